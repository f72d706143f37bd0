//! One followed topic's members on the other nodes, as this node knows them: a part per
//! node, each at the version its node last told. Pure: it takes deltas from the bus and
//! reads of the store, and says which members joined or left; the members task does the
//! reading and the telling.
//!
//! How a part moves:
//! - a delta names the version it follows (`prev`) and its own (`v`); it applies when
//!   `prev` is the part's version, or is 0 (the node's part was empty before: what the
//!   view held of it is dropped). One at or below the part's version is old news. Any
//!   other is a hole: the part is read again from the store;
//! - a read of the store replaces a part unless the view's is newer (deltas run ahead of
//!   a read); a part the view has but the store does not is gone if the store's record
//!   is the one the part was written in (its generation, which deltas carry), and kept
//!   otherwise until the next read (the store lost it: its node writes it again and
//!   says so).

use std::collections::HashMap;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::addr::PeerAddr;
use crate::cluster::member_store::{StoredPart, StoredPresence};
use crate::presence::Member;

/// A member that joined or left, on `node`.
#[derive(Debug, Clone)]
pub(super) struct Change {
    pub join: bool,
    pub node: String,
    pub id: u64,
    pub info: Arc<RawValue>,
}

/// What a node says on a topic's channel, in a presence envelope.
#[derive(Debug, Deserialize)]
pub(super) struct Said {
    /// The version of its part this follows; 0: the part was empty.
    #[serde(default)]
    pub prev: u64,
    /// The part's version after this.
    #[serde(default)]
    pub v: u64,
    /// Members that joined, with their info.
    #[serde(default)]
    pub j: Vec<(u64, Box<RawValue>)>,
    /// Members that left.
    #[serde(default)]
    pub l: Vec<u64>,
    /// The generation of the store's record the part was written in, when the write
    /// went through.
    #[serde(default)]
    pub g: Option<String>,
    /// Not a delta: the node wrote its part anew at this version; read it.
    #[serde(default)]
    pub sync: Option<u64>,
}

/// One node's part.
#[derive(Debug, Default)]
struct Part {
    incarnation: String,
    version: u64,
    /// The store's record it was last seen in; `None` when not known.
    generation: Option<String>,
    members: HashMap<u64, Arc<RawValue>>,
}

/// A followed topic's members on the other nodes.
#[derive(Debug, Default)]
pub(super) struct View {
    parts: HashMap<String, Part>,
    /// Members in all parts.
    count: usize,
    /// Filled by a read of the store; until then deltas are not applied.
    loaded: bool,
}

/// What to do with a delta that did not apply.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Applied {
    Done,
    /// A hole: read the node's part, then apply the delta over it.
    Read,
}

impl View {
    pub fn is_loaded(&self) -> bool {
        self.loaded
    }

    pub fn count(&self) -> usize {
        self.count
    }

    pub fn members(&self) -> Vec<Member> {
        let mut out = Vec::with_capacity(self.count);
        for (node, part) in &self.parts {
            for (id, info) in &part.members {
                let addr = PeerAddr {
                    node: node.clone(),
                    peer: *id,
                };
                out.push(Member::new(addr, info.as_ref().to_owned()));
            }
        }
        out
    }

    /// The nodes with a part, and their incarnations.
    pub fn nodes(&self) -> impl Iterator<Item = (&str, &str)> {
        self.parts
            .iter()
            .map(|(n, p)| (n.as_str(), p.incarnation.as_str()))
    }

    /// Whether the store, as read without members, matches the view: the same parts at
    /// the same versions and sizes. `accept` says which parts count.
    pub fn matches(&self, stored: &StoredPresence, accept: impl Fn(&str, &str) -> bool) -> bool {
        let parts: Vec<&StoredPart> = stored
            .parts
            .iter()
            .filter(|p| accept(&p.node, &p.incarnation))
            .collect();
        parts.len() == self.parts.len()
            && parts.iter().all(|p| {
                self.parts.get(&p.node).is_some_and(|mine| {
                    mine.incarnation == p.incarnation
                        && mine.version == p.version
                        && mine.members.len() == p.len
                })
            })
    }

    /// A delta from `node` (of `incarnation`).
    pub fn apply(
        &mut self,
        node: &str,
        incarnation: &str,
        said: &Said,
        out: &mut Vec<Change>,
    ) -> Applied {
        if !self.loaded {
            return Applied::Done;
        }
        let stale = self
            .parts
            .get(node)
            .is_some_and(|p| p.incarnation != incarnation);
        if stale {
            self.remove(node, out);
        }
        match self.parts.get(node) {
            Some(part) if said.v <= part.version => return Applied::Done,
            Some(part) if said.prev != part.version && said.prev != 0 => return Applied::Read,
            None if said.prev != 0 => return Applied::Read,
            _ => {}
        }
        self.force(node, incarnation, said, out);
        Applied::Done
    }

    /// Applies a delta whatever the part's version (after reading the part again found
    /// it behind the delta: the delta is the newest word).
    pub fn force(&mut self, node: &str, incarnation: &str, said: &Said, out: &mut Vec<Change>) {
        if said.prev == 0 {
            // The node's part was empty before this: whatever the view held is gone.
            self.remove(node, out);
        }
        let part = self.parts.entry(node.to_owned()).or_default();
        part.incarnation = incarnation.to_owned();
        part.version = part.version.max(said.v);
        if said.g.is_some() {
            part.generation = said.g.clone();
        }
        for id in &said.l {
            if let Some(info) = part.members.remove(id) {
                self.count -= 1;
                out.push(leave(node, *id, info));
            }
        }
        for (id, info) in &said.j {
            let info: Arc<RawValue> = Arc::from(info.clone());
            match part.members.insert(*id, info.clone()) {
                Some(old) if old.get() == info.get() => {}
                Some(old) => {
                    out.push(leave(node, *id, old));
                    out.push(join(node, *id, info));
                }
                None => {
                    self.count += 1;
                    out.push(join(node, *id, info));
                }
            }
        }
        if part.members.is_empty() {
            self.parts.remove(node);
        }
    }

    /// The part of `node` as the store (its record of `generation`) has it (`None`: it
    /// has none), unless the view's is newer.
    fn replace(
        &mut self,
        node: &str,
        stored: Option<&StoredPart>,
        generation: &Option<String>,
        out: &mut Vec<Change>,
    ) {
        let Some(stored) = stored else {
            self.remove(node, out);
            return;
        };
        let newer = self
            .parts
            .get(node)
            .is_some_and(|p| p.incarnation == stored.incarnation && p.version > stored.version);
        if newer {
            return;
        }
        let mut fresh: HashMap<u64, Arc<RawValue>> = HashMap::new();
        for (id, info) in stored.members.iter().flatten() {
            let Ok(text) = std::str::from_utf8(info) else {
                continue;
            };
            if let Ok(raw) = RawValue::from_string(text.to_owned()) {
                fresh.insert(*id, Arc::from(raw));
            }
        }
        let old = self.parts.remove(node).unwrap_or_default();
        self.count -= old.members.len();
        for (id, info) in &old.members {
            match fresh.get(id) {
                Some(now) if now.get() == info.get() => {}
                Some(_) | None => out.push(leave(node, *id, info.clone())),
            }
        }
        for (id, info) in &fresh {
            match old.members.get(id) {
                Some(was) if was.get() == info.get() => {}
                _ => out.push(join(node, *id, info.clone())),
            }
        }
        self.count += fresh.len();
        if !fresh.is_empty() {
            self.parts.insert(
                node.to_owned(),
                Part {
                    incarnation: stored.incarnation.clone(),
                    version: stored.version,
                    generation: generation.clone(),
                    members: fresh,
                },
            );
        }
    }

    /// A read of `node`'s part (`part`, if the store has it, from `stored`): the part
    /// is replaced. One the store does not have is gone if it was written in the
    /// store's record read now (same generation); else the store lost it, and it is
    /// kept until the next read (its node writes it again meanwhile).
    pub fn replace_read(
        &mut self,
        node: &str,
        part: Option<&StoredPart>,
        stored: &StoredPresence,
        out: &mut Vec<Change>,
    ) {
        if part.is_some() {
            return self.replace(node, part, &stored.generation, out);
        }
        let Some(mine) = self.parts.get_mut(node) else {
            return;
        };
        if mine.generation.is_some() && mine.generation == stored.generation {
            self.remove(node, out);
        } else {
            mine.generation = stored.generation.clone();
        }
    }

    /// A read of the whole topic (with members). `accept` says which parts count (live
    /// nodes, not this one). The first read fills the view without telling anyone.
    pub fn load(
        &mut self,
        stored: &StoredPresence,
        accept: impl Fn(&str, &str) -> bool,
        out: &mut Vec<Change>,
    ) {
        let first = !self.loaded;
        let mut changes = Vec::new();
        let found: HashMap<&str, &StoredPart> = stored
            .parts
            .iter()
            .filter(|p| accept(&p.node, &p.incarnation))
            .map(|p| (p.node.as_str(), p))
            .collect();
        let missing: Vec<String> = self
            .parts
            .keys()
            .filter(|n| !found.contains_key(n.as_str()))
            .cloned()
            .collect();
        for node in missing {
            self.replace_read(&node, None, stored, &mut changes);
        }
        for (node, part) in found {
            self.replace(node, Some(part), &stored.generation, &mut changes);
        }
        self.loaded = true;
        if !first {
            out.extend(changes);
        }
    }

    /// Every member of `node` leaves.
    pub fn remove(&mut self, node: &str, out: &mut Vec<Change>) {
        if let Some(part) = self.parts.remove(node) {
            self.count -= part.members.len();
            out.extend(
                part.members
                    .into_iter()
                    .map(|(id, info)| leave(node, id, info)),
            );
        }
    }
}

fn join(node: &str, id: u64, info: Arc<RawValue>) -> Change {
    Change {
        join: true,
        node: node.to_owned(),
        id,
        info,
    }
}

fn leave(node: &str, id: u64, info: Arc<RawValue>) -> Change {
    Change {
        join: false,
        node: node.to_owned(),
        id,
        info,
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    fn said(prev: u64, v: u64, j: &[u64], l: &[u64]) -> Said {
        Said {
            prev,
            v,
            j: j.iter()
                .map(|id| {
                    (
                        *id,
                        RawValue::from_string(format!("{{\"u\":{id}}}")).unwrap(),
                    )
                })
                .collect(),
            l: l.to_vec(),
            g: None,
            sync: None,
        }
    }

    fn stored(generation: &str, parts: &[(&str, u64, &[u64])]) -> StoredPresence {
        StoredPresence {
            generation: Some(generation.to_owned()),
            parts: parts
                .iter()
                .map(|(node, version, ids)| StoredPart {
                    node: (*node).to_owned(),
                    incarnation: "i".to_owned(),
                    version: *version,
                    len: ids.len(),
                    members: Some(
                        ids.iter()
                            .map(|id| (*id, Bytes::from(format!("{{\"u\":{id}}}"))))
                            .collect(),
                    ),
                })
                .collect(),
        }
    }

    fn summary(out: &[Change]) -> Vec<(bool, String, u64)> {
        out.iter().map(|c| (c.join, c.node.clone(), c.id)).collect()
    }

    fn all(_: &str, _: &str) -> bool {
        true
    }

    #[test]
    fn a_first_load_tells_no_one_and_deltas_in_order_apply_once() {
        let mut view = View::default();
        let mut out = Vec::new();
        assert_eq!(
            view.apply("b", "i", &said(0, 1, &[1], &[]), &mut out),
            Applied::Done
        );
        assert!(out.is_empty(), "not loaded: ignored");
        view.load(&stored("g", &[("b", 3, &[1, 2])]), all, &mut out);
        assert!(out.is_empty() && view.count() == 2);
        // Old news (at or below the read's version) changes nothing.
        view.apply("b", "i", &said(2, 3, &[2], &[]), &mut out);
        assert!(out.is_empty());
        view.apply("b", "i", &said(3, 4, &[3], &[1]), &mut out);
        assert_eq!(
            summary(&out),
            [(false, "b".into(), 1), (true, "b".into(), 3)]
        );
        // The same delta again: nothing twice.
        out.clear();
        view.apply("b", "i", &said(3, 4, &[3], &[1]), &mut out);
        assert!(out.is_empty());
        assert_eq!(view.count(), 2);
    }

    #[test]
    fn a_hole_asks_for_a_read_and_the_read_then_the_delta_converge() {
        let mut view = View::default();
        let mut out = Vec::new();
        view.load(&stored("g", &[("b", 3, &[1])]), all, &mut out);
        let late = said(5, 6, &[4], &[]);
        assert_eq!(view.apply("b", "i", &late, &mut out), Applied::Read);
        // The store has version 6 already (written before the delta was sent).
        let read = stored("g", &[("b", 6, &[1, 2, 4])]);
        view.replace_read("b", read.parts.first(), &read, &mut out);
        let mut got = summary(&out);
        got.sort();
        assert_eq!(got, [(true, "b".into(), 2), (true, "b".into(), 4)]);
        assert_eq!(view.count(), 3);
        out.clear();
        view.apply("b", "i", &late, &mut out);
        assert!(out.is_empty(), "the delta is old news after the read");
    }

    #[test]
    fn a_part_that_was_empty_starts_over_and_ghosts_leave() {
        let mut view = View::default();
        let mut out = Vec::new();
        view.load(&stored("g", &[("b", 3, &[1, 2])]), all, &mut out);
        // b's part went empty (its last leave was lost), then 9 joined: prev 0.
        view.apply("b", "i", &said(0, 7, &[9], &[]), &mut out);
        let mut got = summary(&out);
        got.sort();
        assert_eq!(
            got,
            [
                (false, "b".into(), 1),
                (false, "b".into(), 2),
                (true, "b".into(), 9)
            ]
        );
        assert_eq!(view.count(), 1);
    }

    #[test]
    fn a_missing_part_goes_under_the_same_generation_and_waits_under_another() {
        let mut view = View::default();
        let mut out = Vec::new();
        view.load(
            &stored("g", &[("b", 3, &[1]), ("c", 2, &[5])]),
            all,
            &mut out,
        );
        // The store lost everything and only b wrote again: c's members stay.
        view.load(&stored("h", &[("b", 3, &[1])]), all, &mut out);
        assert!(out.is_empty());
        assert_eq!(view.count(), 2);
        // Read again, same generation, c still missing: gone.
        view.load(&stored("h", &[("b", 3, &[1])]), all, &mut out);
        assert_eq!(summary(&out), [(false, "c".into(), 5)]);
        assert_eq!(view.count(), 1);
    }

    #[test]
    fn another_incarnation_replaces_the_part() {
        let mut view = View::default();
        let mut out = Vec::new();
        view.load(&stored("g", &[("b", 3, &[1])]), all, &mut out);
        view.apply("b", "j", &said(0, 1, &[8], &[]), &mut out);
        let mut got = summary(&out);
        got.sort();
        assert_eq!(got, [(false, "b".into(), 1), (true, "b".into(), 8)]);
        let matches = view.matches(&stored("g", &[("b", 3, &[1])]), all);
        assert!(!matches);
    }
}

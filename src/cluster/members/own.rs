//! This node's parts: what changed among its members written to the store, then sent
//! as a delta on the topic's channel; parts refreshed every heartbeat, written anew when
//! the store lost them.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use bytes::Bytes;
use serde::Serialize;
use serde_json::value::RawValue;

use super::task::Task;
use crate::cluster::envelope::Kind;
use crate::cluster::member_store::PartWrite;
use crate::cluster::sync::lock;

/// What this node wrote of one topic.
#[derive(Default)]
pub(super) struct Own {
    /// The version of the last write; 0 before the first.
    version: u64,
    members: HashMap<u64, Arc<RawValue>>,
}

/// A change of this node's part of a topic, sent once written.
struct Delta {
    prev: u64,
    v: u64,
    joins: Vec<(u64, Arc<RawValue>)>,
    leaves: Vec<u64>,
}

/// A delta as it goes on the topic's channel.
#[derive(Serialize)]
struct SaidOut<'a> {
    prev: u64,
    v: u64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    j: Vec<(u64, &'a RawValue)>,
    #[serde(skip_serializing_if = "<[u64]>::is_empty")]
    l: &'a [u64],
    #[serde(skip_serializing_if = "Option::is_none")]
    g: Option<&'a str>,
}

impl Delta {
    fn body(&self, generation: Option<&str>) -> Option<Vec<u8>> {
        let said = SaidOut {
            prev: self.prev,
            v: self.v,
            j: self.joins.iter().map(|(id, i)| (*id, i.as_ref())).collect(),
            l: &self.leaves,
            g: generation,
        };
        serde_json::to_vec(&said).ok()
    }
}

impl Task {
    /// Extends the life of this node's parts; writes anew those the store lost.
    pub(super) async fn refresh(&mut self) {
        let topics: Vec<Box<str>> = self.own.keys().cloned().collect();
        for chunk in topics.chunks(super::BATCH) {
            let keys = chunk.iter().map(|t| self.members.key(t)).collect();
            let refreshed = self
                .members
                .bus
                .presence_refresh(keys, &self.members.me.id, self.members.ttl)
                .await;
            match refreshed {
                Ok(found) => {
                    for (topic, there) in chunk.iter().zip(found) {
                        if !there {
                            self.rewrite.insert(topic.clone());
                        }
                    }
                }
                // The next chunks go on: theirs may be on other servers that answer.
                Err(e) => tracing::debug!(error = %e, "presence not refreshed"),
            }
        }
        self.write_anew().await;
    }

    /// Writes what changed among this node's members, then tells the other nodes.
    pub(super) async fn write_own(&mut self) {
        let by_topic = std::mem::take(&mut *lock(&self.members.dirty));
        if by_topic.is_empty() || self.stopped {
            return;
        }
        let mut writes = Vec::new();
        let mut deltas = Vec::new();
        for (topic, ids) in by_topic {
            if let Some((write, delta)) = self.diff(&topic, ids) {
                writes.push((topic.clone(), write));
                deltas.push((topic, delta));
            }
            if writes.len() >= super::BATCH {
                self.write_then_tell(std::mem::take(&mut writes), std::mem::take(&mut deltas))
                    .await;
            }
        }
        self.write_then_tell(writes, deltas).await;
    }

    /// Writes, then sends the deltas (with the generation their write answered, when
    /// it went through): a node that reads the store on a delta finds it written.
    async fn write_then_tell(
        &mut self,
        writes: Vec<(Box<str>, PartWrite)>,
        deltas: Vec<(Box<str>, Delta)>,
    ) {
        let generations = self.store(writes).await;
        let mut gone = false;
        for (i, (topic, delta)) in deltas.into_iter().enumerate() {
            let generation = generations
                .as_ref()
                .and_then(|g| g.get(i))
                .map(String::as_str);
            if generation == Some("") {
                // The store had lost the part (it expired while this node was cut
                // off): it is written whole, and the others told to read it.
                self.rewrite.insert(topic.clone());
                gone = true;
            }
            if let Some(body) = delta.body(generation.filter(|g| !g.is_empty())) {
                self.send(&topic, &body);
            }
        }
        if gone {
            self.write_anew().await;
        }
    }

    /// What changed of `topic` among `ids`, as a write and a delta; the truth is the
    /// topics' members now, whatever order the changes were reported in.
    fn diff(&mut self, topic: &str, ids: HashSet<u64>) -> Option<(PartWrite, Delta)> {
        let own = self.own.entry(topic.into()).or_default();
        let mut joins: Vec<(u64, Arc<RawValue>)> = Vec::new();
        let mut leaves: Vec<u64> = Vec::new();
        let mut removed: Vec<u64> = Vec::new();
        for id in ids {
            match (self.topics.local_member(topic, id), own.members.get(&id)) {
                (Some(info), None) => {
                    own.members.insert(id, info.clone());
                    joins.push((id, info));
                }
                (Some(info), Some(was)) if !Arc::ptr_eq(&info, was) => {
                    // Left and joined again, with other info.
                    own.members.insert(id, info.clone());
                    leaves.push(id);
                    joins.push((id, info));
                }
                (None, Some(_)) => {
                    own.members.remove(&id);
                    leaves.push(id);
                    removed.push(id);
                }
                _ => {}
            }
        }
        if joins.is_empty() && leaves.is_empty() {
            if own.version == 0 {
                self.own.remove(topic);
            }
            return None;
        }
        let prev = own.version;
        self.counter += 1;
        own.version = self.counter;
        let members = &self.members;
        let mut write = PartWrite::new(
            members.key(topic),
            &members.me.id,
            &members.me.incarnation,
            self.counter,
            members.ttl,
        );
        write.replace = prev == 0;
        write.set = joins
            .iter()
            .map(|(id, info)| (*id, Bytes::copy_from_slice(info.get().as_bytes())))
            .collect();
        write.remove = removed;
        if own.members.is_empty() {
            self.own.remove(topic);
        }
        let delta = Delta {
            prev,
            v: self.counter,
            joins,
            leaves,
        };
        Some((write, delta))
    }

    /// Sends writes to the store; a topic whose write fails is written anew later.
    /// The generation of each topic's record, when they were written.
    async fn store(&mut self, writes: Vec<(Box<str>, PartWrite)>) -> Option<Vec<String>> {
        if writes.is_empty() {
            return Some(Vec::new());
        }
        let (topics, writes): (Vec<Box<str>>, Vec<PartWrite>) = writes.into_iter().unzip();
        if self.members.is_up() {
            match self.members.bus.presence_write(writes).await {
                Ok(generations) => return Some(generations),
                Err(e) => tracing::debug!(error = %e, "presence not written; again later"),
            }
        }
        self.rewrite.extend(topics);
        None
    }

    fn send(&self, topic: &str, body: &[u8]) {
        let channel = self.members.me.channels.topic(topic);
        let header = self.members.me.header(Kind::Presence);
        // Refused (a full outbox, a stopped node): the other nodes see the hole in the
        // versions at the next delta, or their check against the store within a
        // heartbeat window, and read this part again.
        if let Err(refused) = self.outbox.push(&channel, header, body, true) {
            tracing::debug!(%topic, ?refused, "presence delta not sent");
        }
    }

    /// Writes every part marked for it anew (a part with no members is deleted), and
    /// tells the other nodes to read it.
    pub(super) async fn write_anew(&mut self) {
        if self.rewrite.is_empty() || !self.members.is_up() {
            return;
        }
        let topics: Vec<Box<str>> = self.rewrite.drain().collect();
        for chunk in topics.chunks(super::BATCH) {
            let mut writes = Vec::new();
            let mut said = Vec::new();
            for topic in chunk {
                let members = &self.members;
                let (version, set) = match self.own.get(topic) {
                    Some(own) => (
                        own.version,
                        own.members
                            .iter()
                            .map(|(id, info)| (*id, Bytes::copy_from_slice(info.get().as_bytes())))
                            .collect(),
                    ),
                    None => (0, Vec::new()),
                };
                let mut write = PartWrite::new(
                    members.key(topic),
                    &members.me.id,
                    &members.me.incarnation,
                    version,
                    members.ttl,
                );
                write.replace = true;
                write.set = set;
                writes.push((topic.clone(), write));
                if version > 0 {
                    said.push((
                        topic.clone(),
                        format!(r#"{{"sync":{version}}}"#).into_bytes(),
                    ));
                }
            }
            if self.store(writes).await.is_some() {
                for (topic, body) in said {
                    self.send(&topic, &body);
                }
            }
        }
    }
}

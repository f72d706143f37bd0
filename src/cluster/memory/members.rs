//! What a [`MemoryHub`](super::MemoryHub) keeps of presence: the same parts, index,
//! generations and expiries as on Redis (`member_store.rs`), in one map, so the cluster's
//! presence logic runs and is tested without a server. Expiry is checked when a key is
//! touched, on tokio's clock (so paused time moves it).

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use crate::cluster::member_store::{
    PartWrite, PresenceKey, PresenceRead, StoredPart, StoredPresence,
};

/// The hub's store: indexes and parts by key.
#[derive(Default)]
pub(super) struct Store {
    indexes: HashMap<String, Index>,
    parts: HashMap<String, Part>,
}

struct Index {
    generation: String,
    /// Node name to the incarnation of its part.
    nodes: HashMap<String, String>,
    expires: Instant,
}

struct Part {
    incarnation: String,
    version: u64,
    members: HashMap<u64, Bytes>,
    expires: Instant,
}

impl Store {
    /// Everything kept is lost (a Redis restart without persistence).
    pub fn clear(&mut self) {
        self.indexes.clear();
        self.parts.clear();
    }

    fn expire(&mut self, key: &PresenceKey, part: Option<&str>) {
        let now = Instant::now();
        if self
            .indexes
            .get(&key.index)
            .is_some_and(|i| i.expires <= now)
        {
            self.indexes.remove(&key.index);
        }
        if let Some(part) = part {
            if self.parts.get(part).is_some_and(|p| p.expires <= now) {
                self.parts.remove(part);
            }
        }
    }

    /// Applies `write`; the record's generation.
    pub fn write(&mut self, write: PartWrite) -> String {
        let part_key = write.key.part(&write.node);
        self.expire(&write.key, Some(&part_key));
        let expires = Instant::now() + write.ttl;
        let mine = self
            .parts
            .get(&part_key)
            .is_some_and(|p| p.incarnation == write.incarnation);
        if !write.replace && !mine {
            return String::new(); // gone: to be written whole
        }
        if write.replace {
            self.parts.remove(&part_key);
        }
        let part = self.parts.entry(part_key.clone()).or_insert_with(|| Part {
            incarnation: write.incarnation.clone(),
            version: 0,
            members: HashMap::new(),
            expires,
        });
        part.members.extend(write.set);
        for id in &write.remove {
            part.members.remove(id);
        }
        let empty = part.members.is_empty();
        if !empty {
            part.incarnation = write.incarnation.clone();
            part.version = write.version;
            part.expires = expires;
        }
        let index = self
            .indexes
            .entry(write.key.index.clone())
            .or_insert_with(|| Index {
                generation: format!("{:016x}", fastrand::u64(..)),
                nodes: HashMap::new(),
                expires,
            });
        index.expires = expires;
        let generation = index.generation.clone();
        if empty {
            self.parts.remove(&part_key);
            index.nodes.remove(&write.node);
        } else {
            index.nodes.insert(write.node, write.incarnation);
        }
        generation
    }

    pub fn read(&mut self, read: &PresenceRead) -> StoredPresence {
        self.expire(&read.key, None);
        let Some(index) = self.indexes.get(&read.key.index) else {
            return StoredPresence::default();
        };
        let generation = Some(index.generation.clone());
        let nodes: Vec<String> = match &read.node {
            Some(node) => vec![node.clone()],
            None => index.nodes.keys().cloned().collect(),
        };
        let now = Instant::now();
        let mut parts = Vec::new();
        let mut gone = Vec::new();
        for node in nodes {
            let key = read.key.part(&node);
            match self.parts.get(&key).filter(|p| p.expires > now) {
                Some(part) => parts.push(StoredPart {
                    node,
                    incarnation: part.incarnation.clone(),
                    version: part.version,
                    len: part.members.len(),
                    members: read.members.then(|| {
                        part.members
                            .iter()
                            .map(|(id, i)| (*id, i.clone()))
                            .collect()
                    }),
                }),
                None => gone.push((node, key)),
            }
        }
        if read.node.is_none() {
            for (node, key) in gone {
                self.parts.remove(&key);
                if let Some(index) = self.indexes.get_mut(&read.key.index) {
                    index.nodes.remove(&node);
                }
            }
        }
        StoredPresence { generation, parts }
    }

    pub fn refresh(&mut self, keys: &[PresenceKey], node: &str, ttl: Duration) -> Vec<bool> {
        let expires = Instant::now() + ttl;
        keys.iter()
            .map(|key| {
                let part_key = key.part(node);
                self.expire(key, Some(&part_key));
                let Some(part) = self.parts.get_mut(&part_key) else {
                    return false;
                };
                part.expires = expires;
                let incarnation = part.incarnation.clone();
                let index = self
                    .indexes
                    .entry(key.index.clone())
                    .or_insert_with(|| Index {
                        generation: format!("{:016x}", fastrand::u64(..)),
                        nodes: HashMap::new(),
                        expires,
                    });
                index.expires = expires;
                index.nodes.insert(node.to_owned(), incarnation);
                true
            })
            .collect()
    }
}

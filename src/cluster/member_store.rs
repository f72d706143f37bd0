//! What the bus keeps of presence, for the [`Backplane`](super::Backplane)'s presence
//! methods: every node's part of every topic's members, each part written only by its
//! node and living as long as that node's heartbeats refresh it.
//!
//! On Redis (7.0 has no expiry per hash field) a topic `T` is two kinds of keys in one
//! slot, the slot of its channel and history, named by the cluster's rule for a topic's
//! names (`jp:<kind>:` + `keys::tagged(T)`: `{T}`, or `:T` when `T` has a hash tag of
//! its own; see `keys.rs`), so they work on Redis Cluster too:
//!
//! - `jp:pi:{T}`, the index: a hash of node name to incarnation, for the nodes with a
//!   part, and `~g`, the index's generation (random, set when the index is made): a
//!   reader that finds another generation than last time knows the bus lost what it
//!   kept (a Redis restart) rather than that the parts missing now were removed;
//! - `jp:pm:{T}|NODE`, one node's part: a hash of member id to info, and `~i`, `~v` (the
//!   writer's incarnation and the part's version), with an expiry of one heartbeat
//!   window that its node refreshes every heartbeat. A node that dies stops refreshing:
//!   its parts go by themselves.
//!
//! Node names have no `|`, so the part key of one (topic, node) is never another's.

use std::time::Duration;

use bytes::Bytes;

/// The keys of one topic's presence on the bus.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct PresenceKey {
    /// The index: which nodes have a part, and its generation.
    pub index: String,
    /// The prefix of the parts' keys: a node's part is this followed by its name.
    pub parts: String,
}

impl PresenceKey {
    /// The keys of `topic`'s presence under the cluster's `prefix`.
    pub fn new(prefix: &str, topic: &str) -> Self {
        let tagged = super::keys::tagged(topic);
        PresenceKey {
            index: format!("{prefix}:pi:{tagged}"),
            parts: format!("{prefix}:pm:{tagged}|"),
        }
    }

    /// The key of `node`'s part.
    pub fn part(&self, node: &str) -> String {
        format!("{}{node}", self.parts)
    }
}

/// One write to a node's part of a topic's presence
/// ([`Backplane::presence_write`](super::Backplane::presence_write)).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct PartWrite {
    /// The topic's keys.
    pub key: PresenceKey,
    /// The writing node.
    pub node: String,
    /// Its incarnation: a part of another incarnation is dropped before this is written.
    pub incarnation: String,
    /// The part's version once written.
    pub version: u64,
    /// Whether the part is written anew (what it held is dropped first). A change that
    /// is not a replace finds the part gone (expired, or the store lost it) and writes
    /// nothing: the store answers an empty generation, and the writer writes it whole.
    pub replace: bool,
    /// Members added: their local id and info (JSON text).
    pub set: Vec<(u64, Bytes)>,
    /// Members removed.
    pub remove: Vec<u64>,
    /// How long the part lives unless refreshed
    /// ([`presence_refresh`](super::Backplane::presence_refresh)). A part left with no
    /// member is deleted, and its node taken out of the index.
    pub ttl: Duration,
}

impl PartWrite {
    /// A write of `node`'s part of the topic at `key`, changing nothing yet.
    pub fn new(
        key: PresenceKey,
        node: &str,
        incarnation: &str,
        version: u64,
        ttl: Duration,
    ) -> Self {
        PartWrite {
            key,
            node: node.to_owned(),
            incarnation: incarnation.to_owned(),
            version,
            replace: false,
            set: Vec::new(),
            remove: Vec::new(),
            ttl,
        }
    }
}

/// What [`presence_read`](super::Backplane::presence_read) reads.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct PresenceRead {
    /// The topic's keys.
    pub key: PresenceKey,
    /// Only this node's part (else every part in the index).
    pub node: Option<String>,
    /// With the members (else only each part's incarnation, version and size).
    pub members: bool,
}

impl PresenceRead {
    /// Every part of the topic at `key`, with the members.
    pub fn new(key: PresenceKey) -> Self {
        PresenceRead {
            key,
            node: None,
            members: true,
        }
    }
}

/// A topic's presence as the bus keeps it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoredPresence {
    /// The index's generation, `None` without an index. It changes when the bus lost
    /// the topic's presence (or nobody was in it for a heartbeat window).
    pub generation: Option<String>,
    /// The parts found (those whose key expired are left out, and taken out of the
    /// index).
    pub parts: Vec<StoredPart>,
}

/// One node's part of a topic's presence, as the bus keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoredPart {
    /// The node.
    pub node: String,
    /// The incarnation that wrote it.
    pub incarnation: String,
    /// Its version.
    pub version: u64,
    /// How many members it has.
    pub len: usize,
    /// The members (id and info), when they were asked for.
    pub members: Option<Vec<(u64, Bytes)>>,
}

//! The seam between this node's peers and the other nodes: what the registry and the
//! topics tell whatever carries their messages further, without knowing what it is.
//!
//! [`ServerHandle::broadcast`](crate::ServerHandle::broadcast) and
//! [`Topics::publish`](crate::Topics::publish) hand the frame (serialized once) to the
//! [`Relay`] attached to them, if any, then deliver it to this node's peers (when the
//! relay refuses it, to no one). A
//! [`Cluster`](crate::cluster::Cluster) attaches one when it starts; without one, the
//! seam costs a `OnceLock` load per broadcast or publish.
//!
//! The other direction needs no trait: the cluster sits above the registry and the
//! topics and calls them down through their crate-level methods (`ServerHandle::push_all`
//! and `peer`, `Topics::deliver`, `apply`, `follow_at`, `topic_names` and
//! `subscriber_count`).
//!
//! # Who owns what
//!
//! The registry and the topics own this node's state: which peers are connected, who is
//! subscribed to what. The relay owns what the nodes share: the bus, which topic
//! channels this node listens to, what the other nodes said. A relay never keeps the
//! cluster alive (it holds it weakly) and never calls back into the registry or the
//! topics from these methods.
//!
//! # History
//!
//! A topic with history is recorded on the bus ([`Relay::record`]: in a cluster, Redis
//! gives the offset, one order for every node and publisher) and comes back down to
//! every node's subscribers through the bus, this node's too, in offset order
//! (`Topics::apply`, called by the cluster). The topics keep the local side: a cache
//! of the bus's history, the live subscribers, the replays. A resume older than the
//! cache reads the bus ([`Relay::read_history`], coalesced per topic and position); a
//! cache that does not follow the bus yet asks it to ([`Relay::follow`]).
//!
//! # Presence
//!
//! Presence is the sibling trait [`MemberRelay`] (below), held by the topics: they keep
//! this node's members (`topics/presence.rs`) and say only that a member of a topic
//! changed; the cluster's members room (`cluster/members.rs`) writes them out, keeps a
//! view of the other nodes' members, and calls their joins and leaves down on the
//! topics (`Topics::presence_changed`), like deliveries. The registry, which only
//! broadcasts, does not change.

use std::sync::Arc;
use std::time::Duration;

use serde_json::value::RawValue;

use crate::history::{HistoryConfig, Position};
use crate::transport::Text;
use futures_util::future::BoxFuture;

use crate::error::Result;

/// What the registry and the topics hand on to the other nodes; implemented by the
/// cluster. `frame` is the JSON-RPC notification exactly as it was delivered here.
pub(crate) trait Relay: Send + Sync {
    /// A broadcast is about to be delivered to this node's peers: deliver `frame` to
    /// every other node's. An error (no room to take it now) means it reaches no one:
    /// the caller then delivers nothing locally either.
    fn broadcast(&self, frame: &str) -> Result<()>;

    /// A publish on `topic` (a topic without history) is about to be delivered to this
    /// node's subscribers: deliver `frame` to the subscribers on every other node.
    /// Resolves once it is taken, waiting for room if there is none yet; an error means
    /// it reaches no one (the caller then delivers nothing locally either).
    fn publish<'a>(&'a self, topic: &'a str, frame: &'a str) -> BoxFuture<'a, Result<()>>;

    /// `topic`'s local subscribers went from none to some, or back: this node should (or
    /// need no longer) hear the other nodes' publishes on it.
    fn changed(&self, topic: &str);

    /// Resolves once this node hears the other nodes' publishes on `topic`: a publish on
    /// any node after that reaches this node's subscribers.
    fn ready<'a>(&'a self, topic: &'a str) -> BoxFuture<'a, Result<()>>;

    /// Records a publication of `data` on `topic` (a topic with history, within
    /// `bounds`) on the bus, which delivers it to the subscribers of every node, this
    /// one's included. Resolves with its position once recorded.
    fn record<'a>(
        &'a self,
        topic: &'a str,
        data: &'a RawValue,
        bounds: &'a HistoryConfig,
    ) -> BoxFuture<'a, Result<Position>>;

    /// Makes `topic`'s history on this node follow the bus: its epoch and newest
    /// offset set from the bus, and what comes down after that applied in order.
    /// Resolves once it does.
    fn follow<'a>(&'a self, topic: &'a str) -> BoxFuture<'a, Result<()>>;

    /// The publications of `topic` after `after`, of `epoch`, read from the bus (one
    /// read for every caller asking the same topic, epoch and offset at about the same
    /// time).
    fn read_history<'a>(
        &'a self,
        topic: &'a str,
        epoch: &'a str,
        after: u64,
        bounds: &'a HistoryConfig,
    ) -> BoxFuture<'a, Result<Replay>>;

    /// `topic`'s position on the bus now.
    fn history_position<'a>(
        &'a self,
        topic: &'a str,
        bounds: &'a HistoryConfig,
    ) -> BoxFuture<'a, Result<Position>>;

    /// The bus has more of `topic` than this node's history (a resume saw it): have
    /// what is missing read from the bus and applied, rather than wait for the next
    /// publication to bring it (this node's link may have lost it). Resolves once asked.
    fn look<'a>(&'a self, topic: &'a str) -> BoxFuture<'a, ()>;
}

/// A publication of a topic's history read from the bus: its offset, its notification
/// (serialized once, shared by every subscriber it is replayed to), its data's size,
/// and its age.
#[derive(Clone, Debug)]
pub(crate) struct Kept {
    pub(crate) offset: u64,
    pub(crate) frame: Text,
    pub(crate) bytes: usize,
    pub(crate) age: Duration,
}

/// What [`Relay::read_history`] found.
#[derive(Clone, Debug)]
pub(crate) enum Replay {
    /// The publications asked for, from `after + 1` on, in offset order (fewer than
    /// asked when the bus has no more), up to `through`, the last offset read. An
    /// entry that is not a publication (not JSON: no node wrote it) is left out, so
    /// the offsets may jump; `through` covers it.
    Kept {
        /// The publications.
        kept: Arc<[Kept]>,
        /// The last offset read, kept or left out (`after` when nothing was read).
        through: u64,
    },
    /// What followed `after` is gone from the bus (trimmed).
    Gone,
    /// The bus's history has another epoch now: the one asked for is lost.
    Epoch,
}

/// Presence across nodes: the sibling of [`Relay`] that the topics hold for their
/// members; implemented by the cluster (`cluster/members.rs`).
///
/// The topics keep this node's members and tell the relay only *that* a member of a
/// topic changed ([`changed`](Self::changed)); the relay reads the topics' members at
/// the moment it writes them out, so changes that race come out as the final state.
/// The relay keeps a view of the other nodes' members for the topics this node
/// follows, and calls joins and leaves from them down on the topics
/// (`Topics::presence_changed`).
pub(crate) trait MemberRelay: Send + Sync {
    /// This node's name, in its members' addresses.
    fn node(&self) -> &str;

    /// The local member `id` of `topic` joined or left.
    fn changed(&self, topic: &str, id: u64);

    /// Keeps a view of `topic`'s members on the other nodes from now on (this node has
    /// subscribers there, so it hears their changes). Resolves once the view holds them;
    /// at once while the bus is down (the view loads when it is back).
    fn follow<'a>(&'a self, topic: &'a str) -> BoxFuture<'a, ()>;

    /// `topic` has no local subscribers left: its view may go.
    fn unfollow(&self, topic: &str);

    /// The members of `topic` on the other nodes: from the view when this node follows
    /// it, else read from the bus.
    fn members<'a>(&'a self, topic: &'a str)
        -> BoxFuture<'a, Result<Vec<crate::presence::Member>>>;

    /// How many members `topic` has on the other nodes (as [`members`](Self::members)).
    fn count<'a>(&'a self, topic: &'a str) -> BoxFuture<'a, Result<usize>>;

    /// How many members of `topic` on the other nodes the view holds now, without waiting.
    fn known(&self, topic: &str) -> usize;
}

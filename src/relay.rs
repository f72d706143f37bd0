//! The seam between this node's peers and the other nodes: what the registry and the
//! topics tell whatever carries their messages further, without knowing what it is.
//!
//! [`ServerHandle::broadcast`](crate::ServerHandle::broadcast) and
//! [`Topics::publish`](crate::Topics::publish) deliver to this node's peers first, then
//! hand the same frame (serialized once) to the [`Relay`] attached to them, if any. A
//! [`Cluster`](crate::cluster::Cluster) attaches one when it starts; without one, the
//! seam costs a `OnceLock` load per broadcast or publish.
//!
//! The other direction needs no trait: the cluster sits above the registry and the
//! topics and calls them down through their crate-level methods (`ServerHandle::push_all`
//! and `peer`, `Topics::deliver`, `topic_names` and `subscriber_count`).
//!
//! # Who owns what
//!
//! The registry and the topics own this node's state: which peers are connected, who is
//! subscribed to what. The relay owns what the nodes share: the bus, which topic
//! channels this node listens to, what the other nodes said. A relay never keeps the
//! cluster alive (it holds it weakly) and never calls back into the registry or the
//! topics from these methods.
//!
//! # What comes next plugs in here
//!
//! Topic history and presence are features of topics, so they meet the relay at
//! [`Topics`](crate::Topics); the registry, which only broadcasts, does not change.
//!
//! - **History** adds methods here for what the bus records: a publish on a topic with
//!   history, awaited, answered with the position (epoch and offset) the bus gave it (in
//!   a cluster, Redis: one order for every node and publisher); and the publications
//!   after a position, for a subscriber that resumes and for a node that must fill a hole
//!   before delivering later ones. The topics keep the local side: the history of a node
//!   without a cluster, the offset each topic's subscribers have reached, a live message
//!   held while a replay runs. Deliveries coming down from the cluster then carry their
//!   position.
//! - **Presence** is the sibling trait [`MemberRelay`] (below), held by the topics: they
//!   keep this node's members (`topics/presence.rs`) and say only that a member of a
//!   topic changed; the cluster's members room (`cluster/members.rs`) writes them out,
//!   keeps a view of the other nodes' members, and calls their joins and leaves down on
//!   the topics (`Topics::presence_changed`), like deliveries.
//!
//! Each of those is a method of this trait (or a sibling trait beside it, held by the
//! topics) that the cluster implements in a room of its own. Their likely shape, for
//! whoever writes them (names are theirs to choose):
//!
//! ```text
//! // history: the bus gives the offset; the topics' ordering logic stays the one there is
//! fn record<'a>(&'a self, topic: &'a str, frame: &'a str) -> BoxFuture<'a, Result<Position>>;
//! fn read_after<'a>(&'a self, topic: &'a str, after: Position, max: usize)
//!     -> BoxFuture<'a, Result<Replay>>;
//! // and down, from the cluster: Topics::deliver_at(topic, position, frame)
//! ```

use futures_util::future::BoxFuture;

use crate::error::Result;

/// What the registry and the topics hand on to the other nodes; implemented by the
/// cluster. `frame` is the JSON-RPC notification exactly as it was delivered here.
pub(crate) trait Relay: Send + Sync {
    /// A broadcast was delivered to this node's peers: deliver `frame` to every other
    /// node's.
    fn broadcast(&self, frame: &str);

    /// A publish on `topic` was delivered to this node's subscribers: deliver `frame` to
    /// the subscribers on every other node.
    fn publish(&self, topic: &str, frame: &str);

    /// `topic`'s local subscribers went from none to some, or back: this node should (or
    /// need no longer) hear the other nodes' publishes on it.
    fn changed(&self, topic: &str);

    /// Resolves once this node hears the other nodes' publishes on `topic`: a publish on
    /// any node after that reaches this node's subscribers.
    fn ready<'a>(&'a self, topic: &'a str) -> BoxFuture<'a, Result<()>>;
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

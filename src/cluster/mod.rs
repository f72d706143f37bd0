//! Scaling out: broadcast, topics and calls to a peer by address across server nodes,
//! over a shared bus (a [`Backplane`]: Redis, a Redis Cluster, or [`MemoryHub`] in one
//! process).
//!
//! Each node is a [`Cluster`] attached to its server's [`ServerHandle`]. Once attached,
//! [`ServerHandle::broadcast`] and the cluster's [`Topics`] deliver to the node's own
//! peers at once, as without a cluster, and send one envelope to the other nodes;
//! [`Cluster::peer`] reaches a peer by its [`PeerAddr`] on any node, as a
//! [`Caller`](crate::Caller).
//!
//! # Guarantees
//!
//! - **At most once, never twice.** Every envelope carries a sequence number per
//!   (origin node, incarnation, channel); a receiver drops what it has already seen, so
//!   a message re-sent after a bus failure is not delivered again.
//! - **Gaps are reported, not silent.** A missing sequence number, or a bus outage
//!   (messages published elsewhere meanwhile are lost to this node), calls the
//!   [`on_gap`](ClusterBuilder::on_gap) hook and, if enabled, notifies the topic's
//!   local subscribers so the application can refetch.
//! - **Order per publisher and topic.** Publishes made one after another on one node
//!   arrive everywhere in that order. There is no total order across publishers,
//!   except on topics with history.
//! - **Topics with history** ([`Topics::keep_history`]): Redis gives the offsets
//!   ([`Backplane::append`]), so a topic has one order on every node and for every
//!   publisher; `publish` returns once Redis recorded it; every node, the publishing
//!   one too, delivers in offset order, filling any hole from the history first; a
//!   resume works on any node; a lost history is one gap per topic and node, with the
//!   new position ([`Gap::position`]). The README's "Across a cluster" has the frames.
//! - **Ok means taken.** A broadcast or publish the cluster cannot take (its outbox is
//!   full; a topic with history that Redis cannot record) fails with an error and
//!   reaches no one, and is counted ([`Topics::refused`],
//!   [`ClusterStats::outbox_refused`]); what the outbox took is never dropped, unless
//!   the bus refuses it for good (a Redis ACL that does not allow the channel:
//!   [`ClusterStats::bus_refused`]).
//!
//! # Failure behaviour
//!
//! - Bus down: local delivery goes on; envelopes wait in an outbox bounded in bytes
//!   ([`outbox_limit`](ClusterBuilder::outbox_limit)). A broadcast or publish that
//!   does not fit is refused with [`ClusterError::Overloaded`] and reaches no one
//!   (counted); what the outbox took is never dropped. Calls and notifies to other
//!   nodes fail at once with [`ClusterError::Unavailable`], and calls waiting on an
//!   answer fail too.
//! - Bus slow (it takes less than is published): `Topics::publish` waits for room in
//!   the outbox, at most the call timeout; a broadcast, which does not wait, is
//!   refused as above.
//! - Bus back: subscriptions are issued again, the outbox is flushed (receivers drop
//!   duplicates), and one gap is reported per topic with local subscribers. The flush
//!   of broadcasts and topic messages waits until every node live before the outage
//!   has announced itself again, for at most one heartbeat window (interval times
//!   [`missed_heartbeats`](ClusterBuilder::missed_heartbeats), 6 s by default). Nodes
//!   redial the bus at random times within its backoff (up to 2 s apart with
//!   `RedisOptions`' defaults): keep the window longer than that, or a node that
//!   comes back last misses the flush and only sees the gap.
//! - One server of several lost (a Redis Cluster master, until its replica takes over;
//!   a slot moved): the bus reports just the channels it held ([`BusEvent::Interrupted`])
//!   once they are subscribed again elsewhere, and the node reports one gap for each of
//!   their topics with local subscribers (and one for broadcasts if a broadcast channel
//!   was among them), none for the others; calls waiting on answers to this node fail if
//!   its own channel was among them.
//! - A node that stops heartbeating is dropped after
//!   [`missed_heartbeats`](ClusterBuilder::missed_heartbeats) intervals; calls waiting on
//!   it fail then with [`ClusterError::NodeDown`]. A node that shuts down says goodbye
//!   and is dropped at once.
//!
//! # Presence
//!
//! [`Topics::presence`] lists every node's members of a topic. Each node writes its own
//! members to the bus's store (with an expiry its heartbeats refresh: on Redis, a key
//! per topic and node) and sends each change on the topic's channel; the nodes with
//! subscribers of the topic keep a view of the others' from one read and those changes.
//! A dropped node's members leave every view with it (with a `presence.leave` each);
//! after an outage each node writes its members anew and reads its views again, so the
//! views converge with what changed meanwhile, each change told once. See
//! `members.rs` and the README's "Presence".

mod backplane;
mod builder;
mod calls;
mod envelope;
mod gaps;
mod history;
mod keys;
mod member_store;
mod members;
mod memory;
mod node;
mod nodes;
mod outbox;
mod receive;
#[cfg(feature = "redis")]
mod redis;
mod relay;
mod remote;
mod sequence;
mod slot;
mod status;
mod subscriptions;
mod sync;

use std::fmt;
use std::sync::Arc;

use tokio::sync::watch;

pub use crate::addr::{ClusterError, ParsePeerAddrError, PeerAddr};
pub use backplane::{
    Append, Backplane, BackplaneError, BoxFuture, BusEvent, HistoryEntry, HistoryRead,
};
pub use builder::ClusterBuilder;
pub use keys::TopicKeys;
pub use member_store::{PartWrite, PresenceKey, PresenceRead, StoredPart, StoredPresence};
pub use memory::{MemoryBackplane, MemoryHub};
#[cfg(feature = "redis-cluster")]
pub use redis::RedisClusterBackplane;
#[cfg(feature = "redis")]
pub use redis::{RedisBackplane, RedisOptions};
pub use remote::RemotePeer;
pub use status::{ClusterState, ClusterStats, Gap};

use crate::peer::Peer;
use crate::registry::ServerHandle;
use crate::topics::Topics;
use node::{Node, Options};

/// One node of a cluster. Cheap to clone; the node runs until
/// [`shutdown`](Self::shutdown) or until every clone is dropped (then without a goodbye:
/// the others notice after the heartbeat window).
///
/// ```
/// use jsonrpc_peer::cluster::{Cluster, MemoryHub};
/// use jsonrpc_peer::ServerHandle;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> jsonrpc_peer::Result<()> {
/// let hub = MemoryHub::new(); // Redis in production: RedisBackplane (feature `redis`)
/// let a = Cluster::builder(hub.backplane(), ServerHandle::new()).node_id("a").start().await?;
/// let b = Cluster::builder(hub.backplane(), ServerHandle::new()).node_id("b").start().await?;
/// let mut nodes = a.watch_nodes();
/// let _ = tokio::time::timeout(
///     std::time::Duration::from_secs(5),
///     nodes.wait_for(|n| n.len() == 2),
/// ).await;
/// assert_eq!(a.nodes(), ["a", "b"]);
/// b.shutdown().await; // goodbye: a drops b at once
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Cluster {
    node: Arc<Node>,
    /// Held only for its drop.
    _owner: Arc<Owner>,
}

/// Stops the node's tasks when the last [`Cluster`] clone goes.
struct Owner(Arc<Node>);

impl Drop for Owner {
    fn drop(&mut self) {
        self.0.stop();
    }
}

impl Cluster {
    /// Starts building a node on `bus` that serves the peers of `handle`
    /// ([`Server::handle`](crate::Server::handle), or an axum endpoint's).
    pub fn builder(bus: impl Backplane, handle: ServerHandle) -> ClusterBuilder {
        ClusterBuilder {
            bus: Box::new(bus),
            handle,
            topics: None,
            node_id: None,
            options: Options::default(),
        }
    }

    /// This node's name.
    pub fn node_id(&self) -> &str {
        &self.node.me.id
    }

    /// A random value of this run of the node, so a restarted node is told apart from
    /// its earlier self.
    pub fn incarnation(&self) -> &str {
        &self.node.me.incarnation
    }

    /// The cluster's topics: publishing reaches subscribers on every node, and this
    /// node listens to a topic's channel only while it has local subscribers.
    pub fn topics(&self) -> Topics {
        self.node.topics.clone()
    }

    /// The handle of this node's connections ([`ServerHandle::broadcast`] is
    /// cluster-wide).
    pub fn handle(&self) -> ServerHandle {
        self.node.handle.clone()
    }

    /// The address of one of this node's peers.
    pub fn addr(&self, peer: &Peer) -> PeerAddr {
        PeerAddr {
            node: self.node.me.id.clone(),
            peer: peer.id(),
        }
    }

    /// The peer at `to`, wherever it is connected: call it and notify it as any
    /// [`Caller`](crate::Caller). Nothing is looked up until a call is made.
    ///
    /// ```no_run
    /// # async fn run(cluster: jsonrpc_peer::cluster::Cluster, addr: jsonrpc_peer::cluster::PeerAddr) -> jsonrpc_peer::Result<()> {
    /// use std::time::Duration;
    /// use jsonrpc_peer::Caller;
    ///
    /// jsonrpc_peer::method!(Describe = "describe", () => String);
    /// let about = cluster.peer(&addr).request(Describe, &()).timeout(Duration::from_secs(2)).await?;
    /// # Ok(()) }
    /// ```
    pub fn peer(&self, to: &PeerAddr) -> RemotePeer {
        RemotePeer::new(self.node.clone(), to.clone())
    }

    /// Connections on every live node: this node's now, the others' from their last
    /// heartbeat.
    pub fn connection_count(&self) -> usize {
        self.node.connection_count()
    }

    /// The live nodes' names (this one included), sorted.
    pub fn nodes(&self) -> Vec<String> {
        self.node.roster.names()
    }

    /// Watches the live nodes' names.
    pub fn watch_nodes(&self) -> watch::Receiver<Vec<String>> {
        self.node.roster.watch()
    }

    /// Whether the bus is reachable.
    pub fn state(&self) -> ClusterState {
        *self.node.state.borrow()
    }

    /// Watches [`state`](Self::state).
    pub fn watch_state(&self) -> watch::Receiver<ClusterState> {
        self.node.state.subscribe()
    }

    /// The node's counters.
    pub fn stats(&self) -> ClusterStats {
        self.node.stats()
    }

    /// Resolves once this node's outbox is empty, everything it took on the bus, or
    /// after `limit`; whether it emptied.
    ///
    /// One node's publishes on different topics may pass one another (a burst goes out
    /// packed, each topic's messages in one bus message; only each topic's order is
    /// kept): a publisher that needs its message on one topic out before it publishes
    /// on another awaits this in between. Broadcasts, calls and notifies need no such
    /// wait: they pass nothing the node sent before them.
    pub async fn flushed(&self, limit: std::time::Duration) -> bool {
        self.node.outbox.drained(limit).await
    }

    /// Sends what the outbox holds (for at most 2 s), says goodbye so the other nodes
    /// drop this one at once, and stops. Local delivery goes on without the cluster.
    pub async fn shutdown(&self) {
        self.node.shutdown().await;
    }
}

impl fmt::Debug for Cluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cluster")
            .field("node", &self.node.me.id)
            .field("state", &self.state())
            .finish()
    }
}

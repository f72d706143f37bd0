//! The settings of a node, and its start.

use std::sync::Arc;
use std::time::Duration;

use super::backplane::Backplane;
use super::node::{config, Node, Options};
use super::status::Gap;
use super::{Cluster, Owner};
use crate::addr::valid_node_id;
use crate::error::Result;
use crate::registry::ServerHandle;
use crate::topics::Topics;

/// Settings for a [`Cluster`] node; [`start`](Self::start) runs it.
pub struct ClusterBuilder {
    pub(super) bus: Box<dyn Backplane>,
    pub(super) handle: ServerHandle,
    pub(super) topics: Option<Topics>,
    pub(super) node_id: Option<String>,
    pub(super) options: Options,
}

impl std::fmt::Debug for ClusterBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterBuilder")
            .field("node_id", &self.node_id)
            .field("handle", &self.handle)
            .finish_non_exhaustive()
    }
}

impl ClusterBuilder {
    /// This node's name (default: 16 random hex digits). Names must be unique in the
    /// cluster: another node seen with this name is logged as an error.
    pub fn node_id(mut self, id: impl Into<String>) -> Self {
        self.node_id = Some(id.into());
        self
    }

    /// The topics to make cluster-wide (default: new ones; see [`Cluster::topics`]).
    pub fn topics(mut self, topics: Topics) -> Self {
        self.topics = Some(topics);
        self
    }

    /// The prefix of every bus channel and key (default `jp`), to share one bus between
    /// clusters. No braces or spaces: a topic's names hold its Redis Cluster hash tag
    /// (see [`TopicKeys`](crate::cluster::TopicKeys)).
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.options.prefix = prefix.into();
        self
    }

    /// How often this node announces itself and its connection count (default 2 s).
    ///
    /// The heartbeat window (this times [`missed_heartbeats`](Self::missed_heartbeats))
    /// is also how long the outbox flush after a bus outage waits for the other nodes to
    /// come back: keep it longer than the bus's redial spread (the backoff's `max`).
    pub fn heartbeat_interval(mut self, interval: Duration) -> Self {
        // `Duration::MAX` ("as seldom as can be") is capped: the windows and instants
        // made of it must not overflow.
        self.options.heartbeat = crate::deadline::capped(interval).max(Duration::from_millis(1));
        self
    }

    /// After how many silent intervals another node is dropped (default 3).
    pub fn missed_heartbeats(mut self, n: u32) -> Self {
        self.options.missed = n.max(1);
        self
    }

    /// The most bytes of envelopes held while the bus is unreachable or slow
    /// (default 8 MiB). Past it a new broadcast or publish is refused, never an old one
    /// dropped: [`ServerHandle::broadcast`](crate::ServerHandle::broadcast) fails at
    /// once, [`Topics::publish`](crate::Topics::publish) waits for room while the bus is
    /// up (at most the [`call_timeout`](Self::call_timeout)) and fails at once while it
    /// is down, both with
    /// [`ClusterError::Overloaded`](crate::cluster::ClusterError::Overloaded); what failed
    /// reached no one. Counted in
    /// [`ClusterStats::outbox_refused`](crate::cluster::ClusterStats::outbox_refused) and
    /// [`Topics::refused`](crate::Topics::refused).
    pub fn outbox_limit(mut self, bytes: usize) -> Self {
        self.options.outbox_limit = bytes;
        self
    }

    /// How many publications on topics with history may wait at once for the bus to
    /// record them (default 10,000); past it `publish` fails at once with
    /// [`ClusterError::Overloaded`](crate::cluster::ClusterError::Overloaded), not
    /// recorded.
    pub fn max_pending_records(mut self, n: usize) -> Self {
        self.options.max_recording = n.max(1);
        self
    }

    /// The timeout of a call to a peer on another node, through [`Cluster::peer`] (default 30 s).
    pub fn call_timeout(mut self, timeout: Duration) -> Self {
        self.options.call_timeout = timeout;
        self
    }

    /// How many calls from other nodes this node runs at once (default 1024); more are
    /// answered at once with [`ClusterError::Remote`](crate::cluster::ClusterError::Remote).
    pub fn max_remote_calls(mut self, n: usize) -> Self {
        self.options.max_remote_calls = n.max(1);
        self
    }

    /// Runs `hook` for every [`Gap`].
    pub fn on_gap(mut self, hook: impl Fn(&Gap) + Send + Sync + 'static) -> Self {
        self.options.on_gap = Some(Arc::new(hook));
        self
    }

    /// Also notifies a topic's local subscribers of a gap, with `method` (for example
    /// `"$/gap"`; off by default) and params `{"topic": name}`, or, for a topic with
    /// history, `{"topic": name, "epoch": E, "offset": K}`, where delivery goes on. The
    /// reconnecting client's followed topics
    /// ([`ReconnectingBuilder::topic`](crate::ReconnectingBuilder::topic)) understand
    /// `"$/gap"`.
    pub fn gap_notification(mut self, method: impl Into<String>) -> Self {
        self.options.gap_method = Some(method.into());
        self
    }

    /// Subscribes the node's own channels, attaches to the handle and topics, says
    /// hello, and runs the node until [`Cluster::shutdown`] or the last handle's drop.
    ///
    /// # Errors
    ///
    /// [`ClusterError::Config`](crate::cluster::ClusterError::Config) for a bad node name, a bus whose events were taken,
    /// or a handle or topics already attached to a cluster; [`ClusterError::Unavailable`](crate::cluster::ClusterError::Unavailable)
    /// when the bus refuses the subscriptions.
    pub async fn start(self) -> Result<Cluster> {
        let id = match self.node_id {
            Some(id) => id,
            None => format!("{:016x}", fastrand::u64(..)),
        };
        if !super::keys::valid_prefix(&self.options.prefix) {
            return Err(config(format!(
                "prefix {:?}: not empty, and no braces or whitespace",
                self.options.prefix
            )));
        }
        if !valid_node_id(&id) {
            return Err(config(format!(
                "node name {id:?}: use 1 to 64 of A-Z a-z 0-9 . _ : -"
            )));
        }
        let topics = self.topics.unwrap_or_default();
        let node = Node::start(self.bus, id, self.handle, topics, self.options).await?;
        Ok(Cluster {
            _owner: Arc::new(Owner(node.clone())),
            node,
        })
    }
}

//! What a node says about itself: whether it reaches the bus, the gaps it saw, its
//! counters. Plain values, written by the node's tasks and read through [`Cluster`].
//!
//! [`Cluster`]: super::Cluster

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use crate::history::Position;

/// Whether this node can reach the bus.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClusterState {
    /// The bus is reachable.
    Up,
    /// The bus is unreachable: local delivery only, the outbox fills.
    Down,
    /// [`Cluster::shutdown`](super::Cluster::shutdown) ran (or every handle was dropped).
    Stopped,
}

/// Messages this node may have missed: the application refetches what it shows.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Gap {
    /// The topic, or `None` for broadcasts.
    pub topic: Option<String>,
    /// The node whose messages went missing, when known (a sequence number jumped);
    /// `None` after a bus outage, when any node's may have.
    pub origin: Option<String>,
    /// How many went missing, when known.
    pub missed: Option<u64>,
    /// On a topic with history: where it continues, in the bus's new epoch (its newest
    /// offset when the loss was seen; the next publication is `offset + 1`). A topic
    /// with history has a gap only when its history was lost (Redis came back empty),
    /// or when this node was cut off for longer than the history keeps.
    pub position: Option<Position>,
}

/// Counters, for logs and tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClusterStats {
    /// Envelopes waiting for the bus, and their bytes.
    pub outbox_len: usize,
    /// Bytes waiting for the bus.
    pub outbox_bytes: usize,
    /// Envelopes the outbox refused because it was full: broadcasts and publishes that
    /// returned an error and reached no one (see
    /// [`outbox_limit`](super::ClusterBuilder::outbox_limit)).
    pub outbox_refused: u64,
    /// Envelopes received twice and dropped.
    pub duplicates: u64,
    /// Gaps reported.
    pub gaps: u64,
    /// Times another node with this node's name was seen.
    pub duplicate_node_seen: u64,
    /// Reads of topic history from the bus (entries, not positions): resumes older
    /// than this node's cache, coalesced, and holes filled before later publications.
    pub history_reads: u64,
    /// Messages the bus lost on their way to this node because its event stream was
    /// full ([`Backplane::dropped`](super::Backplane::dropped)).
    pub bus_dropped: u64,
    /// Times the bus's link was dialed again after a loss
    /// ([`Backplane::reconnects`](super::Backplane::reconnects)).
    pub bus_reconnects: u64,
    /// Messages of the outbox the bus refused for good
    /// ([`BackplaneError::Refused`](super::BackplaneError::Refused): a Redis ACL that
    /// does not allow a channel, say), given up rather than sent again for ever: they
    /// reached no one (a message may pack several envelopes of its channel).
    pub bus_refused: u64,
}

/// What [`ClusterBuilder::on_gap`](super::ClusterBuilder::on_gap) runs.
pub(super) type GapHook = Arc<dyn Fn(&Gap) + Send + Sync>;

/// The node's counters: the receive loop and the history room write them,
/// [`ClusterStats`] reads them.
#[derive(Default)]
pub(super) struct Counters {
    pub duplicates: AtomicU64,
    pub gaps: AtomicU64,
    pub twins: AtomicU64,
    pub history_reads: AtomicU64,
}

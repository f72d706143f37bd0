//! Metrics through the [`metrics`](https://docs.rs/metrics) facade (feature
//! `metrics`): the application installs the recorder (exporter) it wants, then adds
//! a [`Metrics`] layer to its [`PeerConfig`](crate::PeerConfig).
//!
//! Two sources, one switch. Calls and notifications (served and made), their
//! latencies and batches are counted by the [`Metrics`] call layer, per connection
//! config that has it. What the engine counts itself (connections, handshakes, the
//! outgoing queues, slow peers, cancels, topics, the rate limit's closes, a cluster's
//! bus) is reported from the first [`Metrics::new`] on, process-wide; before it (and
//! without the feature) those places cost nothing, or one atomic load.
//!
//! Every name, its type and labels are in [`names`] and in README's "Metrics"
//! section. Labels are bounded: no peer ids or addresses; a method's name only where
//! the router names it (calls made: the first 256 names seen), `other` for the rest.
//!
//! Install the recorder before the first [`Metrics::new`]: the handles taken then are
//! the ones used for the process's life (a recorder installed later sees only the
//! metrics registered after it).

#[cfg(feature = "metrics")]
mod engine;
#[cfg(feature = "metrics")]
mod layer;
#[cfg(feature = "metrics")]
pub mod names;

#[cfg(feature = "metrics")]
pub use layer::Metrics;

#[cfg(feature = "metrics")]
use engine::engine;

/// Runs `$body` with the engine's handles when metrics are on; nothing without the
/// feature.
macro_rules! with_engine {
    (|$m:ident| $body:expr) => {{
        #[cfg(feature = "metrics")]
        if let Some($m) = engine() {
            $body;
        }
    }};
}

/// Whether the engine's metrics are on (from the first [`Metrics::new`]): what is
/// counted going up is counted coming down only if it was counted going up, so a gauge
/// never goes below what it should when metrics come on while connections run.
#[inline]
pub(crate) fn on() -> bool {
    #[cfg(feature = "metrics")]
    return engine().is_some();
    #[cfg(not(feature = "metrics"))]
    false
}

/// A connection's task started: counted open (if metrics are on, see [`on`]) until
/// the value returned is dropped.
#[inline]
pub(crate) fn connection_opened() -> OpenConnection {
    with_engine!(|m| {
        m.connections_open.increment(1.0);
        return OpenConnection { counted: true };
    });
    OpenConnection { counted: false }
}

/// A connection counted open: counted closed when dropped, which its task does when
/// it ends, and which also happens when the task is dropped before its end (its
/// runtime shut down under it), so the gauge never keeps a connection that is gone.
pub(crate) struct OpenConnection {
    counted: bool,
}

impl OpenConnection {
    /// A connection not counted (metrics off when it started).
    #[cfg(test)]
    pub(crate) fn uncounted() -> Self {
        OpenConnection { counted: false }
    }
}

impl Drop for OpenConnection {
    #[inline]
    fn drop(&mut self) {
        if self.counted {
            with_engine!(|m| m.connections_open.decrement(1.0));
        }
    }
}

/// How a server's handshake ended: `accepted`, `refused` (with the HTTP status sent),
/// `timeout`, `evicted`, `gone`.
#[inline]
pub(crate) fn handshake(outcome: &'static str, status: Option<u16>) {
    let _ = (outcome, status);
    with_engine!(|m| m.handshake(outcome, status));
}

/// Bytes went into (`delta` > 0) or out of a connection's outgoing queue.
#[inline]
pub(crate) fn queue_bytes(delta: i64) {
    let _ = delta;
    with_engine!(|m| m.queue_bytes.increment(delta as f64));
}

/// A slow peer was closed (`close`) or a message to it dropped.
#[inline]
pub(crate) fn slow_peer(close: bool) {
    let _ = close;
    with_engine!(|m| if close {
        m.slow_peer_closes.increment(1)
    } else {
        m.slow_peer_drops.increment(1)
    });
}

/// A cancel notification arrived.
#[inline]
pub(crate) fn cancel_received() {
    with_engine!(|m| m.cancels_received.increment(1));
}

/// A cancel notification was queued (`sent`), or skipped for a full queue.
#[inline]
pub(crate) fn cancel_sent(sent: bool) {
    let _ = sent;
    with_engine!(|m| if sent {
        m.cancels_sent.increment(1)
    } else {
        m.cancels_skipped.increment(1)
    });
}

/// A topic publication, queued for `deliveries` local subscribers.
#[inline]
pub(crate) fn topic_published(deliveries: usize) {
    let _ = deliveries;
    with_engine!(|m| {
        m.topic_publishes.increment(1);
        m.topic_deliveries.increment(deliveries as u64);
    });
}

/// A topic publication from another node, queued for `deliveries` local subscribers.
#[inline]
pub(crate) fn topic_delivered(deliveries: usize) {
    let _ = deliveries;
    with_engine!(|m| m.topic_deliveries.increment(deliveries as u64));
}

/// A publication queued for a resuming subscriber from the topic's history.
#[inline]
pub(crate) fn topic_replayed() {
    with_engine!(|m| m.topic_replays.increment(1));
}

/// A connection was closed with 4029 for going on past its rate limit.
#[inline]
pub(crate) fn rate_limit_close() {
    with_engine!(|m| m.rate_limit_closes.increment(1));
}

/// Bytes went into (`delta` > 0) or out of a cluster node's outbox.
#[inline]
pub(crate) fn cluster_outbox_bytes(delta: i64) {
    let _ = delta;
    with_engine!(|m| m.cluster_outbox_bytes.increment(delta as f64));
}

/// A cluster node's full outbox dropped an envelope.
#[inline]
pub(crate) fn cluster_outbox_dropped() {
    with_engine!(|m| m.cluster_outbox_dropped.increment(1));
}

/// A cluster node reported a gap.
#[inline]
pub(crate) fn cluster_gap() {
    with_engine!(|m| m.cluster_gaps.increment(1));
}

/// A cluster node reaches its bus (`up`), or no longer does.
#[inline]
pub(crate) fn cluster_bus(up: bool) {
    let _ = up;
    with_engine!(|m| m.cluster_bus_up.set(if up { 1.0 } else { 0.0 }));
}

/// A cluster node sees `nodes` live nodes, itself included.
#[inline]
pub(crate) fn cluster_nodes(nodes: usize) {
    let _ = nodes;
    with_engine!(|m| m.cluster_nodes.set(nodes as f64));
}

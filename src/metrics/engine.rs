//! The engine's own metrics: handles taken once, at the first `Metrics::new`, and
//! used from the places that count (see `metrics.rs`).

use std::sync::OnceLock;

use metrics::{
    counter, describe_counter, describe_gauge, describe_histogram, Counter, Gauge, Unit,
};

use super::names::*;

/// The handles of the engine's metrics that have fixed labels.
pub(crate) struct Engine {
    pub(crate) connections_open: Gauge,
    pub(crate) queue_bytes: Gauge,
    pub(crate) slow_peer_closes: Counter,
    pub(crate) slow_peer_drops: Counter,
    pub(crate) cancels_received: Counter,
    pub(crate) cancels_sent: Counter,
    pub(crate) cancels_skipped: Counter,
    pub(crate) topic_publishes: Counter,
    pub(crate) topic_deliveries: Counter,
    pub(crate) topic_replays: Counter,
    pub(crate) rate_limit_closes: Counter,
    pub(crate) cluster_outbox_bytes: Gauge,
    pub(crate) cluster_outbox_dropped: Counter,
    pub(crate) cluster_gaps: Counter,
    pub(crate) cluster_bus_up: Gauge,
    pub(crate) cluster_nodes: Gauge,
}

static ENGINE: OnceLock<Engine> = OnceLock::new();

/// The engine's handles, once metrics are on.
#[inline]
pub(crate) fn engine() -> Option<&'static Engine> {
    ENGINE.get()
}

/// Turns the engine's metrics on (once), describing every metric to the recorder.
pub(crate) fn start() {
    ENGINE.get_or_init(|| {
        describe();
        Engine {
            connections_open: metrics::gauge!(CONNECTIONS_OPEN),
            queue_bytes: metrics::gauge!(OUTGOING_QUEUE_BYTES),
            slow_peer_closes: counter!(SLOW_PEERS_TOTAL, "action" => "close"),
            slow_peer_drops: counter!(SLOW_PEERS_TOTAL, "action" => "drop"),
            cancels_received: counter!(CANCELS_TOTAL, "event" => "received"),
            cancels_sent: counter!(CANCELS_TOTAL, "event" => "sent"),
            cancels_skipped: counter!(CANCELS_TOTAL, "event" => "skipped"),
            topic_publishes: counter!(TOPIC_PUBLISHES_TOTAL),
            topic_deliveries: counter!(TOPIC_DELIVERIES_TOTAL),
            topic_replays: counter!(TOPIC_REPLAYS_TOTAL),
            rate_limit_closes: counter!(RATE_LIMIT_CLOSES_TOTAL),
            cluster_outbox_bytes: metrics::gauge!(CLUSTER_OUTBOX_BYTES),
            cluster_outbox_dropped: counter!(CLUSTER_OUTBOX_DROPPED_TOTAL),
            cluster_gaps: counter!(CLUSTER_GAPS_TOTAL),
            cluster_bus_up: metrics::gauge!(CLUSTER_BUS_UP),
            cluster_nodes: metrics::gauge!(CLUSTER_NODES),
        }
    });
}

impl Engine {
    /// A handshake's end; its labels vary, so its handle is looked up each time
    /// (once per connection).
    pub(crate) fn handshake(&self, outcome: &'static str, status: Option<u16>) {
        let status = status.map_or_else(|| "none".to_owned(), |s| s.to_string());
        counter!(CONNECTIONS_TOTAL, "outcome" => outcome, "status" => status).increment(1);
    }
}

/// What each metric is, for the recorder's `# HELP` lines.
fn describe() {
    describe_gauge!(CONNECTIONS_OPEN, "Connections running now.");
    describe_counter!(CONNECTIONS_TOTAL, "Server handshakes, by how they ended.");
    describe_counter!(CALLS_SERVED_TOTAL, "Calls served, by method and outcome.");
    describe_histogram!(
        CALLS_SERVED_DURATION,
        Unit::Seconds,
        "Time to answer a call served."
    );
    describe_counter!(CALLS_MADE_TOTAL, "Calls made, by method and outcome.");
    describe_histogram!(
        CALLS_MADE_DURATION,
        Unit::Seconds,
        "Time until a call made ended."
    );
    describe_counter!(NOTIFICATIONS_RECEIVED_TOTAL, "Notifications received.");
    describe_counter!(NOTIFICATIONS_SENT_TOTAL, "Notifications sent.");
    describe_histogram!(BATCH_ITEMS, "Items per batch, received or sent.");
    describe_gauge!(
        OUTGOING_QUEUE_BYTES,
        Unit::Bytes,
        "Bytes waiting in outgoing queues."
    );
    describe_counter!(SLOW_PEERS_TOTAL, "Pushes that found a peer's queue full.");
    describe_counter!(
        CANCELS_TOTAL,
        "Cancel notifications received, sent or skipped."
    );
    describe_counter!(TOPIC_PUBLISHES_TOTAL, "Topic publications made here.");
    describe_counter!(
        TOPIC_DELIVERIES_TOTAL,
        "Topic notifications queued for subscribers."
    );
    describe_counter!(
        TOPIC_REPLAYS_TOTAL,
        "Topic publications replayed from history."
    );
    describe_counter!(
        RATE_LIMIT_CLOSES_TOTAL,
        "Connections closed (4029) past their rate limit."
    );
    describe_gauge!(
        CLUSTER_OUTBOX_BYTES,
        Unit::Bytes,
        "Bytes in the cluster outbox."
    );
    describe_counter!(
        CLUSTER_OUTBOX_DROPPED_TOTAL,
        "Envelopes the full outbox refused."
    );
    describe_counter!(CLUSTER_GAPS_TOTAL, "Gaps the cluster node reported.");
    describe_gauge!(CLUSTER_BUS_UP, "1 while the node reaches its bus.");
    describe_gauge!(
        CLUSTER_NODES,
        "Live nodes of the cluster, this one included."
    );
}

//! The name of every metric, with its type and labels. Names and labels follow the
//! Prometheus conventions: `snake_case`, a `jsonrpc_` prefix, `_total` on counters, the
//! unit last (`_seconds`, `_bytes`). Label values are bounded (see [`super`]).

/// Gauge: connections running now, server and client sides.
pub const CONNECTIONS_OPEN: &str = "jsonrpc_connections_open";
/// Counter `{outcome, status}`: a server's handshakes by how they ended. `outcome` is
/// `accepted`, `refused`, `timeout` (the handshake took too long), `evicted` (newer
/// handshakes made it give way: `HandshakePolicy::max_handshakes`) or `gone` (the
/// client left first); `status` is the HTTP status answered (`101`, `403`, `429`,
/// `503`...), or `none`.
pub const CONNECTIONS_TOTAL: &str = "jsonrpc_connections_total";
/// Counter `{method, outcome}`: calls the other side made to this one, by how they
/// ended. `outcome` is one of [`OUTCOMES`].
pub const CALLS_SERVED_TOTAL: &str = "jsonrpc_calls_served_total";
/// Histogram `{method}`: seconds from a call's arrival to its answer.
pub const CALLS_SERVED_DURATION: &str = "jsonrpc_calls_served_duration_seconds";
/// Counter `{method, outcome}`: calls this side made, by how they ended.
pub const CALLS_MADE_TOTAL: &str = "jsonrpc_calls_made_total";
/// Histogram `{method}`: seconds from a call's sending to its end.
pub const CALLS_MADE_DURATION: &str = "jsonrpc_calls_made_duration_seconds";
/// Counter `{method, outcome}`: notifications received (`ok` once handled).
pub const NOTIFICATIONS_RECEIVED_TOTAL: &str = "jsonrpc_notifications_received_total";
/// Counter `{method, outcome}`: notifications sent (`ok` once queued).
pub const NOTIFICATIONS_SENT_TOTAL: &str = "jsonrpc_notifications_sent_total";
/// Histogram `{direction}`: items per batch, `received` or `sent`; its `_count` is
/// the number of batches.
pub const BATCH_ITEMS: &str = "jsonrpc_batch_items";
/// Gauge: bytes waiting in the outgoing queues of every connection.
pub const OUTGOING_QUEUE_BYTES: &str = "jsonrpc_outgoing_queue_bytes";
/// Counter `{action}`: pushes (broadcasts, topics) that found a peer's queue full,
/// and what the `SlowPeer` policy did: `close` (1008) or `drop`.
pub const SLOW_PEERS_TOTAL: &str = "jsonrpc_slow_peers_total";
/// Counter `{event}`: cancel notifications `received`, `sent`, or `skipped` (the
/// outgoing queue was full).
pub const CANCELS_TOTAL: &str = "jsonrpc_cancels_total";
/// Counter: topic publications made on this node.
pub const TOPIC_PUBLISHES_TOTAL: &str = "jsonrpc_topic_publishes_total";
/// Counter: topic notifications queued for this node's subscribers (one per
/// subscriber per publication, including those arriving from the cluster).
pub const TOPIC_DELIVERIES_TOTAL: &str = "jsonrpc_topic_deliveries_total";
/// Counter: topic publications queued for a subscriber from the topic's history (a
/// resume from a position) rather than live.
pub const TOPIC_REPLAYS_TOTAL: &str = "jsonrpc_topic_replays_total";
/// Counter: connections closed with 4029 for going on past their rate limit.
pub const RATE_LIMIT_CLOSES_TOTAL: &str = "jsonrpc_rate_limit_closes_total";
/// Gauge: bytes in a cluster node's outbox, waiting for the bus.
pub const CLUSTER_OUTBOX_BYTES: &str = "jsonrpc_cluster_outbox_bytes";
/// Counter: envelopes a cluster node's full outbox refused (and dropped).
pub const CLUSTER_OUTBOX_DROPPED_TOTAL: &str = "jsonrpc_cluster_outbox_dropped_total";
/// Counter: gaps a cluster node reported (messages it may have missed).
pub const CLUSTER_GAPS_TOTAL: &str = "jsonrpc_cluster_gaps_total";
/// Gauge: 1 while a cluster node reaches its bus, 0 while it does not.
pub const CLUSTER_BUS_UP: &str = "jsonrpc_cluster_bus_up";
/// Gauge: the nodes of the cluster this node sees live, itself included.
pub const CLUSTER_NODES: &str = "jsonrpc_cluster_nodes";

/// The values of the `outcome` label of calls and notifications: `ok`; the error's
/// kind by its code (`method_not_found` -32601, `invalid_params` -32602,
/// `internal_error` -32603, `invalid_request` -32600, `rate_limited` -32005,
/// `cancelled` -32800 or a cancel, `error` for any other code); `timeout`, `closed`
/// (the connection ended first), `panicked` (the handler), `failed` (a call made that
/// failed here).
pub const OUTCOMES: [&str; 12] = [
    "ok",
    "error",
    "method_not_found",
    "invalid_params",
    "internal_error",
    "invalid_request",
    "rate_limited",
    "cancelled",
    "timeout",
    "closed",
    "panicked",
    "failed",
];

/// The `method` label of a name the router does not know, and of calls made past the
/// first 256 names.
pub const OTHER_METHOD: &str = "other";

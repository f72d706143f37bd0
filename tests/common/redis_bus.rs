//! A `RedisBackplane` on a test's own Redis, with fast probes: for the suites that need
//! feature `redis` (included by path: `tests/common/mod.rs` is shared with the harness,
//! which has no such feature).

use std::time::Duration;

use crate::common::redis_server::RedisServer;

/// Fast probes so a silent link is found in well under a second, with room for a
/// loaded machine (a busy test thread must not look like a frozen Redis).
pub fn fast_options() -> jsonrpc_peer::cluster::RedisOptions {
    jsonrpc_peer::cluster::RedisOptions::default()
        .probe_interval(Duration::from_millis(200))
        .probe_misses(3)
        .response_timeout(Duration::from_millis(500))
        .connect_timeout(Duration::from_millis(500))
}

/// A backplane on `redis` with [`fast_options`], and its events.
pub async fn backplane(
    redis: &RedisServer,
) -> (
    jsonrpc_peer::cluster::RedisBackplane,
    tokio::sync::mpsc::Receiver<jsonrpc_peer::cluster::BusEvent>,
) {
    use jsonrpc_peer::cluster::Backplane;
    let url = redis.url();
    let connect = jsonrpc_peer::cluster::RedisBackplane::connect(&url, fast_options());
    let bus = tokio::time::timeout(Duration::from_secs(10), connect)
        .await
        .expect("connected within 10 s")
        .expect("connect to the test redis");
    let events = bus.events().expect("events are taken once");
    (bus, events)
}

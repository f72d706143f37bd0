//! Three `cluster_node` example processes against one real Redis (started by the test
//! on a unix socket), with WebSocket clients on each: broadcast, topics, calls across
//! nodes, counts, and a Redis outage (the suite is in `common/cluster_suite.rs`). Build
//! the example first: `cargo build --features redis --example cluster_node`.

#[path = "common/cluster_suite.rs"]
mod cluster_suite;
mod common;

use common::redis_server::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_share_broadcasts_topics_calls_and_counts() {
    let redis = RedisServer::start();
    cluster_suite::three_nodes_share_broadcasts_topics_calls_and_counts(&redis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_for_two_seconds_local_goes_on_then_resubscribe_flush_and_one_gap() {
    let mut redis = RedisServer::start();
    cluster_suite::bus_down_for_two_seconds_local_goes_on_then_resubscribe_flush_and_one_gap(
        &mut redis,
    )
    .await;
}

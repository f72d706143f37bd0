//! Three `cluster_node` example processes against one real Redis (started by the test
//! on a unix socket), with WebSocket clients on each: broadcast, topics, calls across
//! nodes, counts, and a Redis outage (the suite is in `common/cluster_nodes.rs`). Build
//! the example first: `cargo build --features redis --example cluster_node`.

#[path = "common/cluster_nodes.rs"]
mod cluster_nodes;
mod common;

use cluster_nodes::Bus;
use common::redis_server::RedisServer;

/// One Redis on a unix socket.
struct OneRedis(RedisServer);

impl Bus for OneRedis {
    fn args(&self) -> Vec<String> {
        vec!["--redis".into(), self.0.url()]
    }

    fn subscribers(&self, channel: &str) -> u64 {
        // redis-cli prints "channel\ncount".
        let numsub = self.0.cli(&["PUBSUB", "NUMSUB", channel]);
        numsub
            .lines()
            .nth(1)
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    }

    fn kill(&mut self) {
        self.0.kill();
    }

    fn restart(&mut self) {
        self.0.restart();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_share_broadcasts_topics_calls_and_counts() {
    let redis = OneRedis(RedisServer::start());
    cluster_nodes::three_nodes_share_broadcasts_topics_calls_and_counts(&redis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_for_two_seconds_local_goes_on_then_resubscribe_flush_and_one_gap() {
    let mut redis = OneRedis(RedisServer::start());
    cluster_nodes::bus_down_for_two_seconds_local_goes_on_then_resubscribe_flush_and_one_gap(
        &mut redis,
    )
    .await;
}

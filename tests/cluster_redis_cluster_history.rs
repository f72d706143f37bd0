//! Topics with history across three `cluster_node --redis-cluster ... --history N`
//! processes on a real Redis Cluster (three masters, three replicas, started by each
//! test on free loopback ports): the history suite one Redis runs
//! (tests/common/history_suite.rs), so a resume, the order of two publishers, a bus
//! back empty, the nodes' (shard) pub/sub links killed and 1,000 resumes at once (one
//! `XRANGE` per position, summed over the masters) behave alike on both. A master killed and a slot moved with history are in
//! tests/cluster_redis_cluster_nodes.rs. The example must be built with `redis-cluster`
//! (`cargo test --all-features` does).

mod common;
#[path = "common/history_suite.rs"]
mod history_suite;

use common::redis_cluster::RedisCluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_dropping_its_tcp_connection_resumes_on_another_node_with_every_offset_once() {
    let bus = RedisCluster::start(3, 1);
    history_suite::a_client_dropping_its_tcp_connection_resumes_on_another_node_with_every_offset_once(&bus).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_publishers_on_two_nodes_give_every_subscriber_the_same_order() {
    let bus = RedisCluster::start(3, 1);
    history_suite::two_publishers_on_two_nodes_give_every_subscriber_the_same_order(&bus).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outside_the_window_or_after_the_cluster_came_back_empty_a_resume_is_not_recovered() {
    let mut bus = RedisCluster::start(3, 1);
    history_suite::outside_the_window_or_after_redis_came_back_empty_a_resume_is_not_recovered(
        &mut bus,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_pubsub_links_are_filled_in_from_the_history_with_no_gap() {
    let bus = RedisCluster::start(3, 1);
    history_suite::killed_pubsub_links_are_filled_in_from_the_history_with_no_gap(&bus).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_clients_resuming_at_once_read_the_history_once_per_position() {
    let bus = RedisCluster::start(3, 1);
    history_suite::a_thousand_clients_resuming_at_once_read_the_history_once_per_position(&bus)
        .await;
}

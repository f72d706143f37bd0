//! Topics with history across three `cluster_node --history N` processes on a real
//! Redis (started by each test on a unix socket), with WebSocket clients over real
//! sockets: the history suite (tests/common/history_suite.rs: resumes on another node
//! after a dropped TCP connection, one order for two publishers, resumes that cannot
//! recover, Redis restarted empty, the nodes' pub/sub links killed, a reconnect storm). Build the example first: `cargo build --features redis --example cluster_node`.

mod common;
#[path = "common/history_suite.rs"]
mod history_suite;

use common::redis_server::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_dropping_its_tcp_connection_resumes_on_another_node_with_every_offset_once() {
    let redis = RedisServer::start();
    history_suite::a_client_dropping_its_tcp_connection_resumes_on_another_node_with_every_offset_once(&redis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_publishers_on_two_nodes_give_every_subscriber_the_same_order() {
    let redis = RedisServer::start();
    history_suite::two_publishers_on_two_nodes_give_every_subscriber_the_same_order(&redis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outside_the_window_or_after_redis_came_back_empty_a_resume_is_not_recovered() {
    let mut redis = RedisServer::start();
    history_suite::outside_the_window_or_after_redis_came_back_empty_a_resume_is_not_recovered(
        &mut redis,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_pubsub_links_are_filled_in_from_the_history_with_no_gap() {
    let redis = RedisServer::start();
    history_suite::killed_pubsub_links_are_filled_in_from_the_history_with_no_gap(&redis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_clients_resuming_at_once_read_the_history_once_per_position() {
    let redis = RedisServer::start();
    history_suite::a_thousand_clients_resuming_at_once_read_the_history_once_per_position(&redis)
        .await;
}

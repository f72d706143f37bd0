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

/// Cluster node "a" on `redis`, its topic "t" keeping history, and its server (not
/// serving yet).
async fn node_a_keeping_history_of_t(
    redis: &RedisServer,
) -> (jsonrpc_peer::Server, jsonrpc_peer::cluster::Cluster) {
    use jsonrpc_peer::cluster::{Cluster, RedisBackplane, RedisOptions};
    use jsonrpc_peer::{HistoryConfig, Server};

    let server = Server::bind("127.0.0.1:0").await.unwrap();
    let bus = common::within(RedisBackplane::connect(
        &redis.url(),
        RedisOptions::default(),
    ))
    .await
    .unwrap();
    let cluster = common::within(Cluster::builder(bus, server.handle()).node_id("a").start())
        .await
        .unwrap();
    cluster.topics().keep_history("t", HistoryConfig::default());
    (server, cluster)
}

/// Adds `foo bar`, in no node's layout, to the Stream `stream` with the id `id` (`*`:
/// past the last one).
async fn foreign_entry(link: &mut redis::aio::MultiplexedConnection, stream: &str, id: &str) {
    let _: String = redis::cmd("XADD")
        .arg(stream)
        .arg(id)
        .arg("foo")
        .arg("bar")
        .query_async(link)
        .await
        .unwrap();
}

/// An entry in a topic's history that no node wrote, added to its Stream with `XADD` by
/// another program (its data not JSON, in the layout of a node's entries, the meta
/// moved on as a node's append would): a resume from before it gets every publication
/// but that one, in order and `recovered`, and the node counts it as a gap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_entry_in_the_history_is_skipped_and_the_ones_after_it_replayed() {
    use jsonrpc_peer::cluster::TopicKeys;
    use jsonrpc_peer::{Router, TopicMethods};
    use serde_json::{json, Value};

    let redis = RedisServer::start();
    let (server, cluster) = node_a_keeping_history_of_t(&redis).await;
    let url = format!("ws://{}", server.local_addr().unwrap());
    let topics = cluster.topics();
    tokio::spawn(server.serve(Router::new().topics(TopicMethods::new(&topics))));

    for i in 1..=3 {
        common::within(topics.publish("t", &json!(i)))
            .await
            .unwrap();
    }
    // Offset 4: written by someone else.
    let keys = TopicKeys::new("jp", "t");
    let client = redis::Client::open(redis.url()).unwrap();
    let mut redis_link = common::within(client.get_multiplexed_async_connection())
        .await
        .unwrap();
    let (epoch, recorded): (String, u64) = redis::cmd("HMGET")
        .arg(&keys.meta)
        .arg("e")
        .arg("c")
        .query_async(&mut redis_link)
        .await
        .unwrap();
    let foreign = b"not json";
    let mut data = (foreign.len() as u32).to_be_bytes().to_vec();
    data.extend_from_slice(foreign);
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let _: String = redis::cmd("XADD")
        .arg(&keys.stream)
        .arg("4-0")
        .arg("t")
        .arg(now_ms)
        .arg("n")
        .arg(1)
        .arg("s")
        .arg(recorded)
        .arg("d")
        .arg(data)
        .query_async(&mut redis_link)
        .await
        .unwrap();
    let _: () = redis::cmd("HSET")
        .arg(&keys.meta)
        .arg("o")
        .arg(4)
        .arg("c")
        .arg(recorded + foreign.len() as u64)
        .query_async(&mut redis_link)
        .await
        .unwrap();
    for i in 5..=7 {
        let published = common::within(topics.publish("t", &json!(i)))
            .await
            .unwrap();
        assert_eq!(published.offset, Some(i));
    }
    // Offset 8: written by someone else, and not even in a node's layout.
    foreign_entry(&mut redis_link, &keys.stream, "8-0").await;
    let _: () = redis::cmd("HSET")
        .arg(&keys.meta)
        .arg("o")
        .arg(8)
        .query_async(&mut redis_link)
        .await
        .unwrap();
    let published = common::within(topics.publish("t", &json!(9)))
        .await
        .unwrap();
    assert_eq!(published.offset, Some(9));

    // A client resumes from before all of it.
    let mut client = common::RawClient::connect(&url).await;
    let resume = json!({"jsonrpc": "2.0", "method": "subscribe",
        "params": ["t", {"epoch": epoch, "offset": 0}], "id": 1});
    client.send(&resume.to_string()).await;
    let mut replayed = Vec::new();
    let answer = loop {
        assert!(
            replayed.len() <= 10,
            "more than was published: {replayed:?}"
        );
        let Some(text) = client.recv_text().await else {
            panic!("the connection ended after offsets {replayed:?}");
        };
        let frame: Value = serde_json::from_str(&text).unwrap();
        if frame.get("id").is_some() {
            break frame;
        }
        assert_eq!(frame["params"]["data"], frame["params"]["offset"], "{text}");
        replayed.push(frame["params"]["offset"].as_u64().unwrap());
    };
    assert_eq!(replayed, [1, 2, 3, 5, 6, 7, 9]);
    assert_eq!(
        answer["result"],
        json!({"epoch": epoch, "offset": 9, "recovered": true}),
        "{answer}"
    );
    assert!(cluster.stats().gaps >= 1, "{:?}", cluster.stats());
    // Live from there.
    common::within(topics.publish("t", &json!(10)))
        .await
        .unwrap();
    let next = client.recv_json().await;
    assert_eq!(next["params"]["offset"], 10, "{next}");
}

/// Something else adds an entry past the history's last offset (`XADD` with `*`, an id
/// from the clock): the next publication cannot follow it, and is not refused for it
/// either. As when the history is lost, a new epoch starts at offset 1, and a resume
/// from the old one is not recovered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_entry_past_the_last_offset_starts_a_new_epoch_not_a_failure() {
    use jsonrpc_peer::cluster::TopicKeys;
    use serde_json::json;

    let redis = RedisServer::start();
    let (_server, cluster) = node_a_keeping_history_of_t(&redis).await;
    let topics = cluster.topics();
    let first = common::within(topics.publish("t", &json!(1)))
        .await
        .unwrap();
    assert_eq!(first.offset, Some(1));

    let keys = TopicKeys::new("jp", "t");
    let client = redis::Client::open(redis.url()).unwrap();
    let mut redis_link = common::within(client.get_multiplexed_async_connection())
        .await
        .unwrap();
    let epoch = |link: &mut redis::aio::MultiplexedConnection| {
        let mut link = link.clone();
        let meta = keys.meta.clone();
        async move {
            let epoch: String = redis::cmd("HGET")
                .arg(meta)
                .arg("e")
                .query_async(&mut link)
                .await
                .unwrap();
            epoch
        }
    };
    let old_epoch = epoch(&mut redis_link).await;
    foreign_entry(&mut redis_link, &keys.stream, "*").await;

    let next = common::within(topics.publish("t", &json!(2)))
        .await
        .expect("a publication after a foreign entry goes out");
    assert_eq!(next.offset, Some(1), "a new epoch starts at 1");
    let new_epoch = epoch(&mut redis_link).await;
    assert_ne!(new_epoch, old_epoch);
    let after = common::within(topics.publish("t", &json!(3)))
        .await
        .unwrap();
    assert_eq!(after.offset, Some(2));
    assert_eq!(epoch(&mut redis_link).await, new_epoch);
}

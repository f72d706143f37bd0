//! Topics with history across three `cluster_node --history N` processes on a real
//! Redis (started by each test on a unix socket), with WebSocket clients over real
//! sockets: the history suite (tests/common/history_suite.rs: resumes on another node
//! after a dropped TCP connection, one order for two publishers, resumes that cannot
//! recover, Redis restarted empty), then a node's pub/sub link killed and a reconnect
//! storm. Build the example first: `cargo build --features redis --example cluster_node`.

mod common;
#[path = "common/history_suite.rs"]
mod history_suite;

use std::time::Duration;

use common::redis_server::RedisServer;
use common::within;
use history_suite::{call, client, next, three};
use serde_json::{json, Value};

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
    let nodes = three(&redis, "10000").await;
    let (subscriber, mut rx) = client(&nodes[1].url, &["feed"]).await;
    call(&subscriber, "subscribe", json!(["feed"])).await;
    let (publisher, _) = client(&nodes[0].url, &[]).await;
    // A steady stream; midway every node's subscriber connection is killed. A publish
    // made while its node's link is down is refused (not recorded) and made again.
    let mut ok = Vec::new();
    let mut refused = 0;
    for i in 0..300u64 {
        if i == 100 {
            let killed = redis.cli(&["CLIENT", "KILL", "TYPE", "pubsub"]);
            assert_ne!(killed.trim(), "0", "{killed}");
        }
        loop {
            match within(publisher.call::<Value>("publish", json!(["feed", i]))).await {
                Ok(answer) => {
                    ok.push((answer["offset"].as_u64().unwrap(), json!(i)));
                    break;
                }
                Err(e) => {
                    let rpc = e.rpc().cloned().unwrap_or_else(|| panic!("{e}"));
                    assert!(rpc.message.contains("down"), "{rpc:?}");
                    refused += 1;
                    assert!(refused < 1000, "the node never came back");
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let offsets: Vec<u64> = ok.iter().map(|(o, _)| *o).collect();
    assert_eq!(
        offsets,
        (1..=300).collect::<Vec<_>>(),
        "refused ones took no offset"
    );
    for (offset, data) in &ok {
        assert_eq!(next(&mut rx, "feed").await, (*offset, data.clone()));
    }
    // Nothing else (no $/gap): the next thing is the next publication.
    call(&publisher, "publish", json!(["feed", "end"])).await;
    assert_eq!(next(&mut rx, "feed").await, (301, json!("end")));
    let dialed: u64 = redis
        .cli(&["INFO", "stats"])
        .lines()
        .find_map(|l| l.strip_prefix("total_connections_received:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    assert!(dialed > 6, "the nodes dialed again ({dialed} connections)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_clients_resuming_at_once_read_the_history_once_per_position() {
    let redis = RedisServer::start();
    let nodes = three(&redis, "1000").await;
    let (publisher, _) = client(&nodes[0].url, &[]).await;
    for i in 0..100u64 {
        call(&publisher, "publish", json!(["storm", i])).await;
    }
    let (probe, _probe_rx) = client(&nodes[0].url, &["storm"]).await;
    let epoch = call(&probe, "subscribe", json!(["storm"])).await["epoch"].clone();
    // b has never had a subscriber of the topic: its cache is empty, so what the
    // clients missed is on Redis only.
    let mut clients = Vec::new();
    for _ in 0..1000 {
        clients.push(client(&nodes[1].url, &["storm"]).await);
    }
    redis.cli(&["CONFIG", "RESETSTAT"]);
    let resumes = clients.iter().enumerate().map(|(i, (peer, _))| {
        let from = json!({"epoch": epoch, "offset": if i % 2 == 0 { 30 } else { 60 }});
        let peer = peer.clone();
        async move { call(&peer, "subscribe", json!(["storm", from])).await }
    });
    let answers = within(futures_util::future::join_all(resumes)).await;
    for answer in &answers {
        assert_eq!(answer["recovered"], true, "{answer}");
        assert_eq!(answer["offset"], 100);
    }
    for (i, (_, rx)) in clients.iter_mut().enumerate() {
        let start = if i % 2 == 0 { 31 } else { 61 };
        for offset in start..=100u64 {
            assert_eq!(
                next(rx, "storm").await,
                (offset, json!(offset - 1)),
                "client {i}"
            );
        }
    }
    // Redis's own count: every read of entries is one XRANGE (positions read none).
    let stats = redis.cli(&["INFO", "commandstats"]);
    let xrange: u64 = stats
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_xrange:calls="))
        .and_then(|v| v.split(',').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    // One per position at most: 2, or 1 when the read from 30 was in the cache
    // before any resume from 60 looked.
    assert!(
        (1..=2).contains(&xrange),
        "{xrange} history reads for 1,000 resumes from 2 positions"
    );
}

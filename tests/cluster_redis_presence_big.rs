//! A topic of 10,000 members across three `cluster_node` example processes over a real
//! Redis: every node counts them from memory, quickly, and lists them all. A binary of
//! its own: its 10,000 connections load the machine, and the timing tests of
//! `cluster_redis_presence.rs` must not run beside it. Build the example first:
//! `cargo build --features redis --example cluster_node`.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::cluster_node::{Node, NodeClient};
use common::redis_server::RedisServer;
use common::within;
use jsonrpc_peer::Caller;
use serde_json::{json, Value};
use tokio::time::Instant;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_of_ten_thousand_members_is_counted_from_memory_and_listed_whole() {
    const MEMBERS: usize = 10_000;
    let redis = RedisServer::start();
    let nodes = [
        Node::start(&redis, "a", 2000, &[]).await,
        Node::start(&redis, "b", 2000, &[]).await,
        Node::start(&redis, "c", 2000, &[]).await,
    ];
    // 10,000 connections from this process (one socket each), a third on each node,
    // joined 250 at a time.
    let mut clients = Vec::with_capacity(MEMBERS);
    for chunk in (0..MEMBERS).collect::<Vec<_>>().chunks(250) {
        let joins = chunk.iter().map(|&i| {
            let node = &nodes[i % 3];
            async move {
                let client = NodeClient::connect(node).await;
                let ok = client.ok("subscribe", json!(["big", null, {"n": i}])).await;
                assert_eq!(ok, json!(true));
                client
            }
        });
        clients.extend(futures_util::future::join_all(joins).await);
    }
    let asking: Vec<NodeClient> = {
        let mut v = Vec::new();
        for node in &nodes {
            v.push(NodeClient::connect(node).await);
        }
        v
    };
    // Every node comes to count them all.
    let start = Instant::now();
    for client in &asking {
        loop {
            if client.ok("presence_count", json!(["big"])).await == json!(MEMBERS) {
                break;
            }
            assert!(start.elapsed() < Duration::from_secs(30), "not all counted");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    // Counting is a read of memory: Redis runs no command for it.
    let calls_before = redis.cli(&["INFO", "commandstats"]);
    let mut times = Vec::new();
    for client in &asking {
        let mut node_times = Vec::new();
        for _ in 0..21 {
            let asked = Instant::now();
            assert_eq!(
                client.ok("presence_count", json!(["big"])).await,
                json!(MEMBERS)
            );
            node_times.push(asked.elapsed());
        }
        node_times.sort();
        times.push(node_times[10]);
    }
    let calls_after = redis.cli(&["INFO", "commandstats"]);
    // A count that went to Redis would run the read script: an HLEN per part, three
    // per count, 189 for these 63. The nodes' own checks, once a window, run a few.
    let hlen = |stats: &str| -> u64 {
        stats
            .lines()
            .find_map(|l| l.strip_prefix("cmdstat_hlen:calls="))
            .and_then(|rest| rest.split(',').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    let read = hlen(&calls_after) - hlen(&calls_before);
    assert!(read < 21, "counting read Redis: {read} HLEN");
    eprintln!("presence_count of {MEMBERS}, median of 21 round trips per node: {times:?}");
    for (node, median) in ["a", "b", "c"].iter().zip(&times) {
        assert!(
            *median < Duration::from_millis(5),
            "presence_count on {node}: median of 21 answers {median:?}"
        );
    }
    // `presence` lists every member once, with its info, on every node.
    for client in &asking {
        let members = within(client.peer.call::<Vec<Value>>("presence", json!(["big"])))
            .await
            .expect("presence");
        assert_eq!(members.len(), MEMBERS);
        let infos: BTreeSet<u64> = members
            .iter()
            .map(|m| m["info"]["n"].as_u64().expect("n"))
            .collect();
        let addrs: BTreeSet<&str> = members
            .iter()
            .map(|m| m["addr"].as_str().expect("addr"))
            .collect();
        assert_eq!((infos.len(), addrs.len()), (MEMBERS, MEMBERS));
        assert_eq!(infos.last(), Some(&(MEMBERS as u64 - 1)));
    }
    drop(clients);
}

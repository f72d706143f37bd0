//! Presence over a real Redis Cluster (three masters, started by the test): three
//! `cluster_node` processes with `--redis-cluster`, a member joining on one node is
//! listed and counted on every node, and leaves everywhere when its connection ends.
//! The store's keys are one topic's slot (`jp:pi:{T}`, `jp:pm:{T}|NODE`), each write
//! one pipeline per topic on its master. The full presence suite runs on one Redis
//! (tests/cluster_redis_presence.rs).

mod common;

use std::time::Duration;

use common::cluster_node::{Node, NodeClient};
use common::redis_cluster::RedisCluster;
use serde_json::{json, Value};
use tokio::time::Instant;

/// Polls `presence_count` and `presence` through each client until they show `want`
/// members, for at most 10 s.
async fn counted(clients: &[&NodeClient], topic: &str, want: usize) -> Vec<Value> {
    let start = Instant::now();
    let mut listed = Vec::new();
    for client in clients {
        loop {
            let count = client.ok("presence_count", json!([topic])).await;
            let members = client.ok("presence", json!([topic])).await;
            let members = members.as_array().cloned().unwrap_or_default();
            if count == json!(want) && members.len() == want {
                listed = members;
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "never counted {want}: {count}, {members:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    listed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_is_listed_on_every_node_and_leaves_everywhere() {
    let bus = RedisCluster::start(3, 0);
    let a = Node::start(&bus, "a", 500, &[]).await;
    let b = Node::start(&bus, "b", 500, &[]).await;
    let c = Node::start(&bus, "c", 500, &[]).await;
    // Watchers on b and c follow the topic (their nodes keep a view of it).
    let (wb, wc) = (NodeClient::connect(&b).await, NodeClient::connect(&c).await);
    for w in [&wb, &wc] {
        assert_eq!(w.ok("subscribe", json!(["room", null])).await, json!(true));
    }
    let ana = NodeClient::connect(&a).await;
    let info = json!({"user": "ana"});
    assert_eq!(
        ana.ok("subscribe", json!(["room", null, info])).await,
        json!(true)
    );
    let addr = ana.ok("whoami", json!([])).await;
    let listed = counted(&[&ana, &wb, &wc], "room", 1).await;
    assert_eq!(listed, vec![json!({"addr": addr, "info": info})]);
    // Its keys are in the topic's slot, on one master.
    let parts: Vec<String> = bus
        .masters()
        .into_iter()
        .map(|(port, _)| bus.cli(port, &["KEYS", "jp:pm:*"]))
        .filter(|keys| !keys.trim().is_empty())
        .collect();
    assert_eq!(parts, vec!["jp:pm:{room}|a".to_owned()], "{parts:?}");

    ana.peer.close().await;
    counted(&[&wb, &wc], "room", 0).await;
}

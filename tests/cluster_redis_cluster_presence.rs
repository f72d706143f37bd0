//! Presence over a real Redis Cluster (three masters, started by the test): three
//! `cluster_node` processes with `--redis-cluster`, a member joining on one node is
//! listed and counted on every node, and leaves everywhere when its connection ends.
//! The store's keys are one topic's slot (`jp:pi:{T}`, `jp:pm:{T}|NODE`), each write
//! one pipeline per topic on its master. The full presence suite runs on one Redis
//! (tests/cluster_redis_presence.rs).

mod common;

use std::collections::HashMap;
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

/// PTTL of each of `keys` on the Redis at `port` (-2: gone), in one pipeline.
fn pttls(port: u16, keys: &[String]) -> Vec<i64> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).expect("a url");
    let mut conn = client.get_connection().expect("connect to a master");
    let mut pipe = redis::pipe();
    for key in keys {
        pipe.cmd("PTTL").arg(key);
    }
    pipe.query(&mut conn).expect("PTTL answered")
}

/// Polls the TTL of every part in `keys` (by master) until each was seen going back up
/// `times` times (refreshed at that many heartbeats: the caller makes it longer than a
/// heartbeat window, the parts' TTL), for at most 30 s; fails as soon as one expired.
async fn refreshed(keys: &HashMap<u16, Vec<String>>, times: u32, why: &str) {
    let mut last: HashMap<String, i64> = HashMap::new();
    let mut refreshed: HashMap<String, u32> = HashMap::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        for (master, ks) in keys {
            for (key, ttl) in ks.iter().zip(pttls(*master, ks)) {
                assert!(
                    ttl != -2,
                    "{key} on the live master {master} expired: not refreshed since {why}"
                );
                if last.get(key).is_some_and(|before| ttl > *before) {
                    *refreshed.entry(key.clone()).or_default() += 1;
                }
                last.insert(key.clone(), ttl);
            }
        }
        let total: usize = keys.values().map(Vec::len).sum();
        if refreshed.len() == total && refreshed.values().all(|n| *n >= times) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "not refreshed in 30 s: {refreshed:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A member on the empty topic `""` (any client may name it): its presence keys share
/// a slot as every topic's do (`jp:pi:!{empty}`, `jp:pm:!{empty}|a`; wrapped as `{}`
/// they hashed apart and every refresh of its chunk failed with CROSSSLOT), and the
/// refresh of the node's other topics, in chunks of 256, goes on past a chunk that
/// fails: no part expires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_on_the_empty_topic_does_not_stop_the_refresh_of_the_others() {
    let cluster = RedisCluster::start(3, 0);
    // 257 topics and "": two chunks, 256 and 2; "" in the first 255 times in 258.
    let topics: Vec<String> = (0..257).map(|n| format!("e{n}")).collect();
    let mut keys: HashMap<u16, Vec<String>> = HashMap::new();
    for topic in &topics {
        let master = cluster.master_of(cluster.keyslot(topic));
        keys.entry(master)
            .or_default()
            .push(format!("jp:pm:{{{topic}}}|a"));
    }
    let node = Node::start(&cluster, "a", 1000, &[]).await;
    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(NodeClient::connect(&node).await);
    }
    for (i, topic) in topics.iter().enumerate() {
        let client = &clients[i % clients.len()];
        assert_eq!(
            client
                .ok("subscribe", json!([topic, null, {"user": i}]))
                .await,
            json!(true)
        );
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while !keys
        .iter()
        .all(|(m, ks)| pttls(*m, ks).iter().all(|t| *t > 0))
    {
        assert!(Instant::now() < deadline, "the parts were never written");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let empty = NodeClient::connect(&node).await;
    assert_eq!(
        empty
            .ok("subscribe", json!(["", null, {"user": "empty"}]))
            .await,
        json!(true)
    );
    // Seen refreshed at 7 heartbeats (7 s, more than twice the parts' 3 s window).
    refreshed(&keys, 7, "a member joined the topic \"\"").await;
}

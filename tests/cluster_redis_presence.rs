//! Presence across three `cluster_node` example processes over a real Redis (started by
//! the test on a unix socket), with WebSocket clients on each: joins and leaves seen once
//! on every node, a killed node's members gone within its window, a restarted node
//! leaving no ghosts, Redis restarted (the topic of 10,000 members is
//! `cluster_redis_presence_big.rs`, a binary of its own so its load does not run beside
//! these). Build the example first: `cargo build --features redis --example cluster_node`.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::cluster_node::{Node, NodeClient};
use common::redis_server::RedisServer;
use serde_json::{json, Value};
use tokio::time::Instant;

/// A watcher: a member of `topic` with info `{"w": name}` that gets join and leave
/// notifications.
async fn watcher(node: &Node, topic: &str, name: &str) -> NodeClient {
    let client = NodeClient::connect(node).await;
    let info = json!({"w": name, "presence": true});
    assert_eq!(
        client.ok("subscribe", json!([topic, null, info])).await,
        json!(true)
    );
    client
}

/// A member of `topic` with `info`.
async fn member(node: &Node, topic: &str, info: Value) -> (NodeClient, String) {
    let client = NodeClient::connect(node).await;
    assert_eq!(
        client.ok("subscribe", json!([topic, null, info])).await,
        json!(true)
    );
    let addr = client.ok("whoami", json!([])).await;
    (client, addr.as_str().expect("an address").to_owned())
}

/// `presence [topic]` as `addr info` lines.
async fn listed(client: &NodeClient, topic: &str) -> BTreeSet<String> {
    let members = client.ok("presence", json!([topic])).await;
    members
        .as_array()
        .expect("an array")
        .iter()
        .map(|m| format!("{} {}", m["addr"].as_str().expect("addr"), m["info"]))
        .collect()
}

/// Polls `presence` and `presence_count` through each client until they all show
/// `want`, for at most `limit`; returns how long it took.
async fn converge(
    clients: &[&NodeClient],
    topic: &str,
    want: &BTreeSet<String>,
    limit: Duration,
) -> Duration {
    let start = Instant::now();
    loop {
        let mut all = true;
        for client in clients {
            let count = client.ok("presence_count", json!([topic])).await;
            all &= count == json!(want.len()) && listed(client, topic).await == *want;
        }
        if all {
            return start.elapsed();
        }
        if start.elapsed() > limit {
            for client in clients {
                eprintln!("{:?}", listed(client, topic).await);
            }
            panic!("not converged on {want:?} within {limit:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The presence notifications a client gets until `marker` joins: `+addr info` or
/// `-addr info`, sorted.
async fn heard_until(client: &mut NodeClient, marker: &str) -> Vec<String> {
    let mut heard = Vec::new();
    for _ in 0..200 {
        let (method, params) = client.next_note().await;
        let sign = match method.as_str() {
            "presence.join" => '+',
            "presence.leave" => '-',
            _ => continue,
        };
        let line = format!(
            "{sign}{} {}",
            params["addr"].as_str().expect("addr"),
            params["info"]
        );
        if line == format!("+{marker}") {
            heard.sort();
            return heard;
        }
        heard.push(line);
    }
    panic!("the marker never came; heard {heard:?}");
}

/// Waits (at most 10 s) until every client's node counts `n` members of `topic`: every
/// change so far has reached every node, so its watchers heard it.
async fn counted(clients: &[&NodeClient], topic: &str, n: usize) {
    let start = Instant::now();
    for client in clients {
        while client.ok("presence_count", json!([topic])).await != json!(n) {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "never counted {n}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Waits until every client has heard `marker` join; what came before is dropped.
async fn drain_until(clients: &mut [&mut NodeClient], marker: &str) {
    for client in clients {
        heard_until(client, marker).await;
    }
}

fn set(items: &[String]) -> BTreeSet<String> {
    items.iter().cloned().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_see_each_join_and_leave_once() {
    let redis = RedisServer::start();
    let a = Node::start(&redis, "a", 500, &[]).await;
    let b = Node::start(&redis, "b", 500, &[]).await;
    let c = Node::start(&redis, "c", 500, &[]).await;
    let mut wa = watcher(&a, "room", "a").await;
    let mut wb = watcher(&b, "room", "b").await;
    let mut wc = watcher(&c, "room", "c").await;
    counted(&[&wa, &wb, &wc], "room", 3).await;
    let (_m1, m1) = member(&c, "room", json!("m1")).await;
    drain_until(&mut [&mut wa, &mut wb, &mut wc], &format!("{m1} \"m1\"")).await;

    let (ana, ana_addr) = member(&a, "room", json!({"user": "ana"})).await;
    let (ben, ben_addr) = member(&b, "room", json!({"user": "ben"})).await;
    let present = |extra: &[String]| {
        let mut all: Vec<String> = extra.to_vec();
        all.push(format!("{m1} \"m1\""));
        all
    };
    let everyone = present(&[
        format!("{ana_addr} {{\"user\":\"ana\"}}"),
        format!("{ben_addr} {{\"user\":\"ben\"}}"),
    ]);
    // The watchers are members too (info without its `presence` member).
    let mut with_watchers = everyone.clone();
    for (client, name) in [(&wa, "a"), (&wb, "b"), (&wc, "c")] {
        let addr = client.ok("whoami", json!([])).await;
        with_watchers.push(format!(
            "{} {{\"w\":\"{name}\"}}",
            addr.as_str().expect("addr")
        ));
    }
    converge(
        &[&wa, &wb, &wc],
        "room",
        &set(&with_watchers),
        Duration::from_secs(10),
    )
    .await;

    assert_eq!(ana.ok("unsubscribe", json!(["room"])).await, json!(true));
    ben.peer.close().await;
    // Once every node shows them gone, a marker joins: a watcher hears a change as its
    // node's view takes it, so whatever it heard of them came before the marker.
    let remaining: Vec<String> = with_watchers
        .iter()
        .filter(|m| !m.starts_with(&ana_addr) && !m.starts_with(&ben_addr))
        .cloned()
        .collect();
    converge(
        &[&wa, &wb, &wc],
        "room",
        &set(&remaining),
        Duration::from_secs(10),
    )
    .await;
    let (_m2, m2) = member(&c, "room", json!("m2")).await;
    let want = {
        let mut w = vec![
            format!("+{ana_addr} {{\"user\":\"ana\"}}"),
            format!("+{ben_addr} {{\"user\":\"ben\"}}"),
            format!("-{ana_addr} {{\"user\":\"ana\"}}"),
            format!("-{ben_addr} {{\"user\":\"ben\"}}"),
        ];
        w.sort();
        w
    };
    for (name, client) in [("a", &mut wa), ("b", &mut wb), ("c", &mut wc)] {
        assert_eq!(
            heard_until(client, &format!("{m2} \"m2\"")).await,
            want,
            "watcher on {name}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_nodes_members_are_gone_everywhere_within_its_window() {
    let redis = RedisServer::start();
    let heartbeat = Duration::from_millis(1000);
    let a = Node::start(&redis, "a", 1000, &[]).await;
    let b = Node::start(&redis, "b", 1000, &[]).await;
    let c = Node::start(&redis, "c", 1000, &[]).await;
    let mut wa = watcher(&a, "room", "a").await;
    let mut wb = watcher(&b, "room", "b").await;
    let mut on_c = Vec::new();
    for i in 0..3 {
        on_c.push(member(&c, "room", json!(i)).await);
    }
    counted(&[&wa, &wb], "room", 5).await;
    let (_m1, m1) = member(&a, "room", json!("m1")).await;
    drain_until(&mut [&mut wa, &mut wb], &format!("{m1} \"m1\"")).await;

    let killed = Instant::now();
    c.signal("KILL");
    let mut survivors = vec![format!("{m1} \"m1\"")];
    for (client, name) in [(&wa, "a"), (&wb, "b")] {
        let addr = client.ok("whoami", json!([])).await;
        survivors.push(format!(
            "{} {{\"w\":\"{name}\"}}",
            addr.as_str().expect("addr")
        ));
    }
    converge(
        &[&wa, &wb],
        "room",
        &set(&survivors),
        Duration::from_secs(10),
    )
    .await;
    let gone_in = killed.elapsed();
    // The window (three intervals) runs from c's last heartbeat, up to one interval
    // before the kill; silence is looked for every quarter interval.
    assert!(
        gone_in < heartbeat * 4,
        "c's members went after {gone_in:?}"
    );
    let (_m2, m2) = member(&b, "room", json!("m2")).await;
    let mut want: Vec<String> = on_c
        .iter()
        .enumerate()
        .map(|(i, (_, addr))| format!("-{addr} {i}"))
        .collect();
    want.sort();
    for client in [&mut wa, &mut wb] {
        assert_eq!(heard_until(client, &format!("{m2} \"m2\"")).await, want);
    }
    // Its parts expired in Redis too: nothing of c is left there.
    let keys = redis.cli(&["KEYS", "jp:pm:*"]);
    assert!(!keys.contains("|c"), "{keys}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_restarted_at_once_leaves_no_ghosts() {
    let redis = RedisServer::start();
    // A long window: what happens well inside it is the restart's doing.
    let a = Node::start(&redis, "a", 2000, &[]).await;
    let c = Node::start(&redis, "c", 2000, &[]).await;
    let mut wa = watcher(&a, "room", "a").await;
    let (_old, old) = member(&c, "room", json!("old")).await;
    let (method, params) = wa.next_note().await;
    assert_eq!(
        (method.as_str(), &params["info"]),
        ("presence.join", &json!("old"))
    );

    let restarted = Instant::now();
    drop(c); // SIGKILL
    let c = Node::start(&redis, "c", 2000, &[]).await;
    let (_fresh, fresh) = member(&c, "room", json!("fresh")).await;
    let addr_wa = wa.ok("whoami", json!([])).await;
    let want = set(&[
        format!("{fresh} \"fresh\""),
        format!("{} {{\"w\":\"a\"}}", addr_wa.as_str().expect("addr")),
    ]);
    converge(&[&wa], "room", &want, Duration::from_secs(10)).await;
    assert!(
        restarted.elapsed() < Duration::from_secs(6),
        "the old incarnation's members went with its window, not at the restart"
    );
    let mut heard = vec![wa.next_note().await, wa.next_note().await];
    heard.sort_by_key(|(m, _)| m.clone());
    assert_eq!(
        heard,
        [
            (
                "presence.join".to_owned(),
                json!({"topic": "room", "addr": fresh, "info": "fresh"})
            ),
            (
                "presence.leave".to_owned(),
                json!({"topic": "room", "addr": old, "info": "old"})
            ),
        ]
    );
    // A client of the new c that was not there reads the same, old c's part ignored.
    let late = NodeClient::connect(&c).await;
    assert_eq!(listed(&late, "room").await, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_redis_restarts_the_views_converge_with_what_happened_meanwhile_once() {
    let mut redis = RedisServer::start();
    // The default window: longer than the spread of the nodes' redials after Redis
    // comes back (see cluster_redis_nodes.rs).
    let a = Node::start(&redis, "a", 2000, &[]).await;
    let b = Node::start(&redis, "b", 2000, &[]).await;
    let c = Node::start(&redis, "c", 2000, &[]).await;
    let mut wa = watcher(&a, "room", "a").await;
    let mut wb = watcher(&b, "room", "b").await;
    let mut wc = watcher(&c, "room", "c").await;
    let (_stays, stays) = member(&a, "room", json!("stays")).await;
    let (goes, goes_addr) = member(&b, "room", json!("goes")).await;
    let (drops, drops_addr) = member(&c, "room", json!("drops")).await;
    counted(&[&wa, &wb, &wc], "room", 6).await;
    let (_m1, m1) = member(&a, "room", json!("m1")).await;
    drain_until(&mut [&mut wa, &mut wb, &mut wc], &format!("{m1} \"m1\"")).await;

    redis.kill();
    // While Redis is down: one member unsubscribes, one disconnects. Each node's own
    // watcher hears its own at once.
    assert_eq!(goes.ok("unsubscribe", json!(["room"])).await, json!(true));
    drops.peer.close().await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    redis.restart();

    let mut want = vec![format!("{stays} \"stays\""), format!("{m1} \"m1\"")];
    for (client, name) in [(&wa, "a"), (&wb, "b"), (&wc, "c")] {
        let addr = client.ok("whoami", json!([])).await;
        want.push(format!(
            "{} {{\"w\":\"{name}\"}}",
            addr.as_str().expect("addr")
        ));
    }
    converge(
        &[&wa, &wb, &wc],
        "room",
        &set(&want),
        Duration::from_secs(15),
    )
    .await;
    // Redis lost everything; each node writes its members again (at once, or at its
    // next heartbeat if its first write found the connection still dialing).
    let start = Instant::now();
    loop {
        let parts = redis.cli(&["KEYS", "jp:pm:*"]);
        if parts.lines().count() == 3 {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "{parts}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // A marker joins (subscribing works again): before it, each watcher heard the two
    // leaves once, and nothing else (no member that stayed left and came back).
    let (_m2, m2) = member(&b, "room", json!("m2")).await;
    let mut leaves = vec![
        format!("-{goes_addr} \"goes\""),
        format!("-{drops_addr} \"drops\""),
    ];
    leaves.sort();
    for (name, client) in [("a", &mut wa), ("b", &mut wb), ("c", &mut wc)] {
        assert_eq!(
            heard_until(client, &format!("{m2} \"m2\"")).await,
            leaves,
            "watcher on {name}"
        );
    }
}

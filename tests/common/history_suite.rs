//! Topics with history across three `cluster_node --history N` processes on any bus the
//! example takes, with WebSocket clients over real sockets: resumes on another node after
//! a dropped TCP connection, one order for two publishers, resumes that cannot recover,
//! the bus back empty, pub/sub links killed, a reconnect storm.
//! `tests/cluster_redis_history.rs` runs it on one Redis,
//! `tests/cluster_redis_cluster_history.rs` on a Redis Cluster. The example must be
//! built (`cargo test` builds it).
#![allow(dead_code)]

use std::collections::HashMap;
use std::time::Duration;

use jsonrpc_peer::{connect, Caller, Context, Peer, Position, Router};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::common::cluster_node::{Bus, Node};
use crate::common::proxy::Proxy;
use crate::common::within;

/// What a client got: (method, params).
pub type Note = (String, Value);

/// A client of `url` that forwards the notifications of `topics` and `$/gap`.
pub async fn client(url: &str, topics: &[&'static str]) -> (Peer, mpsc::UnboundedReceiver<Note>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let mut router = Router::new();
    for method in topics.iter().copied().chain(["$/gap"]) {
        let tx = tx.clone();
        router = router.notification(method, move |_cx: Context, params: Value| {
            let _ = tx.send((method.to_owned(), params));
            async {}
        });
    }
    let peer = within(connect(url, router)).await.expect("connect");
    (peer, rx)
}

pub async fn call(peer: &Peer, method: &str, params: Value) -> Value {
    within(peer.call::<Value>(method, params.clone()))
        .await
        .unwrap_or_else(|e| panic!("{method} {params}: {e}"))
}

pub fn position(answer: &Value) -> Position {
    serde_json::from_value(answer.clone()).expect("an answer with epoch and offset")
}

/// The next publication of `topic`: (offset, data); anything else fails.
pub async fn next(rx: &mut mpsc::UnboundedReceiver<Note>, topic: &str) -> (u64, Value) {
    let (method, params) = within(rx.recv()).await.expect("the client is alive");
    assert_eq!(method, topic, "{params}");
    (
        params["offset"].as_u64().expect("an offset"),
        params["data"].clone(),
    )
}

pub async fn three(bus: &dyn Bus, history: &str) -> [Node; 3] {
    let extra = ["--history", history];
    [
        Node::start(bus, "a", 500, &extra).await,
        Node::start(bus, "b", 500, &extra).await,
        Node::start(bus, "c", 500, &extra).await,
    ]
}

/// A seed from `SEED` or the clock, printed so a failing run can be repeated.
pub fn seed() -> u64 {
    let seed = std::env::var("SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
    println!("SEED={seed}");
    seed
}

/// A client dropping its TCP connection (no close handshake) at random points of a
/// steady stream resumes on the next node each time: every offset once, in order.
pub async fn a_client_dropping_its_tcp_connection_resumes_on_another_node_with_every_offset_once(
    bus: &dyn Bus,
) {
    let nodes = three(bus, "100000").await;
    let mut rng = fastrand::Rng::with_seed(seed());
    // The subscriber reaches the nodes through a proxy it can cut: the TCP connection
    // ends without a close handshake, and the next one goes to another node.
    let mut at = 0usize;
    let proxy = Proxy::start(nodes[at].addr()).await;
    let (mut peer, mut rx) = client(&proxy.url(), &["feed"]).await;
    let answer = call(&peer, "subscribe", json!(["feed"])).await;
    let mut last = position(&answer);
    assert_eq!(last.offset, 0, "subscribed before the first publish");
    // A steady stream from a publisher on a (not through the proxy), while the
    // subscriber moves.
    const TOTAL: u64 = 600;
    let (publisher, _) = client(&nodes[0].url, &[]).await;
    let publishing = tokio::spawn(async move {
        for i in 0..TOTAL {
            let answer = call(&publisher, "publish", json!(["feed", i])).await;
            assert_eq!(answer, json!({ "offset": i + 1 }));
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    });
    let mut got: Vec<(u64, Value)> = Vec::new();
    let mut cuts = 0;
    for _ in 0..2 * TOTAL {
        if last.offset == TOTAL {
            break;
        }
        // Everything this connection brings, until a random point.
        let until = got.len() + rng.usize(5..120);
        while got.len() < until && last.offset < TOTAL {
            let (offset, data) = next(&mut rx, "feed").await;
            assert_eq!(offset, last.offset + 1, "in order, no gap, no duplicate");
            assert_eq!(data, json!(offset - 1));
            last.offset = offset;
            got.push((offset, data));
        }
        if last.offset == TOTAL {
            break;
        }
        proxy.cut();
        within(peer.closed()).await;
        // What was on its way before the cut and read before the close: taken in
        // order too (it is not replayed, since the resume names the last one read).
        while let Ok((method, params)) = rx.try_recv() {
            assert_eq!(method, "feed");
            let offset = params["offset"].as_u64().unwrap();
            assert_eq!(offset, last.offset + 1);
            last.offset = offset;
            got.push((offset, params["data"].clone()));
        }
        cuts += 1;
        at = (at + 1) % 3;
        proxy.retarget(nodes[at].addr());
        (peer, rx) = client(&proxy.url(), &["feed"]).await;
        let answer = call(&peer, "subscribe", json!(["feed", last])).await;
        assert_eq!(answer["recovered"], true, "{answer}");
        assert_eq!(answer["epoch"], json!(last.epoch));
    }
    within(publishing).await.expect("the publisher");
    assert!(cuts >= 3, "only {cuts} cuts");
    let offsets: Vec<u64> = got.iter().map(|(o, _)| *o).collect();
    assert_eq!(offsets, (1..=TOTAL).collect::<Vec<_>>());
}

/// Two publishers on two nodes: every subscriber on every node sees one order, and
/// each publisher's own order within it.
pub async fn two_publishers_on_two_nodes_give_every_subscriber_the_same_order(bus: &dyn Bus) {
    let nodes = three(bus, "10000").await;
    let mut subscribers = Vec::new();
    for node in &nodes {
        let (peer, rx) = client(&node.url, &["feed"]).await;
        call(&peer, "subscribe", json!(["feed"])).await;
        subscribers.push((peer, rx));
    }
    let publish = |url: String, who: u64| {
        tokio::spawn(async move {
            let (peer, _) = client(&url, &[]).await;
            for i in 0..200u64 {
                call(&peer, "publish", json!(["feed", [who, i]])).await;
            }
        })
    };
    let (a, b) = (
        publish(nodes[0].url.clone(), 0),
        publish(nodes[1].url.clone(), 1),
    );
    within(a).await.unwrap();
    within(b).await.unwrap();
    let mut orders = Vec::new();
    for (_, rx) in &mut subscribers {
        let mut order = Vec::new();
        for offset in 1..=400u64 {
            let (got, data) = next(rx, "feed").await;
            assert_eq!(got, offset);
            order.push(data);
        }
        orders.push(order);
    }
    assert_eq!(orders[0], orders[1]);
    assert_eq!(orders[0], orders[2]);
    for who in 0..2u64 {
        let mine: Vec<&Value> = orders[0].iter().filter(|d| d[0] == who).collect();
        let want: Vec<Value> = (0..200u64).map(|i| json!([who, i])).collect();
        assert_eq!(
            mine,
            want.iter().collect::<Vec<_>>(),
            "publisher {who}'s order"
        );
    }
}

/// A resume of another epoch or outside the window is `recovered:false`; the bus
/// killed and back empty gives one `$/gap` per topic and node with one new epoch, the
/// next notification its offset + 1, and a position of the lost epoch not recovered.
pub async fn outside_the_window_or_after_redis_came_back_empty_a_resume_is_not_recovered(
    bus: &mut dyn Bus,
) {
    let nodes = three(&*bus, "5").await;
    let topics = ["news", "feed"];
    let mut clients = Vec::new();
    for node in &nodes {
        let (peer, rx) = client(&node.url, &topics).await;
        for topic in topics {
            call(&peer, "subscribe", json!([topic])).await;
        }
        clients.push((peer, rx));
    }
    let (publisher, _) = client(&nodes[0].url, &[]).await;
    for i in 0..20u64 {
        for topic in topics {
            call(&publisher, "publish", json!([topic, i])).await;
        }
    }
    let mut epoch = HashMap::new();
    for (peer, rx) in &mut clients {
        for _ in 0..40 {
            within(rx.recv()).await.unwrap();
        }
        for topic in topics {
            // 5 kept: offset 10 is outside the window.
            let answer = call(
                peer,
                "subscribe",
                json!([topic, {"epoch": "x", "offset": 19}]),
            )
            .await;
            assert_eq!(answer["recovered"], false, "another epoch: {answer}");
            let old = answer["epoch"].clone();
            let answer = call(
                peer,
                "subscribe",
                json!([topic, {"epoch": old, "offset": 10}]),
            )
            .await;
            assert_eq!(answer["recovered"], false, "outside the window: {answer}");
            assert_eq!(answer["offset"], 20);
            epoch.insert(topic, old);
        }
    }

    // Redis restarts empty: one $/gap per topic on every node, with the new epoch; the
    // next notification carries its offset + 1.
    bus.kill();
    bus.restart();
    let mut gaps = Vec::new();
    for (i, (_, rx)) in clients.iter_mut().enumerate() {
        let mut seen = HashMap::new();
        for _ in 0..topics.len() {
            let (method, params) = within(rx.recv()).await.unwrap();
            assert_eq!(method, "$/gap", "node {i}: {params}");
            let topic = params["topic"].as_str().unwrap().to_owned();
            assert_ne!(params["epoch"], epoch[topic.as_str()]);
            assert!(
                seen.insert(topic, params.clone()).is_none(),
                "one per topic"
            );
            gaps.push(params);
        }
    }
    for topic in topics {
        let mut new_epochs: Vec<&Value> = gaps
            .iter()
            .filter(|g| g["topic"] == topic)
            .map(|g| &g["epoch"])
            .collect();
        new_epochs.dedup();
        assert_eq!(new_epochs.len(), 1, "one new epoch on every node: {gaps:?}");
    }
    let mut published = HashMap::new();
    for topic in topics {
        // The publisher's node may still be dialing Redis again.
        let answer = publish_when_up(&publisher, topic, "after").await;
        published.insert(topic, answer["offset"].as_u64().unwrap());
    }
    for (i, (peer, rx)) in clients.iter_mut().enumerate() {
        // One notification per topic: in order within a topic, but two topics may be
        // on two shards of a Redis Cluster, so either may come first.
        let mut after = HashMap::new();
        for _ in 0..topics.len() {
            let (method, params) = within(rx.recv()).await.expect("the client is alive");
            assert!(
                topics.contains(&method.as_str()),
                "node {i}: {method} {params}"
            );
            assert!(
                after.insert(method, params).is_none(),
                "node {i}: one per topic"
            );
        }
        for topic in topics {
            let gap = gaps
                .iter()
                .find(|g| g["topic"] == topic)
                .expect("a gap of the topic");
            let offset = after[topic]["offset"].as_u64().expect("an offset");
            assert_eq!(offset, published[topic], "node {i}");
            assert_eq!(
                offset,
                gap["offset"].as_u64().unwrap() + 1,
                "node {i}: K + 1"
            );
            assert_eq!(after[topic]["data"], json!("after"));
            // A position of the lost epoch: not recovered.
            let old = json!({"epoch": epoch[topic], "offset": 20});
            let answer = call(peer, "subscribe", json!([topic, old])).await;
            assert_eq!(answer["recovered"], false, "{answer}");
        }
    }
}

/// Publishes once the node records again (its Redis link may still be coming back).
pub async fn publish_when_up(peer: &Peer, topic: &str, data: &str) -> Value {
    for _ in 0..500 {
        match within(peer.call::<Value>("publish", json!([topic, data]))).await {
            Ok(answer) => return answer,
            Err(e) => {
                let rpc = e.rpc().cloned().unwrap_or_else(|| panic!("{e}"));
                assert_eq!(rpc.code, -32000, "{rpc:?}");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
    panic!("the node never recorded again");
}

/// Every node's subscriber connections killed (`CLIENT KILL TYPE pubsub`) mid-stream:
/// the subscribers get every publication once, in order, no `$/gap`.
pub async fn killed_pubsub_links_are_filled_in_from_the_history_with_no_gap(bus: &dyn Bus) {
    let nodes = three(bus, "10000").await;
    let (subscriber, mut rx) = client(&nodes[1].url, &["feed"]).await;
    call(&subscriber, "subscribe", json!(["feed"])).await;
    let (publisher, _) = client(&nodes[0].url, &[]).await;
    // A steady stream; midway every node's subscriber connection is killed. A publish
    // made while its node's link is down is refused (not recorded) and made again.
    let mut ok = Vec::new();
    let mut refused = 0;
    for i in 0..300u64 {
        if i == 100 {
            let killed: u64 = bus
                .cli_each(&["CLIENT", "KILL", "TYPE", "pubsub"])
                .iter()
                .map(|k| k.trim().parse::<u64>().expect("a count"))
                .sum();
            assert_ne!(killed, 0, "no subscriber connection killed");
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
    let dialed: u64 = bus
        .cli_each(&["INFO", "stats"])
        .iter()
        .filter_map(|info| {
            info.lines()
                .find_map(|l| l.strip_prefix("total_connections_received:"))
                .and_then(|v| v.trim().parse::<u64>().ok())
        })
        .sum();
    assert!(dialed > 6, "the nodes dialed again ({dialed} connections)");
}

/// 1,000 clients of a node that never had the topic resume at once from two positions:
/// at most one history read (`XRANGE`, counted by Redis) per position.
pub async fn a_thousand_clients_resuming_at_once_read_the_history_once_per_position(bus: &dyn Bus) {
    let nodes = three(bus, "1000").await;
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
    bus.cli_each(&["CONFIG", "RESETSTAT"]);
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
    let xrange: u64 = bus
        .cli_each(&["INFO", "commandstats"])
        .iter()
        .filter_map(|stats| {
            stats
                .lines()
                .find_map(|l| l.strip_prefix("cmdstat_xrange:calls="))
                .and_then(|v| v.split(',').next())
                .and_then(|v| v.parse::<u64>().ok())
        })
        .sum();
    // One per position at most: 2, or 1 when the read from 30 was in the cache
    // before any resume from 60 looked.
    assert!(
        (1..=2).contains(&xrange),
        "{xrange} history reads for 1,000 resumes from 2 positions"
    );
}

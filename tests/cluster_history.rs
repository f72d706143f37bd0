//! Topics with history across three nodes on the in-memory bus, with its faults: one
//! order from the bus's offsets on every node, holes filled from the history, resumes
//! on any node, one gap per topic and node when the bus loses the history, reads
//! coalesced. Real servers and clients on 127.0.0.1:0.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{notes_client as client, within, Note};
use jsonrpc_peer::cluster::{Cluster, ClusterError, ClusterState, Gap, MemoryBackplane, MemoryHub};
use jsonrpc_peer::{
    Caller, Context, Error, HistoryConfig, Peer, Position, Router, RpcError, Server, TopicMethods,
};
use serde_json::{json, Value};
use tokio::sync::mpsc;

struct Node {
    cluster: Cluster,
    bus: MemoryBackplane,
    url: String,
    gaps: Arc<Mutex<Vec<Gap>>>,
}

async fn node(hub: &MemoryHub, name: &str, history: HistoryConfig) -> Node {
    let server = Server::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://{}", server.local_addr().unwrap());
    let bus = hub.backplane();
    let gaps = Arc::new(Mutex::new(Vec::new()));
    let cluster = within(
        Cluster::builder(bus.clone(), server.handle())
            .node_id(name)
            .heartbeat_interval(Duration::from_millis(100))
            .gap_notification("$/gap")
            .on_gap({
                let gaps = gaps.clone();
                move |gap| gaps.lock().unwrap().push(gap.clone())
            })
            .start(),
    )
    .await
    .unwrap();
    cluster.topics().keep_history_for_all(history);
    let router = Router::with_state(cluster.clone())
        .topics(TopicMethods::new(&cluster.topics()))
        .method(
            "publish",
            |cx: Context<Cluster>, (topic, data): (String, Value)| async move {
                let published = cx.state().topics().publish(&topic, &data).await;
                let published = published.map_err(|e| RpcError::new(-32000, e.to_string()))?;
                Ok::<_, RpcError>(json!({ "offset": published.offset }))
            },
        );
    tokio::spawn(server.serve(router));
    Node {
        cluster,
        bus,
        url,
        gaps,
    }
}

async fn three(hub: &MemoryHub, history: HistoryConfig) -> [Node; 3] {
    let nodes = [
        node(hub, "a", history.clone()).await,
        node(hub, "b", history.clone()).await,
        node(hub, "c", history).await,
    ];
    for n in &nodes {
        let mut live = n.cluster.watch_nodes();
        within(live.wait_for(|names| names.len() == 3))
            .await
            .unwrap();
    }
    nodes
}

async fn subscribe(peer: &Peer, topic: &str, from: Option<&Position>) -> Value {
    within(peer.call("subscribe", json!([topic, from])))
        .await
        .unwrap()
}

fn position(answer: &Value) -> Position {
    serde_json::from_value(answer.clone()).expect("an answer with epoch and offset")
}

/// The next `n` publications of `topic`: (offset, data), failing on anything else.
async fn take(rx: &mut mpsc::UnboundedReceiver<Note>, topic: &str, n: usize) -> Vec<(u64, Value)> {
    let mut got = Vec::with_capacity(n);
    while got.len() < n {
        let (method, params) = within(rx.recv()).await.unwrap();
        assert_eq!(method, topic, "{params}");
        got.push((params["offset"].as_u64().unwrap(), params["data"].clone()));
    }
    got
}

fn offsets(got: &[(u64, Value)]) -> Vec<u64> {
    got.iter().map(|(o, _)| *o).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_publishers_on_two_nodes_give_every_subscriber_one_order() {
    let hub = MemoryHub::new();
    let nodes = three(&hub, HistoryConfig::default().max_len(10_000)).await;
    let mut clients = Vec::new();
    for n in &nodes {
        let (peer, rx) = client(&n.url, &["feed"]).await;
        let answer = subscribe(&peer, "feed", None).await;
        assert_eq!(position(&answer).offset, 0);
        clients.push((peer, rx));
    }
    let publish = |n: &Node, who: u64| {
        let topics = n.cluster.topics();
        tokio::spawn(async move {
            let mut offsets = Vec::new();
            for i in 0..200u64 {
                let published = topics.publish("feed", &[who, i]).await.unwrap();
                offsets.push(published.offset.unwrap());
            }
            offsets
        })
    };
    let (pa, pb) = (publish(&nodes[0], 0), publish(&nodes[1], 1));
    let (from_a, from_b) = (within(pa).await.unwrap(), within(pb).await.unwrap());
    // Offsets from the bus: 1..=400 between them, each publisher's ascending.
    let mut all: Vec<u64> = from_a.iter().chain(&from_b).copied().collect();
    all.sort_unstable();
    assert_eq!(all, (1..=400).collect::<Vec<_>>());
    assert!(from_a.windows(2).all(|w| w[0] < w[1]));
    let mut orders = Vec::new();
    for (_, rx) in &mut clients {
        let got = take(rx, "feed", 400).await;
        assert_eq!(
            offsets(&got),
            (1..=400).collect::<Vec<_>>(),
            "once each, in offset order"
        );
        orders.push(got);
    }
    assert_eq!(
        orders[0], orders[1],
        "a's and b's subscribers saw one order"
    );
    assert_eq!(orders[0], orders[2], "and c's");
    for n in &nodes {
        assert_eq!(n.cluster.stats().gaps, 0);
    }
}

jsonrpc_peer::notification!(
    /// A price, meant for a topic of another name.
    pub Tick = "tick", Value
);

/// A topic with history in a cluster is published under its own name: a contract of
/// another name on it is refused with an error that says so, and reaches no one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_contract_of_another_name_on_a_topic_with_history_is_refused_by_name() {
    use jsonrpc_peer::{HistoryError, Notification};

    let hub = MemoryHub::new();
    let [a, b, _c] = three(&hub, HistoryConfig::default()).await;
    let (peer, mut rx) = client(&b.url, &["prices", "tick"]).await;
    subscribe(&peer, "prices", None).await;
    let refused = within(
        a.cluster
            .topics()
            .publish(Tick.on_topic("prices"), &json!(1)),
    )
    .await;
    match refused {
        Err(Error::History(HistoryError::OtherName { topic, method })) => {
            assert_eq!((topic.as_str(), method.as_str()), ("prices", "tick"));
        }
        other => panic!("refused by name, not {other:?}"),
    }
    // Under its own name it goes through, and is the first the subscriber gets.
    within(a.cluster.topics().publish("prices", &json!(2)))
        .await
        .unwrap();
    assert_eq!(take(&mut rx, "prices", 1).await[0].1, json!(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_the_bus_loses_are_read_from_the_history_before_later_ones() {
    let hub = MemoryHub::new();
    let [a, b, _c] = three(&hub, HistoryConfig::default()).await;
    let (peer, mut rx) = client(&b.url, &["news"]).await;
    subscribe(&peer, "news", None).await;
    let topics = a.cluster.topics();
    topics.publish("news", &["first"]).await.unwrap();
    assert_eq!(offsets(&take(&mut rx, "news", 1).await), [1]);
    // b's link loses the next five messages without a word.
    b.bus.drop_next(5);
    for i in 2..=20u64 {
        topics.publish("news", &[i]).await.unwrap();
    }
    let got = take(&mut rx, "news", 19).await;
    assert_eq!(
        offsets(&got),
        (2..=20).collect::<Vec<_>>(),
        "no gap, in order"
    );
    assert_eq!(got[0].1, json!([2]));
    let stats = b.cluster.stats();
    assert_eq!(stats.gaps, 0, "{stats:?}");
    assert!(stats.history_reads >= 1, "the hole was read: {stats:?}");
    assert!(b.gaps.lock().unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscribe_from_refused_while_the_bus_is_down_leaves_no_subscriber_behind() {
    let hub = MemoryHub::new();
    let [_a, b, _c] = three(&hub, HistoryConfig::default()).await;
    let (peer, _rx) = client(&b.url, &["fresh"]).await;
    b.bus.cut();
    let mut state = b.cluster.watch_state();
    within(state.wait_for(|s| *s == ClusterState::Down))
        .await
        .unwrap();
    let err = within(peer.call::<Value>("subscribe", json!(["fresh", null])))
        .await
        .unwrap_err();
    assert!(err.rpc().is_some(), "an error answer: {err}");
    // The client was told it is not subscribed; the node does not count it either.
    assert_eq!(b.cluster.topics().subscriber_count("fresh"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_cut_off_alone_fills_in_what_it_missed_when_back() {
    let hub = MemoryHub::new();
    let [a, b, _c] = three(&hub, HistoryConfig::default()).await;
    let (peer, mut rx) = client(&b.url, &["news"]).await;
    subscribe(&peer, "news", None).await;
    b.bus.cut();
    let mut state = b.cluster.watch_state();
    within(state.wait_for(|s| *s == ClusterState::Down))
        .await
        .unwrap();
    let topics = a.cluster.topics();
    for i in 1..=30u64 {
        topics.publish("news", &[i]).await.unwrap();
    }
    // b itself cannot record while its bus is down: an error at once, nothing sent.
    let err = b
        .cluster
        .topics()
        .publish("news", &["b"])
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Cluster(ClusterError::Unavailable(_))),
        "{err:?}"
    );
    b.bus.restore();
    let got = take(&mut rx, "news", 30).await;
    assert_eq!(offsets(&got), (1..=30).collect::<Vec<_>>());
    // Nothing else came: the next one is 31.
    topics.publish("news", &["after"]).await.unwrap();
    assert_eq!(take(&mut rx, "news", 1).await, [(31, json!(["after"]))]);
    let gaps = b.gaps.lock().unwrap().clone();
    assert!(
        gaps.iter().all(|g| g.topic.is_none()),
        "filled in, not a gap (only broadcasts may have missed some): {gaps:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_resumes_on_another_node_and_gets_what_it_missed_once() {
    let hub = MemoryHub::new();
    let [a, b, c] = three(&hub, HistoryConfig::default().max_len(100)).await;
    let topics = c.cluster.topics();
    let (peer, mut rx) = client(&a.url, &["news"]).await;
    let epoch = position(&subscribe(&peer, "news", None).await).epoch;
    for i in 1..=10u64 {
        topics.publish("news", &[i]).await.unwrap();
    }
    let got = take(&mut rx, "news", 10).await;
    assert_eq!(
        c.cluster.topics().position("news"),
        None,
        "c does not follow it"
    );
    assert_eq!(a.cluster.topics().position("news").unwrap().epoch, epoch);
    peer.close().await;
    for i in 11..=40u64 {
        topics.publish("news", &[i]).await.unwrap();
    }
    // b has never had a subscriber of "news": its cache is empty, the 30 come from the
    // bus. Live ones published during the resume follow, each once.
    let (peer, mut rx) = client(&b.url, &["news"]).await;
    let from = Position {
        epoch: epoch.clone(),
        offset: got[9].0,
    };
    let live = {
        let topics = topics.clone();
        tokio::spawn(async move {
            for i in 41..=60u64 {
                topics.publish("news", &[i]).await.unwrap();
            }
        })
    };
    let answer = subscribe(&peer, "news", Some(&from)).await;
    assert_eq!(answer["recovered"], true, "{answer}");
    assert_eq!(answer["epoch"], json!(epoch));
    within(live).await.unwrap();
    let got = take(&mut rx, "news", 50).await;
    assert_eq!(offsets(&got), (11..=60).collect::<Vec<_>>());
    assert_eq!(got[0].1, json!([11]));
    assert!(b.cluster.stats().history_reads >= 1);

    // Outside the window (100 kept): recovered false, nothing replayed, live from now.
    for i in 61..=200u64 {
        topics.publish("news", &[i]).await.unwrap();
    }
    take(&mut rx, "news", 140).await;
    let (late, mut late_rx) = client(&c.url, &["news"]).await;
    let old = Position {
        epoch: epoch.clone(),
        offset: 50,
    };
    let answer = subscribe(&late, "news", Some(&old)).await;
    assert_eq!(answer["recovered"], false, "{answer}");
    assert_eq!(answer["offset"], 200);
    topics.publish("news", &["live"]).await.unwrap();
    assert_eq!(
        take(&mut late_rx, "news", 1).await,
        [(201, json!(["live"]))]
    );
    // Another epoch's position: the same.
    let other = Position {
        epoch: "not-this-one".into(),
        offset: 199,
    };
    let (other_peer, _other_rx) = client(&a.url, &["news"]).await;
    let answer = subscribe(&other_peer, "news", Some(&other)).await;
    assert_eq!(answer["recovered"], false, "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_position_a_node_has_not_seen_yet_is_waited_for_not_refused() {
    let hub = MemoryHub::new();
    let [a, b, _c] = three(&hub, HistoryConfig::default()).await;
    let (peer, mut rx) = client(&b.url, &["news"]).await;
    let epoch = position(&subscribe(&peer, "news", None).await).epoch;
    // b's link loses the first publication: the bus (and the client, which saw it on
    // a) has offset 1, b's cache does not.
    b.bus.drop_next(1);
    let topics = a.cluster.topics();
    let published = topics.publish("news", &["one"]).await.unwrap();
    let at = Position {
        epoch,
        offset: published.offset.unwrap(),
    };
    let (resumer, mut resumer_rx) = client(&b.url, &["news"]).await;
    let resume = {
        let resumer = resumer.clone();
        let at = at.clone();
        tokio::spawn(async move { subscribe(&resumer, "news", Some(&at)).await })
    };
    // The next publication brings 1 (filled in) and 2 to b: the resume continues.
    topics.publish("news", &["two"]).await.unwrap();
    let answer = within(resume).await.unwrap();
    assert_eq!(answer["recovered"], true, "{answer}");
    assert_eq!(
        take(&mut resumer_rx, "news", 1).await,
        [(2, json!(["two"]))]
    );
    assert_eq!(offsets(&take(&mut rx, "news", 2).await), [1, 2]);
    // A position the bus never gave: recovered false, at once.
    let ahead = Position {
        epoch: at.epoch.clone(),
        offset: 99,
    };
    let (liar, _liar_rx) = client(&b.url, &["news"]).await;
    let answer = subscribe(&liar, "news", Some(&ahead)).await;
    assert_eq!(answer["recovered"], false, "{answer}");
    assert_eq!(answer["offset"], 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bus_that_lost_its_history_gives_one_gap_per_topic_and_node() {
    let hub = MemoryHub::new();
    let nodes = three(&hub, HistoryConfig::default()).await;
    let mut clients = Vec::new();
    for n in &nodes {
        let (peer, rx) = client(&n.url, &["news", "feed"]).await;
        subscribe(&peer, "news", None).await;
        subscribe(&peer, "feed", None).await;
        clients.push((peer, rx));
    }
    let topics = nodes[0].cluster.topics();
    for topic in ["news", "feed"] {
        for i in 0..5u64 {
            topics.publish(topic, &[i]).await.unwrap();
        }
    }
    for (_, rx) in &mut clients {
        for _ in 0..10 {
            within(rx.recv()).await.unwrap();
        }
    }
    let old = topics.position("news").unwrap().epoch;

    // The bus restarts empty: every link down, the histories gone, every link back.
    hub.cut_all();
    hub.clear_history();
    hub.restore_all();
    let mut notices: HashMap<(usize, String), Value> = HashMap::new();
    for (i, (_, rx)) in clients.iter_mut().enumerate() {
        for _ in 0..2 {
            let (method, params) = within(rx.recv()).await.unwrap();
            assert_eq!(method, "$/gap", "{params}");
            let topic = params["topic"].as_str().unwrap().to_owned();
            assert!(
                notices.insert((i, topic), params).is_none(),
                "one per topic"
            );
        }
    }
    let mut epochs = HashMap::new();
    for ((_, topic), notice) in &notices {
        assert_ne!(notice["epoch"], json!(old));
        assert_eq!(notice["offset"], 0, "{notice}");
        // The same new epoch on every node.
        let e = epochs
            .entry(topic.clone())
            .or_insert(notice["epoch"].clone());
        assert_eq!(*e, notice["epoch"]);
    }
    // The next notification is offset + 1, in the new epoch; nothing came in between
    // (no second gap).
    for topic in ["news", "feed"] {
        let published = topics.publish(topic, &["new"]).await.unwrap();
        assert_eq!(published.offset, Some(1));
    }
    for (_, rx) in &mut clients {
        assert_eq!(take(rx, "news", 1).await, [(1, json!(["new"]))]);
        assert_eq!(take(rx, "feed", 1).await, [(1, json!(["new"]))]);
    }
    for n in &nodes {
        let gaps = n.gaps.lock().unwrap().clone();
        assert_eq!(gaps.len(), 3, "one for broadcasts, one per topic: {gaps:?}");
        for topic in ["news", "feed"] {
            let gap = gaps
                .iter()
                .find(|g| g.topic.as_deref() == Some(topic))
                .unwrap();
            let at = gap.position.clone().unwrap();
            assert_eq!((json!(at.epoch), at.offset), (epochs[topic].clone(), 0));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_history_lost_during_a_replay_closes_the_resumer_instead_of_saying_not_recovered() {
    use futures_util::StreamExt;
    use tokio_tungstenite::tungstenite::Message;

    let hub = MemoryHub::new();
    let history = HistoryConfig::default().max_len(10_000).max_bytes(64 << 20);
    let a = node(&hub, "a", history).await;
    let topics = a.cluster.topics();
    // 24 MB of history: more than the outgoing queue (1 MiB) and loopback's socket
    // buffers hold, so a replay to a client that stops reading cannot finish.
    // A live subscriber, to hear when the node learns the history is gone.
    let (watcher, mut notes) = client(&a.url, &["feed"]).await;
    let epoch = position(&subscribe(&watcher, "feed", None).await).epoch;
    let pad = "y".repeat(8 * 1024);
    // 50 at a time (400 KB), each batch heard by the watcher before the next: a
    // publication does not wait for the subscribers, and the watcher is a live one,
    // closed as a slow peer once 1 MiB waits for it, as it would be whenever its
    // reader is not scheduled while the publisher runs on.
    for first in (1..=3_000u64).step_by(50) {
        for i in first..first + 50 {
            let published = topics.publish("feed", &json!([i, pad])).await.unwrap();
            assert_eq!(published.offset, Some(i));
        }
        take(&mut notes, "feed", 50).await;
    }

    let mut b = common::RawClient::connect(&a.url).await;
    let resume = json!({"jsonrpc": "2.0", "method": "subscribe", "id": 1,
        "params": ["feed", {"epoch": epoch, "offset": 0}]});
    b.send(&resume.to_string()).await;
    // The replay has begun; b reads nothing more for now.
    let first: Value = serde_json::from_str(&b.recv_text().await.unwrap()).unwrap();
    assert_eq!(first["params"]["offset"], 1, "{first}");

    // The bus restarts empty while the replay waits for room.
    hub.cut_all();
    hub.clear_history();
    hub.restore_all();
    let (method, _) = within(notes.recv()).await.unwrap();
    assert_eq!(method, "$/gap");

    // What b gets now: the rest of what was queued of the old epoch, in order, and
    // then the close, never an answer that says nothing was replayed.
    let mut next_offset = 2;
    let code = loop {
        match within(b.ws.next()).await {
            Some(Ok(Message::Text(text))) => {
                let frame: Value = serde_json::from_str(&text).unwrap();
                if frame.get("id").is_some() {
                    assert!(frame.get("result").is_none(), "answered {frame}");
                    continue;
                }
                assert_eq!(frame["params"]["offset"], next_offset);
                next_offset += 1;
            }
            Some(Ok(Message::Close(close))) => break close.map(|c| u16::from(c.code)),
            Some(Ok(_)) => continue,
            other => panic!("ended without a close frame: {other:?}"),
        }
    };
    assert_eq!(code, Some(1013), "after offsets 1..{next_offset}");
    assert!(
        next_offset <= 3_000,
        "the whole history went out before the loss"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_resumes_read_the_history_once_per_position() {
    let hub = MemoryHub::new();
    let [a, b, _c] = three(&hub, HistoryConfig::default()).await;
    let topics = a.cluster.topics();
    for i in 1..=100u64 {
        topics.publish("news", &[i]).await.unwrap();
    }
    let (probe, _probe_rx) = client(&a.url, &["news"]).await;
    let epoch = position(&subscribe(&probe, "news", None).await).epoch;
    // 200 clients come back to b at once (b has never had the topic: its cache is
    // empty), half from offset 40, half from 70.
    let mut clients = Vec::new();
    for _ in 0..200 {
        clients.push(client(&b.url, &["news"]).await);
    }
    let reads_before = hub.history_reads();
    let resumes = clients.iter().enumerate().map(|(i, (peer, _))| {
        let from = Position {
            epoch: epoch.clone(),
            offset: if i % 2 == 0 { 40 } else { 70 },
        };
        let peer = peer.clone();
        async move { subscribe(&peer, "news", Some(&from)).await }
    });
    let answers = within(futures_util::future::join_all(resumes)).await;
    assert!(answers.iter().all(|a| a["recovered"] == true));
    for (i, (_, rx)) in clients.iter_mut().enumerate() {
        let start = if i % 2 == 0 { 41 } else { 71 };
        let got = take(rx, "news", (101 - start) as usize).await;
        assert_eq!(
            offsets(&got),
            (start..=100).collect::<Vec<_>>(),
            "client {i}"
        );
    }
    let reads = hub.history_reads() - reads_before;
    assert!(
        (1..=2).contains(&reads),
        "{reads} reads for 200 resumes from 2 positions"
    );
    assert_eq!(b.cluster.stats().history_reads, reads);
}

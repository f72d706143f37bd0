//! `cluster_node` example processes on a real Redis Cluster (three masters, three
//! replicas, started by each test on free loopback ports) with `--redis-cluster`: the
//! suite the single Redis runs (broadcast, topics, calls, counts, the whole bus down and
//! back), then what only a cluster has: a master killed mid-stream, a slot moved
//! mid-stream. The example must be built with `redis-cluster` (`cargo test
//! --all-features` does).

#[path = "common/cluster_suite.rs"]
mod cluster_suite;
mod common;

use std::collections::HashMap;
use std::time::Duration;

use cluster_suite::{count_becomes, Client};
use common::cluster_node::Node;
use common::redis_cluster::RedisCluster;
use common::within;
use jsonrpc_peer::Caller;
use serde_json::{json, Value};
use tokio::sync::watch;

/// The shard channel of `topic` (`jp:t:{topic}`) and the master holding it, as Redis
/// lists them (`PUBSUB SHARDCHANNELS` on each master).
fn topic_channel(cluster: &RedisCluster, topic: &str) -> (String, u16) {
    let name = format!("jp:t:{{{topic}}}");
    for (port, _) in cluster.masters() {
        let listed = cluster.cli(port, &["PUBSUB", "SHARDCHANNELS", "jp:t:*"]);
        if listed.lines().any(|c| c == name) {
            return (name, port);
        }
    }
    panic!("no master holds the channel of topic {topic}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_share_broadcasts_topics_calls_and_counts() {
    let bus = RedisCluster::start(3, 1);
    cluster_suite::three_nodes_share_broadcasts_topics_calls_and_counts(&bus).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_whole_cluster_down_for_two_seconds_behaves_as_one_redis_down() {
    let mut bus = RedisCluster::start(3, 1);
    cluster_suite::bus_down_for_two_seconds_local_goes_on_then_resubscribe_flush_and_one_gap(
        &mut bus,
    )
    .await;
}

/// Two nodes, a publisher's client on `a` and a subscriber's on `b`, `b` subscribed to
/// `topics`.
async fn two_nodes(bus: &RedisCluster, topics: &[&str]) -> (Node, Node, Client, Client) {
    let a = Node::start(bus, "a", 2000, &[]).await;
    let b = Node::start(bus, "b", 2000, &[]).await;
    let ca = Client::connect(&a).await;
    let cb = Client::connect(&b).await;
    for client in [&ca, &cb] {
        count_becomes(client, 2).await;
    }
    for topic in topics {
        assert_eq!(cb.ok("subscribe", json!([topic])).await, json!(true));
    }
    (a, b, ca, cb)
}

/// Publishes `{"i": i}` on each of `topics` in turn from `client`'s node, i = 0, 1, ...,
/// one round every 5 ms, until `stop`; returns the number of rounds.
fn stream(
    client: &Client,
    topics: Vec<String>,
    stop: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<u64> {
    let peer = client.peer.clone();
    tokio::spawn(async move {
        let mut round = 0;
        while !*stop.borrow() {
            for topic in &topics {
                let published = peer.call::<Value>("publish", json!([topic, {"i": round}]));
                within(published).await.expect("publish answered");
            }
            round += 1;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        round
    })
}

/// What the subscriber got per topic: the numbers in arrival order, and the `$/gap`
/// notes (as the index into the numbers where each came).
#[derive(Debug, Default)]
struct Got {
    numbers: Vec<u64>,
    gaps: Vec<usize>,
}

/// Reads `client`'s notes until every topic has had `last` (at most 60 s), here or
/// in what was read `before`.
async fn collect(
    client: &mut Client,
    topics: &[&str],
    last: u64,
    before: &[&HashMap<String, Got>],
) -> HashMap<String, Got> {
    let waiting = format!("{last} on every topic");
    let had = |got: &HashMap<String, Got>, topic: &str| {
        std::iter::once(got)
            .chain(before.iter().copied())
            .any(|part| part[topic].numbers.last() >= Some(&last))
    };
    collect_until(client, topics, &waiting, |got| {
        topics.iter().all(|topic| had(got, topic))
    })
    .await
}

/// Reads `client`'s notes until `topic` has had a number after a `$/gap` note: its
/// subscriber is back on the channel's new master (at most 60 s).
async fn collect_back(client: &mut Client, topics: &[&str], topic: &str) -> HashMap<String, Got> {
    let waiting = format!("{topic} to go on after its gap");
    collect_until(client, topics, &waiting, |got| {
        let g = &got[topic];
        g.gaps.last().is_some_and(|&at| g.numbers.len() > at)
    })
    .await
}

/// Reads `client`'s notes on `topics` until `done` says so (at most 60 s, and at most
/// 10 s between two notes); `waiting` names what for, in the message of a failure.
async fn collect_until(
    client: &mut Client,
    topics: &[&str],
    waiting: &str,
    done: impl Fn(&HashMap<String, Got>) -> bool,
) -> HashMap<String, Got> {
    let start = std::time::Instant::now();
    let mut got: HashMap<String, Got> = topics
        .iter()
        .map(|t| (t.to_string(), Got::default()))
        .collect();
    for _ in 0..100_000 {
        if done(&got) {
            return got;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "not everything in 60 s: {got:?}"
        );
        // What arrived so far goes with a step that times out: which topic stopped,
        // and where.
        let Ok(note) = tokio::time::timeout(common::STEP, client.notes.recv()).await else {
            panic!("no note for 10 s while waiting for {waiting}: {got:?}");
        };
        let (method, params) = note.expect("the client is alive");
        if method == "$/gap" {
            let topic = params["topic"].as_str().expect("a gap names its topic");
            let g = got.get_mut(topic).expect("a gap for a subscribed topic");
            g.gaps.push(g.numbers.len());
        } else if let Some(g) = got.get_mut(&method) {
            g.numbers.push(params["i"].as_u64().expect("a number"));
        } else {
            panic!("unexpected note {method} {params}");
        }
    }
    panic!("never got everything: {got:?}");
}

/// What `topic` got over a stream collected in parts (in the order given), its gaps at
/// their places in the whole.
fn joined(parts: &[&HashMap<String, Got>], topic: &str) -> Got {
    let mut whole = Got::default();
    for part in parts {
        let got = &part[topic];
        let at = whole.numbers.len();
        whole.gaps.extend(got.gaps.iter().map(|&gap| gap + at));
        whole.numbers.extend(&got.numbers);
    }
    whole
}

/// Nothing twice, nothing out of order, and a hole only right after a gap note.
fn check_once_in_order_gaps_explained(topic: &str, got: &Got) {
    for (k, pair) in got.numbers.windows(2).enumerate() {
        assert!(
            pair[0] < pair[1],
            "{topic}: {} then {}: twice or out of order",
            pair[0],
            pair[1]
        );
        if pair[1] > pair[0] + 1 {
            assert!(
                got.gaps.iter().any(|&at| at <= k + 1),
                "{topic}: {} to {} missing with no gap reported before: {got:?}",
                pair[0] + 1,
                pair[1] - 1
            );
        }
    }
}

/// Topics whose channels live on two different masters (as Redis lists them once `b`
/// subscribed): (the first, its master), (one on another master).
fn on_two_masters(
    bus: &RedisCluster,
    topics: &[&'static str],
) -> ((&'static str, u16), &'static str) {
    let (_, first_master) = topic_channel(bus, topics[0]);
    let other = topics[1..]
        .iter()
        .find(|t| topic_channel(bus, t).1 != first_master)
        .expect("a topic on another master");
    ((topics[0], first_master), other)
}

const TOPICS: [&str; 5] = ["news", "feed", "alerts", "scores", "chat"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_killed_mid_stream_costs_its_topic_one_gap_and_nothing_twice() {
    let mut bus = RedisCluster::start(3, 1);
    let (_a, _b, ca, mut cb) = two_nodes(&bus, &TOPICS).await;
    let ((news, victim), other) = on_two_masters(&bus, &TOPICS);
    for topic in TOPICS.iter().filter(|t| **t != news && **t != other) {
        assert_eq!(cb.ok("unsubscribe", json!([topic])).await, json!(true));
    }

    let (stop, stopped) = watch::channel(false);
    let publisher = stream(&ca, vec![news.to_owned(), other.to_owned()], stopped);
    // Some of the stream flows before the kill.
    let before = collect(&mut cb, &[news, other], 20, &[]).await;
    tokio::task::block_in_place(|| {
        let slot = bus.keyslot(&topic_channel(&bus, news).0);
        bus.kill(victim);
        bus.wait_failover(slot, victim);
    });
    // The stream goes on on the promoted replica until b's subscriber is back on it
    // (on a loaded machine, finding the failover can take longer than any fixed
    // wait), then stops.
    let during = collect_back(&mut cb, &[news, other], news).await;
    stop.send_replace(true);
    let rounds = within(publisher).await.expect("the publisher");
    let after = collect(&mut cb, &[news, other], rounds - 1, &[&during]).await;

    for (topic, gaps) in [(news, 1), (other, 0)] {
        let got = joined(&[&before, &during, &after], topic);
        check_once_in_order_gaps_explained(topic, &got);
        assert_eq!(got.gaps.len(), gaps, "{topic}: {got:?}");
        assert_eq!(
            got.numbers.last(),
            Some(&(rounds - 1)),
            "{topic}: the stream's end arrived"
        );
    }
    // The other master's topic lost nothing: its shard never went away.
    let other_numbers = joined(&[&before, &during, &after], other).numbers;
    assert_eq!(
        other_numbers,
        (0..rounds).collect::<Vec<_>>(),
        "{other}: every one, once, in order"
    );
    count_becomes(&cb, 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_moved_mid_stream_costs_its_topic_one_gap_and_nothing_twice() {
    let bus = RedisCluster::start(3, 1);
    let (_a, _b, ca, mut cb) = two_nodes(&bus, &TOPICS).await;
    let ((news, from), other) = on_two_masters(&bus, &TOPICS);
    for topic in TOPICS.iter().filter(|t| **t != news && **t != other) {
        assert_eq!(cb.ok("unsubscribe", json!([topic])).await, json!(true));
    }
    let to = bus
        .masters()
        .into_iter()
        .map(|(p, _)| p)
        .find(|p| *p != from)
        .expect("another master");
    let slot = bus.keyslot(&topic_channel(&bus, news).0);

    let (stop, stopped) = watch::channel(false);
    let publisher = stream(&ca, vec![news.to_owned(), other.to_owned()], stopped);
    let before = collect(&mut cb, &[news, other], 20, &[]).await;
    // Migrating for a while (the source still serves the channel), then moved.
    tokio::task::block_in_place(|| assert_eq!(bus.begin_move(slot, to), from));
    tokio::time::sleep(Duration::from_millis(300)).await;
    tokio::task::block_in_place(|| bus.finish_move(slot, from, to));
    // Then on until b's subscriber is back on the new master.
    let during = collect_back(&mut cb, &[news, other], news).await;
    stop.send_replace(true);
    let rounds = within(publisher).await.expect("the publisher");
    let after = collect(&mut cb, &[news, other], rounds - 1, &[&during]).await;
    assert_eq!(
        topic_channel(&bus, news).1,
        to,
        "b listens on the slot's new master"
    );

    for (topic, gaps) in [(news, 1), (other, 0)] {
        let got = joined(&[&before, &during, &after], topic);
        check_once_in_order_gaps_explained(topic, &got);
        assert_eq!(got.gaps.len(), gaps, "{topic}: {got:?}");
    }
    let other_numbers = joined(&[&before, &during, &after], other).numbers;
    assert_eq!(
        other_numbers,
        (0..rounds).collect::<Vec<_>>(),
        "{other}: every one, once, in order"
    );
}

/// Publishes `{"i": i}` on `topic` from `client`'s node (with history: each answer is
/// `{"offset": N}`), one every 5 ms, until `stop`; returns the offsets Redis recorded
/// (a publish refused while its master is away is not recorded, and says so).
fn recorded_stream(
    client: &Client,
    topic: &'static str,
    stop: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<Vec<u64>> {
    let peer = client.peer.clone();
    tokio::spawn(async move {
        let mut offsets = Vec::new();
        let mut i = 0;
        while !*stop.borrow() {
            let published = peer.call::<Value>("publish", json!([topic, {"i": i}]));
            if let Ok(answer) = within(published).await {
                offsets.push(answer["offset"].as_u64().expect("an offset"));
            }
            i += 1;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        offsets
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_with_history_loses_nothing_when_its_master_dies_and_resumes_anywhere() {
    let mut bus = RedisCluster::start(3, 1);
    let history = ["--history", "10000"];
    let a = Node::start(&bus, "a", 2000, &history).await;
    let b = Node::start(&bus, "b", 2000, &history).await;
    let ca = Client::connect(&a).await;
    let mut cb = Client::connect(&b).await;
    for client in [&ca, &cb] {
        count_becomes(client, 2).await;
    }
    let first = cb.ok("subscribe", json!(["news"])).await;
    assert_eq!(first["offset"], json!(0), "{first}");
    let epoch = first["epoch"].clone();
    let (_, victim) = topic_channel(&bus, "news");

    let (stop, stopped) = watch::channel(false);
    let publisher = recorded_stream(&ca, "news", stopped);
    let mut got = Vec::new();
    while got.len() < 20 {
        let (method, params) = cb.next_note().await;
        assert_eq!(method, "news", "{params}");
        got.push(params["offset"].as_u64().expect("an offset"));
    }
    tokio::task::block_in_place(|| {
        let slot = bus.keyslot(&topic_channel(&bus, "news").0);
        bus.kill(victim);
        bus.wait_failover(slot, victim);
    });
    // Twenty more recorded and delivered after the failover before the publisher stops:
    // the appends went on on the replica that took over.
    let before = *got.last().expect("some before the failover");
    read_until(&mut cb, &mut got, before + 20).await;
    stop.send_replace(true);
    let recorded = within(publisher).await.expect("the publisher");
    let last = *recorded.last().expect("recorded");
    // The history was on the killed master: its replica took it over (as far as it had
    // replicated), so the offsets go on from there. What the subscriber got is one
    // order, every offset once, no gap notice: the history room filled what pub/sub
    // missed while the shard was away.
    read_until(&mut cb, &mut got, last).await;
    assert_eq!(
        got,
        (1..=last).collect::<Vec<_>>(),
        "every offset once, in order"
    );
    for offset in &recorded {
        assert!(got.contains(offset), "recorded {offset} never arrived");
    }

    // Resume on the other node from the middle: everything after it, then live.
    let middle = last / 2;
    let mut again = Client::connect(&a).await;
    let answer = again
        .ok(
            "subscribe",
            json!(["news", {"epoch": epoch, "offset": middle}]),
        )
        .await;
    assert_eq!(answer["recovered"], json!(true), "{answer}");
    assert_eq!(answer["offset"], json!(last), "{answer}");
    let mut replayed = Vec::new();
    while replayed.len() < (last - middle) as usize {
        let (method, params) = again.next_note().await;
        assert_eq!(method, "news");
        replayed.push(params["offset"].as_u64().expect("an offset"));
    }
    assert_eq!(replayed, (middle + 1..=last).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_with_history_loses_nothing_while_its_slot_moves() {
    let bus = RedisCluster::start(3, 1);
    let history = ["--history", "10000"];
    let a = Node::start(&bus, "a", 2000, &history).await;
    let b = Node::start(&bus, "b", 2000, &history).await;
    let ca = Client::connect(&a).await;
    let mut cb = Client::connect(&b).await;
    for client in [&ca, &cb] {
        count_becomes(client, 2).await;
    }
    let first = cb.ok("subscribe", json!(["news"])).await;
    assert_eq!(first["offset"], json!(0), "{first}");
    let (channel, from) = topic_channel(&bus, "news");
    let slot = bus.keyslot(&channel);
    let to = bus
        .masters()
        .into_iter()
        .map(|(p, _)| p)
        .find(|p| *p != from)
        .expect("another master");

    let (stop, stopped) = watch::channel(false);
    let publisher = recorded_stream(&ca, "news", stopped);
    let mut got = Vec::new();
    while got.len() < 20 {
        let (method, params) = cb.next_note().await;
        assert_eq!(method, "news", "{params}");
        got.push(params["offset"].as_u64().expect("an offset"));
    }
    // Migrating for a while (the source still serves the channel, the keys move at the
    // end), then moved: the channel is unsubscribed there, and b subscribes it on `to`.
    tokio::task::block_in_place(|| assert_eq!(bus.begin_move(slot, to), from));
    tokio::time::sleep(Duration::from_millis(300)).await;
    tokio::task::block_in_place(|| bus.finish_move(slot, from, to));
    // Twenty more recorded and delivered after the move before the publisher stops.
    let before = *got.last().expect("some before the move");
    read_until(&mut cb, &mut got, before + 20).await;
    stop.send_replace(true);
    let recorded = within(publisher).await.expect("the publisher");
    let last = *recorded.last().expect("recorded");
    assert_eq!(
        recorded,
        (1..=last).collect::<Vec<_>>(),
        "appends follow the slot: one order, none twice"
    );
    // What pub/sub lost while the channel moved came from the history: no $/gap.
    read_until(&mut cb, &mut got, last).await;
    assert_eq!(
        got,
        (1..=last).collect::<Vec<_>>(),
        "every offset once, in order"
    );
    assert_eq!(
        topic_channel(&bus, "news").1,
        to,
        "b listens on the new master"
    );
}

/// Reads `cb`'s notifications of `news` into `got` until it has `offset` (each within
/// the client's wait): none of them a `$/gap`, which a topic with history never needs.
async fn read_until(cb: &mut Client, got: &mut Vec<u64>, offset: u64) {
    while got.last() < Some(&offset) {
        let (method, params) = cb.next_note().await;
        assert_eq!(
            method, "news",
            "no $/gap for a topic with history: {params}"
        );
        got.push(params["offset"].as_u64().expect("an offset"));
    }
}

/// A node name whose channels (its own, `jp:n:NAME`, and the control and broadcast
/// channels it publishes on, one of 16 spread over equal ranges of slots, picked by
/// its name's slot) are all on the master at `port`.
fn name_on(bus: &RedisCluster, port: u16, taken: &[&str]) -> String {
    (0..1000)
        .map(|n| format!("n{n}"))
        .filter(|name| !taken.contains(&name.as_str()))
        .find(|name| {
            let pick = bus.keyslot(name) % 16;
            let (first, last) = (pick * 1024, pick * 1024 + 1023);
            bus.master_of(first) == port
                && bus.master_of(last) == port
                && bus.master_of(bus.keyslot(&format!("jp:n:{name}"))) == port
        })
        .expect("a name with its channels on the master within 1,000")
}

/// A master dead with no replica to take over, in a cluster set to serve the other
/// slots meanwhile (`cluster-require-full-coverage no`). A node that publishes on a
/// topic of the dead shard (its messages cannot reach the bus while the master is
/// dead) gets everything else across as before: more messages waiting for the dead
/// shard than the outbox sends in one batch hold up neither a topic on a live master,
/// nor a broadcast, nor a call, nor its heartbeats (the other node keeps counting its
/// connections). The two nodes' own channels are on a live master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_master_with_no_replica_holds_up_only_its_own_channels() {
    let mut bus = RedisCluster::start(3, 0);
    for (port, _) in bus.masters() {
        let set = ["CONFIG", "SET", "cluster-require-full-coverage", "no"];
        assert_eq!(bus.cli(port, &set), "OK");
    }
    let masters: Vec<u16> = bus.masters().into_iter().map(|(p, _)| p).collect();
    let (home, victim) = (masters[1], masters[0]);
    let name_a = name_on(&bus, home, &[]);
    let name_b = name_on(&bus, home, &[&name_a]);
    let a = Node::start(&bus, &name_a, 500, &[]).await;
    let b = Node::start(&bus, &name_b, 500, &[]).await;
    let ca = Client::connect(&a).await;
    let mut cb = Client::connect(&b).await;
    for client in [&ca, &cb] {
        count_becomes(client, 2).await;
    }
    let on = |port: u16| {
        TOPICS
            .into_iter()
            .find(|t| bus.master_of(bus.keyslot(&format!("jp:t:{{{t}}}"))) == port)
    };
    let (dead, live) = (
        on(victim).expect("a topic on the victim"),
        on(home)
            .or_else(|| on(masters[2]))
            .expect("a topic elsewhere"),
    );
    for topic in [dead, live] {
        assert_eq!(cb.ok("subscribe", json!([topic])).await, json!(true));
    }
    tokio::task::block_in_place(|| bus.kill(victim));

    // More than a batch (256) for the dead shard, ahead of everything else.
    let publishes = (0..300).map(|i| ca.call("publish", json!([dead, {"i": i}])));
    for answer in futures_util::future::join_all(publishes).await {
        answer.expect("published here: the outbox took it");
    }
    let b_addr = cb.ok("whoami", json!([])).await;
    for i in 0..5u64 {
        ca.ok("publish", json!([live, {"i": i}])).await;
        let (method, params) = cb.next_note().await;
        assert_eq!((method.as_str(), &params), (live, &json!({"i": i})));
        ca.ok("broadcast", json!([{"i": i}])).await;
        let (method, params) = cb.next_note().await;
        assert_eq!((method.as_str(), &params), ("broadcast", &json!({"i": i})));
        let answer = ca
            .call("call_peer", json!([b_addr, "add", [i, 1]]))
            .await
            .expect("a call to b's client");
        assert_eq!(answer, json!(i + 1));
        // Three heartbeats (500 ms each) go by over the five rounds: b still counts a.
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(
            cb.ok("cluster_count", json!([])).await,
            json!(2),
            "round {i}"
        );
    }
}

//! The cluster against what the bus may hold or do that no node of it would: a run at
//! the last offset, a history entry that is not JSON, heartbeats whose counts overflow,
//! a node back from a cut re-sending, history reads that fail while the node is busy,
//! envelopes of a channel read after the node left it.
//! Each of these failed before its fix; all on the in-memory hub.

use std::time::Duration;

use bytes::Bytes;
use jsonrpc_peer::cluster::{Backplane, Cluster, MemoryHub};
use jsonrpc_peer::{connect, Caller, Context, Peer, Router, RpcError, Server};
use serde_json::Value;
use tokio::sync::mpsc;

const STEP: Duration = Duration::from_secs(10);

async fn node(hub: &MemoryHub, name: &str) -> (Cluster, String) {
    let (cluster, url, _) = node_with(hub, name, Duration::from_millis(100), 3).await;
    (cluster, url)
}

async fn node_with(
    hub: &MemoryHub,
    name: &str,
    heartbeat: Duration,
    missed: u32,
) -> (Cluster, String, jsonrpc_peer::cluster::MemoryBackplane) {
    let bus = hub.backplane();
    let (cluster, url) = node_on(bus.clone(), name, heartbeat, missed).await;
    (cluster, url, bus)
}

/// A node on `bus`, serving `subscribe [topic]` and `unsubscribe [topic]`.
async fn node_on(
    bus: impl Backplane,
    name: &str,
    heartbeat: Duration,
    missed: u32,
) -> (Cluster, String) {
    let server = Server::bind("127.0.0.1:0")
        .await
        .unwrap()
        .peer_config(jsonrpc_peer::PeerConfig::default().slow_peer(jsonrpc_peer::SlowPeer::Drop));
    let url = format!("ws://{}", server.local_addr().unwrap());
    let cluster = Cluster::builder(bus, server.handle())
        .node_id(name)
        .heartbeat_interval(heartbeat)
        .missed_heartbeats(missed)
        .start()
        .await
        .unwrap();
    let router = Router::with_state(cluster.clone())
        .method(
            "subscribe",
            |cx: Context<Cluster>, (topic,): (String,)| async move {
                cx.state()
                    .topics()
                    .subscribe_ready(cx.peer(), &topic)
                    .await
                    .map_err(|e| RpcError::new(-32000, e.to_string()))
            },
        )
        .method(
            "unsubscribe",
            |cx: Context<Cluster>, (topic,): (String,)| async move {
                Ok::<_, RpcError>(cx.state().topics().unsubscribe(cx.peer(), &topic))
            },
        );
    tokio::spawn(server.serve(router));
    (cluster, url)
}

/// Waits until `cluster` sees `n` nodes live, itself included.
async fn all_live(cluster: &Cluster, n: usize) {
    let mut live = cluster.watch_nodes();
    tokio::time::timeout(STEP, live.wait_for(|names| names.len() == n))
        .await
        .unwrap()
        .unwrap();
}

/// A client subscribed to `topic`, forwarding the params of its notifications.
async fn subscriber(url: &str, topic: &str) -> (Peer, mpsc::UnboundedReceiver<Value>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let router = Router::new().notification(topic, move |_cx: Context, params: Value| {
        let _ = tx.send(params);
        async {}
    });
    let peer = tokio::time::timeout(STEP, connect(url, router))
        .await
        .unwrap()
        .unwrap();
    let _: Value = tokio::time::timeout(STEP, peer.call("subscribe", (topic,)))
        .await
        .unwrap()
        .unwrap();
    (peer, rx)
}

/// A recorded run (`k:"x"` with `n`) whose offset is the largest u64: the receive loop
/// counts the run's offsets with `(offset..)`, which overflows. The node must drop it
/// and go on delivering.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorded_run_at_the_last_offset_does_not_stop_the_receive_loop() {
    let hub = MemoryHub::new();
    let (a, url_a) = node(&hub, "a").await;
    let (b, _url_b) = node(&hub, "b").await;
    all_live(&a, 2).await;
    let (_peer, mut rx) = subscriber(&url_a, "t").await;

    // Another party on the bus (a buggy node, a hostile client of Redis).
    let raw = hub.backplane();
    let mut message = br#"{"v":1,"k":"x","o":"evil","i":"000000000001","s":0,"n":1,"ep":"e","off":18446744073709551615}"#.to_vec();
    message.push(b'\n');
    message.extend_from_slice(&3u32.to_be_bytes());
    message.extend_from_slice(b"[1]");
    raw.publish("jp:t:{t}", Bytes::from(message)).await.unwrap();

    // A plain publish from node b after it (on the same channel, so read after it)
    // still reaches a's subscriber.
    b.topics().publish("t", &["after"]).await.unwrap();
    let got = tokio::time::timeout(STEP, rx.recv()).await;
    assert!(
        matches!(got, Ok(Some(_))),
        "node a stopped delivering after the hostile envelope: {got:?}"
    );
}

/// One entry of a topic's history on the bus that is not JSON (written by anything but
/// a node of this cluster, or corrupted): a node's subscribers must get what follows it,
/// not lose the topic for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_history_entry_that_is_not_json_does_not_stop_the_topic_for_good() {
    use jsonrpc_peer::cluster::{Append, TopicKeys};
    use jsonrpc_peer::HistoryConfig;

    let hub = MemoryHub::new();
    let (a, url_a) = node(&hub, "a").await;
    let (b, _url_b) = node(&hub, "b").await;
    for n in [&a, &b] {
        n.topics().keep_history("t", HistoryConfig::default());
    }
    all_live(&a, 2).await;
    let (_peer, mut rx) = subscriber(&url_a, "t").await;

    b.topics().publish("t", &"one").await.unwrap();
    let first = tokio::time::timeout(STEP, rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first["offset"], 1, "{first}");

    // Offset 2: recorded on the bus, not JSON.
    let raw = hub.backplane();
    let keys = TopicKeys::new("jp", "t");
    let bounds = HistoryConfig::default();
    let head = br#"{"v":1,"k":"x","o":"other","i":"000000000001","s":0,"#;
    let at = raw
        .append(Append::new(&keys, &bounds, "unused", head, b"not json"))
        .await
        .unwrap();
    assert_eq!(at.offset, 2);

    // Offset 3 from node b, as usual.
    let third = b.topics().publish("t", &"three").await.unwrap();
    assert_eq!(third.offset, Some(3));
    let got = tokio::time::timeout(STEP, async {
        loop {
            match rx.recv().await {
                Some(params) if params["offset"] == 3 => return params,
                Some(_) => continue,
                None => panic!("client gone"),
            }
        }
    })
    .await;
    assert!(
        got.is_ok(),
        "node a never delivered offset 3 after the bad entry"
    );
}

/// A node that was dropped for silence (cut off longer than the heartbeat window) and
/// came back stays in the nodes task's `departed` list: 100 intervals after it was
/// dropped, the receive loop forgets its sequence numbers although it is live again,
/// and a copy it re-sends then (its ack was lost) is delivered a second time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_back_from_a_cut_keeps_its_duplicates_dropped() {
    let hub = MemoryHub::new();
    let interval = Duration::from_millis(50);
    let (a, url_a, _) = node_with(&hub, "a", interval, 40).await; // window 2 s
    let (b, _, b_bus) = node_with(&hub, "b", interval, 40).await;
    all_live(&a, 2).await;
    let (_peer, mut rx) = subscriber(&url_a, "t").await;
    b.topics().publish("t", &["warm"]).await.unwrap();
    assert_eq!(
        tokio::time::timeout(STEP, rx.recv())
            .await
            .unwrap()
            .unwrap()[0],
        "warm"
    );

    // b is cut off long enough to be dropped, then comes back.
    b_bus.cut();
    all_live(&a, 1).await;
    let dropped = tokio::time::Instant::now();
    b_bus.restore();
    all_live(&a, 2).await;

    // Well after, while b is live: a publish whose acks are lost, so b's outbox sends it
    // again and again (receivers must drop the copies), across the moment 100 intervals
    // (5 s) after the drop.
    tokio::time::sleep_until(dropped + Duration::from_millis(4600)).await;
    b_bus.lose_acks(u64::MAX);
    b.topics().publish("t", &["x1"]).await.unwrap();
    tokio::time::sleep_until(dropped + Duration::from_millis(6500)).await;
    b_bus.lose_acks(0);
    assert_eq!(a.nodes().len(), 2, "b stayed live");
    assert!(b.flushed(Duration::from_secs(5)).await);
    // Every copy of x1 went on the bus before this, on the same channel.
    b.topics().publish("t", &["marker"]).await.unwrap();
    let mut got = Vec::new();
    loop {
        let params = tokio::time::timeout(STEP, rx.recv())
            .await
            .unwrap()
            .unwrap();
        if params[0] == "marker" {
            break;
        }
        got.push(params);
    }
    let x1 = got.iter().filter(|p| p[0] == "x1").count();
    assert_eq!(x1, 1, "x1 delivered {x1} times: {got:?}");
}

/// Envelopes of a topic channel still queued in the bus's event stream when this node
/// leaves the channel are read after the receive loop forgot the channel's marks: they
/// set a mark again that nothing forgets, and the next subscription to the topic sees
/// a jump from that stale mark, a false gap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaving_a_busy_topic_leaves_no_stale_mark_behind() {
    let hub = MemoryHub::new();
    let (a, url_a) = node(&hub, "a").await;
    let (b, _) = node(&hub, "b").await;
    all_live(&a, 2).await;
    // What b publishes reaches a's receive loop in the order published, whatever the
    // channel: a's subscriber of "sync" hears when a has read all that came before.
    let (_sync, mut synced) = subscriber(&url_a, "sync").await;
    // A race (what is still queued when the channel is left), so a few rounds.
    for round in 0..8u64 {
        let topic = format!("t{round}");
        let (peer, mut rx) = subscriber(&url_a, &topic).await;
        let publisher = {
            let (topics, topic) = (b.topics(), topic.clone());
            tokio::spawn(async move {
                for i in 0..10_000u64 {
                    topics.publish(topic.as_str(), &[i]).await.unwrap();
                }
            })
        };
        // Leave while the burst is coming down.
        tokio::time::timeout(STEP, rx.recv())
            .await
            .unwrap()
            .unwrap();
        let _: bool = tokio::time::timeout(STEP, peer.call("unsubscribe", (&topic,)))
            .await
            .unwrap()
            .unwrap();
        tokio::time::timeout(STEP, publisher)
            .await
            .unwrap()
            .unwrap();
        b.topics().publish("sync", &[round]).await.unwrap();
        let heard = tokio::time::timeout(STEP, synced.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(heard[0], round);
        let gaps_before = a.stats().gaps;

        // Back on the topic: nothing was lost to this subscription.
        let _: Value = tokio::time::timeout(STEP, peer.call("subscribe", (&topic,)))
            .await
            .unwrap()
            .unwrap();
        b.topics()
            .publish(topic.as_str(), &["again"])
            .await
            .unwrap();
        loop {
            let got = tokio::time::timeout(STEP, rx.recv())
                .await
                .unwrap()
                .unwrap();
            if got[0] == "again" {
                break;
            }
        }
        assert_eq!(
            a.stats().gaps,
            gaps_before,
            "round {round}: a gap reported for what was published while no one here was subscribed"
        );
    }
}

/// Heartbeats carry a connection count the nodes task sums with `Iterator::sum`: two
/// heartbeats whose counts overflow a u64 kill the task (in builds with overflow
/// checks), and the node's roster stops moving: dead nodes stay, new ones never show.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_with_huge_counts_do_not_stop_the_roster() {
    let hub = MemoryHub::new();
    let (a, _) = node(&hub, "a").await;
    let raw = hub.backplane();
    for (name, n) in [("evil1", u64::MAX), ("evil2", 1)] {
        let mut message =
            format!(r#"{{"v":1,"k":"h","o":"{name}","i":"000000000001","s":1,"n":{n}}}"#)
                .into_bytes();
        message.push(b'\n');
        raw.publish("jp:ctl", Bytes::from(message)).await.unwrap();
    }
    // The two go silent and are dropped after the window (300 ms); b comes and is seen.
    let (_b, _) = node(&hub, "b").await;
    let mut live = a.watch_nodes();
    let seen = tokio::time::timeout(
        STEP,
        live.wait_for(|n| n == &["a".to_string(), "b".to_string()]),
    )
    .await;
    assert!(seen.is_ok(), "a's roster stuck at {:?}", a.nodes());
}

/// A memory link whose history reads (`read_history`, `history_position`) fail while
/// `failing` is set, each refusal told on `refused`: a Redis that answers some commands
/// with errors while the link is up.
struct Flaky {
    inner: jsonrpc_peer::cluster::MemoryBackplane,
    failing: std::sync::Arc<std::sync::atomic::AtomicBool>,
    refused: std::sync::Arc<tokio::sync::Notify>,
}

mod flaky {
    use super::Flaky;
    use bytes::Bytes;
    use jsonrpc_peer::cluster::*;
    use jsonrpc_peer::{HistoryConfig, Position};
    use std::sync::atomic::Ordering;
    use std::time::Duration;
    use tokio::sync::mpsc;

    impl Flaky {
        fn check(&self) -> Result<(), BackplaneError> {
            if self.failing.load(Ordering::SeqCst) {
                self.refused.notify_one();
                Err(BackplaneError::Unavailable("read refused".into()))
            } else {
                Ok(())
            }
        }
    }

    impl Backplane for Flaky {
        fn publish(&self, c: &str, p: Bytes) -> BoxFuture<'_, Result<(), BackplaneError>> {
            self.inner.publish(c, p)
        }
        fn subscribe(&self, c: &str) -> BoxFuture<'_, Result<(), BackplaneError>> {
            self.inner.subscribe(c)
        }
        fn unsubscribe(&self, c: &str) -> BoxFuture<'_, Result<(), BackplaneError>> {
            self.inner.unsubscribe(c)
        }
        fn presence_write(
            &self,
            w: Vec<PartWrite>,
        ) -> BoxFuture<'_, Result<Vec<String>, BackplaneError>> {
            self.inner.presence_write(w)
        }
        fn presence_read(
            &self,
            r: PresenceRead,
        ) -> BoxFuture<'_, Result<StoredPresence, BackplaneError>> {
            self.inner.presence_read(r)
        }
        fn presence_refresh(
            &self,
            k: Vec<PresenceKey>,
            n: &str,
            t: Duration,
        ) -> BoxFuture<'_, Result<Vec<bool>, BackplaneError>> {
            self.inner.presence_refresh(k, n, t)
        }
        fn events(&self) -> Option<mpsc::Receiver<BusEvent>> {
            self.inner.events()
        }
        fn append<'a>(&'a self, a: Append<'a>) -> BoxFuture<'a, Result<Position, BackplaneError>> {
            self.inner.append(a)
        }
        fn read_history<'a>(
            &'a self,
            k: &'a TopicKeys,
            b: &'a HistoryConfig,
            after: u64,
            max: usize,
        ) -> BoxFuture<'a, Result<HistoryRead, BackplaneError>> {
            if let Err(e) = self.check() {
                return Box::pin(async move { Err(e) });
            }
            self.inner.read_history(k, b, after, max)
        }
        fn history_position<'a>(
            &'a self,
            k: &'a TopicKeys,
            b: &'a HistoryConfig,
            e: &'a str,
        ) -> BoxFuture<'a, Result<HistoryRead, BackplaneError>> {
            if let Err(e) = self.check() {
                return Box::pin(async move { Err(e) });
            }
            self.inner.history_position(k, b, e)
        }
    }
}

/// The history room tries a failed look at a topic again "every second while the bus is
/// up"; but its one-second sleep is made anew on every turn of its loop, so anything
/// else it hears more often than once a second (here: a client joining and leaving
/// another topic) puts the retry off for as long as that lasts, and a publication the
/// node missed stays undelivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_history_look_is_tried_again_while_the_node_is_busy() {
    use jsonrpc_peer::HistoryConfig;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    let hub = MemoryHub::new();
    let a_link = hub.backplane();
    let failing = Arc::new(AtomicBool::new(false));
    let refused = Arc::new(tokio::sync::Notify::new());
    let flaky = Flaky {
        inner: a_link.clone(),
        failing: failing.clone(),
        refused: refused.clone(),
    };
    let (a, url_a) = node_on(flaky, "a", Duration::from_millis(100), 3).await;
    let (b, _) = node(&hub, "b").await;
    for n in [&a, &b] {
        n.topics().keep_history("x", HistoryConfig::default());
        n.topics().keep_history("z", HistoryConfig::default());
    }
    all_live(&a, 2).await;
    let (_c1, mut rx) = subscriber(&url_a, "x").await;
    b.topics().publish("x", &"one").await.unwrap();
    assert_eq!(
        tokio::time::timeout(STEP, rx.recv())
            .await
            .unwrap()
            .unwrap()["offset"],
        1
    );

    // a misses x#2 (its channel interrupted); the look that follows fails once.
    a_link.lose(&["jp:t:{x}"]);
    b.topics().publish("x", &"two").await.unwrap();
    failing.store(true, Ordering::SeqCst);
    a_link.regain();
    tokio::time::timeout(STEP, refused.notified())
        .await
        .unwrap();
    failing.store(false, Ordering::SeqCst);

    // Meanwhile another client of a joins and leaves topic z, again and again: the room
    // hears of it far more often than once a second.
    let (c2, _rx2) = subscriber(&url_a, "z").await;
    let churn = tokio::spawn(async move {
        loop {
            let _: Result<bool, _> = c2.call("unsubscribe", ("z",)).await;
            let _: Result<Value, _> = c2.call("subscribe", ("z",)).await;
        }
    });
    // Tried again within a second or so; `STEP` leaves room for a busy machine, and the
    // churn lasts as long.
    let got = tokio::time::timeout(STEP, rx.recv()).await;
    churn.abort();
    assert!(
        matches!(&got, Ok(Some(p)) if p["offset"] == 2),
        "x#2 not delivered while the node was busy: {got:?}"
    );
}

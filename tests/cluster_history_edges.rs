//! Topic delivery and history across nodes, edge cases found in a review, on the in-memory bus (some behind a gate that
//! holds one bus operation until the test opens it): what a subscriber on another node
//! sees. Real servers and clients on 127.0.0.1:0.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{notes_client as client, within, Note};
use jsonrpc_peer::cluster::{
    Append, Backplane, BackplaneError, BoxFuture, BusEvent, Cluster, Gap, HistoryRead, MemoryHub,
    PartWrite, PresenceKey, PresenceRead, StoredPresence, TopicKeys,
};
use jsonrpc_peer::{Caller, Context, HistoryConfig, Position, Router, RpcError, Server};
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot, Notify};

/// Which bus operation a [`Gated`] link holds.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Gate {
    /// `subscribe` of the channel (the node's subscriptions task waits on it).
    Subscribe,
    /// `history_position` of the topic of the channel (the history room waits on it).
    Position,
    /// `unsubscribe` of the channel (the node's subscriptions task waits on it).
    Unsubscribe,
}

/// A link (a memory one, or another `Gated`) that holds one operation on one channel
/// until the test opens the gate (a slow bus), says when it got there, and tells every
/// subscription it changed on the bus, once done: `+channel` or `-channel`.
#[derive(Clone)]
struct Gated {
    inner: Arc<dyn Backplane>,
    gate: Gate,
    channel: String,
    entered: Arc<Mutex<Option<oneshot::Sender<()>>>>,
    open: Arc<Notify>,
    changed: mpsc::UnboundedSender<String>,
}

impl Gated {
    fn new(
        inner: impl Backplane,
        gate: Gate,
        channel: &str,
    ) -> (Self, oneshot::Receiver<()>, mpsc::UnboundedReceiver<String>) {
        let (tx, rx) = oneshot::channel();
        let (changed, changes) = mpsc::unbounded_channel();
        let gated = Gated {
            inner: Arc::new(inner),
            gate,
            channel: channel.to_owned(),
            entered: Arc::new(Mutex::new(Some(tx))),
            open: Arc::new(Notify::new()),
            changed,
        };
        (gated, rx, changes)
    }

    /// Waits for the gate if `gate` on `channel` is the one held.
    async fn pass(&self, gate: Gate, channel: &str) {
        if gate != self.gate || channel != self.channel {
            return;
        }
        let opened = self.open.notified();
        if let Some(entered) = self.entered.lock().unwrap().take() {
            let _ = entered.send(());
        }
        opened.await;
    }
}

impl Backplane for Gated {
    fn publish(
        &self,
        channel: &str,
        payload: bytes::Bytes,
    ) -> BoxFuture<'_, Result<(), BackplaneError>> {
        self.inner.publish(channel, payload)
    }
    fn publish_many(
        &self,
        messages: Vec<(String, bytes::Bytes)>,
    ) -> BoxFuture<'_, Result<(), BackplaneError>> {
        self.inner.publish_many(messages)
    }
    fn subscribe(&self, channel: &str) -> BoxFuture<'_, Result<(), BackplaneError>> {
        let channel = channel.to_owned();
        Box::pin(async move {
            self.pass(Gate::Subscribe, &channel).await;
            let done = self.inner.subscribe(&channel).await;
            let _ = self.changed.send(format!("+{channel}"));
            done
        })
    }
    fn unsubscribe(&self, channel: &str) -> BoxFuture<'_, Result<(), BackplaneError>> {
        let channel = channel.to_owned();
        Box::pin(async move {
            self.pass(Gate::Unsubscribe, &channel).await;
            let done = self.inner.unsubscribe(&channel).await;
            let _ = self.changed.send(format!("-{channel}"));
            done
        })
    }
    fn presence_write(
        &self,
        writes: Vec<PartWrite>,
    ) -> BoxFuture<'_, Result<Vec<String>, BackplaneError>> {
        self.inner.presence_write(writes)
    }
    fn presence_read(
        &self,
        read: PresenceRead,
    ) -> BoxFuture<'_, Result<StoredPresence, BackplaneError>> {
        self.inner.presence_read(read)
    }
    fn presence_refresh(
        &self,
        keys: Vec<PresenceKey>,
        node: &str,
        ttl: Duration,
    ) -> BoxFuture<'_, Result<Vec<bool>, BackplaneError>> {
        self.inner.presence_refresh(keys, node, ttl)
    }
    fn events(&self) -> Option<mpsc::Receiver<BusEvent>> {
        self.inner.events()
    }
    fn append<'a>(&'a self, append: Append<'a>) -> BoxFuture<'a, Result<Position, BackplaneError>> {
        self.inner.append(append)
    }
    fn read_history<'a>(
        &'a self,
        keys: &'a TopicKeys,
        bounds: &'a HistoryConfig,
        after: u64,
        max: usize,
    ) -> BoxFuture<'a, Result<HistoryRead, BackplaneError>> {
        self.inner.read_history(keys, bounds, after, max)
    }
    fn history_position<'a>(
        &'a self,
        keys: &'a TopicKeys,
        bounds: &'a HistoryConfig,
        new_epoch: &'a str,
    ) -> BoxFuture<'a, Result<HistoryRead, BackplaneError>> {
        Box::pin(async move {
            self.pass(Gate::Position, &keys.channel).await;
            self.inner.history_position(keys, bounds, new_epoch).await
        })
    }
}

struct Node {
    cluster: Cluster,
    url: String,
    gaps: Arc<Mutex<Vec<Gap>>>,
    /// Each gap too, as it is reported.
    gap_rx: mpsc::UnboundedReceiver<Gap>,
}

/// A node on `bus`; `history`: every topic keeps one. Its clients may `subscribe [topic]`
/// (ready once the bus has it; from a position with `[topic, position]` on a topic with
/// history), `join [topic]` (the plain `Topics::subscribe`), `unsubscribe [topic]`.
async fn node(bus: impl Backplane, name: &str, history: Option<HistoryConfig>) -> Node {
    node_with(bus, name, history, Some("$/gap")).await
}

/// [`node`] with other settings: subscribers told of gaps with `gap_method`, if any
/// (off by default).
async fn node_with(
    bus: impl Backplane,
    name: &str,
    history: Option<HistoryConfig>,
    gap_method: Option<&str>,
) -> Node {
    node_beating(bus, name, history, gap_method, Duration::from_millis(100)).await
}

/// [`node_with`], heartbeating every `heartbeat`.
async fn node_beating(
    bus: impl Backplane,
    name: &str,
    history: Option<HistoryConfig>,
    gap_method: Option<&str>,
    heartbeat: Duration,
) -> Node {
    let server = Server::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://{}", server.local_addr().unwrap());
    let gaps = Arc::new(Mutex::new(Vec::new()));
    let (gap_tx, gap_rx) = mpsc::unbounded_channel();
    let mut builder = Cluster::builder(bus, server.handle())
        .node_id(name)
        .heartbeat_interval(heartbeat)
        .on_gap({
            let gaps = gaps.clone();
            move |gap| {
                gaps.lock().unwrap().push(gap.clone());
                let _ = gap_tx.send(gap.clone());
            }
        });
    if let Some(method) = gap_method {
        builder = builder.gap_notification(method);
    }
    let cluster = within(builder.start()).await.unwrap();
    if let Some(history) = history {
        cluster.topics().keep_history_for_all(history);
    }
    let router = Router::with_state(cluster.clone())
        .method(
            "subscribe",
            |cx: Context<Cluster>, (topic, from): (String, Option<Position>)| async move {
                let topics = cx.state().topics();
                let failed = |e: jsonrpc_peer::Error| RpcError::new(-32000, e.to_string());
                if topics.keeps_history(&topic) {
                    let subscribed = topics.subscribe_from(cx.peer(), &topic, from).await;
                    Ok::<_, RpcError>(serde_json::to_value(subscribed.map_err(failed)?).unwrap())
                } else {
                    let added = topics.subscribe_ready(cx.peer(), &topic).await;
                    Ok(json!(added.map_err(failed)?))
                }
            },
        )
        .method(
            "join",
            |cx: Context<Cluster>, (topic,): (String,)| async move {
                Ok::<_, RpcError>(cx.state().topics().subscribe(cx.peer(), &topic))
            },
        )
        .method(
            "watch",
            |cx: Context<Cluster>, (topic,): (String,)| async move {
                let watched = cx.state().topics().watch_presence(cx.peer(), &topic).await;
                watched.map_err(|e| RpcError::new(-32000, e.to_string()))
            },
        )
        .method(
            "enter",
            |cx: Context<Cluster>, (topic,): (String,)| async move {
                let entered = cx
                    .state()
                    .topics()
                    .join_presence(cx.peer(), &topic, json!({}))
                    .await;
                entered.map_err(|e| RpcError::new(-32000, e.to_string()))
            },
        )
        .method(
            "unsubscribe",
            |cx: Context<Cluster>, (topic,): (String,)| async move {
                Ok::<_, RpcError>(cx.state().topics().unsubscribe(cx.peer(), &topic))
            },
        );
    tokio::spawn(server.serve(router));
    Node {
        cluster,
        url,
        gaps,
        gap_rx,
    }
}

async fn all_live(nodes: &[&Node]) {
    for n in nodes {
        let mut live = n.cluster.watch_nodes();
        within(live.wait_for(|names| names.len() == nodes.len()))
            .await
            .unwrap();
    }
}

/// Everything `rx` got up to (not including) the first `method` notification.
async fn until(rx: &mut mpsc::UnboundedReceiver<Note>, method: &str) -> Vec<Note> {
    let mut got = Vec::new();
    loop {
        let note = within(rx.recv()).await.unwrap();
        if note.0 == method {
            return got;
        }
        got.push(note);
    }
}

/// A node whose topic has no subscriber left, though it still listens to its channel
/// (its subscriptions task is busy), drops what comes on it: a subscriber that joins
/// after that missed nothing, and must not be told it did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_message_nobody_on_the_node_wanted_is_not_a_gap_for_the_next_subscriber() {
    let hub = MemoryHub::new();
    let a = node(hub.backplane(), "a", None).await;
    let (gated, entered, _) = Gated::new(hub.backplane(), Gate::Subscribe, "jp:t:{gate}");
    let open = gated.open.clone();
    let b = node(gated, "b", None).await;
    all_live(&[&a, &b]).await;
    let topics = a.cluster.topics();

    let (first, mut first_rx) = client(&b.url, &["news", "mark"]).await;
    let _: bool = within(first.call("subscribe", json!(["news"])))
        .await
        .unwrap();
    topics.publish("news", &[1]).await.unwrap();
    assert_eq!(
        within(first_rx.recv()).await.unwrap(),
        ("news".into(), json!([1]))
    );

    // b's subscriptions task gets busy with another topic (a slow subscribe).
    let (other, _other_rx) = client(&b.url, &[]).await;
    let busy = tokio::spawn(async move {
        let _: Value = within(other.call("subscribe", json!(["gate"])))
            .await
            .unwrap();
    });
    within(entered).await.unwrap();
    // The only subscriber of "news" on b leaves; b still listens to the channel.
    let _: bool = within(first.call("unsubscribe", json!(["news"])))
        .await
        .unwrap();
    topics.publish("news", &[2]).await.unwrap();
    // Once `first` has the broadcast after it, b's receive loop has passed 2 (dropped:
    // no one on b wanted it).
    a.cluster.flushed(Duration::from_secs(5)).await;
    a.cluster.handle().broadcast("mark", &()).unwrap();
    assert!(until(&mut first_rx, "mark").await.is_empty());

    // A new subscriber on b, after 2 was dropped; then the subscriptions task goes on.
    let (second, mut second_rx) = client(&b.url, &["news", "mark"]).await;
    let _: bool = within(second.call("join", json!(["news"]))).await.unwrap();
    open.notify_one();
    within(busy).await.unwrap();

    topics.publish("news", &[3]).await.unwrap();
    a.cluster.flushed(Duration::from_secs(5)).await;
    a.cluster.handle().broadcast("mark", &()).unwrap();
    let got = until(&mut second_rx, "mark").await;
    assert_eq!(got, [("news".to_owned(), json!([3]))], "3 alone, no $/gap");
    assert_eq!(b.cluster.stats().gaps, 0, "{:?}", b.gaps.lock().unwrap());
}

/// A publication's offset and data, failing on anything else.
fn publication(note: Note, topic: &str) -> (u64, Value) {
    assert_eq!(note.0, topic, "{note:?}");
    (note.1["offset"].as_u64().unwrap(), note.1["data"].clone())
}

/// The offsets of `topic` that `rx` gets until it has `last`, or until nothing more came
/// for 2 s.
async fn offsets_up_to(rx: &mut mpsc::UnboundedReceiver<Note>, topic: &str, last: u64) -> Vec<u64> {
    let mut got = Vec::new();
    while got.last() != Some(&last) && got.len() < 100_000 {
        match tokio::time::timeout(Duration::from_secs(2), rx.recv()).await {
            Ok(Some(note)) => got.push(publication(note, topic).0),
            _ => break,
        }
    }
    got
}

/// The last subscriber of a topic with history leaves a node and a new one comes while
/// the node's history room is still busy (a slow read of the bus for another topic):
/// the new subscriber is answered where live publications continue, and gets every one
/// after that, once, in order; none is dropped when the room catches up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_that_comes_back_while_the_history_room_is_busy_misses_nothing() {
    let hub = MemoryHub::new();
    let history = Some(HistoryConfig::default());
    let a = node(hub.backplane(), "a", history.clone()).await;
    let (gated, entered, mut changes) = Gated::new(hub.backplane(), Gate::Position, "jp:t:{slow}");
    let open = gated.open.clone();
    let b = node(gated, "b", history).await;
    all_live(&[&a, &b]).await;
    let topics = a.cluster.topics();

    let (first, mut first_rx) = client(&b.url, &["news"]).await;
    let _: Value = within(first.call("subscribe", json!(["news", null])))
        .await
        .unwrap();
    topics.publish("news", &[1]).await.unwrap();
    let one = publication(within(first_rx.recv()).await.unwrap(), "news");
    assert_eq!(one, (1, json!([1])));

    // b's history room gets busy: a subscriber of another topic waits on its position.
    let (other, _other_rx) = client(&b.url, &[]).await;
    let busy = tokio::spawn(async move {
        let _: Value = within(other.call("subscribe", json!(["slow", null])))
            .await
            .unwrap();
    });
    within(entered).await.unwrap();
    // The only subscriber of "news" on b leaves: b leaves the channel.
    let _: bool = within(first.call("unsubscribe", json!(["news"])))
        .await
        .unwrap();
    while within(changes.recv()).await.unwrap() != "-jp:t:{news}" {}
    topics.publish("news", &[2]).await.unwrap();

    // A new subscriber of "news" on b, from now.
    let (second, mut second_rx) = client(&b.url, &["news"]).await;
    let subscribe = tokio::spawn(async move {
        let answer: Value = within(second.call("subscribe", json!(["news", null])))
            .await
            .unwrap();
        (second, answer)
    });
    // The room stays busy until the subscribe is answered, or for a second should the
    // subscribe wait for the room (then nothing else says it got there).
    tokio::pin!(subscribe);
    let answered = tokio::time::timeout(Duration::from_secs(1), &mut subscribe).await;
    open.notify_one();
    let (_second, answer) = match answered {
        Ok(answered) => answered.unwrap(),
        Err(_) => within(subscribe).await.unwrap(),
    };
    within(busy).await.unwrap();
    let from = answer["offset"].as_u64().unwrap();
    for i in 3..=5u64 {
        topics.publish("news", &[i]).await.unwrap();
    }
    let offsets = offsets_up_to(&mut second_rx, "news", 5).await;
    assert_eq!(
        offsets,
        (from + 1..=5).collect::<Vec<_>>(),
        "answered {answer}: every publication after it, once, in order"
    );
}

/// A subscriber added with the plain `Topics::subscribe` (no position, nothing awaited)
/// to a topic with history: once its node listens to the topic's channel, what is
/// published reaches it, from the first publication on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_subscriber_of_a_topic_with_history_gets_the_first_publications_too() {
    let hub = MemoryHub::new();
    let history = Some(HistoryConfig::default());
    let a = node(hub.backplane(), "a", history.clone()).await;
    let (gated, _, mut changes) = Gated::new(hub.backplane(), Gate::Subscribe, "none");
    let b = node(gated, "b", history).await;
    all_live(&[&a, &b]).await;
    let topics = a.cluster.topics();
    topics.publish("news", &["before"]).await.unwrap();

    let (peer, mut rx) = client(&b.url, &["news"]).await;
    let added: bool = within(peer.call("join", json!(["news"]))).await.unwrap();
    assert!(added);
    // b listens to the topic's channel from here on.
    while within(changes.recv()).await.unwrap() != "+jp:t:{news}" {}
    for i in 1..=3u64 {
        topics.publish("news", &[i]).await.unwrap();
    }
    let offsets = offsets_up_to(&mut rx, "news", 4).await;
    assert_eq!(
        offsets,
        [2, 3, 4],
        "each publication after b listens, once, in order"
    );
}

/// A client saw a publication on one node and resumes from it on another whose bus link
/// lost it (a lossy link, or Redis pushes dropped for a busy node), while nothing more
/// is published: the bus has it, so the resume is answered, recovered, and goes live.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_from_a_publication_the_node_lost_is_answered_while_the_topic_is_quiet() {
    let hub = MemoryHub::new();
    let history = Some(HistoryConfig::default());
    let a = node(hub.backplane(), "a", history.clone()).await;
    let b_bus = hub.backplane();
    let b = node(b_bus.clone(), "b", history).await;
    all_live(&[&a, &b]).await;
    let topics = a.cluster.topics();

    let (on_a, mut on_a_rx) = client(&a.url, &["news"]).await;
    let (on_b, mut on_b_rx) = client(&b.url, &["news"]).await;
    let answer: Value = within(on_a.call("subscribe", json!(["news", null])))
        .await
        .unwrap();
    let epoch = answer["epoch"].as_str().unwrap().to_owned();
    let _: Value = within(on_b.call("subscribe", json!(["news", null])))
        .await
        .unwrap();
    // b's link loses the one publication; a's client has it.
    b_bus.drop_next(1);
    topics.publish("news", &["one"]).await.unwrap();
    let one = publication(within(on_a_rx.recv()).await.unwrap(), "news");
    assert_eq!(one, (1, json!(["one"])));
    on_a.close().await;

    // The client comes back through b, from what it has.
    let (back, mut back_rx) = client(&b.url, &["news"]).await;
    let from = json!({ "epoch": epoch, "offset": 1 });
    let answer: Result<Value, _> = within(back.call("subscribe", json!(["news", from]))).await;
    let answer = answer.expect("a resume from a position the bus has is answered");
    assert_eq!(answer["recovered"], true, "{answer}");
    assert_eq!(answer["offset"], 1, "{answer}");
    topics.publish("news", &["two"]).await.unwrap();
    assert_eq!(offsets_up_to(&mut back_rx, "news", 2).await, [2]);
    assert_eq!(offsets_up_to(&mut on_b_rx, "news", 2).await, [1, 2]);
}

/// A node cut off from the bus while many publications went by fills them in from the
/// history when it is back: its live subscriber gets every one, in order, and is not
/// taken for a slow peer (it reads; the node hands it the backlog all at once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_filled_in_after_an_outage_does_not_close_a_subscriber_that_reads() {
    let hub = MemoryHub::new();
    let history = Some(HistoryConfig::default().max_len(10_000));
    let a = node(hub.backplane(), "a", history.clone()).await;
    let b_bus = hub.backplane();
    let b = node(b_bus.clone(), "b", history).await;
    all_live(&[&a, &b]).await;
    let topics = a.cluster.topics();

    let (peer, mut rx) = client(&b.url, &["news"]).await;
    let _: Value = within(peer.call("subscribe", json!(["news", null])))
        .await
        .unwrap();
    b_bus.cut();
    let mut state = b.cluster.watch_state();
    within(state.wait_for(|s| *s == jsonrpc_peer::cluster::ClusterState::Down))
        .await
        .unwrap();
    let n = 3_000u64;
    for i in 1..=n {
        topics.publish("news", &[i]).await.unwrap();
    }
    b_bus.restore();
    let got = offsets_up_to(&mut rx, "news", n).await;
    if got.len() as u64 != n && peer.is_closed() {
        panic!(
            "got {} of {n}, then closed: {:?}",
            got.len(),
            within(peer.closed()).await
        );
    }
    assert_eq!(got, (1..=n).collect::<Vec<_>>());
}

/// A cluster with the default settings (no gap notification method) whose bus comes back
/// empty: a resuming client following the topic must not take the new epoch's
/// publications, whose offsets are lower than its position, for ones it already had.
/// It gets them, or is told it missed some; never silence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_history_lost_on_a_cluster_without_gap_notices_is_not_silent_to_a_resuming_client() {
    use jsonrpc_peer::{Backoff, Reconnecting, TopicEvent, TopicOptions};

    let hub = MemoryHub::new();
    let history = Some(HistoryConfig::default());
    let mut a = node_with(hub.backplane(), "a", history.clone(), None).await;
    let mut b = node_with(hub.backplane(), "b", history, None).await;
    all_live(&[&a, &b]).await;
    let topics = a.cluster.topics();

    // `[topic, position_or_null]`, the node's subscribe method's form.
    let options = TopicOptions::default().params(|topic, from| json!([topic, from]));
    let (builder, mut events) =
        Reconnecting::builder(b.url.as_str(), Router::new()).topic_with::<Value>("news", options);
    let follower = builder
        .backoff(
            Backoff::default()
                .initial(Duration::from_millis(5))
                .max(Duration::from_millis(50)),
        )
        .start();
    within(follower.connected(Duration::from_secs(10)))
        .await
        .unwrap();
    // The connect hook subscribed before `connected` resolved: b follows the topic.
    for i in 1..=5u64 {
        topics.publish("news", &json!(["old", i])).await.unwrap();
    }
    for i in 1..=5u64 {
        match within(events.recv()).await.unwrap() {
            TopicEvent::Data(data) => assert_eq!(data, json!(["old", i])),
            other => panic!("{other:?}"),
        }
    }

    // The bus restarts empty.
    hub.cut_all();
    hub.clear_history();
    hub.restore_all();
    // Each node back on the bus reports the outage's gap (for broadcasts).
    for n in [&mut a, &mut b] {
        while within(n.gap_rx.recv()).await.unwrap().topic.is_some() {}
    }
    // Six publications in the new epoch: offsets 1 to 6.
    for i in 1..=6u64 {
        let published = within(topics.publish("news", &json!(["new", i]))).await;
        assert_eq!(published.unwrap().offset, Some(i));
    }
    // What the client hands over until it has the sixth, or nothing came for 2 s.
    let mut seen = Vec::new();
    while seen.len() < 20 {
        let Ok(event) = tokio::time::timeout(Duration::from_secs(2), events.recv()).await else {
            break;
        };
        let event = event.unwrap();
        let last = matches!(&event, TopicEvent::Data(data) if *data == json!(["new", 6]));
        seen.push(format!("{event:?}"));
        if last {
            break;
        }
    }
    let missed = seen.iter().any(|e| e.starts_with("Missed"));
    let all_new = (1..=6).all(|i| {
        seen.iter()
            .any(|e| e.contains(&format!("\"new\", Number({i})")))
    });
    assert!(
        missed || all_new,
        "the new epoch's 1 to 5 were dropped without a word: {seen:?}"
    );
    within(follower.close()).await;
}

/// On a topic with history, publications are never numbered per node (their offsets
/// are the bus's); presence changes on its channel are. A lost presence change is the
/// members' business (the view is read again): the topic's subscribers lost no
/// publication, and are not told `{"topic": T}` (what a topic without history says).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_presence_change_is_not_a_publication_gap_on_a_topic_with_history() {
    let hub = MemoryHub::new();
    let history = Some(HistoryConfig::default());
    // Heartbeats far apart: the one message b's link loses below is the presence change.
    let beat = Duration::from_secs(5);
    let a = node_beating(hub.backplane(), "a", history.clone(), Some("$/gap"), beat).await;
    let b_bus = hub.backplane();
    let b = node_beating(b_bus.clone(), "b", history.clone(), Some("$/gap"), beat).await;
    let c = node_beating(hub.backplane(), "c", history, Some("$/gap"), beat).await;
    all_live(&[&a, &b, &c]).await;

    // A subscriber on b; one on c that watches who joins (it says when a change went by).
    let (on_b, mut b_rx) = client(&b.url, &["room", "mark"]).await;
    let _: Value = within(on_b.call("subscribe", json!(["room", null])))
        .await
        .unwrap();
    let (on_c, mut c_rx) = client(&c.url, &["presence.join"]).await;
    let _: Value = within(on_c.call("subscribe", json!(["room", null])))
        .await
        .unwrap();
    let _: bool = within(on_c.call("watch", json!(["room"]))).await.unwrap();
    let mut members = Vec::new();
    for _ in 0..3 {
        let (member, member_rx) = client(&a.url, &[]).await;
        let _: Value = within(member.call("subscribe", json!(["room", null])))
            .await
            .unwrap();
        members.push((member, member_rx));
    }
    let enter = |i: usize| {
        let member = members[i].0.clone();
        async move {
            let _: bool = within(member.call("enter", json!(["room"]))).await.unwrap();
        }
    };
    enter(0).await;
    assert_eq!(within(c_rx.recv()).await.unwrap().0, "presence.join");
    // b's link loses the second member's join (c hears it: it went by); the third's comes.
    b_bus.drop_next(1);
    enter(1).await;
    assert_eq!(within(c_rx.recv()).await.unwrap().0, "presence.join");
    enter(2).await;
    assert_eq!(within(c_rx.recv()).await.unwrap().0, "presence.join");
    assert!(a.cluster.flushed(Duration::from_secs(5)).await);
    a.cluster.handle().broadcast("mark", &()).unwrap();
    let got = until(&mut b_rx, "mark").await;
    assert!(got.is_empty(), "no publication was lost: {got:?}");
    assert_eq!(b.cluster.stats().gaps, 0, "{:?}", b.gaps.lock().unwrap());
}

/// A client that subscribes to a topic with history (every topic keeps one) and goes
/// away while its node reads the topic's position on the bus leaves nothing behind: the
/// read, ending after the last subscriber left, makes no history for the topic, which no
/// one would leave again (it would be kept, for no one, for `max_idle`: a day by
/// default). Before the fix it made one, and a client naming topics could make it grow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscribe_given_up_while_its_position_is_read_leaves_no_history_behind() {
    let hub = MemoryHub::new();
    // b's history room waits on the position of "gone"; its subscriptions task waits
    // on leaving the channel of "gone" (so the room is not told before the test looks).
    let (unsubscribing, left, _) = Gated::new(hub.backplane(), Gate::Unsubscribe, "jp:t:{gone}");
    let leave = unsubscribing.open.clone();
    let (gated, reading, _) = Gated::new(unsubscribing, Gate::Position, "jp:t:{gone}");
    let read = gated.open.clone();
    let b = node(gated, "b", Some(HistoryConfig::default())).await;
    all_live(&[&b]).await;
    let topics = b.cluster.topics();

    // Another client, subscribed before: its subscribe asked again goes through the
    // history room after whatever the room was asked before it.
    let (marker, _marker_rx) = client(&b.url, &[]).await;
    let _: Value = within(marker.call("subscribe", json!(["marker", null])))
        .await
        .unwrap();

    let (gone, _gone_rx) = client(&b.url, &["gone"]).await;
    let subscribing = {
        let gone = gone.clone();
        tokio::spawn(async move { gone.call::<Value>("subscribe", json!(["gone", null])).await })
    };
    // The room reads the position of "gone" for that subscribe; its client goes.
    within(reading).await.unwrap();
    within(gone.close()).await;
    subscribing.abort();
    // The node leaves the channel once "gone" has no subscriber: the client is gone.
    within(left).await.unwrap();
    assert_eq!(topics.subscriber_count("gone"), 0);

    read.notify_one();
    let _: Value = within(marker.call("subscribe", json!(["marker", null])))
        .await
        .unwrap();
    // The room is done with "gone": it made no history for a topic no one is in.
    assert_eq!(
        topics.position("gone"),
        None,
        "a history was made for a topic with no subscriber"
    );
    leave.notify_one();
    assert_eq!(topics.subscriber_count("gone"), 0);

    // The topic serves the next subscriber as any other (its position read let through).
    read.notify_one();
    let (next, mut next_rx) = client(&b.url, &["gone"]).await;
    let _: Value = within(next.call("subscribe", json!(["gone", null])))
        .await
        .unwrap();
    assert!(topics.position("gone").is_some());
    topics.publish("gone", &[1]).await.unwrap();
    assert_eq!(
        publication(within(next_rx.recv()).await.unwrap(), "gone"),
        (1, json!([1]))
    );
}

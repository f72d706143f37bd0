//! Every metric README lists moves when its event happens: one test per family, read
//! through a recorder installed for this test binary (counters, gauges and histogram
//! samples kept as they are, never reset by reading). The tests run one at a time:
//! the gauges are process-wide, and each test measures what it changes.

mod common;

use std::collections::HashMap;
use std::future::{Future, IntoFuture};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use common::{serve_with, within, RawClient};
use jsonrpc_peer::cluster::{Cluster, ClusterError, ClusterState, MemoryHub};
use jsonrpc_peer::metrics::{names, Metrics};
use jsonrpc_peer::{
    connect_with_config, Caller, Context, Error, HandshakePolicy, HistoryConfig, Peer, PeerConfig,
    Position, RateLimit, Router, RpcError, Server, SlowPeer, Topics,
};
use metrics::{Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, SharedString, Unit};
use serde_json::json;

/// Keeps every metric by its name and sorted labels, `name{a=1,b=2}`.
#[derive(Default)]
struct Recorder {
    counters: Mutex<HashMap<String, Arc<AtomicU64>>>,
    gauges: Mutex<HashMap<String, Arc<AtomicU64>>>,
    histograms: Mutex<HashMap<String, Arc<Samples>>>,
}

#[derive(Default)]
struct Samples(Mutex<Vec<f64>>);

impl HistogramFn for Samples {
    fn record(&self, value: f64) {
        self.0.lock().unwrap().push(value);
    }
}

fn id(name: &str, labels: &[(&str, &str)]) -> String {
    let mut labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    labels.sort();
    format!("{name}{{{}}}", labels.join(","))
}

fn key_id(key: &Key) -> String {
    let labels: Vec<(&str, &str)> = key.labels().map(|l| (l.key(), l.value())).collect();
    id(key.name(), &labels)
}

impl metrics::Recorder for Recorder {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let mut counters = self.counters.lock().unwrap();
        Counter::from_arc(counters.entry(key_id(key)).or_default().clone())
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        let mut gauges = self.gauges.lock().unwrap();
        Gauge::from_arc(gauges.entry(key_id(key)).or_default().clone())
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        let mut histograms = self.histograms.lock().unwrap();
        Histogram::from_arc(histograms.entry(key_id(key)).or_default().clone())
    }
}

impl Recorder {
    fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        let counters = self.counters.lock().unwrap();
        counters
            .get(&id(name, labels))
            .map_or(0, |c| c.load(Ordering::SeqCst))
    }

    fn gauge(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let gauges = self.gauges.lock().unwrap();
        gauges
            .get(&id(name, labels))
            .map_or(0.0, |g| f64::from_bits(g.load(Ordering::SeqCst)))
    }

    fn samples(&self, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
        let histograms = self.histograms.lock().unwrap();
        histograms
            .get(&id(name, labels))
            .map(|h| h.0.lock().unwrap().clone())
            .unwrap_or_default()
    }
}

/// The recorder, installed once before any `Metrics` is made; and the lock that runs
/// these tests one at a time.
fn recorder() -> &'static Recorder {
    static RECORDER: OnceLock<&'static Recorder> = OnceLock::new();
    RECORDER.get_or_init(|| {
        let recorder: &'static Recorder = Box::leak(Box::default());
        metrics::set_global_recorder(recorder).expect("the only recorder");
        recorder
    })
}

/// One test at a time, each from a quiet `jsonrpc_connections_open`: the test before
/// gives the lock back as its client closes, while the server's end of its connection
/// is still closing (or its runtime shutting down, which counts it closed too).
async fn serial() -> tokio::sync::MutexGuard<'static, ()> {
    static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let guard = SERIAL.lock().await;
    until(
        "the connections of the test before are counted closed",
        || recorder().gauge(names::CONNECTIONS_OPEN, &[]) == 0.0,
    )
    .await;
    guard
}

/// Waits (at most the test's step) until `done` holds.
async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let wait = async {
        for _ in 0..2_000 {
            if done() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("never: {what}");
    };
    within(wait).await;
}

/// Runs `f` and returns how much the counter moved meanwhile.
async fn moved<T>(name: &str, labels: &[(&str, &str)], f: impl Future<Output = T>) -> (u64, T) {
    let before = recorder().counter(name, labels);
    let out = f.await;
    (recorder().counter(name, labels) - before, out)
}

fn config() -> PeerConfig {
    recorder();
    PeerConfig::default().layer(Metrics::new())
}

fn server_router() -> Router {
    Router::new()
        .method("m.add", |_cx: Context, [a, b]: [i64; 2]| async move {
            Ok::<_, RpcError>(a + b)
        })
        .method("m.fail", |_cx: Context, (): ()| async {
            Err::<(), _>(RpcError::new(-32050, "no"))
        })
        .method("m.slow", |_cx: Context, (): ()| async {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok::<_, RpcError>(())
        })
        .notification("m.note", |_cx: Context, _: [i64; 1]| async {})
}

fn m(method: &'static str, outcome: &'static str) -> [(&'static str, &'static str); 2] {
    [("method", method), ("outcome", outcome)]
}

/// `jsonrpc_calls_served_total`, `jsonrpc_calls_made_total`, their durations,
/// `jsonrpc_notifications_received_total` and `_sent_total`, `jsonrpc_batch_items`.
#[tokio::test]
async fn calls_notifications_and_batches_are_counted_both_ways() {
    let _serial = serial().await;
    let r = recorder();
    let (url, _handle) = serve_with(server_router(), config()).await;
    let peer = within(connect_with_config(&url, Router::new(), &config()))
        .await
        .unwrap();

    let served = names::CALLS_SERVED_TOTAL;
    let made = names::CALLS_MADE_TOTAL;
    let durations = |name| r.samples(name, &[("method", "m.add")]).len();
    let (before_served, before_made) = (
        durations(names::CALLS_SERVED_DURATION),
        durations(names::CALLS_MADE_DURATION),
    );
    let (n, sum) = moved(
        served,
        &m("m.add", "ok"),
        peer.call::<i64>("m.add", [1, 2]).into_future(),
    )
    .await;
    assert_eq!((n, sum.unwrap()), (1, 3));
    assert_eq!(r.counter(made, &m("m.add", "ok")), 1);
    assert_eq!(durations(names::CALLS_SERVED_DURATION), before_served + 1);
    assert_eq!(durations(names::CALLS_MADE_DURATION), before_made + 1);

    for (method, params, outcome) in [
        ("m.add", json!(["x"]), "invalid_params"),
        ("m.fail", json!([]), "error"),
    ] {
        let call = peer.call::<serde_json::Value>(method, params).into_future();
        let (n, _) = moved(served, &m(method, outcome), call).await;
        assert_eq!(n, 1, "{method} {outcome}");
        assert_eq!(r.counter(made, &m(method, outcome)), 1);
    }
    // A name the server does not know is `other` there, its own name here.
    let unknown = peer.call::<i64>("m.unknown", ()).into_future();
    let (n, _) = moved(served, &m("other", "method_not_found"), unknown).await;
    assert_eq!(n, 1);
    assert_eq!(r.counter(made, &m("m.unknown", "method_not_found")), 1);
    // A timeout here, a cancel there.
    let slow = peer
        .call::<()>("m.slow", ())
        .timeout(Duration::from_millis(50))
        .into_future();
    let (n, outcome) = moved(made, &m("m.slow", "timeout"), slow).await;
    assert!(matches!(outcome, Err(Error::Timeout { .. })));
    assert_eq!(n, 1);
    until("the call served is cancelled", || {
        r.counter(served, &m("m.slow", "cancelled")) == 1
    })
    .await;

    // Notifications, counted once handled (received) and once queued (sent).
    let note = peer.notify("m.note", [1]);
    let (n, _) = moved(names::NOTIFICATIONS_SENT_TOTAL, &m("m.note", "ok"), note).await;
    assert_eq!(n, 1);
    until("the notification is handled", || {
        r.counter(names::NOTIFICATIONS_RECEIVED_TOTAL, &m("m.note", "ok")) == 1
    })
    .await;

    // A batch of three, sent and received.
    let batch_sizes = |direction| r.samples(names::BATCH_ITEMS, &[("direction", direction)]);
    let (sent, received) = (batch_sizes("sent").len(), batch_sizes("received").len());
    let mut batch = peer.batch();
    batch.call("m.add", [1, 1]).unwrap();
    batch.call("m.add", [2, 2]).unwrap();
    batch.notify("m.note", [3]).unwrap();
    within(batch.send()).await.unwrap();
    assert_eq!(batch_sizes("sent")[sent..], [3.0]);
    assert_eq!(batch_sizes("received")[received..], [3.0]);
    assert_eq!(r.counter(served, &m("m.add", "ok")), 3);
    peer.close().await;
}

/// `jsonrpc_connections_open` and `jsonrpc_connections_total{outcome, status}`.
#[tokio::test]
async fn connections_are_counted_open_and_by_handshake_outcome() {
    let _serial = serial().await;
    let r = recorder();
    let server = Server::bind("127.0.0.1:0")
        .await
        .unwrap()
        .peer_config(config())
        .handshake_policy(HandshakePolicy::default().max_connections_per_address(Some(1)));
    let url = format!("ws://{}", server.local_addr().unwrap());
    let handle = server.handle();
    let mut gone = common::disconnections(&handle);
    tokio::spawn(server.serve(server_router()));
    let open = || r.gauge(names::CONNECTIONS_OPEN, &[]);
    let total = |outcome, status| {
        r.counter(
            names::CONNECTIONS_TOTAL,
            &[("outcome", outcome), ("status", status)],
        )
    };
    let (before, accepted, refused) = (open(), total("accepted", "101"), total("refused", "429"));

    let peer = within(connect_with_config(&url, Router::new(), &config()))
        .await
        .unwrap();
    // Both ends of it run here.
    until("both ends are open", || open() == before + 2.0).await;
    assert_eq!(total("accepted", "101"), accepted + 1);
    let second = within(connect_with_config(&url, Router::new(), &config())).await;
    assert!(matches!(second, Err(Error::Refused { .. })), "{second:?}");
    assert_eq!(total("refused", "429"), refused + 1);
    let upgrade = total("refused", "426");
    let plain = plain_get(&url).await;
    assert!(plain.starts_with("HTTP/1.1 426"), "{plain}");
    assert_eq!(total("refused", "426"), upgrade + 1);

    peer.close().await;
    within(gone.recv()).await.unwrap();
    until("both ends are closed", || open() == before).await;
}

/// A client in a runtime of its own (a blocking program's, or a test's) that is shut
/// down under its connection: `jsonrpc_connections_open` comes back to where it was,
/// as when the connection closes.
#[tokio::test]
async fn a_connection_whose_runtime_shuts_down_is_counted_closed() {
    let _serial = serial().await;
    let r = recorder();
    let (url, handle) = serve_with(server_router(), config()).await;
    let mut gone = common::disconnections(&handle);
    let open = || r.gauge(names::CONNECTIONS_OPEN, &[]);
    let before = open();

    let client_config = config();
    let client = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let peer = runtime
            .block_on(within(connect_with_config(
                &url,
                Router::new(),
                &client_config,
            )))
            .unwrap();
        // A round trip (to a name no other test counts), so that both ends run.
        let answer = runtime.block_on(within(peer.call::<i64>("m.absent", ())));
        let both = open();
        // The runtime goes with the connection's task in it; the server sees the end.
        drop(runtime);
        (answer.is_err(), both)
    });
    let (failed, both) = within(tokio::task::spawn_blocking(move || client.join().unwrap()))
        .await
        .unwrap();
    assert_eq!((failed, both), (true, before + 2.0));
    within(gone.recv()).await.unwrap();
    assert_eq!(open(), before, "connections counted open after both ended");
}

/// A node shut down while its bus is down, with broadcasts waiting in its outbox: they
/// will never go out, and `jsonrpc_cluster_outbox_bytes` comes back to where it was.
#[tokio::test]
async fn a_stopped_nodes_outbox_leaves_the_gauge() {
    let _serial = serial().await;
    let r = recorder();
    let _ = config();
    let outbox = || r.gauge(names::CLUSTER_OUTBOX_BYTES, &[]);
    let before = outbox();
    let hub = MemoryHub::new();
    let server = Server::bind("127.0.0.1:0").await.unwrap();
    let cluster = Cluster::builder(hub.backplane(), server.handle()).node_id("lone");
    let node = within(cluster.start()).await.unwrap();
    tokio::spawn(server.serve(Router::new()));

    hub.cut_all();
    let mut state = node.watch_state();
    within(state.wait_for(|s| *s == ClusterState::Down))
        .await
        .unwrap();
    node.handle()
        .broadcast("news", &["kept for the bus"])
        .unwrap();
    assert!(outbox() > before, "the broadcast waits in the outbox");

    within(node.shutdown()).await;
    assert_eq!(node.state(), ClusterState::Stopped);
    // Its tasks end; with the last handle, the outbox goes.
    drop(node);
    until("the stopped node's outbox is counted out", || {
        outbox() == before
    })
    .await;
}

/// An axum endpoint's handshake whose upgrade fails after the 101 (the client reset the
/// connection at once) is counted once, as `gone`, not also as `accepted`.
#[cfg(feature = "axum")]
#[tokio::test]
async fn an_axum_handshake_that_fails_after_its_101_is_counted_once() {
    use tokio::io::AsyncWriteExt;

    let _serial = serial().await;
    let r = recorder();
    let endpoint = jsonrpc_peer::axum::Endpoint::new(Router::new())
        .peer_config(config())
        .handshake_policy(HandshakePolicy::default().handshake_timeout(Duration::from_secs(5)));
    let app = axum::Router::new().route("/rpc", endpoint.into_route());
    let addr = common::serve_axum(app).await;
    let total = |outcome, status| {
        r.counter(
            names::CONNECTIONS_TOTAL,
            &[("outcome", outcome), ("status", status)],
        )
    };
    let (accepted, gone) = (total("accepted", "101"), total("gone", "none"));
    let mut tcp = within(tokio::net::TcpStream::connect(addr)).await.unwrap();
    let request = "GET /rpc HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
        Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n";
    within(tcp.write_all(request.as_bytes())).await.unwrap();
    // A linger of zero resets the connection when it is dropped (the point here); it
    // does not block, which is what the deprecation warns of.
    #[allow(deprecated)]
    tcp.set_linger(Some(Duration::ZERO)).unwrap();
    drop(tcp);
    until("the upgrade failed", || total("gone", "none") == gone + 1).await;
    assert_eq!(
        total("accepted", "101"),
        accepted,
        "counted as accepted too"
    );
}

/// A GET without the upgrade, answered 426; returns the response's head.
async fn plain_get(url: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = url.trim_start_matches("ws://");
    let mut tcp = within(tokio::net::TcpStream::connect(addr)).await.unwrap();
    tcp.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    within(tcp.read_to_end(&mut answer)).await.unwrap();
    String::from_utf8_lossy(&answer).into_owned()
}

/// A peer over an in-memory pair whose other end reads nothing (one frame fits in
/// it): what it sends waits in its outgoing queue.
fn stuck_peer(config: PeerConfig) -> (Peer, jsonrpc_peer::transport::Memory) {
    let (end, other) = jsonrpc_peer::transport::pair_with_capacity(1);
    (Peer::start(end, Router::new(), &config), other)
}

/// `jsonrpc_outgoing_queue_bytes`, `jsonrpc_slow_peers_total{action}` and
/// `jsonrpc_cancels_total{event}`.
#[tokio::test]
async fn queued_bytes_slow_peers_and_cancels_are_counted() {
    let _serial = serial().await;
    let r = recorder();
    let queued = || r.gauge(names::OUTGOING_QUEUE_BYTES, &[]);
    let before = queued();

    // Three notifications of 100 bytes of payload: one in the pair, two queued.
    let dropping = config().outgoing_queue(8).slow_peer(SlowPeer::Drop);
    let (peer, _other) = stuck_peer(dropping);
    let text = "x".repeat(100);
    for _ in 0..3 {
        within(peer.notify("fill", [&text])).await.unwrap();
    }
    until("two frames wait", || queued() - before >= 2.0 * 100.0).await;
    assert_eq!(queued() - before, peer.queued_bytes() as f64);

    // A push to a full queue: dropped (this config), or the peer closed (default).
    let topics = Topics::new();
    topics.subscribe(&peer, "t");
    let drops = r.counter(names::SLOW_PEERS_TOTAL, &[("action", "drop")]);
    for _ in 0..8 {
        within(topics.publish("t", &[1])).await.unwrap();
    }
    assert!(r.counter(names::SLOW_PEERS_TOTAL, &[("action", "drop")]) > drops);
    let closes = r.counter(names::SLOW_PEERS_TOTAL, &[("action", "close")]);
    let (closing, _other2) = stuck_peer(config_close());
    topics.subscribe(&closing, "t");
    for _ in 0..16 {
        within(topics.publish("t", &[1])).await.unwrap();
    }
    assert_eq!(
        r.counter(names::SLOW_PEERS_TOTAL, &[("action", "close")]),
        closes + 1
    );
    within(closing.closed()).await;

    // A call given up: its cancel would go to a full queue, so it is skipped.
    let cancels = |event| r.counter(names::CANCELS_TOTAL, &[("event", event)]);
    let skipped = cancels("skipped");
    let call = peer
        .call::<()>("never", ())
        .timeout(Duration::from_millis(20))
        .into_future();
    assert!(within(call).await.is_err());
    assert_eq!(cancels("skipped"), skipped + 1);

    // Closed, its queue's bytes leave the count.
    peer.close_with(1000, "").await;
    until("the queue is gone", || queued() == before).await;

    // A cancel sent here is a cancel received there.
    let (url, _handle) = serve_with(server_router(), config()).await;
    let peer = within(connect_with_config(&url, Router::new(), &config()))
        .await
        .unwrap();
    let (sent, received) = (cancels("sent"), cancels("received"));
    let slow = peer
        .call::<()>("m.slow", ())
        .timeout(Duration::from_millis(20))
        .into_future();
    assert!(within(slow).await.is_err());
    assert_eq!(cancels("sent"), sent + 1);
    until("the cancel arrives", || cancels("received") == received + 1).await;
    peer.close().await;
}

fn config_close() -> PeerConfig {
    config().outgoing_queue(8)
}

/// `jsonrpc_topic_publishes_total`, `_deliveries_total`, `_replays_total`.
#[tokio::test]
async fn topic_publishes_deliveries_and_replays_are_counted() {
    let _serial = serial().await;
    let r = recorder();
    let (url, _handle) = serve_with(server_router(), config()).await;
    let topics = Topics::new();
    topics.keep_history("kept", HistoryConfig::default());
    let (a, b) = (
        within(connect_with_config(&url, Router::new(), &config()))
            .await
            .unwrap(),
        within(connect_with_config(&url, Router::new(), &config()))
            .await
            .unwrap(),
    );
    topics.subscribe(&a, "plain");
    topics.subscribe(&b, "plain");
    let (publishes, deliveries) = (
        r.counter(names::TOPIC_PUBLISHES_TOTAL, &[]),
        r.counter(names::TOPIC_DELIVERIES_TOTAL, &[]),
    );
    within(topics.publish("plain", &[1])).await.unwrap();
    assert_eq!(r.counter(names::TOPIC_PUBLISHES_TOTAL, &[]), publishes + 1);
    assert_eq!(
        r.counter(names::TOPIC_DELIVERIES_TOTAL, &[]),
        deliveries + 2
    );

    for i in 0..3 {
        within(topics.publish("kept", &[i])).await.unwrap();
    }
    let epoch = topics.position("kept").unwrap().epoch;
    let replays = r.counter(names::TOPIC_REPLAYS_TOTAL, &[]);
    let from = Position { epoch, offset: 0 };
    within(topics.subscribe_from(&a, "kept", Some(from)))
        .await
        .unwrap();
    assert_eq!(r.counter(names::TOPIC_REPLAYS_TOTAL, &[]), replays + 3);
    a.close().await;
    b.close().await;
}

/// Calls past the rate limit are `rate_limited`; the close for abuse is
/// `jsonrpc_rate_limit_closes_total`.
#[tokio::test]
async fn rate_limited_calls_and_closes_are_counted() {
    let _serial = serial().await;
    let r = recorder();
    let limit = RateLimit::per_second(1).burst(1).close_after(Some(3));
    let (url, _handle) = serve_with(server_router(), config().rate_limit(Some(limit))).await;
    let closes = r.counter(names::RATE_LIMIT_CLOSES_TOTAL, &[]);
    let limited = r.counter(names::CALLS_SERVED_TOTAL, &m("m.add", "rate_limited"));
    let mut client = RawClient::connect(&url).await;
    let items: Vec<String> = (0..6)
        .map(|id| format!(r#"{{"jsonrpc":"2.0","method":"m.add","params":[1,2],"id":{id}}}"#))
        .collect();
    client.send(&format!("[{}]", items.join(","))).await;
    let answers = client.recv_json().await;
    let refused = answers
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["error"]["code"] == -32005)
        .count();
    assert!(refused >= 4, "{answers}");
    assert_eq!(
        r.counter(names::CALLS_SERVED_TOTAL, &m("m.add", "rate_limited")),
        limited + refused as u64
    );
    assert_eq!(r.counter(names::RATE_LIMIT_CLOSES_TOTAL, &[]), closes + 1);
    assert!(client.recv_text().await.is_none(), "closed");
}

/// `jsonrpc_cluster_outbox_bytes`, `_outbox_dropped_total`, `_gaps_total`,
/// `_bus_up` and `_nodes`.
#[tokio::test]
async fn a_clusters_bus_outbox_gaps_and_nodes_are_counted() {
    let _serial = serial().await;
    let r = recorder();
    // The engine's own metrics (the cluster's among them) are on from the first
    // `Metrics::new`; no connection here needs the layer itself.
    let _ = config();
    let hub = MemoryHub::new();
    let node = |name: &'static str| {
        let hub = &hub;
        async move {
            let server = Server::bind("127.0.0.1:0").await.unwrap();
            let cluster = Cluster::builder(hub.backplane(), server.handle())
                .node_id(name)
                .heartbeat_interval(Duration::from_millis(50))
                .outbox_limit(2048);
            (within(cluster.start()).await.unwrap(), server)
        }
    };
    let (a, a_server) = node("a").await;
    let (b, b_server) = node("b").await;
    tokio::spawn(a_server.serve(Router::new()));
    tokio::spawn(b_server.serve(Router::new()));
    until("each node sees two", || {
        r.gauge(names::CLUSTER_NODES, &[]) == 2.0 && a.nodes().len() == 2 && b.nodes().len() == 2
    })
    .await;
    assert_eq!(r.gauge(names::CLUSTER_BUS_UP, &[]), 1.0);

    let outbox = || r.gauge(names::CLUSTER_OUTBOX_BYTES, &[]);
    let (before, dropped, gaps) = (
        outbox(),
        r.counter(names::CLUSTER_OUTBOX_DROPPED_TOTAL, &[]),
        r.counter(names::CLUSTER_GAPS_TOTAL, &[]),
    );
    hub.cut_all();
    for n in [&a, &b] {
        let mut state = n.watch_state();
        within(state.wait_for(|s| *s == ClusterState::Down))
            .await
            .unwrap();
    }
    assert_eq!(r.gauge(names::CLUSTER_BUS_UP, &[]), 0.0);
    // Broadcasts wait in the outbox while the bus is down; past its 2 KiB the new ones
    // are refused (and reach no one), each counted.
    let filler = "x".repeat(100);
    a.handle().broadcast("news", &[&filler]).unwrap();
    assert!(outbox() > before, "{} bytes", outbox() - before);
    let mut refused = 0u64;
    for _ in 0..40 {
        match a.handle().broadcast("news", &[&filler]) {
            Ok(_) => {}
            Err(Error::Cluster(ClusterError::Overloaded(_))) => refused += 1,
            Err(other) => panic!("{other:?}"),
        }
    }
    assert!(
        refused > 0,
        "2 KiB hold fewer than 41 broadcasts of 100 bytes"
    );
    assert!(outbox() - before <= 2048.0);
    assert!(r.counter(names::CLUSTER_OUTBOX_DROPPED_TOTAL, &[]) >= dropped + refused);
    hub.restore_all();
    for n in [&a, &b] {
        let mut state = n.watch_state();
        within(state.wait_for(|s| *s == ClusterState::Up))
            .await
            .unwrap();
    }
    until("the outbox is flushed", || outbox() == before).await;
    assert_eq!(r.gauge(names::CLUSTER_BUS_UP, &[]), 1.0);
    assert!(
        r.counter(names::CLUSTER_GAPS_TOTAL, &[]) > gaps,
        "the outage is a gap"
    );
    a.shutdown().await;
    b.shutdown().await;
}

//! A cluster of three nodes in one process on the in-memory bus: real servers on
//! 127.0.0.1:0, real clients, faults injected into the bus.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::within;
use jsonrpc_peer::cluster::{
    Backplane, BackplaneError, BusEvent, Cluster, ClusterError, ClusterState, Gap, MemoryBackplane,
    MemoryHub, PeerAddr,
};
use jsonrpc_peer::{
    connect, Caller, Context, Error, ErrorCode, Peer, PeerConfig, Router, RpcError, Server,
};
use serde_json::{json, Value};
use tokio::sync::mpsc;

/// What a client received: (client, method, params).
type Seen = (usize, String, Value);

struct Node {
    cluster: Cluster,
    bus: MemoryBackplane,
    url: String,
    gaps: Arc<Mutex<Vec<Gap>>>,
}

struct Setup {
    heartbeat: Duration,
    /// Silent intervals before a node is dropped; with `heartbeat`, also how long the
    /// flush after an outage waits for the nodes live before it.
    missed: u32,
    outbox_limit: usize,
    /// Calls from other nodes each node runs at once.
    max_remote_calls: usize,
    /// Each server's peers' settings.
    peers: PeerConfig,
}

impl Default for Setup {
    fn default() -> Self {
        Setup {
            heartbeat: Duration::from_millis(100),
            missed: 3,
            outbox_limit: 8 << 20,
            max_remote_calls: 1024,
            peers: PeerConfig::default(),
        }
    }
}

async fn node(hub: &MemoryHub, name: &str, setup: &Setup) -> Node {
    let server = Server::bind("127.0.0.1:0")
        .await
        .unwrap()
        .peer_config(setup.peers.clone());
    let url = format!("ws://{}", server.local_addr().unwrap());
    let bus = hub.backplane();
    let gaps = Arc::new(Mutex::new(Vec::new()));
    let cluster = within(
        Cluster::builder(bus.clone(), server.handle())
            .node_id(name)
            .heartbeat_interval(setup.heartbeat)
            .missed_heartbeats(setup.missed)
            .outbox_limit(setup.outbox_limit)
            .max_remote_calls(setup.max_remote_calls)
            .gap_notification("$/gap")
            .on_gap({
                let gaps = gaps.clone();
                move |gap| gaps.lock().unwrap().push(gap.clone())
            })
            .start(),
    )
    .await
    .unwrap();
    let router = Router::with_state(cluster.clone())
        .method("whoami", |cx: Context<Cluster>, (): ()| async move {
            Ok::<_, RpcError>(cx.state().addr(cx.peer()).to_string())
        })
        .method(
            "subscribe",
            |cx: Context<Cluster>, (topic,): (String,)| async move {
                let topics = cx.state().topics();
                topics
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
    Node {
        cluster,
        bus,
        url,
        gaps,
    }
}

/// Three nodes a, b, c that all see each other.
async fn three(hub: &MemoryHub, setup: &Setup) -> [Node; 3] {
    let nodes = [
        node(hub, "a", setup).await,
        node(hub, "b", setup).await,
        node(hub, "c", setup).await,
    ];
    for n in &nodes {
        all_live(n, 3).await;
    }
    nodes
}

async fn all_live(node: &Node, count: usize) {
    let mut nodes = node.cluster.watch_nodes();
    within(nodes.wait_for(|n| n.len() == count)).await.unwrap();
}

/// A client that forwards every notification it knows to `tx`, and serves a few
/// methods for calls from the server side.
async fn client(url: &str, me: usize, tx: &mpsc::UnboundedSender<Seen>) -> (Peer, PeerAddr) {
    let mut router = Router::new()
        .method("describe", move |_cx: Context, (): ()| async move {
            Ok::<_, RpcError>(json!({ "client": me }))
        })
        .method("double", |_cx: Context, (n,): (i64,)| async move {
            Ok::<_, RpcError>(n * 2)
        })
        // `slow [ms, tag]` answers `tag` after `ms`; its start is seen as `slow`.
        .method("slow", {
            let tx = tx.clone();
            move |_cx: Context, (ms, tag): (u64, String)| {
                let _ = tx.send((me, "slow".into(), Value::String(tag.clone())));
                async move {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    Ok::<_, RpcError>(tag)
                }
            }
        })
        .method("hang", {
            let tx = tx.clone();
            move |_cx: Context, (): ()| {
                let _ = tx.send((me, "hanging".into(), Value::Null));
                async move {
                    tokio::time::sleep(Duration::from_secs(60)).await;
                    Ok::<_, RpcError>(0)
                }
            }
        });
    for method in ["tick", "news", "feed", "prices", "$/gap", "done", "toast"] {
        let tx = tx.clone();
        router = router.notification(method, move |_cx: Context, params: Value| {
            let _ = tx.send((me, method.to_owned(), params));
            async {}
        });
    }
    let peer = within(connect(url, router)).await.unwrap();
    // Answered by a handler, so the server has registered this peer.
    let addr: String = within(peer.call("whoami", ())).await.unwrap();
    (peer, addr.parse().unwrap())
}

/// Receives until every one of `clients` got `done`; returns what each got before it.
async fn until_done(
    rx: &mut mpsc::UnboundedReceiver<Seen>,
    clients: &[usize],
) -> HashMap<usize, Vec<(String, Value)>> {
    let mut got: HashMap<usize, Vec<(String, Value)>> = HashMap::new();
    let mut done = 0;
    while done < clients.len() {
        let (who, method, params) = within(rx.recv()).await.unwrap();
        if method == "done" {
            done += 1;
        } else {
            got.entry(who).or_default().push((method, params));
        }
    }
    got
}

/// Waits (at most 5 s) until `n` links are subscribed to `channel`: the subscriptions
/// task follows a topic's subscribers on its own time.
async fn until_subscribers(hub: &MemoryHub, channel: &str, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while hub.subscribers(channel) != n {
        assert!(
            Instant::now() < deadline,
            "{channel}: not {n} subscribed links"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Waits until `cluster`'s outbox is empty: what it took is on the bus.
async fn flushed(cluster: &Cluster) {
    assert!(
        cluster.flushed(Duration::from_secs(10)).await,
        "the outbox never emptied"
    );
}

fn numbers(seen: &[(String, Value)], method: &str) -> Vec<u64> {
    seen.iter()
        .filter(|(m, _)| m == method)
        .map(|(_, p)| p[0].as_u64().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_broadcasts_reach_every_client_on_every_node_once_in_order() {
    let hub = MemoryHub::new();
    let nodes = three(&hub, &Setup::default()).await;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut clients = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        for j in 0..2 {
            clients.push(client(&n.url, i * 10 + j, &tx).await);
        }
    }
    let a = nodes[0].cluster.handle();
    for i in 0..1000u64 {
        assert_eq!(a.broadcast("tick", &[i]).unwrap(), 2, "a's own two clients");
    }
    a.broadcast("done", &()).unwrap();
    let ids = [0, 1, 10, 11, 20, 21];
    let got = until_done(&mut rx, &ids).await;
    for id in ids {
        let ticks = numbers(&got[&id], "tick");
        assert_eq!(ticks, (0..1000).collect::<Vec<_>>(), "client {id}");
    }
    for n in &nodes {
        assert_eq!(n.cluster.stats().gaps, 0);
    }
}

/// A burst on a slow bus goes out in packs of hundreds of envelopes (two topics
/// interleaved, then broadcasts in a row): every client gets every message once, in
/// each channel's order, the closing broadcast after all of them, and no node sees a
/// gap. (The clients' queues hold the whole burst: a client that cannot keep up with
/// one is a slow peer, which is not what this test is about.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_sent_in_packs_reaches_every_client_once_in_order() {
    let hub = MemoryHub::new();
    let setup = Setup {
        peers: PeerConfig::default()
            .outgoing_queue(100_000)
            .outgoing_queue_bytes(64 << 20),
        ..Setup::default()
    };
    let nodes = three(&hub, &setup).await;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (on_b, _) = client(&nodes[1].url, 1, &tx).await;
    for topic in ["news", "feed"] {
        let _: bool = within(on_b.call("subscribe", [topic])).await.unwrap();
    }
    let (_on_c, _) = client(&nodes[2].url, 2, &tx).await;
    let a = &nodes[0].cluster;
    let topics = a.topics();
    // A bus round trip of 1 ms: the burst waits in the outbox meanwhile and goes out
    // in batches of hundreds, each channel's packed.
    nodes[0].bus.set_delay(Duration::from_millis(1));
    const N: u64 = 10_000;
    for i in 0..N {
        within(topics.publish("news", &[i])).await.unwrap();
        within(topics.publish("feed", &[i])).await.unwrap();
    }
    for i in 0..N {
        a.handle().broadcast("tick", &[i]).unwrap();
    }
    a.handle().broadcast("done", &()).unwrap();
    let got = until_done(&mut rx, &[1, 2]).await;
    let all: Vec<u64> = (0..N).collect();
    // Compared as booleans: a failure prints counts, not 10,000 numbers.
    for (who, method) in [(1, "news"), (1, "feed"), (1, "tick"), (2, "tick")] {
        let seen = numbers(&got[&who], method);
        assert!(
            seen == all,
            "client {who}, {method}: {} of {N}, first out of place at {:?}",
            seen.len(),
            seen.iter().zip(&all).position(|(a, b)| a != b)
        );
    }
    for n in &nodes {
        assert_eq!(n.cluster.stats().gaps, 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_goes_only_to_the_nodes_with_subscribers() {
    let hub = MemoryHub::new();
    let [a, b, c] = three(&hub, &Setup::default()).await;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (_on_a, _) = client(&a.url, 0, &tx).await;
    let (on_b, _) = client(&b.url, 1, &tx).await;
    let (on_c, _) = client(&c.url, 2, &tx).await;
    for p in [&on_b, &on_c] {
        let added: bool = within(p.call("subscribe", ["prices"])).await.unwrap();
        assert!(added);
    }
    assert_eq!(
        hub.subscribers("jp:t:{prices}"),
        2,
        "b and c listen, a does not"
    );
    let topics = a.cluster.topics();
    for i in 0..20u64 {
        assert_eq!(
            topics.publish("prices", &[i]).await.unwrap().delivered,
            0,
            "no subscriber on a"
        );
    }
    a.cluster.handle().broadcast("done", &()).unwrap();
    let got = until_done(&mut rx, &[0, 1, 2]).await;
    assert!(
        !got.contains_key(&0),
        "a's client is not subscribed: {got:?}"
    );
    for id in [1, 2] {
        assert_eq!(numbers(&got[&id], "prices"), (0..20).collect::<Vec<_>>());
    }

    // The last subscriber on c leaves: c stops listening, b keeps on.
    let removed: bool = within(on_c.call("unsubscribe", ["prices"])).await.unwrap();
    assert!(removed);
    until_subscribers(&hub, "jp:t:{prices}", 1).await;
    topics.publish("prices", &[99]).await.unwrap();
    a.cluster.handle().broadcast("done", &()).unwrap();
    let got = until_done(&mut rx, &[0, 1, 2]).await;
    assert_eq!(numbers(&got[&1], "prices"), [99]);
    assert!(!got.contains_key(&2));
}

/// A publish the bus refuses for good (a Redis ACL that does not allow the channel)
/// is given up and counted, not sent again for ever: what the outbox holds behind it,
/// broadcasts and heartbeats, goes out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_the_bus_refuses_for_good_is_given_up_and_holds_nothing_behind_it() {
    let hub = MemoryHub::new();
    let [a, b, _c] = three(&hub, &Setup::default()).await;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (on_b, _) = client(&b.url, 1, &tx).await;
    let added: bool = within(on_b.call("subscribe", ["prices"])).await.unwrap();
    assert!(added);
    until_subscribers(&hub, "jp:t:{prices}", 1).await;
    a.bus.refuse(&["jp:t:{prices}"]);
    // Taken by the outbox: Ok.
    a.cluster.topics().publish("prices", &[1]).await.unwrap();
    a.cluster.handle().broadcast("done", &()).unwrap();
    let got = until_done(&mut rx, &[1]).await;
    assert!(!got.contains_key(&1), "{got:?}");
    flushed(&a.cluster).await;
    assert_eq!(a.cluster.stats().bus_refused, 1);
}

/// `broadcast_local` reaches this node's peers only, where `broadcast` reaches every
/// node's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_broadcast_stays_on_its_node() {
    let hub = MemoryHub::new();
    let [a, b, _c] = three(&hub, &Setup::default()).await;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (_on_a, _) = client(&a.url, 0, &tx).await;
    let (_on_b, _) = client(&b.url, 1, &tx).await;
    assert_eq!(a.cluster.handle().broadcast_local("tick", &[1]).unwrap(), 1);
    a.cluster.handle().broadcast("done", &()).unwrap();
    let got = until_done(&mut rx, &[0, 1]).await;
    assert_eq!(numbers(&got[&0], "tick"), [1]);
    assert!(!got.contains_key(&1), "{got:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_publishers_on_one_topic_each_keep_their_order() {
    let hub = MemoryHub::new();
    let [a, b, c] = three(&hub, &Setup::default()).await;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut subscribers = Vec::new();
    for (i, n) in [&a, &b, &c].iter().enumerate() {
        let (p, _) = client(&n.url, i, &tx).await;
        let _: bool = within(p.call("subscribe", ["feed"])).await.unwrap();
        subscribers.push(p);
    }
    let publish = |n: &Node, origin: u64| {
        let topics = n.cluster.topics();
        tokio::spawn(async move {
            for i in 0..500u64 {
                topics.publish("feed", &[origin, i]).await.unwrap();
                if i % 50 == 0 {
                    tokio::task::yield_now().await;
                }
            }
        })
    };
    let (pa, pb) = (publish(&a, 0), publish(&b, 1));
    within(pa).await.unwrap();
    within(pb).await.unwrap();
    let mut got: HashMap<usize, [Vec<u64>; 2]> = HashMap::new();
    for _ in 0..3 * 1000 {
        let (who, method, p) = within(rx.recv()).await.unwrap();
        assert_eq!(method, "feed");
        let origin = p[0].as_u64().unwrap() as usize;
        got.entry(who).or_default()[origin].push(p[1].as_u64().unwrap());
    }
    for who in 0..3 {
        for (origin, seen) in got[&who].iter().enumerate() {
            assert_eq!(
                *seen,
                (0..500).collect::<Vec<_>>(),
                "client {who}, publisher {origin}"
            );
        }
    }
}

/// A heartbeat interval of `Duration::MAX` ("as seldom as can be", with as many beats
/// missed as a `u32` holds) is a cluster that announces itself once and never drops a
/// node for silence; not a panic in `start` (its windows overflowed the clock).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_heartbeat_of_duration_max_starts_and_serves() {
    let hub = MemoryHub::new();
    let setup = Setup {
        heartbeat: Duration::MAX,
        missed: u32::MAX,
        ..Setup::default()
    };
    let a = node(&hub, "a", &setup).await;
    let c = node(&hub, "c", &setup).await;
    all_live(&a, 2).await;
    let (tx, _rx) = mpsc::unbounded_channel();
    let (_peer, addr) = client(&c.url, 7, &tx).await;
    let doubled: i64 = within(a.cluster.peer(&addr).call("double", [21]))
        .await
        .unwrap();
    assert_eq!(doubled, 42);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_on_another_node_is_called_and_notified_by_address() {
    let hub = MemoryHub::new();
    let [a, _b, c] = three(&hub, &Setup::default()).await;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (_peer, addr) = client(&c.url, 7, &tx).await;
    assert_eq!(addr.node, "c");

    let described: Value = within(a.cluster.peer(&addr).call("describe", ()))
        .await
        .unwrap();
    assert_eq!(described, json!({ "client": 7 }));
    let doubled: i64 = within(a.cluster.peer(&addr).call("double", [21]))
        .await
        .unwrap();
    assert_eq!(doubled, 42);

    // The peer's own error comes back as it would from a local call.
    let err = within(a.cluster.peer(&addr).call::<i64>("double", ["x"]))
        .await
        .unwrap_err();
    assert_eq!(err.rpc().map(|e| e.code), Some(ErrorCode::INVALID_PARAMS));
    let local = within(c.cluster.peer(&addr).call::<i64>("double", ["x"]))
        .await
        .unwrap_err();
    assert_eq!(err.rpc(), local.rpc(), "remote and local errors agree");
    let err = within(a.cluster.peer(&addr).call::<i64>("nope", ()))
        .await
        .unwrap_err();
    assert_eq!(err.rpc().map(|e| e.code), Some(ErrorCode::METHOD_NOT_FOUND));

    // A peer the node does not have.
    let unknown = PeerAddr {
        node: "c".into(),
        peer: 999_999,
    };
    let started = Instant::now();
    let err = within(a.cluster.peer(&unknown).call::<Value>("describe", ()))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Cluster(ClusterError::NoSuchPeer(ref p)) if *p == unknown),
        "{err:?}"
    );
    // At once: not after the call timeout (30 s). The bound leaves room for a busy
    // machine.
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    // A node that does not exist fails at once.
    let nowhere: PeerAddr = "zz/1".parse().unwrap();
    let err = a
        .cluster
        .peer(&nowhere)
        .call::<Value>("describe", ())
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Cluster(ClusterError::NodeDown(_))),
        "{err:?}"
    );

    // The call's own timeout holds across nodes.
    let err = within(
        a.cluster
            .peer(&addr)
            .call::<jsonrpc_peer::Reply>("hang", ())
            .timeout(Duration::from_millis(200)),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err:?}");

    let (_, method, _) = within(rx.recv()).await.unwrap();
    assert_eq!(method, "hanging", "the timed-out call did reach the client");
    within(a.cluster.peer(&addr).notify("toast", ["hi"]))
        .await
        .unwrap();
    let (who, method, params) = within(rx.recv()).await.unwrap();
    assert_eq!((who, method.as_str(), params), (7, "toast", json!(["hi"])));
}

/// Calls from other nodes to this node's peers are bounded: past
/// `max_remote_calls` running at once, one more is refused at once with
/// `ClusterError::Remote`, and never reaches the peer; the one running is not disturbed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_from_other_nodes_past_max_remote_calls_are_refused_at_once() {
    let hub = MemoryHub::new();
    let setup = Setup {
        max_remote_calls: 1,
        ..Setup::default()
    };
    let a = node(&hub, "a", &setup).await;
    let c = node(&hub, "c", &setup).await;
    all_live(&a, 2).await;
    all_live(&c, 2).await;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (_peer, addr) = client(&c.url, 0, &tx).await;
    let running = {
        let cluster = a.cluster.clone();
        let addr = addr.clone();
        tokio::spawn(async move {
            cluster
                .peer(&addr)
                .call::<String>("slow", (500, "first"))
                .await
        })
    };
    // The first runs on c's client, holding c's one place.
    let (_, method, tag) = within(rx.recv()).await.unwrap();
    assert_eq!((method.as_str(), tag), ("slow", json!("first")));
    let started = Instant::now();
    let err = within(a.cluster.peer(&addr).call::<String>("slow", (0, "second")))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Cluster(ClusterError::Remote(ref m)) if m.contains("too many calls")),
        "{err:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "at once, not at the call timeout: {:?}",
        started.elapsed()
    );
    assert_eq!(within(running).await.unwrap().unwrap(), "first");
    assert!(
        rx.try_recv().is_err(),
        "the refused call never reached the peer"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_dies_mid_call_fails_the_call_within_its_heartbeat_window() {
    let hub = MemoryHub::new();
    let setup = Setup::default(); // 100 ms heartbeats, dead after 3 silent ones
    let [a, _b, c] = three(&hub, &setup).await;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (_peer, addr) = client(&c.url, 0, &tx).await;
    let call = {
        let cluster = a.cluster.clone();
        let addr = addr.clone();
        tokio::spawn(async move {
            cluster
                .peer(&addr)
                .call::<jsonrpc_peer::Reply>("hang", ())
                .timeout(Duration::from_secs(30))
                .await
        })
    };
    // The call is running on c's client before c dies.
    let (_, method, _) = within(rx.recv()).await.unwrap();
    assert_eq!(method, "hanging");
    let died = Instant::now();
    c.bus.cut(); // c vanishes from the bus without a goodbye
    let err = within(call).await.unwrap().unwrap_err();
    let took = died.elapsed();
    assert!(
        matches!(err, Error::Cluster(ClusterError::NodeDown(ref n)) if n == "c"),
        "{err:?}"
    );
    assert!(
        took >= Duration::from_millis(200),
        "not before c went silent: {took:?}"
    );
    assert!(
        took < Duration::from_secs(2),
        "within the window, not the 30 s timeout: {took:?}"
    );
    assert_eq!(a.cluster.nodes(), ["a", "b"]);
    // Calls to it now fail at once.
    let err = a
        .cluster
        .peer(&addr)
        .call::<Value>("describe", ())
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Cluster(ClusterError::NodeDown(_))),
        "{err:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_counts_converge_and_drop_by_goodbye_or_silence() {
    let hub = MemoryHub::new();
    let [a, b, c] = three(&hub, &Setup::default()).await;
    let (tx, _rx) = mpsc::unbounded_channel();
    let mut clients = Vec::new();
    for (n, count) in [(&a, 2), (&b, 1), (&c, 3)] {
        for i in 0..count {
            clients.push(client(&n.url, i, &tx).await);
        }
    }
    for n in [&a, &b, &c] {
        wait_count(&n.cluster, 6).await;
    }
    // A goodbye drops b's count at once, well before its heartbeat window.
    let mut nodes = a.cluster.watch_nodes();
    b.cluster.shutdown().await;
    within(nodes.wait_for(|n| n.len() == 2)).await.unwrap();
    assert_eq!(a.cluster.connection_count(), 5);
    assert_eq!(b.cluster.state(), ClusterState::Stopped);
    // Silence drops c after a few intervals.
    let cut = Instant::now();
    c.bus.cut();
    within(nodes.wait_for(|n| n.len() == 1)).await.unwrap();
    assert!(
        cut.elapsed() >= Duration::from_millis(200),
        "{:?}",
        cut.elapsed()
    );
    assert_eq!(a.cluster.connection_count(), 2);
}

/// Waits until `cluster` counts `n` connections in all (they come with heartbeats).
async fn wait_count(cluster: &Cluster, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while cluster.connection_count() != n {
        assert!(
            Instant::now() < deadline,
            "{} counts {}, not {n}",
            cluster.node_id(),
            cluster.connection_count()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bus_outage_keeps_local_delivery_flushes_without_duplicates_and_reports_one_gap() {
    let hub = MemoryHub::new();
    let [a, b, c] = three(&hub, &Setup::default()).await;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut subscribers = Vec::new();
    for (i, n) in [&a, &b, &c].iter().enumerate() {
        let (p, addr) = client(&n.url, i, &tx).await;
        let _: bool = within(p.call("subscribe", ["news"])).await.unwrap();
        subscribers.push((p, addr));
    }
    let topics = a.cluster.topics();
    topics.publish("news", &[0]).await.unwrap();
    for _ in 0..3 {
        let (_, method, p) = within(rx.recv()).await.unwrap();
        assert_eq!((method.as_str(), p), ("news", json!([0])));
    }

    hub.cut_all();
    for n in [&a, &b, &c] {
        let mut state = n.cluster.watch_state();
        within(state.wait_for(|s| *s == ClusterState::Down))
            .await
            .unwrap();
    }
    // Local delivery goes on; the rest waits in a's outbox.
    for i in 1..50u64 {
        assert_eq!(topics.publish("news", &[i]).await.unwrap().delivered, 1);
    }
    assert!(
        a.cluster.stats().outbox_len >= 49,
        "{:?}",
        a.cluster.stats()
    );
    // Calls to other nodes fail at once.
    let started = Instant::now();
    let err = a
        .cluster
        .peer(&subscribers[1].1)
        .call::<Value>("describe", ())
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Cluster(ClusterError::Unavailable(_))),
        "{err:?}"
    );
    // At once: not after the call timeout (30 s).
    assert!(started.elapsed() < Duration::from_secs(1));
    let mut local = Vec::new();
    while local.len() < 49 {
        let (who, method, p) = within(rx.recv()).await.unwrap();
        assert_eq!(
            (who, method.as_str()),
            (0, "news"),
            "only a's client, during the cut"
        );
        local.push(p[0].as_u64().unwrap());
    }
    assert_eq!(local, (1..50).collect::<Vec<_>>());

    // The answers to a's first publishes after the outage get lost: it sends them
    // again, and the others must drop the copies.
    a.bus.lose_acks(3);
    hub.restore_all();
    for n in [&a, &b, &c] {
        let mut state = n.cluster.watch_state();
        within(state.wait_for(|s| *s == ClusterState::Up))
            .await
            .unwrap();
        all_live(n, 3).await;
    }
    for i in 50..60u64 {
        topics.publish("news", &[i]).await.unwrap();
    }
    a.cluster.handle().broadcast("done", &()).unwrap();
    let got = until_done(&mut rx, &[0, 1, 2]).await;
    for who in [1, 2] {
        let news = numbers(&got[&who], "news");
        assert_eq!(
            news,
            (1..60).collect::<Vec<_>>(),
            "client {who}: once each, in order"
        );
    }
    assert!(
        b.cluster.stats().duplicates + c.cluster.stats().duplicates > 0,
        "copies were sent and dropped"
    );
    for (i, n) in [&a, &b, &c].iter().enumerate() {
        let gaps = n.gaps.lock().unwrap().clone();
        let news: Vec<_> = gaps
            .iter()
            .filter(|g| g.topic.as_deref() == Some("news"))
            .collect();
        assert_eq!(news.len(), 1, "node {i}: one gap for the topic: {gaps:?}");
        // Its subscriber was told too, so it can refetch.
        let told: Vec<_> = got
            .get(&i)
            .map(|seen| seen.iter().filter(|(m, _)| m == "$/gap").collect())
            .unwrap_or_default();
        assert_eq!(told.len(), 1, "node {i}: {told:?}");
        assert_eq!(told[0].1, json!({ "topic": "news" }));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_outbox_refuses_the_new_publish_with_an_error_and_a_lossy_bus_is_reported_as_a_gap()
{
    let hub = MemoryHub::new();
    let setup = Setup {
        outbox_limit: 4096,
        ..Setup::default()
    };
    let [a, b, _c] = three(&hub, &setup).await;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (p, _) = client(&b.url, 1, &tx).await;
    let _: bool = within(p.call("subscribe", ["news"])).await.unwrap();
    let (on_a, _) = client(&a.url, 0, &tx).await;
    let _: bool = within(on_a.call("subscribe", ["news"])).await.unwrap();
    let topics = a.cluster.topics();
    topics.publish("news", &[0]).await.unwrap();
    for _ in 0..2 {
        let (_, method, _) = within(rx.recv()).await.unwrap();
        assert_eq!(method, "news");
    }

    // Only a loses the bus: its outbox fills, then refuses each new publish at once,
    // with an error; what it refused reaches no one, a's own subscriber included.
    a.bus.cut();
    let mut state = a.cluster.watch_state();
    within(state.wait_for(|s| *s == ClusterState::Down))
        .await
        .unwrap();
    let filler = "x".repeat(100);
    let (mut taken, mut refused) = (Vec::new(), 0u64);
    for i in 1..=200u64 {
        match within(topics.publish("news", &json!([i, filler]))).await {
            Ok(published) => {
                assert_eq!(published.delivered, 1, "a's own subscriber");
                taken.push(i);
            }
            Err(Error::Cluster(ClusterError::Overloaded(why))) => {
                assert!(why.contains("full"), "{why}");
                refused += 1;
            }
            Err(other) => panic!("{other:?}"),
        }
    }
    assert_eq!(
        taken,
        (1..=taken.len() as u64).collect::<Vec<_>>(),
        "the first ones fit, then every one is refused"
    );
    assert!(refused > 150, "refused {refused}");
    let stats = a.cluster.stats();
    assert!(stats.outbox_bytes <= 4096, "{stats:?}");
    assert_eq!(stats.outbox_refused, refused, "{stats:?}");
    assert_eq!(topics.refused(), refused, "the counter the publisher reads");
    a.bus.restore();
    within(state.wait_for(|s| *s == ClusterState::Up))
        .await
        .unwrap();
    all_live(&b, 3).await;
    // What the outbox held is flushed first (until then a broadcast may find it full).
    flushed(&a.cluster).await;
    a.cluster.handle().broadcast("done", &()).unwrap();
    let got = until_done(&mut rx, &[0, 1]).await;
    for who in [0, 1] {
        let news = numbers(&got[&who], "news");
        assert_eq!(
            news, taken,
            "client {who}: exactly what was taken, in order"
        );
    }
    assert!(b.gaps.lock().unwrap().is_empty(), "nothing taken was lost");

    // A bus that loses messages for b: reported as a gap with the count. Each publish
    // is on the bus before the next is made, so each is a bus message of its own (a
    // burst would go out packed, and a lost pack loses all of its envelopes).
    b.bus.drop_next(3);
    for i in 200..210u64 {
        topics.publish("news", &json!([i])).await.unwrap();
        flushed(&a.cluster).await;
    }
    a.cluster.handle().broadcast("done", &()).unwrap();
    let got = until_done(&mut rx, &[0, 1]).await;
    let news = numbers(&got[&1], "news");
    let gaps = b.gaps.lock().unwrap().clone();
    assert_eq!(gaps.len(), 1, "{gaps:?}");
    assert_eq!(gaps[0].missed, Some(10 - news.len() as u64), "{news:?}");
}

/// The burst: more publishes than the outbox holds. Each one either returns
/// Ok and is delivered (on a slow bus the publisher waits for room), or returns an
/// error and reaches no one (the bus is down and the outbox full): never Ok then lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_past_the_outbox_is_either_delivered_or_refused_never_ok_then_lost() {
    let hub = MemoryHub::new();
    let setup = Setup {
        outbox_limit: 4096,
        ..Setup::default()
    };
    let [a, b, _c] = three(&hub, &setup).await;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (on_b, _) = client(&b.url, 1, &tx).await;
    let _: bool = within(on_b.call("subscribe", ["news"])).await.unwrap();
    let (on_a, _) = client(&a.url, 0, &tx).await;
    let _: bool = within(on_a.call("subscribe", ["news"])).await.unwrap();
    let topics = a.cluster.topics();
    let filler = "x".repeat(100);
    let mut ok = Vec::new();

    // A slow bus (each envelope takes 1 ms): 300 publishes of ~160 bytes are twelve
    // times the outbox; every one waits for room and is taken.
    a.bus.set_delay(Duration::from_millis(1));
    for i in 0..300u64 {
        within(topics.publish("news", &json!([i, filler])))
            .await
            .expect("taken once there is room");
        ok.push(i);
    }
    assert_eq!(a.cluster.stats().outbox_refused, 0);
    a.bus.set_delay(Duration::ZERO);

    // The bus goes away: the outbox fills and the rest are refused at once.
    a.bus.cut();
    let mut state = a.cluster.watch_state();
    within(state.wait_for(|s| *s == ClusterState::Down))
        .await
        .unwrap();
    let mut refused = 0;
    for i in 300..600u64 {
        match within(topics.publish("news", &json!([i, filler]))).await {
            Ok(_) => ok.push(i),
            Err(Error::Cluster(ClusterError::Overloaded(_))) => refused += 1,
            Err(other) => panic!("{other:?}"),
        }
    }
    assert!(refused > 250, "refused {refused}");
    assert_eq!(topics.refused(), refused);
    a.bus.restore();
    within(state.wait_for(|s| *s == ClusterState::Up))
        .await
        .unwrap();
    all_live(&b, 3).await;
    // What the outbox held is flushed first (until then a broadcast may find it full).
    flushed(&a.cluster).await;
    a.cluster.handle().broadcast("done", &()).unwrap();
    let got = until_done(&mut rx, &[0, 1]).await;
    for who in [0, 1] {
        let news: Vec<u64> = got[&who]
            .iter()
            .filter(|(m, _)| m == "news")
            .map(|(_, p)| p[0].as_u64().unwrap())
            .collect();
        assert_eq!(
            news, ok,
            "client {who}: every Ok delivered once, in order; no other"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_with_one_name_are_noticed() {
    let hub = MemoryHub::new();
    let setup = Setup::default();
    let first = node(&hub, "same", &setup).await;
    let second = node(&hub, "same", &setup).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while first.cluster.stats().duplicate_node_seen == 0
        || second.cluster.stats().duplicate_node_seen == 0
    {
        assert!(Instant::now() < deadline, "the twin goes unnoticed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_ne!(first.cluster.incarnation(), second.cluster.incarnation());
}

/// A node restarted under its name while its earlier incarnation's goodbye was still
/// on the bus stays in the others' rosters: that goodbye is the earlier
/// incarnation's alone (it dropped the new one until its next heartbeat: calls to its
/// peers failed with `NodeDown`, its members left the presence views).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_goodbye_of_an_earlier_incarnation_leaves_the_new_one_in_the_roster() {
    let hub = MemoryHub::new();
    // Long: no periodic heartbeat falls in the test's second, so only a goodbye
    // could drop b from a's roster.
    let setup = Setup {
        heartbeat: Duration::from_secs(5),
        ..Setup::default()
    };
    // a's hello is out before b1 listens, so b1 has no hello to answer: b1's last
    // heartbeat before its goodbye is its own hello.
    let a = node(&hub, "a", &setup).await;
    flushed(&a.cluster).await;
    let b1 = node(&hub, "b", &setup).await;
    all_live(&a, 2).await;
    all_live(&b1, 2).await;
    flushed(&b1.cluster).await;
    // Every roster a shows from now on.
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut nodes = a.cluster.watch_nodes();
    tokio::spawn({
        let seen = seen.clone();
        async move {
            while nodes.changed().await.is_ok() {
                let now = nodes.borrow_and_update().clone();
                seen.lock().unwrap().push(now);
            }
        }
    });
    // b1's goodbye takes 300 ms to reach the bus; b2 starts meanwhile. b1 does not
    // hear b2's hello (a heartbeat it sent in answer, after its goodbye, would rightly
    // make b1 the live incarnation again at a until b2's next heartbeat).
    b1.bus.lose(&["jp:ctl"]);
    b1.bus.set_delay(Duration::from_millis(300));
    let goodbye = tokio::spawn(async move {
        b1.cluster.shutdown().await;
        b1
    });
    let b2 = node(&hub, "b", &setup).await;
    // a answers b2's hello at once: b2 lists a once a has heard it.
    all_live(&b2, 2).await;
    let b1 = within(goodbye).await.unwrap();
    assert_ne!(b1.cluster.incarnation(), b2.cluster.incarnation());
    // a has read the goodbye (delivered before b1's shutdown returned) once it reads
    // what b2 publishes now.
    let (tx, mut rx) = mpsc::unbounded_channel();
    let _on_a = client(&a.url, 1, &tx).await;
    b2.cluster.handle().broadcast("done", &json!([])).unwrap();
    let (_, method, _) = within(rx.recv()).await.unwrap();
    assert_eq!(method, "done");
    let seen = seen.lock().unwrap().clone();
    assert!(
        seen.iter().all(|n| n.iter().any(|n| n == "b")),
        "a dropped b: {seen:?}"
    );
    assert_eq!(a.cluster.nodes(), ["a", "b"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_an_outage_the_flush_waits_for_the_nodes_that_come_back_later() {
    let hub = MemoryHub::new();
    // The flush waits for b and c at most one heartbeat window: 10 s here, so that it
    // cannot run out on a loaded machine before a's hello is out (with 200 ms x 3 it
    // did once in CI, and the news went out first). b's and c's hellos end it as soon
    // as they are back, so the test takes no longer for it.
    let setup = Setup {
        heartbeat: Duration::from_millis(200),
        missed: 50,
        ..Setup::default()
    };
    let [a, b, c] = three(&hub, &setup).await;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut subscribers = Vec::new();
    for (i, n) in [&b, &c].iter().enumerate() {
        let (p, _) = client(&n.url, i + 1, &tx).await;
        let _: bool = within(p.call("subscribe", ["news"])).await.unwrap();
        subscribers.push(p);
    }
    hub.cut_all();
    let mut state = a.cluster.watch_state();
    within(state.wait_for(|s| *s == ClusterState::Down))
        .await
        .unwrap();
    // A link of the test's own, made after the cut, sees what a sends on the bus.
    let spy = hub.backplane();
    let mut seen_on_bus = spy.events().expect("the spy's events");
    for channel in ["jp:ctl", "jp:t:{news}"] {
        within(spy.subscribe(channel))
            .await
            .expect("the spy listens");
    }
    let topics = a.cluster.topics();
    for i in 0..10u64 {
        topics.publish("news", &[i]).await.unwrap();
    }
    // a's link comes back first; b's and c's only once a has sent its hello (queued
    // after the news, and not held): the outbox has had its turn since a is up, so a
    // flush at once would have sent the news by then, to reach neither b nor c.
    a.bus.restore();
    let mut hello = false;
    for _ in 0..1000 {
        let (channel, payload) = match within(seen_on_bus.recv()).await {
            Some(BusEvent::Message { channel, payload }) => (channel, payload),
            Some(BusEvent::Subscribed { .. }) => continue,
            other => panic!("the spy's link is not cut: {other:?}"),
        };
        assert_eq!(
            channel, "jp:ctl",
            "the news went out before b and c were back"
        );
        let header: Value =
            serde_json::from_slice(payload.split(|&b| b == b'\n').next().unwrap_or_default())
                .expect("an envelope's header line");
        if header["o"] == "a" && header["hello"] == true {
            hello = true;
            break;
        }
    }
    assert!(hello, "a never said hello");
    assert_eq!(*state.borrow(), ClusterState::Up);
    b.bus.restore();
    c.bus.restore();
    for n in [&a, &b, &c] {
        all_live(n, 3).await;
    }
    a.cluster.handle().broadcast("done", &()).unwrap();
    let got = until_done(&mut rx, &[1, 2]).await;
    for who in [1, 2] {
        assert_eq!(
            numbers(&got[&who], "news"),
            (0..10).collect::<Vec<_>>(),
            "client {who}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broadcasts_spread_over_channels_keep_each_publishers_order() {
    // As on a Redis Cluster: broadcasts and heartbeats over 16 channels, each node
    // publishing on its own pick, every node listening to all.
    let hub = MemoryHub::with_spread(16);
    let nodes = three(&hub, &Setup::default()).await;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut clients = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        clients.push(client(&n.url, i, &tx).await);
    }
    for (origin, n) in nodes.iter().enumerate() {
        let handle = n.cluster.handle();
        for i in 0..300u64 {
            handle.broadcast("tick", &[origin as u64, i]).unwrap();
        }
    }
    let mut got: HashMap<usize, [Vec<u64>; 3]> = HashMap::new();
    for _ in 0..3 * 900 {
        let (who, method, p) = within(rx.recv()).await.unwrap();
        assert_eq!(method, "tick");
        let origin = p[0].as_u64().unwrap() as usize;
        got.entry(who).or_default()[origin].push(p[1].as_u64().unwrap());
    }
    for who in 0..3 {
        for (origin, seen) in got[&who].iter().enumerate() {
            assert_eq!(
                *seen,
                (0..300).collect::<Vec<_>>(),
                "client {who}, publisher {origin}"
            );
        }
    }
    // No one channel carries them all: the three nodes listen to sixteen.
    assert_eq!(hub.subscribers("jp:all"), 0);
    for n in &nodes {
        assert_eq!(n.cluster.stats().gaps, 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_channel_costs_a_gap_for_its_topic_only() {
    let hub = MemoryHub::with_spread(4);
    let [a, b, c] = three(&hub, &Setup::default()).await;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (on_b, _) = client(&b.url, 1, &tx).await;
    let (on_c, _) = client(&c.url, 2, &tx).await;
    for topic in ["news", "feed"] {
        let _: bool = within(on_b.call("subscribe", [topic])).await.unwrap();
    }
    let _: bool = within(on_c.call("subscribe", ["news"])).await.unwrap();

    // The server holding b's subscription to `news` goes away; `feed` lives elsewhere.
    b.bus.lose(&["jp:t:{news}"]);
    let topics = a.cluster.topics();
    topics.publish("news", &[1]).await.unwrap();
    topics.publish("feed", &[1]).await.unwrap();
    a.cluster.handle().broadcast("done", &()).unwrap();
    let got = until_done(&mut rx, &[1, 2]).await;
    assert_eq!(
        got[&1],
        [("feed".to_owned(), json!([1]))],
        "b lost only news"
    );
    assert_eq!(got[&2], [("news".to_owned(), json!([1]))]);

    // Subscribed again elsewhere: one gap, for news, on b alone; its subscriber is told.
    b.bus.regain();
    let (who, method, params) = within(rx.recv()).await.unwrap();
    assert_eq!((who, method.as_str()), (1, "$/gap"));
    assert_eq!(params, json!({ "topic": "news" }));
    // The next one arrives; its jump in sequence numbers is the same gap, not another.
    topics.publish("news", &[2]).await.unwrap();
    a.cluster.handle().broadcast("done", &()).unwrap();
    let got = until_done(&mut rx, &[1, 2]).await;
    for who in [1, 2] {
        assert_eq!(got[&who], [("news".to_owned(), json!([2]))], "client {who}");
    }
    let gaps = b.gaps.lock().unwrap().clone();
    assert_eq!(gaps, [Gap::clone(&gaps[0])], "one gap on b: {gaps:?}");
    assert_eq!(
        (gaps[0].topic.as_deref(), gaps[0].origin.as_deref()),
        (Some("news"), None)
    );
    assert!(a.gaps.lock().unwrap().is_empty() && c.gaps.lock().unwrap().is_empty());
    assert_eq!(
        b.cluster.state(),
        ClusterState::Up,
        "the bus as a whole stayed up"
    );
}

/// Node a calls a peer on b, then restarts (same name, new incarnation) before the
/// answer, and calls a peer on c. b's late answer to the old call, sent to a's channel,
/// is not taken for the answer to the new one: only the node called answers a call
/// (and a new incarnation numbers its calls from a random point).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_answer_to_a_restarted_callers_old_call_does_not_answer_its_new_call() {
    let hub = MemoryHub::new();
    let setup = Setup::default();
    let [a1, b, c] = three(&hub, &setup).await;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (_on_b, at_b) = client(&b.url, 1, &tx).await;
    let (_on_c, at_c) = client(&c.url, 2, &tx).await;
    let old = {
        let (cluster, to) = (a1.cluster.clone(), at_b.clone());
        tokio::spawn(async move {
            cluster
                .peer(&to)
                .call::<String>("slow", (1500u64, "b's answer to a's old call"))
                .timeout(Duration::from_secs(10))
                .await
        })
    };
    let (who, method, _) = within(rx.recv()).await.unwrap();
    assert_eq!(
        (who, method.as_str()),
        (1, "slow"),
        "b's peer runs the call"
    );
    // a restarts under its name (a new process, a new incarnation).
    a1.cluster.shutdown().await;
    old.abort();
    let a2 = node(&hub, "a", &setup).await;
    all_live(&a2, 3).await;
    assert_ne!(a1.cluster.incarnation(), a2.cluster.incarnation());
    let got = within(
        a2.cluster
            .peer(&at_c)
            .call::<String>("slow", (3000u64, "c's answer"))
            .timeout(Duration::from_secs(8)),
    )
    .await;
    assert_eq!(
        got.as_deref().map_err(|e| e.to_string()),
        Ok("c's answer"),
        "a call to {at_c} answered by {at_b}'s answer to the previous incarnation"
    );
}

/// The memory bus places a subscription in its stream: `Subscribed` once (a second
/// subscribe is the same subscription), after what the link was handed before, before
/// what is published on the channel after it.
#[tokio::test]
async fn the_memory_bus_says_where_a_subscription_took_effect() {
    let hub = MemoryHub::new();
    let (a, b) = (hub.backplane(), hub.backplane());
    let mut events = b.events().expect("b's events");
    within(b.subscribe("jp:t:x")).await.unwrap();
    within(b.subscribe("jp:t:x")).await.unwrap();
    within(a.publish("jp:t:x", "one".into())).await.unwrap();
    let subscribed = BusEvent::Subscribed {
        channel: "jp:t:x".into(),
    };
    assert_eq!(events.try_recv(), Ok(subscribed.clone()));
    assert!(matches!(events.try_recv(), Ok(BusEvent::Message { .. })));
    assert!(
        events.try_recv().is_err(),
        "one Subscribed for two subscribes"
    );
    // Held events keep their order with a new subscription among them.
    b.hold();
    within(a.publish("jp:t:x", "two".into())).await.unwrap();
    within(b.unsubscribe("jp:t:x")).await.unwrap();
    within(b.subscribe("jp:t:x")).await.unwrap();
    within(a.publish("jp:t:x", "three".into())).await.unwrap();
    assert!(events.try_recv().is_err(), "held");
    b.release();
    let payload = |e: Result<BusEvent, _>| match e {
        Ok(BusEvent::Message { payload, .. }) => payload,
        other => panic!("a message, not {other:?}"),
    };
    assert_eq!(payload(events.try_recv()), "two");
    assert_eq!(events.try_recv(), Ok(subscribed));
    assert_eq!(payload(events.try_recv()), "three");
}

/// A node that leaves a topic's channel and joins it again while envelopes of its old
/// subscription are still unread starts the channel's sequence marks afresh where the
/// new subscription took effect: what was published while it was off the channel is not
/// a gap for the new subscriber.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_left_and_joined_again_behind_unread_envelopes_is_not_a_gap() {
    let hub = MemoryHub::new();
    // A heartbeat window far longer than the hold below: no node is taken for gone.
    let setup = Setup {
        heartbeat: Duration::from_millis(500),
        missed: 10,
        ..Setup::default()
    };
    let [a, b, _c] = three(&hub, &setup).await;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (first, _) = client(&b.url, 1, &tx).await;
    let _: bool = within(first.call("subscribe", ["news"])).await.unwrap();
    let topics = a.cluster.topics();
    topics.publish("news", &[1]).await.unwrap();
    let (who, method, params) = within(rx.recv()).await.unwrap();
    assert_eq!((who, method.as_str(), params), (1, "news", json!([1])));

    // b's receiving falls behind: what the bus hands b waits, unread, in order.
    b.bus.hold();
    topics.publish("news", &[2]).await.unwrap();
    flushed(&a.cluster).await;
    // Its subscriber leaves, so b leaves the channel; 3 and 4 go out while it is off.
    let _: bool = within(first.call("unsubscribe", ["news"])).await.unwrap();
    until_subscribers(&hub, "jp:t:{news}", 0).await;
    topics.publish("news", &[3]).await.unwrap();
    topics.publish("news", &[4]).await.unwrap();
    flushed(&a.cluster).await;
    // A new subscriber: b joins the channel again, behind the unread envelope of 2.
    let (second, _) = client(&b.url, 2, &tx).await;
    let _: bool = within(second.call("subscribe", ["news"])).await.unwrap();
    b.bus.release();

    topics.publish("news", &[5]).await.unwrap();
    a.cluster.handle().broadcast("done", &()).unwrap();
    let got = until_done(&mut rx, &[1, 2]).await;
    let second_got = &got[&2];
    assert!(
        !second_got.iter().any(|(m, _)| m == "$/gap"),
        "no gap for the new subscriber: {second_got:?}"
    );
    assert_eq!(
        numbers(second_got, "news").last(),
        Some(&5),
        "{second_got:?}"
    );
    assert!(!got
        .get(&1)
        .is_some_and(|g| g.iter().any(|(m, _)| m == "news")));
    assert!(
        b.gaps.lock().unwrap().is_empty(),
        "{:?}",
        b.gaps.lock().unwrap()
    );
    assert_eq!(b.cluster.stats().gaps, 0);
}

#[tokio::test]
async fn the_memory_bus_keeps_topic_history_as_the_redis_script_does() {
    let hub = MemoryHub::new();
    let (a, b) = (hub.backplane(), hub.backplane());
    let mut b_events = b.events().expect("b's events");
    common::history_bus::history_semantics(&a, &b, &mut b_events, || hub.clear_history()).await;
}

/// A bus of someone else's without history: the cluster's history calls say so.
#[tokio::test]
async fn a_bus_without_history_says_it_does_not_support_it() {
    struct Plain;
    impl Backplane for Plain {
        fn publish(
            &self,
            _: &str,
            _: bytes::Bytes,
        ) -> jsonrpc_peer::cluster::BoxFuture<'_, Result<(), BackplaneError>> {
            Box::pin(async { Ok(()) })
        }
        fn subscribe(
            &self,
            _: &str,
        ) -> jsonrpc_peer::cluster::BoxFuture<'_, Result<(), BackplaneError>> {
            Box::pin(async { Ok(()) })
        }
        fn unsubscribe(
            &self,
            _: &str,
        ) -> jsonrpc_peer::cluster::BoxFuture<'_, Result<(), BackplaneError>> {
            Box::pin(async { Ok(()) })
        }
        fn events(&self) -> Option<mpsc::Receiver<BusEvent>> {
            None
        }
    }
    let keys = jsonrpc_peer::cluster::TopicKeys::new("jp", "t");
    let bounds = jsonrpc_peer::HistoryConfig::default();
    let append = jsonrpc_peer::cluster::Append::new(&keys, &bounds, "e", b"{", b"1");
    let err = Plain.append(append).await.unwrap_err();
    assert!(matches!(err, BackplaneError::Unsupported(_)), "{err:?}");
    assert!(err.to_string().contains("history"), "{err}");
    let err = Plain.read_history(&keys, &bounds, 0, 1).await.unwrap_err();
    assert!(matches!(err, BackplaneError::Unsupported(_)), "{err:?}");
}

#[tokio::test]
async fn what_the_bus_lost_for_a_slow_node_is_counted_in_its_stats() {
    let hub = MemoryHub::new();
    // The node's link holds one unread event; the backplane moves into the builder.
    let cluster = within(
        Cluster::builder(
            hub.backplane_with_capacity(1),
            jsonrpc_peer::ServerHandle::new(),
        )
        .node_id("slow")
        .start(),
    )
    .await
    .unwrap();
    let before = cluster.stats().bus_dropped;
    // Published without a pause (the in-memory bus delivers at once), so the node's
    // receive loop, on this same thread, reads none of them in between: one fits (if
    // the link was empty), the rest are lost.
    let flood = hub.backplane();
    for i in 0..100u32 {
        within(flood.publish("jp:all", i.to_string().into()))
            .await
            .unwrap();
    }
    let lost = cluster.stats().bus_dropped - before;
    assert!((99..=100).contains(&lost), "lost {lost}");
    cluster.shutdown().await;
}

/// A channel the bus cannot reach for now while the rest of it works (a Redis Cluster
/// shard with no master) holds back only its own messages: with more of them waiting
/// than the outbox sends in one batch, a topic on another channel and broadcasts still
/// go at once; once it is reachable again, the held ones arrive, every one, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_the_bus_cannot_reach_holds_back_only_itself() {
    let hub = MemoryHub::new();
    let [a, b, _c] = three(&hub, &Setup::default()).await;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (on_b, _) = client(&b.url, 1, &tx).await;
    for topic in ["prices", "news"] {
        let added: bool = within(on_b.call("subscribe", [topic])).await.unwrap();
        assert!(added);
        until_subscribers(&hub, &format!("jp:t:{{{topic}}}"), 1).await;
    }
    a.bus.unreach(&["jp:t:{prices}"]);
    let topics = a.cluster.topics();
    for i in 0..300u64 {
        within(topics.publish("prices", &[i])).await.unwrap();
    }
    for i in 0..5u64 {
        within(topics.publish("news", &[i])).await.unwrap();
    }
    a.cluster.handle().broadcast("done", &()).unwrap();
    let got = until_done(&mut rx, &[1]).await;
    assert_eq!(numbers(&got[&1], "news"), (0..5).collect::<Vec<_>>());
    assert!(numbers(&got[&1], "prices").is_empty(), "{got:?}");
    assert!(a.cluster.stats().outbox_len >= 300, "the held ones wait");

    a.bus.reach();
    let mut prices = Vec::new();
    while prices.len() < 300 {
        let (who, method, params) = within(rx.recv()).await.unwrap();
        assert_eq!((who, method.as_str()), (1, "prices"), "{params}");
        prices.push(params[0].as_u64().unwrap());
    }
    assert_eq!(prices, (0..300).collect::<Vec<_>>());
    flushed(&a.cluster).await;
}

/// A channel held back for long does not take the whole outbox: once what waits for
/// the channels the bus cannot reach fills half the bound, a new publish on one of
/// them fails at once (`Unavailable`: the bus cannot reach it), and the other half
/// stays for the channels the bus reaches: a topic there still publishes without a
/// refusal. Before, the held channel filled the bound, and every publish on every
/// topic waited for room and then failed `Overloaded`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_held_back_fills_only_its_share_of_the_outbox() {
    let hub = MemoryHub::new();
    let setup = Setup {
        outbox_limit: 64 << 10,
        ..Setup::default()
    };
    let [a, b, _c] = three(&hub, &setup).await;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (on_b, _) = client(&b.url, 1, &tx).await;
    for topic in ["prices", "news"] {
        let added: bool = within(on_b.call("subscribe", [topic])).await.unwrap();
        assert!(added);
        until_subscribers(&hub, &format!("jp:t:{{{topic}}}"), 1).await;
    }
    a.bus.unreach(&["jp:t:{prices}"]);
    let topics = a.cluster.topics();
    let mut held = 0u64;
    let refusal = loop {
        assert!(held < 10_000, "never refused: the outbox holds 64 KiB");
        match within(topics.publish("prices", &[held])).await {
            Ok(_) => held += 1,
            Err(e) => break e,
        }
    };
    assert!(
        matches!(refusal, Error::Cluster(ClusterError::Unavailable(_))),
        "{refusal:?}"
    );
    // Half the bound, or more when the publishes ran ahead of the outbox's first try.
    let waiting = a.cluster.stats().outbox_bytes;
    assert!(
        (16 << 10..=64 << 10).contains(&waiting),
        "{waiting} bytes wait, for a bound of 64 KiB"
    );
    // The other half: more than fits beside the held ones at once, every one taken.
    for i in 0..(held * 2) {
        within(topics.publish("news", &[i])).await.unwrap();
    }
    a.cluster.handle().broadcast("done", &()).unwrap();
    let got = until_done(&mut rx, &[1]).await;
    assert_eq!(numbers(&got[&1], "news"), (0..held * 2).collect::<Vec<_>>());

    a.bus.reach();
    let mut prices = Vec::new();
    while prices.len() < held as usize {
        let (who, method, params) = within(rx.recv()).await.unwrap();
        assert_eq!((who, method.as_str()), (1, "prices"), "{params}");
        prices.push(params[0].as_u64().unwrap());
    }
    assert_eq!(prices, (0..held).collect::<Vec<_>>());
    flushed(&a.cluster).await;
}

/// A [`MemoryHub`] link whose consumer has fallen behind loses messages, counted, as
/// its docs say ("as Redis drops a subscriber that falls too far behind"; the Redis
/// backplane's `event_capacity`: "`Down` and `Up` are never dropped"). The link's `Down`
/// and `Up` went the same way, uncounted: a cluster on it that missed the `Up` stayed
/// down, delivering locally only, after the bus was back.
#[tokio::test]
async fn a_memory_link_behind_its_consumer_still_reports_down_and_up() {
    use jsonrpc_peer::cluster::{Backplane, BusEvent, MemoryHub};

    let hub = MemoryHub::new();
    let bus = hub.backplane_with_capacity(2);
    let mut events = bus.events().unwrap();
    within(bus.subscribe("news")).await.unwrap();
    let other = hub.backplane();
    for n in 0..3u8 {
        within(other.publish("news", vec![n].into())).await.unwrap();
    }
    // The stream is full: its consumer is behind. The bus goes away and comes back.
    bus.cut();
    bus.restore();
    let mut seen = Vec::new();
    while let Ok(event) = events.try_recv() {
        seen.push(event);
    }
    assert!(
        seen.ends_with(&[BusEvent::Down, BusEvent::Up]),
        "{seen:?}; {} messages dropped",
        bus.dropped()
    );
}

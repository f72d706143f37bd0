//! Messages that arrive late in a cluster on the in-memory bus: a node's answer to a
//! call of the caller's earlier incarnation, a presence join read after its node died.
//! Real servers and clients on 127.0.0.1:0.

mod common;

use std::time::Duration;

use common::within;
use jsonrpc_peer::cluster::{Cluster, MemoryBackplane, MemoryHub, PeerAddr};
use jsonrpc_peer::{connect, Caller, Context, Peer, PresenceJoin, Router, RpcError, Server};
use serde_json::{json, Value};
use tokio::sync::mpsc;

struct Node {
    cluster: Cluster,
    #[allow(dead_code)]
    bus: MemoryBackplane,
    url: String,
}

async fn node(hub: &MemoryHub, name: &str) -> Node {
    node_with(hub, name, Duration::from_millis(100)).await
}

async fn node_with(hub: &MemoryHub, name: &str, heartbeat: Duration) -> Node {
    let server = Server::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://{}", server.local_addr().unwrap());
    let bus = hub.backplane();
    let cluster = within(
        Cluster::builder(bus.clone(), server.handle())
            .node_id(name)
            .heartbeat_interval(heartbeat)
            .start(),
    )
    .await
    .unwrap();
    let router = Router::with_state(cluster.clone())
        .method("whoami", |cx: Context<Cluster>, (): ()| async move {
            Ok::<_, RpcError>(cx.state().addr(cx.peer()).to_string())
        })
        // `sub [topic, info_or_null, watch]`
        .method(
            "sub",
            |cx: Context<Cluster>, (topic, info, watch): (String, Value, bool)| async move {
                let topics = cx.state().topics();
                let rpc = |e: jsonrpc_peer::Error| RpcError::new(-32000, e.to_string());
                topics
                    .subscribe_ready(cx.peer(), &topic)
                    .await
                    .map_err(rpc)?;
                if !info.is_null() {
                    topics
                        .join_presence(cx.peer(), &topic, info)
                        .await
                        .map_err(rpc)?;
                }
                if watch {
                    topics
                        .watch_presence(cx.peer(), &topic)
                        .await
                        .map_err(rpc)?;
                }
                Ok::<_, RpcError>(true)
            },
        );
    tokio::spawn(server.serve(router));
    Node { cluster, bus, url }
}

async fn all_live(cluster: &Cluster, count: usize) {
    let mut nodes = cluster.watch_nodes();
    within(nodes.wait_for(|n| n.len() == count)).await.unwrap();
}

/// A client whose `slow [ms, tag]` answers `tag` after `ms`; each call it starts is
/// told on the returned receiver.
async fn client(url: &str) -> (Peer, PeerAddr, mpsc::UnboundedReceiver<String>) {
    let (tx, started) = mpsc::unbounded_channel();
    let router = Router::new().method("slow", move |_cx: Context, (ms, tag): (u64, String)| {
        let _ = tx.send(tag.clone());
        async move {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Ok::<_, RpcError>(tag)
        }
    });
    let peer = within(connect(url, router)).await.unwrap();
    let addr: String = within(peer.call("whoami", ())).await.unwrap();
    (peer, addr.parse().unwrap(), started)
}

/// Node a calls a peer on b, then restarts (same name, new incarnation) before the
/// answer, and calls a peer on c. b's late answer to the old call, sent to a's channel,
/// is not taken for the answer to the new one: only the node called answers a call
/// (and a new incarnation numbers its calls from a random point).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_answer_to_a_restarted_callers_old_call_does_not_answer_its_new_call() {
    let hub = MemoryHub::new();
    let a1 = node(&hub, "a").await;
    let b = node(&hub, "b").await;
    let c = node(&hub, "c").await;
    for n in [&a1, &b, &c] {
        all_live(&n.cluster, 3).await;
    }
    let (_on_b, at_b, mut started_on_b) = client(&b.url).await;
    let (_on_c, at_c, _) = client(&c.url).await;

    // a's first incarnation: a call to b's peer that answers in 1.5 s.
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
    within(started_on_b.recv()).await.unwrap();
    // a restarts under its name (a new process, a new incarnation).
    a1.cluster.shutdown().await;
    old.abort();
    let a2 = node(&hub, "a").await;
    all_live(&a2.cluster, 3).await;
    assert_ne!(a1.cluster.incarnation(), a2.cluster.incarnation());

    // The new a calls c's peer, which answers in 3 s.
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

/// A client that subscribes to `topic` with `info` (a member unless null), watching it
/// when `watch`; what it hears of joins comes on the receiver as `+addr`.
async fn member(
    node: &Node,
    topic: &str,
    info: Value,
    watch: bool,
) -> (Peer, String, mpsc::UnboundedReceiver<String>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let router = Router::new().on(PresenceJoin, move |_cx, c| {
        let _ = tx.send(format!("+{}", c.addr));
        async {}
    });
    let peer = within(connect(&node.url, router)).await.unwrap();
    let addr: String = within(peer.call("whoami", ())).await.unwrap();
    let ok: bool = within(peer.call("sub", json!([topic, info, watch])))
        .await
        .unwrap();
    assert!(ok);
    (peer, addr, rx)
}

async fn listed(node: &Node, topic: &str) -> Vec<String> {
    let mut got: Vec<String> = within(node.cluster.topics().presence(topic))
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.addr.to_string())
        .collect();
    got.sort();
    got
}

/// b's receive loop falls behind (its bus events held) while x, the only node with a
/// member in the room, sends the member's join and dies. b drops x from its roster;
/// then it reads the join of the dead node. The member must not come back: the join is
/// refused while b remembers x's departure (two windows), and a part taken in after
/// that is dropped once x has been out of the roster for a whole window (the store has
/// no record of the room left to tell it gone).
async fn a_dead_nodes_late_join(held_after_departure: u32) {
    let hub = MemoryHub::new();
    let heartbeat = Duration::from_millis(300);
    let window = heartbeat * 3;
    let a = node_with(&hub, "a", heartbeat).await;
    let b = node_with(&hub, "b", heartbeat).await;
    let x = node_with(&hub, "x", heartbeat).await;
    for n in [&a, &b, &x] {
        all_live(&n.cluster, 3).await;
    }
    let (_wa, _, mut heard_a) = member(&a, "room", Value::Null, true).await;
    let (_wb, _, _) = member(&b, "room", Value::Null, true).await;

    // b's consumer stops reading for a while (a busy node); the rest goes on.
    b.bus.hold();
    let (_m, m_addr, _) = member(&x, "room", json!("m"), false).await;
    // a heard the join: x's delta is on the bus. x dies at once, without a word.
    assert_eq!(within(heard_a.recv()).await.unwrap(), format!("+{m_addr}"));
    x.bus.cut();
    within(
        b.cluster
            .watch_nodes()
            .wait_for(|n| !n.contains(&"x".to_string())),
    )
    .await
    .unwrap();
    // x's keys in the store expire; b goes on holding for as long as asked.
    tokio::time::sleep(window * held_after_departure.max(1)).await;
    assert_eq!(listed(&a, "room").await, Vec::<String>::new());

    // b reads what it held: x's join, from a node it knows is dead.
    b.bus.release();
    all_live(&b.cluster, 2).await;
    // Three windows: the views are checked once a window.
    tokio::time::sleep(window * 3).await;
    assert_eq!(b.cluster.nodes(), ["a", "b"]);
    assert_eq!(
        listed(&b, "room").await,
        Vec::<String>::new(),
        "a member of the dead x"
    );
    assert_eq!(
        within(b.cluster.topics().presence_count("room"))
            .await
            .unwrap(),
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_nodes_join_read_late_is_refused() {
    a_dead_nodes_late_join(1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_nodes_join_read_after_its_departure_is_forgotten_leaves_within_two_windows() {
    a_dead_nodes_late_join(3).await;
}

//! A peer's address names one connection forever: after a node restarts, an address
//! from before fails as `NoSuchPeer` and never reaches whoever connected since.

mod common;

use std::time::Duration;

use common::within;
use jsonrpc_peer::cluster::{Cluster, ClusterError, MemoryHub, PeerAddr};
use jsonrpc_peer::{connect, Caller, Context, Error, Peer, Router, RpcError, Server, ServerHandle};
use serde_json::Value;
use tokio::sync::mpsc;

struct Node {
    cluster: Cluster,
    handle: ServerHandle,
    url: String,
}

async fn node(hub: &MemoryHub, name: &str) -> Node {
    let server = Server::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://{}", server.local_addr().unwrap());
    let handle = server.handle();
    let cluster = within(
        Cluster::builder(hub.backplane(), server.handle())
            .node_id(name)
            .heartbeat_interval(Duration::from_millis(100))
            .start(),
    )
    .await
    .unwrap();
    let router = Router::with_state(cluster.clone()).method(
        "whoami",
        |cx: Context<Cluster>, (): ()| async move {
            Ok::<_, RpcError>(cx.state().addr(cx.peer()).to_string())
        },
    );
    tokio::spawn(server.serve(router));
    Node {
        cluster,
        handle,
        url,
    }
}

async fn live(node: &Node, count: usize) {
    let mut nodes = node.cluster.watch_nodes();
    within(nodes.wait_for(|n| n.len() == count)).await.unwrap();
}

/// A client that reports every `poke` call it serves to `tx`; and its address.
async fn client(url: &str, tx: &mpsc::UnboundedSender<String>) -> (Peer, PeerAddr) {
    let tx = tx.clone();
    let router = Router::new().method("poke", move |_cx: Context, (who,): (String,)| {
        let _ = tx.send(who);
        async { Ok::<_, RpcError>("poked") }
    });
    let peer = within(connect(url, router)).await.unwrap();
    let addr: String = within(peer.call("whoami", ())).await.unwrap();
    (peer, addr.parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_address_from_before_a_node_restart_is_no_such_peer() {
    let hub = MemoryHub::new();
    let b = node(&hub, "b").await;
    let a = node(&hub, "a").await;
    live(&a, 2).await;
    live(&b, 2).await;
    let (tx, mut poked) = mpsc::unbounded_channel();
    let (old_client, old_addr) = client(&a.url, &tx).await;
    let answer: String = within(b.cluster.peer(&old_addr).call("poke", ["before"]))
        .await
        .unwrap();
    assert_eq!(answer, "poked");
    assert_eq!(within(poked.recv()).await.unwrap(), "before");

    // Node a restarts: a new server and cluster under the same name, new clients.
    within(a.cluster.shutdown()).await;
    within(a.handle.shutdown()).await;
    drop(old_client);
    let a = node(&hub, "a").await;
    live(&a, 2).await;
    live(&b, 2).await;
    let mut new_clients = Vec::new();
    for _ in 0..5 {
        let (peer, addr) = client(&a.url, &tx).await;
        assert_eq!(addr.node, "a");
        assert_ne!(addr, old_addr, "an id given out again");
        new_clients.push(peer);
    }

    let err = within(b.cluster.peer(&old_addr).call::<Value>("poke", ["after"]))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Cluster(ClusterError::NoSuchPeer(ref p)) if *p == old_addr),
        "{err:?}"
    );
    // The node's own lookup says the same.
    let err = within(a.cluster.peer(&old_addr).call::<Value>("poke", ["local"]))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Cluster(ClusterError::NoSuchPeer(_))),
        "{err:?}"
    );
    assert!(poked.try_recv().is_err(), "no new client was poked");
}

/// What `PEER_ID_CHILD=1` makes the child print before its first connection's id.
const ID_LINE: &str = "first peer id: ";

/// The id of a connection made in a fresh process of this test binary.
async fn id_in_a_new_process() -> u64 {
    let exe = std::env::current_exe().unwrap();
    let output = within(
        tokio::process::Command::new(exe)
            .args([
                "--exact",
                "a_peer_id_counts_from_the_clock",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env("PEER_ID_CHILD", "1")
            .output(),
    )
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    // libtest prints the test's name on the same line.
    stdout
        .split(ID_LINE)
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|id| id.parse().ok())
        .unwrap_or_else(|| panic!("no id in {stdout}"))
}

#[tokio::test]
async fn a_peer_id_counts_from_the_clock() {
    let (url, _handle) = common::serve(Router::new()).await;
    let peer = within(connect(&url, Router::new())).await.unwrap();
    let id = peer.id();
    if std::env::var_os("PEER_ID_CHILD").is_some() {
        println!("{ID_LINE}{id}");
    }
    // Microseconds since the Unix epoch (after 2020), and exact in JavaScript.
    assert!(id > 1_577_836_800_000_000, "{id}");
    assert!(id < 1 << 53, "{id}");
}

#[tokio::test]
async fn a_restarted_process_gives_ids_above_every_id_of_the_one_before() {
    let first = id_in_a_new_process().await;
    let second = id_in_a_new_process().await;
    assert!(
        second > first,
        "the second process's first id {second} is not above the first's {first}"
    );
}

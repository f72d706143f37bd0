//! Alone in its binary, so no other test's allocations blur the figure: a client that
//! stops reading costs the server a bounded amount of memory, however much is pushed.

mod common;

use common::{rss, within};
use futures_util::StreamExt;
use jsonrpc_peer::{CloseReason, PeerConfig, Router, Server};
use tokio::sync::mpsc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_client_costs_at_most_its_queue_then_is_closed() {
    // The default queue bound (1,024 frames): the memory held is the queue's, not the
    // traffic's.
    let server = Server::bind("127.0.0.1:0")
        .await
        .unwrap()
        .peer_config(PeerConfig::default());
    let url = format!("ws://{}", server.local_addr().unwrap());
    let handle = server.handle();
    let mut arrivals = common::connections(&handle);
    let (closed_tx, mut closed_rx) = mpsc::unbounded_channel();
    handle.on_disconnect(move |peer, _| {
        let _ = closed_tx.send(peer.close_reason());
    });
    tokio::spawn(server.serve(Router::new()));

    // The client completes the handshake, then never reads again.
    let (stalled, _) = within(tokio_tungstenite::connect_async(&url))
        .await
        .unwrap();
    within(arrivals.recv())
        .await
        .expect("the server registers it");
    // One payload shared by every notification: the broadcast queues the same bytes.
    let payload = "x".repeat(1024);
    let before = rss();
    let mut pushed = 0usize;
    while pushed < 25 << 20 {
        if handle.broadcast("tick", &[&payload]).unwrap() == 0 {
            break; // closed by the slow-peer policy
        }
        pushed += payload.len();
        tokio::task::yield_now().await;
    }
    let grew = rss().saturating_sub(before);
    println!(
        "pushed {} MiB to a stalled client; server memory grew by {} KiB",
        pushed >> 20,
        grew >> 10
    );
    // The queue holds at most 1,024 frames of 1 KiB; the socket's buffers are the
    // kernel's. Whatever is pushed after that is refused, not held.
    assert!(grew < 4 << 20, "memory grew by {} KiB", grew >> 10);
    let reason = within(closed_rx.recv()).await.unwrap();
    assert!(
        matches!(reason, Some(CloseReason::Local { code: 1008, .. })),
        "{reason:?}"
    );
    drop(stalled.into_future());
}

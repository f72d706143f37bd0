//! A slow peer's close frame goes ahead of the frames queued for it: a client that
//! stops reading and reads again later sees 1008, not a connection cut mid-stream.

mod common;

use futures_util::StreamExt;
use jsonrpc_peer::{CloseReason, PeerConfig, Router, Server};
use tokio_tungstenite::tungstenite::Message;

use common::within;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_client_that_reads_again_sees_1008_ahead_of_the_queue() {
    // A queue of 1,024 frames of 128 KiB notifications (the byte bound raised out of
    // the way): 128 MiB would stand in front of the close frame if it waited its turn.
    let server = Server::bind("127.0.0.1:0")
        .await
        .unwrap()
        .peer_config(PeerConfig::default().outgoing_queue_bytes(256 << 20));
    let url = format!("ws://{}", server.local_addr().unwrap());
    let handle = server.handle();
    let mut arrivals = common::connections(&handle);
    tokio::spawn(server.serve(Router::new()));
    let (mut slow, _) = within(tokio_tungstenite::connect_async(&url))
        .await
        .unwrap();
    let server_peer = within(arrivals.recv()).await.expect("registered");

    // Serialized once, so the queue shares one buffer however many frames it holds.
    let payload = "x".repeat(128 * 1024);
    let mut pushed = 0u64;
    for _ in 0..100_000 {
        if handle.broadcast("tick", [&payload]).unwrap() == 0 {
            break;
        }
        pushed += 1;
        tokio::task::yield_now().await;
    }
    let reason = within(server_peer.closed()).await;
    assert!(
        matches!(reason, CloseReason::Local { code: 1008, .. }),
        "{reason:?}"
    );

    // The client reads again: what the sockets already hold, then the close frame.
    let mut before_close = 0u64;
    let code = loop {
        match within(slow.next()).await {
            Some(Ok(Message::Text(_))) => before_close += 1,
            Some(Ok(Message::Close(frame))) => break frame.map(|f| u16::from(f.code)),
            Some(Ok(_)) => {}
            other => panic!("the connection ended without a close frame: {other:?}"),
        }
        assert!(before_close <= pushed, "more frames than were pushed");
    };
    println!("pushed {pushed}; the client read {before_close} before the close frame");
    assert_eq!(code, Some(1008));
    // What was in flight in the sockets' buffers, not the 1,024 queued frames.
    assert!(
        before_close < 512,
        "{before_close} frames came before the close: the queue went first"
    );
}

//! Closing against a peer that does not read. A slow peer's close frame goes ahead of
//! the frames queued for it: a client that stops reading and reads again later sees
//! 1008, not a connection cut mid-stream. And a client that never reads, fills the
//! outgoing side and then closes is let go within the closing handshake's timeout.

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
        if handle.broadcast("tick", &[&payload]).unwrap() == 0 {
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

/// A masked text frame from a client, written by hand.
fn client_text(payload: &[u8]) -> Vec<u8> {
    let mut frame = vec![0x81u8];
    match payload.len() {
        n if n < 126 => frame.push(0x80 | n as u8),
        n => {
            frame.push(0x80 | 126);
            frame.extend_from_slice(&u16::try_from(n).expect("a short frame").to_be_bytes());
        }
    }
    // The zero mask leaves the payload as it is.
    frame.extend_from_slice(&[0, 0, 0, 0]);
    frame.extend_from_slice(payload);
    frame
}

/// Over a real socket: a client that never reads fills the server's outgoing side (the
/// sockets' buffers, the queue, then the answers waiting for room, which pause
/// reading), then sends a close frame. The server sees it although it reads no more
/// calls, and lets the connection go within the closing handshake's 2 s.
#[tokio::test]
async fn a_client_that_fills_our_side_without_reading_then_closes_is_let_go_in_time() {
    use tokio::io::AsyncWriteExt;
    use tokio::sync::mpsc;

    // Each answer is larger than the default byte bound (1 MiB): once one is queued, the
    // queue is full, and the next answer waits for room and holds the bound.
    const ANSWER: usize = (1 << 20) + 1;
    let (ran_tx, mut ran) = mpsc::unbounded_channel::<u64>();
    let router = Router::with_state(ran_tx).method(
        "blob",
        |cx: jsonrpc_peer::Context<mpsc::UnboundedSender<u64>>, (n,): (u64,)| async move {
            let _ = cx.state().send(n);
            Ok::<_, jsonrpc_peer::RpcError>("x".repeat(ANSWER))
        },
    );
    let (url, handle) = common::serve(router).await;
    let mut arrivals = common::connections(&handle);
    let mut gone = common::disconnections(&handle);
    let mut tcp = common::raw_upgrade(&url).await;
    let server_peer = within(arrivals.recv()).await.expect("registered");

    // One call at a time; the handler's signal says the server read it, and (on this
    // one-thread runtime) placed its answer before this task runs again.
    let call = |n: u64| {
        client_text(
            format!(r#"{{"jsonrpc":"2.0","method":"blob","params":[{n}],"id":{n}}}"#).as_bytes(),
        )
    };
    let mut n = 0;
    while server_peer.queued_bytes() < 1 << 20 && n < 64 {
        within(tcp.write_all(&call(n))).await.unwrap();
        assert_eq!(within(ran.recv()).await, Some(n));
        n += 1;
    }
    assert!(server_peer.queued_bytes() >= 1 << 20, "the queue is full");
    // The next answer finds the sink and the queue full: it waits, and reading pauses.
    within(tcp.write_all(&call(n))).await.unwrap();
    assert_eq!(within(ran.recv()).await, Some(n));
    assert!(
        server_peer.queued_bytes() >= 1 << 20,
        "nothing was written since"
    );

    // A masked close frame, code 1000.
    within(tcp.write_all(&[0x88, 0x82, 0, 0, 0, 0, 0x03, 0xe8]))
        .await
        .unwrap();
    let sent = std::time::Instant::now();
    let reason = tokio::time::timeout(std::time::Duration::from_secs(2), server_peer.closed())
        .await
        .expect("the close frame is seen although reading is paused");
    assert!(
        matches!(reason, CloseReason::Remote { code: 1000, .. }),
        "{reason:?}"
    );
    // Its answers cannot be written: the closing handshake gives up at its 2 s.
    let ended = tokio::time::timeout(std::time::Duration::from_secs(5), gone.recv()).await;
    assert!(
        matches!(ended, Ok(Some(_))),
        "the connection is still there {:?} after the close",
        sent.elapsed()
    );
    assert!(
        sent.elapsed() < std::time::Duration::from_secs(5),
        "ended {:?} after the close",
        sent.elapsed()
    );
    drop(tcp);
}

/// `Peer::close_with` takes any reason, but a WebSocket close frame carries at most
/// 123 bytes of it (RFC 6455 5.5: a control frame's payload is at most 125 bytes). A
/// longer one went out as it was: the other side took the frame for a protocol
/// violation and never saw the code.
#[tokio::test]
async fn a_close_with_a_long_reason_still_reaches_the_other_side_with_its_code() {
    let server = Server::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://{}", server.local_addr().unwrap());
    let handle = server.handle();
    let mut gone = common::disconnections(&handle);
    tokio::spawn(server.serve(Router::new()));

    let client = within(jsonrpc_peer::connect(&url, Router::new()))
        .await
        .unwrap();
    let reason = "é".repeat(100); // 200 bytes
    tokio::time::timeout(common::STEP, client.close_with(4000, &reason))
        .await
        .expect("close_with ends");
    let peer = within(gone.recv()).await.unwrap();
    match peer.close_reason() {
        Some(CloseReason::Remote { code, reason: got }) => {
            assert_eq!(code, 4000);
            assert!(got.len() <= 123 && reason.starts_with(&got), "{got:?}");
        }
        other => panic!("the server saw {other:?}, not the client's 4000"),
    }
}

/// A code a close frame may not carry (RFC 6455 7.4: 1005, 1006 and 1015 mean "none
/// was sent" and are never sent; below 1000, 1004, 1016 to 2999, 5000 and up are not
/// for a frame either) goes as a close frame without a code: the other side reads
/// 1005, and the handshake ends cleanly. Sent as it was, the other side took the frame
/// for a protocol violation and closed with 1002 instead.
#[tokio::test]
async fn a_code_a_close_frame_may_not_carry_goes_as_no_code_at_all() {
    let server = Server::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://{}", server.local_addr().unwrap());
    let handle = server.handle();
    let mut gone = common::disconnections(&handle);
    tokio::spawn(server.serve(Router::new()));

    for code in [1005, 1006, 1015, 999, 1004, 2000, 5000] {
        let client = within(jsonrpc_peer::connect(&url, Router::new()))
            .await
            .unwrap();
        tokio::time::timeout(common::STEP, client.close_with(code, "bye"))
            .await
            .expect("close_with ends");
        match client.closed().await {
            CloseReason::Local { code: 1005, reason } => assert_eq!(reason, "", "{code}"),
            other => panic!("asked for {code}, the client says {other:?}"),
        }
        let peer = within(gone.recv()).await.unwrap();
        match peer.close_reason() {
            Some(CloseReason::Remote { code: 1005, reason }) => assert_eq!(reason, "", "{code}"),
            other => panic!("asked for {code}, the server saw {other:?}"),
        }
    }
}

/// A client that closes while the server has a frame queued for it gets the server's
/// close frame back. The queued frame cannot go after the client's close (the WebSocket
/// layer refuses it), and that refusal ended the server's side of the handshake before
/// it closed its sink: the answer to the client's close frame, which closing the sink
/// sends, never went, and the client saw the connection end without one (1006, an
/// abnormal closure, where a browser reports `wasClean: false`).
#[tokio::test]
async fn a_client_that_closes_while_a_frame_is_queued_for_it_gets_its_close_answered() {
    use futures_util::SinkExt;
    use jsonrpc_peer::{Caller, Context, RpcError};
    use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
    use tokio_tungstenite::tungstenite::protocol::CloseFrame;

    // A notification whose method queues a frame for the client, and ends there.
    let router = Router::new().method("push", |cx: Context, (): ()| async move {
        let _ = cx.peer().notify("tick", ()).await;
        Ok::<_, RpcError>(())
    });
    let (url, handle) = common::serve(router).await;
    let mut gone = common::disconnections(&handle);
    for round in 0..5 {
        let (mut ws, _) = within(tokio_tungstenite::connect_async(&url))
            .await
            .unwrap();
        // The notification and the close frame go in one write, so the server reads
        // the close right behind it, with the tick still queued.
        within(ws.feed(Message::text(r#"{"jsonrpc":"2.0","method":"push"}"#)))
            .await
            .unwrap();
        within(ws.send(Message::Close(Some(CloseFrame {
            code: CloseCode::Normal,
            reason: "bye".into(),
        }))))
        .await
        .unwrap();
        let mut frames = 0;
        let end = loop {
            match within(ws.next()).await {
                Some(Ok(Message::Close(frame))) => break Ok(frame.map(|f| u16::from(f.code))),
                Some(Ok(_)) => frames += 1,
                None => break Err("the stream ended".to_owned()),
                Some(Err(e)) => break Err(e.to_string()),
            }
            assert!(frames < 10, "frames after the close");
        };
        assert_eq!(
            end,
            Ok(Some(1000)),
            "round {round}: the server ended the connection without answering the close"
        );
        let peer = within(gone.recv()).await.unwrap();
        assert!(
            matches!(
                peer.close_reason(),
                Some(CloseReason::Remote { code: 1000, .. })
            ),
            "{:?}",
            peer.close_reason()
        );
    }
}

/// `Peer::on_close` callbacks are the application's code, and one may panic. The
/// panic stopped the connection's end where it stood: the callbacks after it never ran
/// (a registry or a topic that forgets the peer in one keeps it forever), and the
/// outgoing queue was never closed, so a notification waiting for room in it waited
/// forever (and later ones were taken as sent). A panicking callback is logged, the
/// others run, and the connection ends as any other does.
#[tokio::test]
async fn a_panicking_on_close_callback_does_not_leave_the_peer_half_ended() {
    use common::unix::{config, start, ws_pair};
    use jsonrpc_peer::{Caller, Error};

    let (client, server) = ws_pair().await;
    let peer = start(server, Router::new(), &config().outgoing_queue(4));
    peer.on_close(|| panic!("a bug in the application's on_close callback"));
    let (ran_tx, ran) = tokio::sync::oneshot::channel::<()>();
    peer.on_close(move || {
        let _ = ran_tx.send(());
    });
    // Notifications until one fails: the queue fills, then they wait for room.
    let sender = tokio::spawn({
        let peer = peer.clone();
        async move {
            for i in 0..100_000u64 {
                if let Err(e) = peer.notify("item", [i]).await {
                    return Some(e);
                }
            }
            None
        }
    });
    // The other side goes.
    drop(client);
    within(peer.closed()).await;
    assert!(
        within(ran).await.is_ok(),
        "the callback registered after the panicking one never ran"
    );
    let ended = tokio::time::timeout(std::time::Duration::from_secs(5), sender).await;
    assert!(
        matches!(ended, Ok(Ok(Some(Error::Closed(_))))),
        "the notification waiting for room did not end with Closed: {ended:?}"
    );
}

/// A transport of the application's own (here a WebSocket wrapped by code with a bug)
/// that panics on the connection's task. The connection ends (1011) and its waiting
/// calls fail, but its outgoing queue was left open: a notification waiting for room
/// in it waited forever, and `notify` on the closed peer said `Ok` while its frame
/// went nowhere.
#[tokio::test]
async fn a_panic_in_the_connections_task_closes_its_outgoing_queue_too() {
    use std::pin::Pin;
    use std::task::{Context as TaskContext, Poll};

    use common::unix::{config, ws_pair, Raw};
    use futures_util::{Sink, Stream};
    use jsonrpc_peer::transport::{Frame, TransportError, WebSocket};
    use jsonrpc_peer::{Caller, Error, Peer};
    use tokio::net::UnixStream;

    /// Panics when it reads the text `boom`.
    struct Buggy(WebSocket<UnixStream>);

    impl Stream for Buggy {
        type Item = Result<Frame, TransportError>;
        fn poll_next(
            mut self: Pin<&mut Self>,
            cx: &mut TaskContext<'_>,
        ) -> Poll<Option<Self::Item>> {
            let next = Pin::new(&mut self.0).poll_next(cx);
            if let Poll::Ready(Some(Ok(Frame::Text(text)))) = &next {
                assert_ne!(text.as_str(), "boom", "a bug in the transport");
            }
            next
        }
    }

    impl Sink<Frame> for Buggy {
        type Error = TransportError;
        fn poll_ready(
            mut self: Pin<&mut Self>,
            cx: &mut TaskContext<'_>,
        ) -> Poll<Result<(), TransportError>> {
            Pin::new(&mut self.0).poll_ready(cx)
        }
        fn start_send(mut self: Pin<&mut Self>, frame: Frame) -> Result<(), TransportError> {
            Pin::new(&mut self.0).start_send(frame)
        }
        fn poll_flush(
            mut self: Pin<&mut Self>,
            cx: &mut TaskContext<'_>,
        ) -> Poll<Result<(), TransportError>> {
            Pin::new(&mut self.0).poll_flush(cx)
        }
        fn poll_close(
            mut self: Pin<&mut Self>,
            cx: &mut TaskContext<'_>,
        ) -> Poll<Result<(), TransportError>> {
            Pin::new(&mut self.0).poll_close(cx)
        }
    }

    let (client, server) = ws_pair().await;
    let peer = Peer::start(
        Buggy(WebSocket::new(server)),
        Router::new(),
        &config().outgoing_queue(4),
    );
    // Notifications until one fails; the client reads none, so they end up waiting
    // for room.
    let sender = tokio::spawn({
        let peer = peer.clone();
        async move {
            for i in 0..100_000u64 {
                if let Err(e) = peer.notify("item", [i]).await {
                    return Some(e);
                }
            }
            None
        }
    });
    let mut raw = Raw(client);
    raw.send("boom").await;
    let reason = within(peer.closed()).await;
    assert!(
        matches!(reason, CloseReason::Local { code: 1011, .. }),
        "{reason:?}"
    );
    let ended = tokio::time::timeout(std::time::Duration::from_secs(5), sender).await;
    assert!(
        matches!(ended, Ok(Ok(Some(Error::Closed(_))))),
        "the notification waiting for room did not end with Closed: {ended:?}"
    );
    let late = peer.notify("late", ()).await;
    assert!(matches!(late, Err(Error::Closed(_))), "{late:?}");
}

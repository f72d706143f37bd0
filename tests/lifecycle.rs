//! How calls end: closes, dropped connections, timeouts, cancellation, panics.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{serve, within, RawClient};
use jsonrpc_peer::{
    connect, Caller, CloseReason, Context, Error, ErrorCode, Peer, PeerConfig, Router, RpcError,
};
use serde::Deserialize;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

/// Tells the test when a `hang` handler starts, and when one is stopped before it
/// finishes (dropped with its task).
struct Probe {
    started: mpsc::UnboundedSender<()>,
    stopped: mpsc::UnboundedSender<()>,
}

struct StopGuard(Arc<Probe>);

impl Drop for StopGuard {
    fn drop(&mut self) {
        let _ = self.0.stopped.send(());
    }
}

/// The probe, and the receivers of its `started` and `stopped` events.
struct Events {
    started: mpsc::UnboundedReceiver<()>,
    stopped: mpsc::UnboundedReceiver<()>,
}

impl Events {
    /// Waits (bounded) for `n` handlers to be stopped.
    async fn stopped(&mut self, n: usize) {
        for _ in 0..n {
            within(self.stopped.recv())
                .await
                .expect("a handler was stopped");
        }
    }
}

/// `hang` never answers (until stopped); `slow(ms)` answers after `ms`; `boom` panics.
fn router(probe: Arc<Probe>) -> Router<Arc<Probe>> {
    Router::with_state(probe)
        .method("hang", |cx: Context<Arc<Probe>>, (): ()| async move {
            let probe = cx.state().clone();
            let _guard = StopGuard(probe.clone());
            let _ = probe.started.send(());
            std::future::pending::<()>().await;
            Ok::<_, RpcError>(())
        })
        .method(
            "slow",
            |_cx: Context<Arc<Probe>>, (ms,): (u64,)| async move {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                Ok::<_, RpcError>(ms)
            },
        )
        .method("boom", |_cx: Context<Arc<Probe>>, (): ()| async move {
            if true {
                panic!("a handler bug");
            }
            Ok::<_, RpcError>(())
        })
        .method(
            "add",
            |_cx: Context<Arc<Probe>>, (a, b): (i64, i64)| async move { Ok::<_, RpcError>(a + b) },
        )
        .notification("boom", |_cx: Context<Arc<Probe>>, (): ()| async move {
            panic!("a notification handler bug");
        })
}

fn probe() -> (Arc<Probe>, Events) {
    let (started, started_rx) = mpsc::unbounded_channel();
    let (stopped, stopped_rx) = mpsc::unbounded_channel();
    let events = Events {
        started: started_rx,
        stopped: stopped_rx,
    };
    (Arc::new(Probe { started, stopped }), events)
}

/// Starts `n` calls to `hang` from `caller` and waits until all `n` handlers run.
async fn hang_calls(
    caller: &Peer,
    n: usize,
    started: &mut mpsc::UnboundedReceiver<()>,
) -> Vec<tokio::task::JoinHandle<Result<(), Error>>> {
    let calls: Vec<_> = (0..n)
        .map(|_| {
            let caller = caller.clone();
            tokio::spawn(async move { caller.call::<()>("hang", ()).await })
        })
        .collect();
    for _ in 0..n {
        within(started.recv()).await.expect("a handler started");
    }
    assert_eq!(caller.pending_calls(), n);
    calls
}

/// Each call ends with `Error::Closed` (not its 30 s timeout: `within` allows 10 s).
/// That they end at the very instant of the close is timing, checked under paused
/// time in tests/engine.rs (`a_close_ends_waiting_calls_at_once...`,
/// `every_way_a_call_leaves_the_pending_map`), where a busy machine cannot flake it.
async fn assert_all_closed(calls: Vec<tokio::task::JoinHandle<Result<(), Error>>>) {
    for call in calls {
        let result = within(call).await.unwrap();
        assert!(
            matches!(result, Err(Error::Closed(_))),
            "expected Closed, got {result:?}"
        );
    }
}

#[tokio::test]
async fn a_close_frame_ends_every_waiting_call_and_stops_the_other_sides_handlers() {
    let (server_probe, mut server_events) = probe();
    let (client_probe, mut client_events) = probe();
    let (url, server) = serve(router(server_probe)).await;
    let mut gone = common::disconnections(&server);
    let client = within(connect(&url, router(client_probe))).await.unwrap();

    // The client waits on the server and the server waits on the client.
    let client_calls = hang_calls(&client, 3, &mut server_events.started).await;
    let server_peer = server.peers().pop().unwrap();
    let server_calls = hang_calls(&server_peer, 2, &mut client_events.started).await;

    within(client.close()).await;
    assert_all_closed(client_calls).await;
    assert_all_closed(server_calls).await;

    assert!(matches!(
        within(client.closed()).await,
        CloseReason::Local { code: 1000, .. }
    ));
    assert!(matches!(
        within(server_peer.closed()).await,
        CloseReason::Remote { code: 1000, .. }
    ));
    assert_eq!(client.pending_calls(), 0);
    assert_eq!(server_peer.pending_calls(), 0);
    // Handlers serving the side that went are stopped, on both sides.
    server_events.stopped(3).await;
    client_events.stopped(2).await;
    within(gone.recv())
        .await
        .expect("the server forgets the connection");
    assert_eq!(server.connection_count(), 0);
    // Calls after the close fail at once.
    let late = within(client.call::<i64>("add", (1, 2))).await;
    assert!(matches!(late, Err(Error::Closed(_))));
}

/// A TCP relay between a client and `upstream`: aborting it drops both connections
/// without a WebSocket close, as a dead link does.
async fn relay(upstream: String) -> (String, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://{}", listener.local_addr().unwrap());
    let upstream = upstream.trim_start_matches("ws://").to_owned();
    let task = tokio::spawn(async move {
        let (mut inbound, _) = listener.accept().await.unwrap();
        let mut outbound = tokio::net::TcpStream::connect(upstream).await.unwrap();
        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
    });
    (url, task)
}

#[tokio::test]
async fn a_dropped_connection_ends_every_waiting_call() {
    let (server_probe, mut server_events) = probe();
    let (client_probe, mut client_events) = probe();
    let (upstream, server) = serve(router(server_probe)).await;
    let (url, link) = relay(upstream).await;
    let client = within(connect(&url, router(client_probe))).await.unwrap();

    let client_calls = hang_calls(&client, 4, &mut server_events.started).await;
    let server_peer = server.peers().pop().unwrap();
    let server_calls = hang_calls(&server_peer, 4, &mut client_events.started).await;

    link.abort();
    assert_all_closed(client_calls).await;
    assert_all_closed(server_calls).await;
    let reason = within(client.closed()).await;
    assert!(
        matches!(reason, CloseReason::Transport(_) | CloseReason::Eof),
        "a dropped link is not a clean close: {reason:?}"
    );
    assert_eq!(client.pending_calls(), 0);
    assert_eq!(server_peer.pending_calls(), 0);
    server_events.stopped(4).await;
}

#[tokio::test]
async fn timeouts_and_dropped_calls_leave_nothing_behind() {
    let (probe, _events) = probe();
    let (url, _server) = serve(router(probe)).await;
    let config = PeerConfig::default().call_timeout(Duration::from_millis(100));
    let client = within(jsonrpc_peer::connect_with_config(
        &url,
        Router::new(),
        &config,
    ))
    .await
    .unwrap();

    // The peer's own timeout.
    let result = within(client.call::<()>("hang", ())).await;
    assert!(
        matches!(result, Err(Error::Timeout { after: d, .. }) if d == Duration::from_millis(100))
    );
    assert_eq!(client.pending_calls(), 0);

    // A call's own timeout, shorter than the peer's.
    let started = Instant::now();
    let result = within(
        client
            .call::<u64>("slow", (1000,))
            .timeout(Duration::from_millis(20)),
    )
    .await;
    assert!(matches!(result, Err(Error::Timeout { .. })));
    assert!(started.elapsed() < Duration::from_millis(1000));
    assert_eq!(client.pending_calls(), 0);

    // A call whose future is dropped.
    let dropped =
        tokio::time::timeout(Duration::from_millis(10), client.call::<()>("hang", ())).await;
    assert!(dropped.is_err());
    assert_eq!(client.pending_calls(), 0);

    // A late answer: `slow(50)` times out at 10 ms and its answer arrives later. The
    // answer to `slow(200)` is sent after it, so once that one is in, the late one was
    // read (and ignored).
    let late = client
        .call::<u64>("slow", (50,))
        .timeout(Duration::from_millis(10))
        .await;
    assert!(matches!(late, Err(Error::Timeout { .. })));
    let after: u64 = within(client.call("slow", (200,)).timeout(Duration::from_secs(5)))
        .await
        .unwrap();
    assert_eq!(after, 200);
    assert_eq!(client.pending_calls(), 0);
    assert!(!client.is_closed());
}

#[tokio::test]
async fn a_panicking_handler_answers_internal_error_and_the_connection_goes_on() {
    let (probe, _events) = probe();
    let (url, _server) = serve(router(probe)).await;
    let client = within(connect(&url, Router::new())).await.unwrap();

    let err = within(client.call::<()>("boom", ())).await.unwrap_err();
    let rpc = err.rpc().expect("an error answer");
    assert_eq!(rpc.code, ErrorCode::INTERNAL_ERROR);
    assert_eq!(rpc.message, "Internal error");

    within(client.notify("boom", ())).await.unwrap();
    let sum: i64 = within(client.call("add", (2, 3))).await.unwrap();
    assert_eq!(sum, 5);
    assert!(!client.is_closed());
}

#[derive(Deserialize)]
struct Point {
    x: i32,
    y: i32,
}

#[tokio::test]
async fn params_that_do_not_fit_are_invalid_params_with_serdes_message() {
    let router = Router::new()
        .method("norm1", |_cx: Context, p: Point| async move {
            Ok::<_, RpcError>(p.x.abs() + p.y.abs())
        })
        .method("none", |_cx: Context, (): ()| async move {
            Ok::<_, RpcError>("none taken")
        });
    let (url, _server) = serve(router).await;
    let mut raw = RawClient::connect(&url).await;

    // A struct reads named and positional params alike.
    let a = raw
        .ask(r#"{"jsonrpc":"2.0","method":"norm1","params":{"x":3,"y":-4},"id":1}"#)
        .await;
    assert_eq!(a["result"], 7);
    let a = raw
        .ask(r#"{"jsonrpc":"2.0","method":"norm1","params":[3,-4],"id":2}"#)
        .await;
    assert_eq!(a["result"], 7);

    for (params, message) in [
        (
            r#"{"x":"3","y":4}"#,
            "invalid type: string \"3\", expected i32",
        ),
        (r#"{"x":3}"#, "missing field `y`"),
        (r#"[3]"#, "invalid length 1"),
        (r#"[3,4,5]"#, "trailing"),
    ] {
        let frame = format!(r#"{{"jsonrpc":"2.0","method":"norm1","params":{params},"id":"p"}}"#);
        let a = raw.ask(&frame).await;
        assert_eq!(a["id"], "p");
        assert_eq!(a["error"]["code"], -32602, "for {params}: {a}");
        assert_eq!(a["error"]["message"], "Invalid params");
        let data = a["error"]["data"].as_str().unwrap_or_default();
        assert!(
            data.contains(message),
            "for {params}, data {data:?} should say {message:?}"
        );
    }
    // A method without params reads `[]` and `{}` as it reads absent params.
    for params in ["", r#","params":[]"#, r#","params":{ }"#] {
        let a = raw
            .ask(&format!(
                r#"{{"jsonrpc":"2.0","method":"none","id":4{params}}}"#
            ))
            .await;
        assert_eq!(a["result"], "none taken", "for {params:?}: {a}");
    }
    let a = raw
        .ask(r#"{"jsonrpc":"2.0","method":"none","params":[1],"id":5}"#)
        .await;
    assert_eq!(a["error"]["code"], -32602);

    // Absent params for a struct that needs fields.
    let a = raw
        .ask(r#"{"jsonrpc":"2.0","method":"norm1","id":3}"#)
        .await;
    assert_eq!(a["error"]["code"], -32602);
}

#[tokio::test]
async fn closing_one_side_resolves_closed_on_both_with_the_cause() {
    let (url, server) = serve(Router::new()).await;
    let mut arrivals = common::connections(&server);
    let client = within(connect(&url, Router::new())).await.unwrap();
    let server_peer = within(arrivals.recv())
        .await
        .expect("the server registers the connection");
    within(server_peer.close_with(4000, "bye")).await;
    match within(client.closed()).await {
        CloseReason::Remote { code, reason } => assert_eq!((code, reason.as_str()), (4000, "bye")),
        other => panic!("expected the server's close, got {other:?}"),
    }
    assert!(client.is_closed());
    let err = within(client.call::<()>("x", ())).await.unwrap_err();
    assert!(
        err.to_string().contains("4000"),
        "the cause travels with the error: {err}"
    );
}

/// `Duration::MAX` for "as long as it takes", wherever a close takes a duration: a
/// graceful close's grace, the server's shutdown grace, the closing handshake's
/// timeout. Each added it to the clock and panicked ("overflow when adding duration to
/// instant"): the caller's task, or the connection's, which then never closed.
#[tokio::test]
async fn duration_max_as_a_close_grace_or_timeout_closes_without_panicking() {
    let config = PeerConfig::default().close_timeout(Duration::MAX);
    let (url, server) = common::serve_with(Router::new(), config.clone()).await;
    let mut arrivals = common::connections(&server);

    let client = within(jsonrpc_peer::connect_with_config(
        &url,
        Router::new(),
        &config,
    ))
    .await
    .unwrap();
    let server_peer = within(arrivals.recv()).await.unwrap();
    let closing = tokio::spawn(async move {
        server_peer
            .drain_and_close(4000, "done", Duration::MAX)
            .await
    });
    within(closing)
        .await
        .expect("drain_and_close did not panic");
    match within(client.closed()).await {
        CloseReason::Remote { code, .. } => assert_eq!(code, 4000),
        other => panic!("the client saw {other:?}"),
    }

    let client = within(jsonrpc_peer::connect(&url, Router::new()))
        .await
        .unwrap();
    within(arrivals.recv()).await.unwrap();
    let shutdown = tokio::spawn(async move { server.shutdown_within(Duration::MAX).await });
    within(shutdown)
        .await
        .expect("shutdown_within did not panic");
    match within(client.closed()).await {
        CloseReason::Remote { code, .. } => assert_eq!(code, 1001),
        other => panic!("the client saw {other:?}"),
    }
}

/// The application's code that runs on the connection's own path, outside any handler:
/// a call layer (here on a method nothing serves, and on a batch) and a lane's key
/// function (here on params the peer chose).
mod on_the_connections_path {
    use jsonrpc_peer::layer::{CallInfo, Decision, Direction, Layer};
    use jsonrpc_peer::MethodOptions;

    pub struct Panics;

    impl Layer for Panics {
        fn on_call(&self, call: &CallInfo<'_>) -> Decision {
            assert!(call.is_known(), "a layer's bug");
            Decision::Continue
        }

        fn on_batch(&self, _direction: Direction, calls: usize) {
            assert!(calls < 2, "a layer's bug");
        }
    }

    pub fn keyed() -> MethodOptions<(Vec<u32>,)> {
        MethodOptions::new().keyed(|p: &(Vec<u32>,)| p.0[0])
    }
}

#[tokio::test]
async fn application_code_on_the_connections_path_that_panics_costs_its_call_not_the_connection() {
    let router = Router::new()
        .method("add", |_cx: Context, (a, b): (i64, i64)| async move {
            Ok::<_, RpcError>(a + b)
        })
        .method_with(
            "first",
            on_the_connections_path::keyed(),
            |_cx: Context, (v,): (Vec<u32>,)| async move { Ok::<_, RpcError>(v[0]) },
        );
    let config = PeerConfig::default().layer(on_the_connections_path::Panics);
    let (url, handle) = common::serve_with(router, config).await;
    let mut gone = common::disconnections(&handle);
    let mut raw = RawClient::connect(&url).await;
    for bad in [
        r#"{"jsonrpc":"2.0","method":"nothing","id":1}"#,
        r#"{"jsonrpc":"2.0","method":"first","params":[[]],"id":1}"#,
    ] {
        let answer = raw.ask(bad).await;
        assert_eq!(answer["error"]["code"], -32603, "{bad}: {answer}");
        assert_eq!(answer["id"], 1);
        let answer = raw
            .ask(r#"{"jsonrpc":"2.0","method":"add","params":[2,3],"id":2}"#)
            .await;
        assert_eq!(answer["result"], 5, "after {bad}: {answer}");
    }
    // The key of a call that fits is taken as before.
    let answer = raw
        .ask(r#"{"jsonrpc":"2.0","method":"first","params":[[7]],"id":3}"#)
        .await;
    assert_eq!(answer["result"], 7);
    // A batch is answered in full though the layer that saw it panicked.
    let answer = raw
        .ask(r#"[{"jsonrpc":"2.0","method":"add","params":[1,1],"id":4},{"jsonrpc":"2.0","method":"add","params":[2,2],"id":5}]"#)
        .await;
    let mut sums: Vec<i64> = answer
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["result"].as_i64().unwrap())
        .collect();
    sums.sort();
    assert_eq!(sums, [2, 4]);
    // And the connection still ends as any other: forgotten, and nothing for a
    // shutdown to wait on.
    drop(raw);
    within(gone.recv()).await.unwrap();
    assert_eq!(handle.connection_count(), 0);
    within(handle.shutdown_within(Duration::from_secs(1))).await;
}

#[tokio::test]
async fn hooks_that_panic_leave_no_peer_behind_and_the_hooks_after_them_run() {
    let router = Router::new().method("add", |_cx: Context, (a, b): (i64, i64)| async move {
        Ok::<_, RpcError>(a + b)
    });
    let (url, handle) = common::serve(router).await;
    handle.on_connect(|_peer, _info| panic!("an on_connect hook's bug"));
    handle.on_disconnect(|_peer, _info| panic!("an on_disconnect hook's bug"));
    let mut gone = common::disconnections(&handle);

    let client = within(connect(&url, Router::new())).await.unwrap();
    let sum: i64 = within(client.call("add", (2, 3))).await.unwrap();
    assert_eq!(sum, 5);
    assert_eq!(handle.connection_count(), 1);
    within(client.close()).await;
    // The hook after the one that panicked saw the end.
    within(gone.recv()).await.unwrap();
    assert_eq!(handle.connection_count(), 0);
    within(handle.shutdown_within(Duration::from_secs(1))).await;
}

/// A transport of the application's own (any `Stream` + `Sink` of frames is one) that
/// panics once told to: code on the connection's task that no handler wraps.
struct PanicsWhenTold {
    inner: jsonrpc_peer::transport::Memory,
    told: Arc<std::sync::atomic::AtomicBool>,
}

impl futures_util::Stream for PanicsWhenTold {
    type Item = Result<jsonrpc_peer::transport::Frame, jsonrpc_peer::transport::TransportError>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        let polled = std::pin::Pin::new(&mut self.inner).poll_next(cx);
        if polled.is_ready() && self.told.load(std::sync::atomic::Ordering::SeqCst) {
            panic!("the transport's bug");
        }
        polled
    }
}

impl futures_util::Sink<jsonrpc_peer::transport::Frame> for PanicsWhenTold {
    type Error = jsonrpc_peer::transport::TransportError;

    fn poll_ready(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::pin::Pin::new(&mut self.inner).poll_ready(cx)
    }

    fn start_send(
        mut self: std::pin::Pin<&mut Self>,
        item: jsonrpc_peer::transport::Frame,
    ) -> Result<(), Self::Error> {
        std::pin::Pin::new(&mut self.inner).start_send(item)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_close(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::pin::Pin::new(&mut self.inner).poll_close(cx)
    }
}

#[tokio::test]
async fn a_panic_that_reaches_the_connections_task_ends_the_connection_as_any_end_does() {
    let (ours, theirs) = jsonrpc_peer::transport::pair();
    let told = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let transport = PanicsWhenTold {
        inner: ours,
        told: told.clone(),
    };
    let peer = Peer::start(transport, Router::new(), &PeerConfig::default());
    let started = Arc::new(tokio::sync::Notify::new());
    let hang = Router::with_state(started.clone()).method(
        "hang",
        |cx: Context<Arc<tokio::sync::Notify>>, (): ()| async move {
            cx.state().notify_one();
            std::future::pending::<()>().await;
            Ok::<_, RpcError>(())
        },
    );
    let other = Peer::start(theirs, hang, &PeerConfig::default());
    let waiting = tokio::spawn({
        let peer = peer.clone();
        async move { peer.call::<()>("hang", ()).await }
    });
    // The call is out and waits; the next frame read panics.
    within(started.notified()).await;
    told.store(true, std::sync::atomic::Ordering::SeqCst);
    other.notify("wake", ()).await.unwrap();
    let reason = within(peer.closed()).await;
    assert!(
        matches!(&reason, CloseReason::Local { code: 1011, .. }),
        "{reason}"
    );
    let call = within(waiting).await.unwrap();
    assert!(matches!(call, Err(Error::Closed(_))), "{call:?}");
    assert!(peer.is_closed());
}

/// Sets its flag when the handler that owns it is gone, finished or stopped.
struct GoneFlag(Arc<std::sync::atomic::AtomicBool>);

impl Drop for GoneFlag {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A notification handler (the ordered lane) still running when the other side goes
/// is stopped and gone by the time the server forgets the connection, as a call's is:
/// the `on_disconnect` hook, which cleans up after a connection, never runs beside a
/// handler of that connection.
#[tokio::test]
async fn a_notification_handler_is_gone_before_the_server_forgets_its_connection() {
    let gone = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let router = Router::with_state((gone.clone(), started_tx)).notification(
        "hold",
        |cx: Context<(
            Arc<std::sync::atomic::AtomicBool>,
            mpsc::UnboundedSender<()>,
        )>,
         (): ()| async move {
            let _flag = GoneFlag(cx.state().0.clone());
            // Not done in its first poll: it goes on on the ordered task.
            tokio::task::yield_now().await;
            let _ = cx.state().1.send(());
            std::future::pending::<()>().await;
        },
    );
    let (url, server) = serve(router).await;
    let (seen_tx, mut seen) = mpsc::unbounded_channel();
    server.on_disconnect(move |_peer, _info| {
        let _ = seen_tx.send(gone.load(std::sync::atomic::Ordering::SeqCst));
    });
    let mut raw = RawClient::connect(&url).await;
    raw.send(r#"{"jsonrpc":"2.0","method":"hold"}"#).await;
    within(started.recv()).await.expect("the handler runs");
    // The client goes without a close frame.
    drop(raw);
    let handler_gone = within(seen.recv()).await.expect("the hook ran");
    assert!(
        handler_gone,
        "on_disconnect ran while the connection's notification handler was still there"
    );
}

/// A server whose runtime shuts down under its connections, its handle kept beyond it
/// (an application that runs its server on a runtime of its own, say): each
/// connection's end still reaches the registry. It no longer counts them, lists them or
/// waits for them on shutdown, and `on_disconnect` runs for each, as for any end.
#[test]
fn connections_of_a_runtime_that_shuts_down_leave_the_registry() {
    let server_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (url, handle) = server_runtime.block_on(serve(Router::new()));
    let (ended_tx, mut ended) = mpsc::unbounded_channel();
    handle.on_disconnect(move |peer, _| {
        let _ = ended_tx.send(peer.id());
    });
    let clients = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _peers = clients.block_on(async {
        let mut peers = Vec::new();
        for _ in 0..3 {
            peers.push(within(connect(&url, Router::new())).await.unwrap());
        }
        peers
    });
    assert_eq!(handle.connection_count(), 3);
    let served = handle.peers();

    drop(server_runtime);

    assert_eq!(
        handle.connection_count(),
        0,
        "still counted after their runtime"
    );
    assert!(handle.peers().is_empty());
    let mut ids: Vec<u64> = std::iter::from_fn(|| ended.try_recv().ok()).collect();
    ids.sort_unstable();
    let mut served: Vec<u64> = served.iter().map(|p| p.id()).collect();
    served.sort_unstable();
    assert_eq!(ids, served, "on_disconnect ran once for each");
    // Nothing left to wait for: shutdown returns at once rather than after its grace.
    let started = Instant::now();
    clients.block_on(handle.shutdown_within(Duration::from_secs(30)));
    assert!(started.elapsed() < Duration::from_secs(10));
}

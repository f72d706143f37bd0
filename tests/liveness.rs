//! Liveness: keepalive, graceful shutdown, back-pressure, and churn that leaves
//! nothing behind.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::within;
use jsonrpc_peer::{
    connect, connect_with_config, Caller, CloseReason, Context, Error, MethodOptions, PeerConfig,
    Router, RpcError, Server,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch, Notify, Semaphore};

/// A TCP relay that can be frozen: it then stops forwarding without closing anything,
/// as a paused process or a dead link does.
async fn freezable_relay(upstream: String) -> (String, watch::Sender<bool>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://{}", listener.local_addr().unwrap());
    let (frozen, _) = watch::channel(false);
    let freeze = frozen.clone();
    tokio::spawn(async move {
        let (inbound, _) = listener.accept().await.unwrap();
        let outbound = TcpStream::connect(upstream.trim_start_matches("ws://"))
            .await
            .unwrap();
        let (a_read, a_write) = inbound.into_split();
        let (b_read, b_write) = outbound.into_split();
        let pipe = |mut from: tokio::net::tcp::OwnedReadHalf,
                    mut to: tokio::net::tcp::OwnedWriteHalf,
                    mut frozen: watch::Receiver<bool>| async move {
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                let n = match from.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                if *frozen.borrow_and_update() {
                    // Hold the connections open, forward nothing, forever.
                    let _ = frozen.wait_for(|f| !*f).await;
                    std::future::pending::<()>().await;
                }
                if to.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
        };
        tokio::join!(
            pipe(a_read, b_write, freeze.subscribe()),
            pipe(b_read, a_write, freeze.subscribe())
        );
    });
    (url, frozen)
}

/// `hang` never answers and says on `started` that it runs; `echo` answers at once.
fn hang_router(started: mpsc::UnboundedSender<()>) -> Router<mpsc::UnboundedSender<()>> {
    Router::with_state(started)
        .method("hang", |cx: Context<_>, (): ()| async move {
            let _ = cx.state().send(());
            std::future::pending::<()>().await;
            Ok::<_, RpcError>(())
        })
        .method("echo", |_cx: Context<_>, (n,): (u64,)| async move {
            Ok::<_, RpcError>(n)
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_peer_is_detected_and_its_calls_end() {
    let fast = PeerConfig::default()
        .ping_interval(Some(Duration::from_secs(1)))
        .keepalive_timeout(Duration::from_secs(1));
    let server = Server::bind("127.0.0.1:0")
        .await
        .unwrap()
        .peer_config(fast.clone());
    let upstream = format!("ws://{}", server.local_addr().unwrap());
    let handle = server.handle();
    let (started, mut hangs) = mpsc::unbounded_channel();
    tokio::spawn(server.serve(hang_router(started.clone())));
    let (url, frozen) = freezable_relay(upstream).await;
    let client = within(connect_with_config(&url, hang_router(started), &fast))
        .await
        .unwrap();

    // Over a real socket: pings are answered and calls go through. How long a healthy
    // link stays open (sixty rounds) and how soon a frozen one is noticed (within
    // interval + timeout) is timing, checked under paused time in tests/engine.rs
    // (`a_responsive_peer_stays_open_and_a_frozen_one_is_closed_within_...`).
    let _: u64 = within(client.call("echo", (1,))).await.unwrap();
    let server_peer = handle.peers().pop().unwrap();

    let waiting_client = tokio::spawn({
        let c = client.clone();
        async move { c.call::<()>("hang", ()).await }
    });
    let waiting_server = tokio::spawn({
        let p = server_peer.clone();
        async move { p.call::<()>("hang", ()).await }
    });
    // Both handlers run, so both calls wait.
    for _ in 0..2 {
        within(hangs.recv()).await.expect("a hang handler started");
    }

    frozen.send_replace(true);
    // Both notice (well before `within`'s 10 s, as the calls' own timeout is 30 s).
    for (side, waiting) in [("client", waiting_client), ("server", waiting_server)] {
        let result = within(waiting).await.unwrap();
        assert!(
            matches!(result, Err(Error::Closed(CloseReason::KeepaliveTimeout))),
            "{side}: expected a keepalive timeout, got {result:?}"
        );
    }
    assert_eq!(client.pending_calls(), 0);
    assert_eq!(server_peer.pending_calls(), 0);
}

type Gate = (Arc<Notify>, Arc<Notify>);

/// `slow` (in the lane `options` say) tells `started` and waits for `release`, then
/// answers "finished"; `quick` answers at once.
fn gated(options: MethodOptions<()>) -> (Router<Gate>, Arc<Notify>, Arc<Notify>) {
    let release = Arc::new(Notify::new());
    let started = Arc::new(Notify::new());
    let router = Router::with_state((release.clone(), started.clone()))
        .method_with("slow", options, |cx: Context<Gate>, (): ()| async move {
            cx.state().1.notify_one();
            cx.state().0.notified().await;
            Ok::<_, RpcError>("finished")
        })
        .method("quick", |_cx: Context<_>, (): ()| async {
            Ok::<_, RpcError>("quick")
        });
    (router, release, started)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_lets_running_calls_finish_then_closes_with_1001() {
    let (router, release, started) = gated(MethodOptions::new());
    let server = Server::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://{}", server.local_addr().unwrap());
    let handle = server.handle();
    let serving = tokio::spawn(server.serve(router));
    let client = within(connect(&url, Router::new())).await.unwrap();

    let running = tokio::spawn({
        let c = client.clone();
        async move { c.call::<String>("slow", ()).await }
    });
    within(started.notified()).await;
    let shutting_down = tokio::spawn({
        let handle = handle.clone();
        async move { handle.shutdown_within(Duration::from_secs(5)).await }
    });
    // While it drains, new calls are refused and the running one goes on.
    let refused = within(async {
        loop {
            match client.call::<String>("quick", ()).await {
                Err(Error::Rpc { error: e, .. }) => break e,
                Ok(_) => tokio::task::yield_now().await, // shutdown not started yet
                Err(other) => panic!("unexpected {other:?}"),
            }
        }
    })
    .await;
    assert_eq!(refused.code, -32000);
    assert!(!running.is_finished());
    release.notify_one();
    assert_eq!(
        within(running).await.unwrap().unwrap(),
        "finished",
        "the running call got its answer"
    );
    within(shutting_down).await.unwrap();
    assert!(matches!(
        within(client.closed()).await,
        CloseReason::Remote { code: 1001, .. }
    ));
    within(serving).await.unwrap().unwrap();
    assert_eq!(handle.connection_count(), 0, "nothing is left running");
    assert!(
        TcpStream::connect(url.trim_start_matches("ws://"))
            .await
            .is_err(),
        "no longer accepting"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_whose_handshake_ends_after_shutdown_began_is_closed_too() {
    use jsonrpc_peer::{HandshakePolicy, Refusal, ServerHandle};
    use std::sync::OnceLock;

    let server = Server::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://{}", server.local_addr().unwrap());
    let handle = server.handle();
    let for_hook: Arc<OnceLock<ServerHandle>> = Arc::new(OnceLock::new());
    let _ = for_hook.set(handle.clone());
    // The handshake's check holds it until a whole shutdown has run (on a thread of its
    // own): shutdown listed the connections to close before this one was one.
    let policy = HandshakePolicy::default().authenticate(move |_request| {
        let handle = for_hook.get().unwrap().clone();
        let runtime = tokio::runtime::Handle::current();
        let shutdown = std::thread::spawn(move || {
            runtime.block_on(handle.shutdown_within(Duration::from_millis(100)))
        });
        shutdown.join().unwrap();
        Ok::<_, Refusal>(())
    });
    let serving = tokio::spawn(server.handshake_policy(policy).serve(Router::new()));
    let client = within(connect(&url, Router::new())).await.unwrap();
    within(serving).await.unwrap().unwrap();
    assert!(matches!(
        within(client.closed()).await,
        CloseReason::Remote { code: 1001, .. }
    ));
    let mut gone = common::disconnections(&handle);
    if handle.connection_count() > 0 {
        within(gone.recv()).await.unwrap();
    }
    assert_eq!(handle.connection_count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_lets_a_running_ordered_call_finish_too() {
    // An ordered call runs on the connection's task for ordered work, not with the
    // other running calls: the drain must wait for it as well.
    let (router, release, started) = gated(MethodOptions::new().ordered());
    let server = Server::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://{}", server.local_addr().unwrap());
    let handle = server.handle();
    tokio::spawn(server.serve(router));
    let client = within(connect(&url, Router::new())).await.unwrap();
    let running = tokio::spawn({
        let c = client.clone();
        async move { c.call::<String>("slow", ()).await }
    });
    within(started.notified()).await;
    let shutting_down = tokio::spawn({
        let handle = handle.clone();
        async move { handle.shutdown_within(Duration::from_secs(5)).await }
    });
    // Once the drain has begun (new calls are refused), the running call finishes.
    within(async {
        while client.call::<String>("quick", ()).await.is_ok() {
            tokio::task::yield_now().await;
        }
    })
    .await;
    assert!(!running.is_finished(), "cut off: {:?}", running.await);
    release.notify_one();
    assert_eq!(within(running).await.unwrap().unwrap(), "finished");
    within(shutting_down).await.unwrap();
    assert!(matches!(
        within(client.closed()).await,
        CloseReason::Remote { code: 1001, .. }
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_stops_calls_that_outlive_the_grace_period() {
    let server = Server::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://{}", server.local_addr().unwrap());
    let handle = server.handle();
    let started = Arc::new(Notify::new());
    let router = Router::with_state(started.clone()).method(
        "hang",
        |cx: Context<Arc<Notify>>, (): ()| async move {
            cx.state().notify_one();
            std::future::pending::<()>().await;
            Ok::<_, RpcError>(())
        },
    );
    let serving = tokio::spawn(server.serve(router));
    let client = within(connect(&url, Router::new())).await.unwrap();
    let hanging = tokio::spawn({
        let c = client.clone();
        async move { c.call::<()>("hang", ()).await }
    });
    within(started.notified()).await;
    let started = Instant::now();
    within(handle.shutdown_within(Duration::from_millis(300))).await;
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(matches!(
        within(hanging).await.unwrap(),
        Err(Error::Closed(_))
    ));
    assert_eq!(handle.connection_count(), 0);
    within(serving).await.unwrap().unwrap();
}

type PermitsState = (Arc<Semaphore>, Arc<AtomicUsize>, mpsc::UnboundedSender<()>);

/// What the test holds of [`permits`]' router: the permits it hands out, how many
/// handlers run now, and a tick as each starts.
struct Permits {
    release: Arc<Semaphore>,
    running: Arc<AtomicUsize>,
    starts: mpsc::UnboundedReceiver<()>,
}

/// `wait` waits for a permit, which the test hands out; `quick` answers at once.
fn permits() -> (Router<PermitsState>, Permits) {
    let release = Arc::new(Semaphore::new(0));
    let running = Arc::new(AtomicUsize::new(0));
    let (started, starts) = mpsc::unbounded_channel();
    let router = Router::with_state((release.clone(), running.clone(), started))
        .method("wait", |cx: Context<PermitsState>, (): ()| async move {
            let (release, running, started) = cx.state();
            running.fetch_add(1, Ordering::SeqCst);
            let _ = started.send(());
            let _permit = release.acquire().await;
            running.fetch_sub(1, Ordering::SeqCst);
            Ok::<_, RpcError>(())
        })
        .method("quick", |_cx: Context<_>, (): ()| async {
            Ok::<_, RpcError>(())
        });
    let permits = Permits {
        release,
        running,
        starts,
    };
    (router, permits)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_in_flight_limit_the_peer_stops_reading_instead_of_failing() {
    let (
        router,
        Permits {
            release,
            running,
            mut starts,
        },
    ) = permits();
    let config = PeerConfig::default().max_in_flight(4);
    let server = Server::bind("127.0.0.1:0")
        .await
        .unwrap()
        .peer_config(config);
    let url = format!("ws://{}", server.local_addr().unwrap());
    tokio::spawn(server.serve(router));
    let client = within(connect(&url, Router::new())).await.unwrap();

    let waits: Vec<_> = (0..6)
        .map(|_| {
            let c = client.clone();
            tokio::spawn(async move { c.call::<()>("wait", ()).await })
        })
        .collect();
    for _ in 0..4 {
        within(starts.recv()).await.expect("a call started");
    }
    // The server reads no further: a quick call sent now is not answered while four run.
    let quick = client
        .call::<()>("quick", ())
        .timeout(Duration::from_millis(300))
        .await;
    assert!(matches!(quick, Err(Error::Timeout { .. })), "{quick:?}");
    assert_eq!(
        running.load(Ordering::SeqCst),
        4,
        "never more than the limit at once"
    );

    // As calls finish, reading resumes; every call is answered, none failed.
    release.add_permits(6);
    for w in waits {
        within(w).await.unwrap().unwrap();
    }
    assert_eq!(running.load(Ordering::SeqCst), 0);
    within(client.call::<()>("quick", ())).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_calls_of_a_batch_count_each_against_the_in_flight_limit() {
    let (
        router,
        Permits {
            release,
            running,
            mut starts,
        },
    ) = permits();
    let config = PeerConfig::default().max_in_flight(4);
    let (url, _handle) = common::serve_with(router, config).await;
    let mut raw = common::RawClient::connect(&url).await;
    let batch = |first: u64| {
        let calls: Vec<_> = (first..first + 3)
            .map(|id| serde_json::json!({"jsonrpc": "2.0", "method": "wait", "id": id}))
            .collect();
        serde_json::Value::from(calls).to_string()
    };
    // Three calls run; there is room for one more, so the next batch is read and runs
    // whole: six. Then the peer reads no further (it read on past a batch counted as
    // one call before).
    raw.send(&batch(0)).await;
    raw.send(&batch(3)).await;
    raw.send(r#"{"jsonrpc":"2.0","method":"quick","id":9}"#)
        .await;
    for _ in 0..6 {
        within(starts.recv()).await.expect("a call started");
    }
    let early = tokio::time::timeout(Duration::from_millis(300), raw.recv_text()).await;
    assert!(early.is_err(), "answered while six calls ran: {early:?}");
    assert_eq!(running.load(Ordering::SeqCst), 6);

    release.add_permits(6);
    let mut ids = Vec::new();
    for _ in 0..3 {
        match raw.recv_json().await {
            serde_json::Value::Array(answers) => {
                ids.extend(answers.iter().map(|a| a["id"].clone()))
            }
            single => ids.push(single["id"].clone()),
        }
    }
    ids.sort_by_key(|id| id.as_u64());
    assert_eq!(
        ids,
        (0..6)
            .chain([9])
            .map(serde_json::Value::from)
            .collect::<Vec<_>>()
    );
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .map(|d| d.count())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn churn_leaves_file_descriptors_and_tasks_at_their_baseline() {
    let server = Server::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://{}", server.local_addr().unwrap());
    let handle = server.handle();
    let mut gone = common::disconnections(&handle);
    let (started, _starts) = mpsc::unbounded_channel();
    tokio::spawn(server.serve(hang_router(started)));
    let metrics = tokio::runtime::Handle::current().metrics();
    // Warm up once, so lazily made things (the runtime's own) are in the baseline.
    let warm = within(connect(&url, Router::new())).await.unwrap();
    within(warm.close()).await;
    within(gone.recv())
        .await
        .expect("the server forgets the connection");
    let (fds, tasks) = (open_fds(), metrics.num_alive_tasks());

    // 1,000 orderly cycles: connect, call, close.
    for chunk in 0..20 {
        let cycles = (0..50).map(|i| {
            let url = url.clone();
            async move {
                let peer = connect(&url, Router::new()).await.unwrap();
                let n: u64 = peer.call("echo", (chunk * 50 + i,)).await.unwrap();
                assert_eq!(n, chunk * 50 + i);
                peer.close().await;
                assert_eq!(peer.pending_calls(), 0);
            }
        });
        within(futures_util::future::join_all(cycles)).await;
    }
    // 1,000 abrupt drops: a raw client that sends a call and vanishes (no close frame).
    for _ in 0..20 {
        let drops = (0..50).map(|_| {
            let url = url.clone();
            async move {
                let (mut ws, _) = tokio_tungstenite::connect_async(&url).await.unwrap();
                use futures_util::SinkExt;
                ws.send(r#"{"jsonrpc":"2.0","method":"hang","id":1}"#.into())
                    .await
                    .unwrap();
                drop(ws);
            }
        });
        within(futures_util::future::join_all(drops)).await;
    }
    // The server reports each of the 2,000 gone once its tasks and socket are.
    for _ in 0..2000 {
        within(gone.recv())
            .await
            .expect("the server forgets a connection");
    }
    // A connection's last task may still be returning, and a client's socket closing,
    // as the report arrives: file descriptors and task counts have no event of their
    // own to wait on, so they are read again until they settle (bounded).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (now_fds, now_tasks) = (open_fds(), metrics.num_alive_tasks());
        if handle.connection_count() == 0 && now_fds <= fds + 3 && now_tasks <= tasks + 3 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still {} connections, {now_fds} fds (baseline {fds}), {now_tasks} tasks (baseline {tasks})",
            handle.connection_count()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!(
        "after 2,000 connections: fds {} (baseline {fds}), tasks {} (baseline {tasks})",
        open_fds(),
        metrics.num_alive_tasks()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn once_shutdown_returns_the_port_is_free_to_bind_again() {
    // With one connection or none, shutdown has little to wait for: it must still not
    // return before the accept loop let its listener go (a restart on the same port,
    // as in tests/push.rs, failed with "address in use" when it did).
    for round in 0..20 {
        let server = Server::bind("127.0.0.1:0").await.unwrap();
        let addr = server.local_addr().unwrap();
        let handle = server.handle();
        let serving = tokio::spawn(server.serve(Router::new()));
        let client = match round % 2 {
            1 => Some(
                within(connect(&format!("ws://{addr}"), Router::new()))
                    .await
                    .unwrap(),
            ),
            _ => None,
        };
        within(handle.shutdown()).await;
        drop(client);
        let again = Server::bind(addr);
        assert!(
            again.await.is_ok(),
            "round {round}: {addr} still taken after shutdown returned"
        );
        within(serving).await.unwrap().unwrap();
    }
}

/// Keepalive after a stall: the connection's task did not run for 100 s (a process
/// stopped and continued, a runtime starved by blocking code; paused time here). Its
/// keepalive replayed the schedule it missed from the timer's deadlines: a ping "sent"
/// at the first missed deadline was given up at the next one, both in the past, so the
/// connection was closed with 1011 in the same instant the ping went out. The other
/// side had no moment to answer; it was alive, and its calls failed. The keepalive's
/// rule: a ping unanswered past the timeout (nothing heard since it was sent) means the
/// other side is gone.
#[tokio::test(start_paused = true)]
async fn a_stalled_connection_pings_and_waits_for_the_answer_before_giving_up() {
    use jsonrpc_peer::{transport, Caller, Context, Peer, PeerConfig, Router, RpcError};
    use std::sync::Arc;
    use std::time::Duration;

    let (a, b) = transport::pair();
    let router = Router::new().method("one", |_cx: Context, (): ()| async { Ok::<_, RpcError>(1) });
    // The server keeps the defaults: a ping every 30 s, given up after 30 s.
    let server = Peer::start(b, Arc::new(router), &PeerConfig::default());
    let client = Peer::start(
        a,
        Arc::new(Router::new()),
        &PeerConfig::default().ping_interval(None),
    );
    assert_eq!(within(client.call::<i64>("one", ())).await.unwrap(), 1);

    tokio::time::advance(Duration::from_secs(100)).await;
    let answer = within(client.call::<i64>("one", ())).await;
    assert!(
        matches!(answer, Ok(1)),
        "{answer:?}; the server closed: {:?}",
        server.close_reason()
    );
}

/// A client that reads a long stream of notifications steadily, but slower than the
/// server makes them, and sends nothing (a browser: it answers pings but sends none).
/// The handler waits for room in the outgoing queue, so the queue is full at every
/// keepalive tick and no ping can be queued; the client still reads a frame every
/// 20 ms. The silence was timed all the same, and the server closed the connection
/// with 1011 two seconds in, a live client that was reading. The sink taking frames
/// while the queue is full is the sign of life, as for answers a client reads slowly.
#[tokio::test(start_paused = true)]
async fn a_client_reading_a_long_stream_steadily_is_not_closed_by_keepalive() {
    use common::unix::{start, ws_pair, Raw};

    const ITEMS: u64 = 300;
    let second = Duration::from_secs(1);
    let config = PeerConfig::default()
        .outgoing_queue(4)
        .ping_interval(Some(second))
        .keepalive_timeout(second);
    let router = Router::new().method("stream", |cx: Context, (n,): (u64,)| async move {
        let chunk = "x".repeat(16 * 1024);
        for i in 0..n {
            if cx.peer().notify("item", (i, &chunk)).await.is_err() {
                return Err(RpcError::internal_error("the connection ended"));
            }
        }
        Ok::<_, RpcError>(n)
    });
    let (client, server) = ws_pair().await;
    let peer = start(server, router, &config);
    let mut raw = Raw(client);
    raw.send(&format!(
        r#"{{"jsonrpc":"2.0","method":"stream","params":[{ITEMS}],"id":1}}"#
    ))
    .await;

    // 300 items, one every 20 ms: 6 s, six keepalive periods.
    let began = tokio::time::Instant::now();
    for i in 0..ITEMS {
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(
            !peer.is_closed(),
            "closed {:?} in, after the client read {i} items: {:?}",
            began.elapsed(),
            peer.close_reason()
        );
        let item = raw.recv().await;
        assert_eq!(item["params"][0], i, "{}", item["method"]);
    }
    assert_eq!(raw.recv().await["result"], ITEMS);
    assert!(!peer.is_closed(), "{:?}", peer.close_reason());
}

/// Handlers may call back the side that called them. With as many such handlers
/// running as the in-flight limit allows, the server stopped reading, and the answers
/// to their calls back waited unread behind the limit they held: each handler waited
/// its whole call timeout (30 s) and the client's calls failed with -32603. Answers to
/// this side's own calls start nothing, and are read while reading is paused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handlers_at_the_in_flight_limit_get_the_answers_to_their_calls_back() {
    let server_router = Router::new().method("ask", |cx: Context, (): ()| async move {
        cx.peer()
            .call::<u64>("confirm", ())
            .await
            .map_err(|e| RpcError::internal_error(e.to_string()))
    });
    let config = PeerConfig::default().max_in_flight(2);
    let (url, _handle) = common::serve_with(server_router, config).await;
    let client_router = Router::new().method("confirm", |_cx: Context, (): ()| async {
        Ok::<_, RpcError>(7u64)
    });
    let client = within(connect(&url, client_router)).await.unwrap();

    let both = async { tokio::join!(client.call::<u64>("ask", ()), client.call::<u64>("ask", ())) };
    let answers = tokio::time::timeout(Duration::from_secs(5), both).await;
    let Ok((first, second)) = answers else {
        panic!("no answer within 5 s: the answers to the calls back are not read");
    };
    assert_eq!((first.unwrap(), second.unwrap()), (7, 7));
}

//! Who may connect: the Origin allow-list, authentication, the connection limit and
//! oversized handshakes, for `Server` and for the axum endpoint.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::within;
use jsonrpc_peer::axum::Endpoint;
use jsonrpc_peer::{connect, Caller, Context, HandshakePolicy, Refusal, Router, RpcError, Server};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Error as WsError;

struct User(String);

/// Counts calls, so a test can tell that no handler ran.
fn router(calls: Arc<AtomicUsize>) -> Router<Arc<AtomicUsize>> {
    Router::with_state(calls).method(
        "whoami",
        |cx: Context<Arc<AtomicUsize>>, (): ()| async move {
            cx.state().fetch_add(1, Ordering::SeqCst);
            Ok::<_, RpcError>(cx.peer().auth::<User>().map(|u| u.0.clone()))
        },
    )
}

fn policy() -> HandshakePolicy {
    HandshakePolicy::default()
        .allowed_origins(["https://app.example.com"])
        .authenticate(|request| {
            match request.uri().query().and_then(|q| q.strip_prefix("token=")) {
                Some("s3cret") => Ok(User("alice".into())),
                Some(_) => Err(Refusal::forbidden("unknown token")),
                None => Err(Refusal::unauthorized("a token is needed")),
            }
        })
}

/// Both ways of serving: a `Server`, and the axum endpoint. Returns `ws://HOST:PORT/rpc`.
async fn serve(axum_endpoint: bool, policy: HandshakePolicy, calls: Arc<AtomicUsize>) -> String {
    if axum_endpoint {
        let app = axum::Router::new().route(
            "/rpc",
            Endpoint::new(router(calls))
                .handshake_policy(policy)
                .into_route(),
        );
        let addr = common::serve_axum(app).await;
        format!("ws://{addr}/rpc")
    } else {
        let server = Server::bind("127.0.0.1:0")
            .await
            .unwrap()
            .handshake_policy(policy);
        let url = format!("ws://{}/rpc", server.local_addr().unwrap());
        tokio::spawn(server.serve(router(calls)));
        url
    }
}

/// Opens a raw WebSocket with an optional Origin; returns the HTTP status of a refusal.
async fn handshake(url: &str, origin: Option<&str>) -> Result<(), u16> {
    let mut request = url.into_client_request().unwrap();
    if let Some(origin) = origin {
        request
            .headers_mut()
            .insert("origin", origin.parse().unwrap());
    }
    match within(tokio_tungstenite::connect_async(request)).await {
        Ok(_) => Ok(()),
        Err(WsError::Http(response)) => Err(response.status().as_u16()),
        Err(other) => panic!("expected an HTTP refusal, got {other}"),
    }
}

#[tokio::test]
async fn origins_and_authentication_decide_at_the_handshake() {
    for axum_endpoint in [false, true] {
        let calls = Arc::new(AtomicUsize::new(0));
        let base = serve(axum_endpoint, policy(), calls.clone()).await;
        let ok = format!("{base}?token=s3cret");

        assert_eq!(
            handshake(&ok, Some("https://evil.example.net")).await,
            Err(403),
            "foreign origin"
        );
        assert_eq!(
            handshake(&ok, Some("https://APP.example.com")).await,
            Ok(()),
            "origins ignore case"
        );
        assert_eq!(
            handshake(&ok, None).await,
            Ok(()),
            "no Origin: not a browser"
        );
        assert_eq!(handshake(&base, None).await, Err(401), "no token");
        assert_eq!(
            handshake(&format!("{base}?token=nope"), None).await,
            Err(403),
            "wrong token"
        );

        // What the hook attached reaches the handlers.
        let peer = within(connect(&ok, Router::new())).await.unwrap();
        let me: Option<String> = within(peer.call("whoami", ())).await.unwrap();
        assert_eq!(me.as_deref(), Some("alice"));
        assert_eq!(
            calls.load(Ordering::SeqCst),
            1,
            "no handler ran for a refused handshake"
        );
    }
}

/// A browser never writes its scheme's default port in `Origin` (`https://host`, not
/// `https://host:443`), so an allow-list entry written with it names the same origin:
/// the browser on that site gets in, one on another port does not.
#[tokio::test]
async fn an_allowed_origin_written_with_its_default_port_lets_its_browsers_in() {
    for axum_endpoint in [false, true] {
        let policy = HandshakePolicy::default()
            .allowed_origins(["https://app.example.com:443", "http://localhost:80"]);
        let url = serve(axum_endpoint, policy, Arc::new(AtomicUsize::new(0))).await;
        assert_eq!(
            handshake(&url, Some("https://app.example.com")).await,
            Ok(()),
            "axum: {axum_endpoint}: https on 443"
        );
        assert_eq!(
            handshake(&url, Some("http://localhost")).await,
            Ok(()),
            "axum: {axum_endpoint}: http on 80"
        );
        assert_eq!(
            handshake(&url, Some("https://app.example.com:8443")).await,
            Err(403),
            "axum: {axum_endpoint}: another port"
        );
        assert_eq!(
            handshake(&url, Some("http://app.example.com")).await,
            Err(403),
            "axum: {axum_endpoint}: another scheme"
        );
    }
}

#[tokio::test]
async fn a_missing_origin_can_be_refused_too() {
    let calls = Arc::new(AtomicUsize::new(0));
    let strict = HandshakePolicy::default()
        .allowed_origins(["https://app.example.com"])
        .allow_missing_origin(false);
    let url = serve(false, strict, calls).await;
    assert_eq!(handshake(&url, None).await, Err(403));
    assert_eq!(
        handshake(&url, Some("https://app.example.com")).await,
        Ok(())
    );
}

#[tokio::test]
async fn past_the_connection_limit_the_handshake_gets_503_until_one_closes() {
    for axum_endpoint in [false, true] {
        let calls = Arc::new(AtomicUsize::new(0));
        let url = serve(
            axum_endpoint,
            HandshakePolicy::default().max_connections(3),
            calls,
        )
        .await;
        let mut peers = Vec::new();
        for _ in 0..3 {
            peers.push(within(connect(&url, Router::new())).await.unwrap());
        }
        assert_eq!(handshake(&url, None).await, Err(503), "connection 4 of 3");
        let first = peers.remove(0);
        within(first.close()).await;
        // The slot is free once the server side's tasks are gone; retry (bounded)
        // until the server has noticed.
        let again = within(async {
            loop {
                match handshake(&url, None).await {
                    Ok(()) => break,
                    Err(503) => tokio::task::yield_now().await,
                    Err(other) => panic!("unexpected status {other}"),
                }
            }
        });
        again.await;
    }
}

/// A refusal for the request's own fault (its origin, its credentials) is final: a
/// client told 403 or 401 stops dialling, one told 503 dials again. A full server
/// still says which.
#[tokio::test]
async fn a_full_server_still_answers_a_refused_origin_or_token_as_such() {
    for axum_endpoint in [false, true] {
        let calls = Arc::new(AtomicUsize::new(0));
        let base = serve(axum_endpoint, policy().max_connections(1), calls).await;
        let ok = format!("{base}?token=s3cret");
        let _only = within(connect(&ok, Router::new())).await.unwrap();
        assert_eq!(handshake(&ok, None).await, Err(503), "full");
        assert_eq!(
            handshake(&ok, Some("https://evil.example.net")).await,
            Err(403),
            "axum: {axum_endpoint}: foreign origin"
        );
        assert_eq!(
            handshake(&base, None).await,
            Err(401),
            "axum: {axum_endpoint}: no token"
        );
    }
}

#[tokio::test]
async fn an_oversized_handshake_is_refused() {
    let calls = Arc::new(AtomicUsize::new(0));
    let url = serve(false, HandshakePolicy::default(), calls.clone()).await;
    let addr = url
        .trim_start_matches("ws://")
        .trim_end_matches("/rpc")
        .to_owned();
    let mut tcp = within(tokio::net::TcpStream::connect(&addr)).await.unwrap();
    // Twice the default limit of 16 KiB: the server reads up to the limit, answers, and
    // drains what follows (up to 64 KiB) before it closes, so its answer is not lost
    // to a reset; the test ends its request so that the drain sees the end.
    let huge = "a".repeat(32 * 1024);
    let request = format!(
        "GET /rpc HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nX-Big: {huge}\r\n\r\n"
    );
    within(tcp.write_all(request.as_bytes()))
        .await
        .expect("the kernel's buffers take the request");
    within(tcp.shutdown()).await.expect("end of the request");
    let mut answer = Vec::new();
    within(tcp.read_to_end(&mut answer))
        .await
        .expect("the server answers, then closes");
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        answer.starts_with("HTTP/1.1 431 "),
        "an oversized handshake is refused with 431: {answer:.200}"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn handshake_headers_stay_with_the_peer_only_when_asked() {
    for keep in [false, true] {
        let router = Router::new().method("header", |cx: Context, (): ()| async move {
            let value = cx
                .peer()
                .info()
                .headers
                .get("x-team")
                .map(|v| v.to_str().unwrap_or("").to_owned());
            Ok::<_, RpcError>((value, cx.peer().info().path.clone()))
        });
        let server = Server::bind("127.0.0.1:0")
            .await
            .unwrap()
            .handshake_policy(HandshakePolicy::default().keep_headers(keep));
        let addr = server.local_addr().unwrap();
        let seen_by_hook = Arc::new(std::sync::Mutex::new(None));
        server.handle().on_connect({
            let seen = seen_by_hook.clone();
            move |_peer, info| *seen.lock().unwrap() = info.headers.get("x-team").cloned()
        });
        tokio::spawn(server.serve(router));

        let mut request = format!("ws://{addr}/rpc?x=1")
            .into_client_request()
            .unwrap();
        request
            .headers_mut()
            .insert("x-team", "blue".parse().unwrap());
        let (mut ws, _) = within(tokio_tungstenite::connect_async(request))
            .await
            .unwrap();
        use futures_util::{SinkExt, StreamExt};
        within(ws.send(r#"{"jsonrpc":"2.0","method":"header","id":1}"#.into()))
            .await
            .unwrap();
        let answer = within(ws.next()).await.unwrap().unwrap();
        let answer: serde_json::Value = serde_json::from_str(answer.to_text().unwrap()).unwrap();
        let expected = if keep {
            serde_json::json!("blue")
        } else {
            serde_json::Value::Null
        };
        assert_eq!(answer["result"][0], expected, "keep_headers({keep})");
        assert_eq!(answer["result"][1], "/rpc?x=1", "the path is always kept");
        assert_eq!(
            seen_by_hook
                .lock()
                .unwrap()
                .as_ref()
                .map(|v| v.to_str().unwrap().to_owned())
                .as_deref(),
            Some("blue"),
            "the hook always sees them"
        );
    }
}

/// Connections past `max_handshakes` are accepted and wait for a place, oldest first,
/// instead of being left in the listen queue, where a herd overflows it and the
/// kernel drops the SYNs of the rest. One handshake place, held by a client that sends
/// nothing, and a listen queue of one: twenty more clients still get their TCP
/// connection (the queue alone holds two), and each its handshake once the silent
/// one goes.
#[tokio::test]
async fn past_max_handshakes_newcomers_are_accepted_and_wait_their_turn() {
    let long = Duration::from_secs(600);
    let server = Server::bind_with_backlog("127.0.0.1:0", 1)
        .await
        .unwrap()
        .handshake_policy(
            HandshakePolicy::default()
                .max_handshakes(1)
                .handshake_grace(long)
                .handshake_timeout(long),
        );
    let addr = server.local_addr().unwrap();
    tokio::spawn(server.serve(router(Arc::new(AtomicUsize::new(0)))));
    let silent = within(TcpStream::connect(addr)).await.unwrap();
    let mut waiting = Vec::new();
    for _ in 0..20 {
        waiting.push(within(TcpStream::connect(addr)).await.unwrap());
    }
    drop(silent);
    let url = format!("ws://{addr}/rpc");
    let handshakes = waiting
        .into_iter()
        .map(|stream| within(tokio_tungstenite::client_async(url.clone(), stream)));
    for done in futures_util::future::join_all(handshakes).await {
        let (_, response) = done.expect("the handshake succeeds once a place is free");
        assert_eq!(response.status().as_u16(), 101);
    }
}

/// A shutdown that starts while a handshake is being authenticated (past the
/// shutdown's check, its peer not yet registered) returns only once that connection
/// is gone too: it is closed with 1001 as it starts, within the grace period.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_waits_for_the_handshake_it_met_being_authenticated() {
    use futures_util::StreamExt;
    use std::sync::{mpsc, Mutex};
    use tokio_tungstenite::tungstenite::Message;

    let (entered_tx, entered_rx) = mpsc::channel::<()>();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let (entered_tx, release_rx) = (Mutex::new(entered_tx), Mutex::new(release_rx));
    // Synchronous and slow, as a lookup in a blocking store is.
    let policy = HandshakePolicy::default().authenticate(move |_request| {
        let _ = entered_tx.lock().unwrap().send(());
        let _ = release_rx
            .lock()
            .unwrap()
            .recv_timeout(Duration::from_secs(10));
        Ok(())
    });
    let server = Server::bind("127.0.0.1:0")
        .await
        .unwrap()
        .handshake_policy(policy);
    let url = format!("ws://{}", server.local_addr().unwrap());
    let handle = server.handle();
    tokio::spawn(server.serve(Router::new()));

    let client = tokio::spawn(tokio_tungstenite::connect_async(url));
    // The hook blocks a runtime thread: wait for it off the runtime.
    within(tokio::task::spawn_blocking(move || {
        entered_rx.recv_timeout(Duration::from_secs(10))
    }))
    .await
    .unwrap()
    .expect("the hook ran");
    let mut shutdown = tokio::spawn({
        let handle = handle.clone();
        async move { handle.shutdown_within(Duration::from_millis(200)).await }
    });
    // Not done while the handshake it met is still being decided (a shutdown with
    // nothing to wait for returns in a few milliseconds).
    let early = tokio::time::timeout(Duration::from_millis(500), &mut shutdown).await;
    assert!(
        early.is_err(),
        "shutdown returned while a connection it met was being admitted"
    );
    release_tx.send(()).unwrap();
    within(&mut shutdown).await.unwrap();
    assert_eq!(handle.connection_count(), 0);
    // The client was let in, then closed with 1001.
    let (mut ws, response) = within(client).await.unwrap().expect("the handshake");
    assert_eq!(response.status(), 101);
    let mut close = None;
    for _ in 0..8 {
        match within(ws.next()).await {
            Some(Ok(Message::Close(frame))) => {
                close = frame.map(|f| u16::from(f.code));
                break;
            }
            Some(Ok(_)) => continue,
            _ => break,
        }
    }
    assert_eq!(close, Some(1001));
}

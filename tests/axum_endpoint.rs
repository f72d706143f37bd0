//! The `axum` feature: a peer endpoint mounted on an axum route, next to plain routes.

mod common;

use common::within;
use jsonrpc_peer::axum::Endpoint;
use jsonrpc_peer::{connect, Caller, Context, Router, RpcError};
use tokio::sync::mpsc;

async fn app() -> (String, jsonrpc_peer::ServerHandle) {
    let rpc =
        common::spec_methods::spec_router().method("whoami", |cx: Context, (): ()| async move {
            Ok::<_, RpcError>(cx.peer().remote_addr().map(|a| a.ip().to_string()))
        });
    let endpoint = Endpoint::new(rpc);
    let handle = endpoint.handle();
    let app = axum::Router::new()
        .route("/rpc", endpoint.into_route())
        .route("/", axum::routing::get(|| async { "a page" }));
    let addr = common::serve_axum(app).await;
    (format!("{addr}"), handle)
}

#[tokio::test]
async fn calls_notifications_and_broadcast_through_axum() {
    let (addr, handle) = app().await;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let client_router =
        Router::with_state(tx).notification("news", |cx: Context<_>, (n,): (u32,)| async move {
            let _ = cx.state().send(n);
        });
    let peer = within(connect(&format!("ws://{addr}/rpc"), client_router))
        .await
        .unwrap();
    let diff: i64 = within(peer.call("subtract", [42, 23])).await.unwrap();
    assert_eq!(diff, 19);
    let ip: Option<String> = within(peer.call("whoami", ())).await.unwrap();
    assert_eq!(
        ip.as_deref(),
        Some("127.0.0.1"),
        "the endpoint knows the remote address"
    );

    assert_eq!(handle.connection_count(), 1);
    assert_eq!(handle.broadcast("news", &(7,)).unwrap(), 1);
    assert_eq!(within(rx.recv()).await, Some(7));

    within(handle.shutdown()).await;
    let reason = within(peer.closed()).await;
    assert!(
        matches!(reason, jsonrpc_peer::CloseReason::Remote { code: 1001, .. }),
        "{reason:?}"
    );
    // After shutdown, new connections are refused.
    assert!(within(connect(&format!("ws://{addr}/rpc"), Router::new()))
        .await
        .is_err());
}

#[tokio::test]
async fn plain_http_to_the_endpoint_is_told_to_upgrade() {
    let (addr, _handle) = app().await;
    let mut tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    tcp.write_all(
        format!("GET /rpc HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    let mut response = String::new();
    within(tcp.read_to_string(&mut response)).await.unwrap();
    assert!(response.starts_with("HTTP/1.1 426"), "{response}");
}

/// `max_connections_per_address` on the axum endpoint served the common way,
/// `axum::serve(listener, app)`: without `into_make_service_with_connect_info` the
/// endpoint does not know the remote address, and the bound was skipped without a
/// word. One address opened as many connections as it liked, while the policy said
/// "the next one is refused with 429".
#[tokio::test]
async fn the_axum_endpoint_does_not_skip_the_bound_per_address_silently() {
    use jsonrpc_peer::axum::Endpoint;
    use jsonrpc_peer::HandshakePolicy;

    let policy = HandshakePolicy::default().max_connections_per_address(Some(1));
    let endpoint = Endpoint::new(Router::new()).handshake_policy(policy);
    let app = axum::Router::new().route("/rpc", endpoint.into_route());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://{}/rpc", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let mut open = Vec::new();
    for _ in 0..3 {
        match within(tokio_tungstenite::connect_async(&url)).await {
            Ok((ws, _)) => open.push(ws),
            Err(_) => break,
        }
    }
    assert!(
        open.len() <= 1,
        "{} connections open from 127.0.0.1 with a bound of one per address",
        open.len()
    );
}

/// Mounted under a prefix (`Router::nest`), the endpoint still tells its handlers, and
/// the authentication hook, the path the client asked for, not what the nesting left
/// of it.
#[tokio::test]
async fn a_nested_endpoint_sees_the_path_the_client_asked_for() {
    let rpc = Router::new().method("path", |cx: Context, (): ()| async move {
        Ok::<_, RpcError>(cx.peer().info().path.clone())
    });
    let (seen_tx, mut seen_rx) = mpsc::unbounded_channel();
    let policy = jsonrpc_peer::HandshakePolicy::default().authenticate(move |request| {
        let _ = seen_tx.send(request.uri().to_string());
        Ok(())
    });
    let endpoint = Endpoint::new(rpc).handshake_policy(policy);
    let app = axum::Router::new().nest(
        "/api",
        axum::Router::new().route("/rpc", endpoint.into_route()),
    );
    let addr = common::serve_axum(app).await;
    let peer = within(connect(
        &format!("ws://{addr}/api/rpc?room=1"),
        Router::new(),
    ))
    .await
    .unwrap();
    let path: Option<String> = within(peer.call("path", ())).await.unwrap();
    assert_eq!(path.as_deref(), Some("/api/rpc?room=1"));
    assert_eq!(
        within(seen_rx.recv()).await.as_deref(),
        Some("/api/rpc?room=1")
    );
}

/// As with `Server`: a client whose connect has resolved is in the endpoint's registry,
/// and a broadcast made at once reaches it (the endpoint registers the connection
/// before hyper writes the 101 it returns; registered after, the test failed in every
/// one of 10 runs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_axum_a_broadcast_made_as_soon_as_connect_resolves_reaches_the_client() {
    let (addr, handle) = app().await;
    let mut clients = Vec::new();
    for round in 0..200u32 {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let router = Router::with_state(tx).notification(
            "news",
            |cx: Context<_>, (n,): (u32,)| async move {
                let _ = cx.state().send(n);
            },
        );
        let peer = within(connect(&format!("ws://{addr}/rpc"), router))
            .await
            .unwrap();
        assert_eq!(
            handle.connection_count(),
            round as usize + 1,
            "round {round}: connected, and not in the endpoint's registry"
        );
        handle.broadcast("news", &(round,)).unwrap();
        assert_eq!(within(rx.recv()).await, Some(round), "round {round}");
        clients.push((peer, rx));
    }
}

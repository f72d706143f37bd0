//! A client as a new user writes one: handshake headers, refusals that say why, a
//! connection that closes when its last handle is dropped, hooks that add up, a token
//! refreshed for each redial, `last_error` as the link's state.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::proxy::Proxy;
use common::{connections, disconnections, serve, within};
use jsonrpc_peer::http::header::AUTHORIZATION;
use jsonrpc_peer::http::StatusCode;
use jsonrpc_peer::{
    connect, Backoff, Caller, ClientRequestBuilder, Context, Error, HandshakePolicy,
    IntoClientRequest, LinkState, Peer, Reconnecting, Refusal, Router, RpcError, Server,
    ServerHandle,
};
use tokio::sync::mpsc;

/// A server that admits `Authorization: Bearer s3cret` only, and counts handshakes.
async fn guarded() -> (String, ServerHandle, Arc<AtomicUsize>) {
    let attempts = Arc::new(AtomicUsize::new(0));
    let counted = attempts.clone();
    let policy = HandshakePolicy::default().authenticate(move |req| {
        counted.fetch_add(1, Ordering::SeqCst);
        match req.headers().get("authorization").map(|v| v.to_str()) {
            Some(Ok("Bearer s3cret")) => Ok("ada".to_owned()),
            _ => Err(Refusal::unauthorized("a bearer token is required")),
        }
    });
    let router = Router::new().method("whoami", |cx: Context, (): ()| async move {
        Ok::<_, RpcError>(cx.peer().auth::<String>().cloned())
    });
    let server = Server::bind("127.0.0.1:0")
        .await
        .unwrap()
        .handshake_policy(policy);
    let url = format!("ws://{}/rpc", server.local_addr().unwrap());
    let handle = server.handle();
    tokio::spawn(server.serve(router));
    (url, handle, attempts)
}

#[tokio::test]
async fn a_client_sends_handshake_headers() {
    let (url, _server, _) = guarded().await;

    let request = ClientRequestBuilder::new(url.parse().unwrap())
        .with_header("Authorization", "Bearer s3cret");
    let peer = within(connect(request, Router::new())).await.unwrap();
    let who: Option<String> = within(peer.call("whoami", ())).await.unwrap();
    assert_eq!(who.as_deref(), Some("ada"));

    // Or tungstenite's way: a request made from the URL, headers added.
    let mut request = url.as_str().into_client_request().unwrap();
    request
        .headers_mut()
        .insert("authorization", "Bearer s3cret".parse().unwrap());
    let peer = within(connect(request, Router::new())).await.unwrap();
    let who: Option<String> = within(peer.call("whoami", ())).await.unwrap();
    assert_eq!(who.as_deref(), Some("ada"));
}

#[tokio::test]
async fn a_refused_handshake_is_its_own_error_with_the_status_and_body() {
    let (url, _server, _) = guarded().await;
    let e = within(connect(url.as_str(), Router::new()))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, Error::Refused { status, body }
            if *status == StatusCode::UNAUTHORIZED
                && body.as_deref() == Some("a bearer token is required")),
        "{e:?}"
    );
    assert_eq!(e.refused_status(), Some(StatusCode::UNAUTHORIZED));
    assert_eq!(
        e.to_string(),
        "the server refused the handshake: 401 Unauthorized (a bearer token is required)"
    );

    // A server that is full answers 503: refused too, not an I/O error.
    let server = Server::bind("127.0.0.1:0")
        .await
        .unwrap()
        .handshake_policy(HandshakePolicy::default().max_connections(1));
    let full = format!("ws://{}", server.local_addr().unwrap());
    tokio::spawn(server.serve(Router::new()));
    let _first = within(connect(full.as_str(), Router::new())).await.unwrap();
    let e = within(connect(full.as_str(), Router::new()))
        .await
        .unwrap_err();
    assert_eq!(
        e.refused_status(),
        Some(StatusCode::SERVICE_UNAVAILABLE),
        "{e:?}"
    );

    // Nothing listening is a transport error, not a refusal.
    let gone = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("ws://{}", listener.local_addr().unwrap())
    };
    let e = within(connect(gone.as_str(), Router::new()))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Transport(_)), "{e:?}");
}

#[tokio::test]
async fn a_reconnecting_client_stops_on_401_and_says_why() {
    let (url, _server, attempts) = guarded().await;
    let client = Reconnecting::builder(url.as_str(), Router::new())
        .backoff(
            Backoff::default()
                .initial(Duration::from_millis(1))
                .max(Duration::from_millis(5)),
        )
        .start();
    let mut state = client.watch_state();
    within(state.wait_for(LinkState::is_final)).await.unwrap();
    assert_eq!(
        client.state(),
        LinkState::Refused {
            status: StatusCode::UNAUTHORIZED
        }
    );
    let e = within(client.call::<Option<String>>("whoami", ()))
        .await
        .unwrap_err();
    assert_eq!(e.refused_status(), Some(StatusCode::UNAUTHORIZED), "{e:?}");
    let last = client.last_error().expect("the refusal is kept");
    assert_eq!(last.refused_status(), Some(StatusCode::UNAUTHORIZED));
    // One handshake, not one every few milliseconds forever.
    assert_eq!(attempts.load(Ordering::SeqCst), 1);
    within(client.close()).await;

    // With the header, every attempt carries it.
    let request = ClientRequestBuilder::new(url.parse().unwrap())
        .with_header("Authorization", "Bearer s3cret");
    let client = Reconnecting::builder(request, Router::new()).start();
    let who: Option<String> = within(client.call("whoami", ())).await.unwrap();
    assert_eq!(who.as_deref(), Some("ada"));
    within(client.close()).await;
}

#[tokio::test]
async fn a_reconnecting_client_with_a_bad_url_stops_at_once() {
    let client = Reconnecting::builder("not a url", Router::new()).start();
    let mut state = client.watch_state();
    within(state.wait_for(LinkState::is_final)).await.unwrap();
    assert_eq!(client.state(), LinkState::Stopped);
    assert!(matches!(
        client.last_error().as_deref(),
        Some(Error::Transport(_))
    ));
}

/// A URL that parses but that no attempt can dial (an `http://` one where `ws://` was
/// meant, `wss://` without TLS support) stops the client at once, as a malformed one
/// does, instead of failing every attempt for ever.
#[tokio::test]
async fn a_reconnecting_client_with_a_url_it_cannot_dial_stops_at_once() {
    let (listening, _server) = serve(Router::new()).await;
    let mut urls = vec![
        "http://127.0.0.1:9/rpc".to_owned(),
        listening.replace("ws://", "https://"),
    ];
    if cfg!(not(feature = "rustls")) {
        urls.push(listening.replace("ws://", "wss://"));
    }
    for url in urls {
        let client = Reconnecting::builder(url.as_str(), Router::new())
            .backoff(fast())
            .start();
        let mut state = client.watch_state();
        within(state.wait_for(LinkState::is_final))
            .await
            .unwrap_or_else(|_| panic!("{url}: the client's task ended"));
        assert_eq!(client.state(), LinkState::Stopped, "{url}");
        let why = client
            .last_error()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            why.contains("scheme") || why.contains("TLS"),
            "{url}: last_error: {why}"
        );
        let e = within(client.call::<String>("ping", ())).await.unwrap_err();
        assert!(matches!(e, Error::Closed(_)), "{url}: {e:?}");
    }
}

#[tokio::test]
async fn dropping_the_last_client_handle_closes_the_connection() {
    let (url, server) = serve(Router::new().method("ping", |_cx: Context, (): ()| async {
        Ok::<_, RpcError>("pong")
    }))
    .await;
    let mut gone = disconnections(&server);
    let peer = within(connect(url.as_str(), Router::new())).await.unwrap();
    let clone = peer.clone();
    drop(peer);
    // A clone still holds it: still open.
    let pong: String = within(clone.call("ping", ())).await.unwrap();
    assert_eq!(pong, "pong");
    assert_eq!(server.connection_count(), 1);

    drop(clone);
    let closed = tokio::time::timeout(Duration::from_secs(1), gone.recv())
        .await
        .expect("the server's count drops within a second")
        .expect("a disconnection");
    assert_eq!(server.connection_count(), 0);
    // And it was a clean close with 1000 from the client.
    assert!(
        matches!(
            closed.close_reason(),
            Some(jsonrpc_peer::CloseReason::Remote { code: 1000, .. })
        ),
        "{:?}",
        closed.close_reason()
    );
}

#[tokio::test]
async fn server_side_peers_stay_when_their_handles_are_dropped() {
    let (url, server) = serve(Router::new().method("ping", |_cx: Context, (): ()| async {
        Ok::<_, RpcError>("pong")
    }))
    .await;
    let mut new = connections(&server);
    let client = within(connect(url.as_str(), Router::new())).await.unwrap();
    let server_side = within(new.recv()).await.unwrap();
    drop(server_side);
    drop(server.peers());
    let pong: String = within(client.call("ping", ())).await.unwrap();
    assert_eq!(pong, "pong");
    assert_eq!(server.connection_count(), 1);
}

#[tokio::test]
async fn hooks_add_up_instead_of_replacing_each_other() {
    let (url, server) = serve(Router::new()).await;
    let (tx, mut ran) = mpsc::unbounded_channel();
    for name in ["first", "second"] {
        let tx = tx.clone();
        server.on_connect(move |_peer, _info| {
            let _ = tx.send(name);
        });
    }
    let _peer = within(connect(url.as_str(), Router::new())).await.unwrap();
    assert_eq!(within(ran.recv()).await, Some("first"));
    assert_eq!(within(ran.recv()).await, Some("second"));

    let (tx, mut hooked) = mpsc::unbounded_channel();
    let (a, b) = (tx.clone(), tx);
    let client = Reconnecting::builder(url.as_str(), Router::new())
        .on_connect(move |_peer| {
            let a = a.clone();
            async move {
                let _ = a.send("subscribe");
            }
        })
        .on_connect(move |_peer| {
            let b = b.clone();
            async move {
                let _ = b.send("announce");
            }
        })
        .start();
    within(client.connected(Duration::from_secs(5)))
        .await
        .unwrap();
    assert_eq!(within(hooked.recv()).await, Some("subscribe"));
    assert_eq!(within(hooked.recv()).await, Some("announce"));
    within(client.close()).await;
}

/// A server that admits only the current bearer token, which the test rotates; its
/// `renew` method rotates it over a live connection and returns the new one.
async fn rotating() -> (String, ServerHandle, Arc<Mutex<String>>) {
    let current = Arc::new(Mutex::new("t1".to_owned()));
    let accepted = current.clone();
    let policy = HandshakePolicy::default().authenticate(move |req| {
        let want = format!("Bearer {}", accepted.lock().unwrap());
        match req.headers().get("authorization").map(|v| v.to_str()) {
            Some(Ok(got)) if got == want => Ok(got.to_owned()),
            _ => Err(Refusal::unauthorized("not the current token")),
        }
    });
    let router = Router::with_state(current.clone())
        .method(
            "whoami",
            |cx: Context<Arc<Mutex<String>>>, (): ()| async move {
                Ok::<_, RpcError>(cx.peer().auth::<String>().cloned())
            },
        )
        .method(
            "renew",
            |cx: Context<Arc<Mutex<String>>>, (): ()| async move {
                let mut token = cx.state().lock().unwrap();
                *token = format!("{}+", *token);
                Ok::<_, RpcError>(token.clone())
            },
        );
    let server = Server::bind("127.0.0.1:0")
        .await
        .unwrap()
        .handshake_policy(policy);
    let url = format!("ws://{}/rpc", server.local_addr().unwrap());
    let handle = server.handle();
    tokio::spawn(server.serve(router));
    (url, handle, current)
}

/// A call with no deadline to speak of (`Duration::MAX`) goes through a reconnecting
/// client as it goes through a peer.
#[tokio::test]
async fn a_reconnecting_call_with_the_longest_timeout_goes_through() {
    let router = Router::new().method("ping", |_: Context, (): ()| async {
        Ok::<_, RpcError>("pong")
    });
    let (url, _handle) = serve(router).await;
    let peer = within(connect(url.as_str(), Router::new())).await.unwrap();
    let pong: String = within(peer.call("ping", ()).timeout(Duration::MAX))
        .await
        .unwrap();
    assert_eq!(pong, "pong");
    let client = Reconnecting::builder(url.as_str(), Router::new()).start();
    let pong: String = within(client.call("ping", ()).timeout(Duration::MAX))
        .await
        .unwrap();
    assert_eq!(pong, "pong");
    within(client.close()).await;
}

/// An `on_connect` hook that panics costs that connection (closed with 1011, the failure
/// kept in `last_error`), not the client: it dials again, and `close` ends it all.
#[tokio::test]
async fn a_panicking_on_connect_hook_closes_its_connection_and_the_client_goes_on() {
    let router = Router::new().method("subscribe", |_: Context, (): ()| async {
        Err::<bool, _>(RpcError::invalid_params("no"))
    });
    let (url, handle) = serve(router).await;
    let mut gone = disconnections(&handle);
    let mut made = connections(&handle);
    let client = Reconnecting::builder(url, Router::new())
        .backoff(fast())
        .on_connect(|peer| async move {
            let _: bool = peer.call("subscribe", ()).await.unwrap();
        })
        .start();
    within(made.recv()).await.unwrap();
    within(gone.recv())
        .await
        .expect("the hook's connection closed");
    within(made.recv()).await.expect("and another dialed");
    let why = client
        .last_error()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(why.contains("1011"), "last_error: {why}");
    within(client.close()).await;
    assert!(client.state().is_final(), "{:?}", client.state());
}

fn fast() -> Backoff {
    Backoff::default()
        .initial(Duration::from_millis(1))
        .max(Duration::from_millis(5))
}

fn bearer(url: &str, token: &str) -> ClientRequestBuilder {
    ClientRequestBuilder::new(url.parse().unwrap())
        .with_header("Authorization", format!("Bearer {token}"))
}

/// Closes every connection of `server` and waits until `client` is connected again
/// over a new one.
async fn redial(server: &ServerHandle, client: &Reconnecting) -> Peer {
    let old = within(client.connected(Duration::from_secs(5)))
        .await
        .unwrap();
    for peer in server.peers() {
        within(peer.close_with(1012, "restarting")).await;
    }
    within(old.closed()).await;
    within(client.connected(Duration::from_secs(5)))
        .await
        .unwrap()
}

#[tokio::test]
async fn a_redial_sends_the_token_fetched_for_it_and_gets_in_where_a_fixed_one_is_refused() {
    let (url, server, current) = rotating().await;
    // The application's token source (here the server's own, as an identity provider
    // would hand out the current one).
    let issued = current.clone();
    let asked = Arc::new(AtomicUsize::new(0));
    let counted = asked.clone();
    let refreshing = Reconnecting::builder(url.as_str(), Router::new())
        .backoff(fast())
        .before_dial(move |mut request| {
            counted.fetch_add(1, Ordering::SeqCst);
            let token = issued.lock().unwrap().clone();
            async move {
                let value = format!("Bearer {token}")
                    .parse()
                    .map_err(|e| Error::Transport(Box::new(e)))?;
                request.headers_mut().insert(AUTHORIZATION, value);
                Ok(request)
            }
        })
        .start();
    let fixed = Reconnecting::builder(bearer(&url, "t1"), Router::new())
        .backoff(fast())
        .start();
    let who: Option<String> = within(refreshing.call("whoami", ())).await.unwrap();
    assert_eq!(who.as_deref(), Some("Bearer t1"));
    let who: Option<String> = within(fixed.call("whoami", ())).await.unwrap();
    assert_eq!(who.as_deref(), Some("Bearer t1"));
    assert_eq!(asked.load(Ordering::SeqCst), 1);

    // The token rotates; the connections that are up stay up until the links drop.
    *current.lock().unwrap() = "t2".to_owned();
    let mut fixed_state = fixed.watch_state();
    let new = redial(&server, &refreshing).await;
    let who: Option<String> = within(new.call("whoami", ())).await.unwrap();
    assert_eq!(
        who.as_deref(),
        Some("Bearer t2"),
        "the redial sent the new token"
    );
    assert!(
        asked.load(Ordering::SeqCst) >= 2,
        "the hook ran for the redial"
    );
    assert!(refreshing.last_error().is_none());

    // The same redial with the request fixed at start ends refused, for good.
    within(fixed_state.wait_for(LinkState::is_final))
        .await
        .unwrap();
    assert_eq!(
        fixed.state(),
        LinkState::Refused {
            status: StatusCode::UNAUTHORIZED
        }
    );
    within(refreshing.close()).await;
}

#[tokio::test]
async fn a_live_connection_changes_what_the_next_redial_sends() {
    let (url, server, _current) = rotating().await;
    let client = Reconnecting::builder(bearer(&url, "t1"), Router::new())
        .backoff(fast())
        .start();
    // Over the live connection the server hands out the next token; the application
    // keeps it for the next redial. The connection up now stays as it is.
    let next: String = within(client.call("renew", ())).await.unwrap();
    assert_eq!(next, "t1+");
    client.set_request(bearer(&url, &next)).unwrap();
    let who: Option<String> = within(client.call("whoami", ())).await.unwrap();
    assert_eq!(who.as_deref(), Some("Bearer t1"));

    let new = redial(&server, &client).await;
    let who: Option<String> = within(new.call("whoami", ())).await.unwrap();
    assert_eq!(who.as_deref(), Some("Bearer t1+"));
    // A request that is not valid is refused at once, and the one before stays.
    assert!(client.set_request("not a url").is_err());
    within(client.close()).await;
}

#[tokio::test]
async fn last_error_says_what_failed_while_down_and_clears_once_the_link_is_back() {
    let (url, _server) = serve(Router::new()).await;
    let target = url.trim_start_matches("ws://").parse().unwrap();
    let proxy = Proxy::start(target).await;
    let client = Reconnecting::builder(proxy.url(), Router::new())
        .backoff(fast())
        .start();
    let first = within(client.connected(Duration::from_secs(5)))
        .await
        .unwrap();
    assert!(client.last_error().is_none());

    // The link drops and dials fail for a while.
    proxy.refuse(true);
    proxy.cut();
    within(first.closed()).await;
    let mut state = client.watch_state();
    within(state.wait_for(|s| matches!(s, LinkState::Waiting { attempt, .. } if *attempt >= 2)))
        .await
        .unwrap();
    assert!(client.last_error().is_some(), "a failed dial is kept");

    // Back: the old error is not the state of the link any more.
    proxy.refuse(false);
    within(client.connected(Duration::from_secs(5)))
        .await
        .unwrap();
    assert!(
        client.last_error().is_none(),
        "{:?} after a successful reconnect",
        client.last_error()
    );
    within(client.close()).await;
}

/// A server that accepts each connection and closes it at once (shedding load with
/// 1013) is dialed with growing waits, as a server that is down is: a link lost sooner
/// than the longest wait counts as a failed attempt instead of starting the count over.
#[tokio::test]
async fn a_server_that_closes_every_link_at_once_is_dialed_with_growing_waits() {
    let (url, server) = serve(Router::new()).await;
    let accepted = Arc::new(AtomicUsize::new(0));
    let counted = accepted.clone();
    server.on_connect(move |peer, _| {
        counted.fetch_add(1, Ordering::SeqCst);
        let peer = peer.clone();
        tokio::spawn(async move { peer.close_with(1013, "try again later").await });
    });
    // Waits of at most 1, 2, 4, 8, 16 and 32 ms for the first six attempts.
    let client = Reconnecting::builder(url, Router::new())
        .backoff(
            Backoff::default()
                .initial(Duration::from_millis(1))
                .max(Duration::from_secs(60)),
        )
        .start();
    let mut state = client.watch_state();
    within(state.wait_for(|s| matches!(s, LinkState::Waiting { attempt, .. } if *attempt >= 6)))
        .await
        .expect("the count grows while every link is closed at once");
    assert!(accepted.load(Ordering::SeqCst) >= 6, "each attempt got in");
    let why = client
        .last_error()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(why.contains("1013"), "last_error: {why}");
    within(client.close()).await;
}

/// A hook whose closure panics before it returns its future (a lookup that fails, say)
/// costs what a hook whose future panics costs: an `on_connect` hook its connection, a
/// `before_dial` hook its attempt. The client goes on dialing, says why in
/// `last_error`, and `close` ends it; it does not die with its state stuck at
/// `Connecting`.
#[tokio::test]
async fn a_hook_that_panics_before_its_future_starts_costs_an_attempt_not_the_client() {
    let (url, handle) = serve(Router::new()).await;
    let mut made = connections(&handle);
    let subscriptions: Vec<&str> = Vec::new();
    let client = Reconnecting::builder(url.as_str(), Router::new())
        .backoff(fast())
        .on_connect(move |_peer| {
            let first = subscriptions[0].to_owned();
            async move { drop(first) }
        })
        .start();
    within(made.recv()).await.unwrap();
    within(made.recv()).await.expect("the client dials again");
    let why = client
        .last_error()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(why.contains("1011"), "last_error: {why}");
    within(client.close()).await;
    assert_eq!(client.state(), LinkState::Stopped);

    let tokens: Vec<String> = Vec::new();
    let client = Reconnecting::builder(url.as_str(), Router::new())
        .backoff(fast())
        .before_dial(move |request| {
            let _token = tokens[0].clone();
            async move { Ok(request) }
        })
        .start();
    let mut state = client.watch_state();
    within(state.wait_for(|s| matches!(s, LinkState::Waiting { attempt, .. } if *attempt >= 2)))
        .await
        .expect("the client tries again after each panic");
    let why = client
        .last_error()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        why.contains("before_dial hook panicked"),
        "last_error: {why}"
    );
    within(client.close()).await;
    assert_eq!(client.state(), LinkState::Stopped);
}

/// A runtime of one thread, for a client to live in (and outlive).
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A server answering `ping` with "pong", on a runtime of its own: it outlives the
/// runtimes the clients are made in. Keep the runtime as long as the server is needed.
fn ping_server_on_its_own_runtime() -> (tokio::runtime::Runtime, String, ServerHandle) {
    let server_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (url, server) = server_runtime.block_on(serve(
        Router::new().method("ping", |_: Context, (): ()| async {
            Ok::<_, RpcError>("pong")
        }),
    ));
    (server_runtime, url, server)
}

/// A client kept beyond the runtime it was started in (one shared by the tests of a
/// file, each with its own runtime, say) says it stopped: its task and its connection's
/// went with that runtime, so it does not claim to be connected, hand out that dead
/// connection, or let a call wait past its timeout on it.
#[test]
fn a_client_outliving_its_runtime_says_it_stopped_and_its_calls_end() {
    let (_server_runtime, url, _server) = ping_server_on_its_own_runtime();
    let first = runtime();
    let client = first.block_on(async {
        let client = Reconnecting::builder(url.as_str(), Router::new()).start();
        within(client.connected(Duration::from_secs(5)))
            .await
            .unwrap();
        client
    });
    drop(first);

    assert_eq!(client.state(), LinkState::Stopped);
    assert!(client.peer().is_none());
    runtime().block_on(async {
        let e = within(client.connected(Duration::from_secs(1)))
            .await
            .unwrap_err();
        assert!(matches!(e, Error::Closed(_)), "{e:?}");
        let e = within(
            client
                .call::<String>("ping", ())
                .timeout(Duration::from_secs(1)),
        )
        .await
        .unwrap_err();
        assert!(matches!(e, Error::Closed(_)), "{e:?}");
        within(client.close()).await;
    });
    assert_eq!(client.state(), LinkState::Stopped);
}

/// A front that refuses every handshake with `status` and `Retry-After: 30`, as a load
/// balancer shedding load does; counts the handshakes.
async fn shedding(status: &'static str) -> (String, Arc<AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://{}", listener.local_addr().unwrap());
    let handshakes = Arc::new(AtomicUsize::new(0));
    let counted = handshakes.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buf = [0u8; 1024];
                while !request.ends_with(b"\r\n\r\n") && request.len() < 16 * 1024 {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let answer = format!(
                    "HTTP/1.1 {status}\r\nRetry-After: 30\r\nContent-Length: 4\r\n\r\nbusy"
                );
                let _ = socket.write_all(answer.as_bytes()).await;
            });
        }
    });
    (url, handshakes)
}

/// A refusal that asks for a wait (`Retry-After` in seconds, with a 429 or a 503) gets
/// it: the client waits at least that long before it dials again, instead of coming
/// back after its first backoff step (a quarter second by default); `close` ends the
/// wait at once.
#[tokio::test]
async fn a_refusal_with_retry_after_is_not_redialed_sooner() {
    for status in ["429 Too Many Requests", "503 Service Unavailable"] {
        let (url, handshakes) = shedding(status).await;
        let client = Reconnecting::builder(url, Router::new()).start();
        let mut state = client.watch_state();
        let waiting = within(state.wait_for(|s| matches!(s, LinkState::Waiting { .. })))
            .await
            .unwrap()
            .clone();
        let LinkState::Waiting { attempt, retry_in } = waiting else {
            unreachable!()
        };
        assert_eq!(attempt, 1, "{status}");
        assert!(
            retry_in >= Duration::from_secs(30),
            "{status}: retries in {retry_in:?}"
        );
        let last = client.last_error().expect("the refusal is kept");
        assert!(last.refused_status().is_some(), "{status}: {last:?}");
        within(client.close()).await;
        assert_eq!(client.state(), LinkState::Stopped);
        assert_eq!(handshakes.load(Ordering::SeqCst), 1, "{status}");
    }
}

/// Calls and notifications made while the link is down, from tasks of their own (the
/// handlers of an application sharing one client), go out once it is up in the order
/// they were made, as they do on a link that is up.
#[tokio::test]
async fn what_waited_for_the_link_goes_out_in_the_order_it_was_made() {
    type Seen = Arc<Mutex<Vec<u32>>>;
    let seen = Seen::default();
    let router = Router::with_state(seen.clone())
        .method("record", |cx: Context<Seen>, (n,): (u32,)| async move {
            cx.state().lock().unwrap().push(n);
            Ok::<_, RpcError>(n)
        })
        .notification("note", |cx: Context<Seen>, (n,): (u32,)| async move {
            cx.state().lock().unwrap().push(n);
        });
    let (url, _server) = serve(router).await;
    let proxy = Proxy::start(url.trim_start_matches("ws://").parse().unwrap()).await;
    proxy.refuse(true);
    let client = Reconnecting::builder(proxy.url(), Router::new())
        .backoff(fast())
        .start();
    let mut sent = Vec::new();
    for n in 0..10u32 {
        let client = client.clone();
        sent.push(tokio::spawn(async move {
            if n % 2 == 0 {
                client.call::<u32>("record", (n,)).await.map(drop)
            } else {
                client.notify("note", (n,)).await
            }
        }));
        // Its task runs up to its wait before the next one is made.
        tokio::task::yield_now().await;
    }
    proxy.refuse(false);
    for done in sent {
        within(done).await.unwrap().unwrap();
    }
    // After every notification too: the server reads in order.
    let _: u32 = within(client.call("record", (10,))).await.unwrap();
    assert_eq!(*seen.lock().unwrap(), (0..=10).collect::<Vec<_>>());
    within(client.close()).await;
}

/// The other side of the rule above: a link that stayed up at least the longest wait
/// starts the count over when it is lost, however many attempts it took to come up.
#[tokio::test]
async fn a_link_that_stayed_up_starts_the_count_over_when_lost() {
    let (url, _server) = serve(Router::new()).await;
    let proxy = Proxy::start(url.trim_start_matches("ws://").parse().unwrap()).await;
    proxy.refuse(true);
    let longest = Duration::from_millis(50);
    let client = Reconnecting::builder(proxy.url(), Router::new())
        .backoff(
            Backoff::default()
                .initial(Duration::from_millis(1))
                .max(longest),
        )
        .start();
    let mut state = client.watch_state();
    within(state.wait_for(|s| matches!(s, LinkState::Waiting { attempt, .. } if *attempt >= 4)))
        .await
        .unwrap();
    proxy.refuse(false);
    let peer = within(client.connected(Duration::from_secs(5)))
        .await
        .unwrap();
    // The link stays up as long as the longest wait: that is what the rule looks at.
    tokio::time::sleep(longest).await;
    proxy.refuse(true);
    assert_eq!(*state.borrow_and_update(), LinkState::Connected);
    proxy.cut();
    within(peer.closed()).await;
    within(state.changed()).await.unwrap();
    let after = state.borrow_and_update().clone();
    assert!(
        matches!(
            after,
            LinkState::Waiting { attempt: 1, .. } | LinkState::Connecting { attempt: 1 }
        ),
        "after the loss of a link that lasted: {after:?}"
    );
    within(client.close()).await;
}

/// Whoever sees the state turn `Connected` finds the link's peer at once, on any thread,
/// after each of several drops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connected_in_the_state_means_a_peer_is_there() {
    let (url, _server) = serve(Router::new()).await;
    let proxy = Proxy::start(url.trim_start_matches("ws://").parse().unwrap()).await;
    let client = Reconnecting::builder(proxy.url(), Router::new())
        .backoff(fast())
        .start();
    let mut state = client.watch_state();
    for round in 0..30 {
        within(state.wait_for(|s| *s == LinkState::Connected))
            .await
            .unwrap();
        let peer = client.peer();
        assert!(peer.is_some(), "round {round}: Connected without a peer");
        proxy.cut();
        // The next change, whatever it is: the link may be lost, dialed again and back
        // at `Connected` before this task runs, and a watch keeps only the newest value,
        // so waiting for a state other than `Connected` could wait for ever.
        within(state.changed()).await.unwrap();
    }
    within(client.close()).await;
}

/// A server that answers every handshake with `status` (and a `Location`), counting them.
async fn redirecting(status: &'static str) -> (String, Arc<AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://{}/rpc", listener.local_addr().unwrap());
    let answered = Arc::new(AtomicUsize::new(0));
    let counted = answered.clone();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            let counted = counted.clone();
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buf = [0u8; 1024];
                while !request.ends_with(b"\r\n\r\n") && request.len() < 16 * 1024 {
                    match tcp.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                counted.fetch_add(1, Ordering::SeqCst);
                let answer = format!(
                    "HTTP/1.1 {status}\r\nLocation: ws://127.0.0.1:9/elsewhere\r\nContent-Length: 0\r\n\r\n"
                );
                let _ = tcp.write_all(answer.as_bytes()).await;
            });
        }
    });
    (url, answered)
}

/// A permanent redirect is the address moved for good: the client stops, as on a 4xx. A
/// temporary one is dialed again.
#[tokio::test]
async fn a_permanent_redirect_stops_the_client_and_a_temporary_one_is_retried() {
    for status in ["301 Moved Permanently", "308 Permanent Redirect"] {
        let (url, answered) = redirecting(status).await;
        let client = Reconnecting::builder(url, Router::new())
            .backoff(fast())
            .start();
        let mut state = client.watch_state();
        within(state.wait_for(LinkState::is_final)).await.unwrap();
        let code: u16 = status[..3].parse().unwrap();
        assert_eq!(
            client.state(),
            LinkState::Refused {
                status: StatusCode::from_u16(code).unwrap()
            }
        );
        assert_eq!(answered.load(Ordering::SeqCst), 1, "{status}");
        within(client.close()).await;
    }
    let (url, answered) = redirecting("307 Temporary Redirect").await;
    let client = Reconnecting::builder(url, Router::new())
        .backoff(fast())
        .start();
    let mut state = client.watch_state();
    within(state.wait_for(|s| matches!(s, LinkState::Waiting { attempt, .. } if *attempt >= 2)))
        .await
        .unwrap();
    assert!(answered.load(Ordering::SeqCst) >= 2);
    within(client.close()).await;
}

/// A plain `connect()` peer kept past the runtime it was made in: its connection's task
/// went with that runtime, so it says it is closed, and a call on it ends at once
/// (even one made without a timeout of its own would otherwise wait for ever: the
/// call timer was that task's).
#[test]
fn a_peer_outliving_its_runtime_is_closed_and_its_calls_end() {
    let (_server_runtime, url, _server) = ping_server_on_its_own_runtime();
    let first = runtime();
    let (peer, waiting) = first.block_on(async {
        let peer = within(jsonrpc_peer::connect(&url, Router::new()))
            .await
            .unwrap();
        let pong: String = within(peer.call("ping", ())).await.unwrap();
        assert_eq!(pong, "pong");
        (peer.clone(), peer)
    });
    drop(first);

    assert!(peer.is_closed());
    runtime().block_on(async {
        let e = within(peer.call::<String>("ping", ())).await.unwrap_err();
        assert!(matches!(e, Error::Closed(_)), "{e:?}");
        let reason = within(waiting.closed()).await;
        assert!(reason.to_string().contains("runtime"), "{reason}");
    });
}

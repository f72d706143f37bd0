//! Helpers shared by the integration tests: servers on 127.0.0.1:0, a raw WebSocket
//! client that speaks text frames, and a timeout on every wait.
#![allow(dead_code)]

pub mod cluster_node;
pub mod history_bus;
pub mod proxy;
pub mod redis_cluster;
pub mod redis_server;
pub mod unix;

#[path = "../../examples/common/spec_methods.rs"]
pub mod spec_methods;

use std::future::IntoFuture;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use jsonrpc_peer::{Context, Peer, PeerConfig, Router, Server, ServerHandle};
use serde_json::Value;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// The longest any single step of a test may take.
pub const STEP: Duration = Duration::from_secs(10);

/// Awaits `fut` (a future, or a call on its way), failing the test if it takes longer
/// than [`STEP`].
pub async fn within<T>(fut: impl IntoFuture<Output = T>) -> T {
    tokio::time::timeout(STEP, fut)
        .await
        .expect("a test step took longer than 10 s")
}

/// Every peer the server registers from now on, as it is registered (the server's
/// `on_connect` hook: a test that uses this sets no hook of its own).
pub fn connections(server: &ServerHandle) -> mpsc::UnboundedReceiver<Peer> {
    let (tx, rx) = mpsc::unbounded_channel();
    server.on_connect(move |peer, _| {
        let _ = tx.send(peer.clone());
    });
    rx
}

/// Every peer the server forgets from now on, once its tasks are gone (the server's
/// `on_disconnect` hook).
pub fn disconnections(server: &ServerHandle) -> mpsc::UnboundedReceiver<Peer> {
    let (tx, rx) = mpsc::unbounded_channel();
    server.on_disconnect(move |peer, _| {
        let _ = tx.send(peer.clone());
    });
    rx
}

/// Starts a server for `router` on 127.0.0.1:0; returns its `ws://` URL and handle.
pub async fn serve<S: Send + Sync + 'static>(router: Router<S>) -> (String, ServerHandle) {
    serve_with(router, PeerConfig::default()).await
}

/// [`serve`] with settings.
pub async fn serve_with<S: Send + Sync + 'static>(
    router: Router<S>,
    config: PeerConfig,
) -> (String, ServerHandle) {
    let server = Server::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1:0")
        .peer_config(config);
    let url = format!("ws://{}", server.local_addr().expect("local addr"));
    let handle = server.handle();
    tokio::spawn(server.serve(router));
    (url, handle)
}

/// Serves an axum app on 127.0.0.1:0, with each connection's remote address known to
/// it; returns the address.
pub async fn serve_axum(app: axum::Router) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("local addr");
    let service = app.into_make_service_with_connect_info::<std::net::SocketAddr>();
    tokio::spawn(async move { axum::serve(listener, service).await });
    addr
}

/// A WebSocket client that sends and reads raw text frames.
pub struct RawClient {
    pub ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
}

impl RawClient {
    pub async fn connect(url: &str) -> RawClient {
        let (ws, _) = within(tokio_tungstenite::connect_async(url))
            .await
            .expect("connect");
        RawClient { ws }
    }

    pub async fn send(&mut self, text: &str) {
        within(self.ws.send(Message::text(text)))
            .await
            .expect("send a text frame");
    }

    /// The next text frame, skipping control frames; `None` when the connection ends.
    pub async fn recv_text(&mut self) -> Option<String> {
        loop {
            match within(self.ws.next()).await {
                Some(Ok(Message::Text(t))) => return Some(t.to_string()),
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return None,
                Some(Ok(_)) => continue,
            }
        }
    }

    /// The next text frame, parsed.
    pub async fn recv_json(&mut self) -> Value {
        let text = self
            .recv_text()
            .await
            .expect("a frame, not the end of the connection");
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("answer is not JSON ({e}): {text}"))
    }

    /// Sends `text` and returns the parsed answer.
    pub async fn ask(&mut self, text: &str) -> Value {
        self.send(text).await;
        self.recv_json().await
    }

    /// Proves that nothing was sent in answer to what came before: a marker request
    /// sent now must be the very next thing answered.
    pub async fn assert_nothing_before_marker(&mut self) {
        let marker = r#"{"jsonrpc":"2.0","method":"no.such.method","id":"marker"}"#;
        let answer = self.ask(marker).await;
        assert_eq!(
            answer["id"], "marker",
            "something was answered before the marker: {answer}"
        );
    }
}

/// Resident memory of this process, in bytes (Linux).
pub fn rss() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: usize = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

/// Parses a JSON literal of a test's expectation.
pub fn json(text: &str) -> Value {
    serde_json::from_str(text).expect("the test's own JSON is valid")
}

/// A batch answer as a set: its elements sorted by their JSON text, so order is free.
pub fn as_set(v: &Value) -> Vec<String> {
    let mut items: Vec<String> = v
        .as_array()
        .unwrap_or_else(|| panic!("expected an array, got {v}"))
        .iter()
        .map(|e| e.to_string())
        .collect();
    items.sort();
    items
}

/// A TCP connection to `url`'s server that has completed a WebSocket handshake by hand
/// (key `dGhlIHNhbXBsZSBub25jZQ==`), for tests that write frames as raw bytes.
pub async fn raw_upgrade(url: &str) -> TcpStream {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = url.trim_start_matches("ws://").to_owned();
    let mut tcp = within(TcpStream::connect(&addr)).await.expect("connect");
    let request = format!(
        "GET / HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
    );
    within(tcp.write_all(request.as_bytes()))
        .await
        .expect("send the handshake");
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") && head.len() < 4096 {
        let mut byte = [0u8];
        within(tcp.read_exact(&mut byte))
            .await
            .expect("read the answer");
        head.push(byte[0]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 101"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    tcp
}

/// An example's executable, next to the test's own `deps/` folder (`cargo test` builds
/// the examples; `features` says which the example needs, for the message when it is
/// missing).
pub fn example_binary(name: &str, features: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let dir = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("target/<profile>");
    let bin = dir.join("examples").join(name);
    assert!(
        bin.exists(),
        "{} is missing: run `cargo build {features}--example {name}` first",
        bin.display()
    );
    bin
}

/// What a [`notes_client`] got: (method, params).
pub type Note = (String, Value);

/// A client of `url` that forwards every notification of `methods`, and `$/gap`, to a
/// channel.
pub async fn notes_client(
    url: &str,
    methods: &[&'static str],
) -> (Peer, mpsc::UnboundedReceiver<Note>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let mut router = Router::new();
    for method in methods.iter().copied().chain(["$/gap"]) {
        let tx = tx.clone();
        router = router.notification(method, move |_cx: Context, params: Value| {
            let _ = tx.send((method.to_owned(), params));
            async {}
        });
    }
    let peer = within(jsonrpc_peer::connect(url, router)).await.unwrap();
    (peer, rx)
}

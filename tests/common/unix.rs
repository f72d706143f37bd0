//! Two WebSocket ends over a unix socket pair (no TCP, no handshake), for tests that
//! run a `Peer` on one end and drive the other by hand, frame by frame.

use std::sync::Arc;

use futures_util::{SinkExt, StreamExt};
use jsonrpc_peer::transport::WebSocket;
use jsonrpc_peer::{Peer, PeerConfig, Router};
use serde_json::Value;
use tokio::net::UnixStream;
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use super::within;

/// The settings these tests use: the defaults without pings, which would come between
/// the frames a test reads.
pub fn config() -> PeerConfig {
    PeerConfig::default().ping_interval(None)
}

/// The two ends of a unix socket pair as WebSockets (client end, server end).
pub async fn ws_pair() -> (WebSocketStream<UnixStream>, WebSocketStream<UnixStream>) {
    let (a, b) = UnixStream::pair().expect("a unix socket pair");
    let a = WebSocketStream::from_raw_socket(a, Role::Client, None).await;
    let b = WebSocketStream::from_raw_socket(b, Role::Server, None).await;
    (a, b)
}

/// A peer serving `router` on `ws`.
pub fn start<S: Send + Sync + 'static>(
    ws: WebSocketStream<UnixStream>,
    router: Router<S>,
    config: &PeerConfig,
) -> Peer {
    Peer::start(WebSocket::new(ws), Arc::new(router), config)
}

/// A raw WebSocket end: exact JSON in and out.
pub struct Raw(pub WebSocketStream<UnixStream>);

impl Raw {
    pub async fn send(&mut self, text: &str) {
        within(self.0.send(Message::text(text)))
            .await
            .expect("send a frame");
    }

    /// The next text frame, parsed; pings and pongs are skipped.
    pub async fn recv(&mut self) -> Value {
        loop {
            match within(self.0.next()).await {
                Some(Ok(Message::Text(t))) => {
                    return serde_json::from_str(&t).expect("frames are JSON")
                }
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                other => panic!("expected a text frame, got {other:?}"),
            }
        }
    }

    /// Proves nothing was answered before: a marker call's answer comes next.
    pub async fn nothing_before_marker(&mut self) {
        self.send(r#"{"jsonrpc":"2.0","method":"no.such","id":"marker"}"#)
            .await;
        let next = self.recv().await;
        assert_eq!(next["id"], "marker", "answered before the marker: {next}");
    }
}

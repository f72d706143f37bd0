//! A peer endpoint in an axum app (feature `axum`).
//!
//! The endpoint answers the WebSocket handshake itself and runs the connection on the
//! same tokio-tungstenite stack as [`Server`](crate::Server), so both paths share one
//! transport, one set of limits and one registry type. (axum's own `WebSocketUpgrade`
//! would put a second WebSocket type, and a copy of every frame, between the two.)
//!
//! ```no_run
//! use jsonrpc_peer::axum::Endpoint;
//! use jsonrpc_peer::{Context, Router, RpcError};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let rpc = Router::new().method("ping", |_cx: Context, (): ()| async { Ok::<_, RpcError>("pong") });
//! let endpoint = Endpoint::new(rpc);
//! let peers = endpoint.handle(); // count, broadcast, shutdown
//! let app = axum::Router::new().route("/rpc", endpoint.into_route());
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! axum::serve(
//!     listener,
//!     app.into_make_service_with_connect_info::<std::net::SocketAddr>(),
//! )
//! .await?;
//! # Ok(()) }
//! ```

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{ConnectInfo, OriginalUri, Request};
use axum::http::{self, header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::MethodRouter;
use hyper_util::rt::TokioIo;
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::WebSocketStream;

use crate::config::PeerConfig;
use crate::handshake::{self, Rejection};
use crate::peer::ConnectionInfo as PeerInfo;
use crate::policy::{HandshakePolicy, Refusal, Slots};
use crate::registry::ServerHandle;
use crate::router::Router;
use crate::transport::WebSocket;

/// A JSON-RPC endpoint to mount on an axum route: each WebSocket connection to it gets
/// its own [`Peer`](crate::Peer) serving the router.
pub struct Endpoint<S> {
    router: Arc<Router<S>>,
    config: PeerConfig,
    handle: ServerHandle,
    policy: HandshakePolicy,
    slots: Slots,
}

impl<S> std::fmt::Debug for Endpoint<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("router", &self.router)
            .field("config", &self.config)
            .field("policy", &self.policy)
            .field("handle", &self.handle)
            .finish_non_exhaustive()
    }
}

impl<S: Send + Sync + 'static> Endpoint<S> {
    /// An endpoint serving `router` with the default [`PeerConfig`].
    pub fn new(router: Router<S>) -> Self {
        Endpoint {
            router: Arc::new(router),
            config: PeerConfig::default(),
            handle: ServerHandle::new(),
            slots: Slots::new(&HandshakePolicy::default()),
            policy: HandshakePolicy::default(),
        }
    }

    /// Who may connect: connection limit, handshake timeout, Origin allow-list,
    /// authentication.
    pub fn handshake_policy(mut self, policy: HandshakePolicy) -> Self {
        self.slots = Slots::new(&policy);
        self.policy = policy;
        self
    }

    /// Settings for every connection.
    pub fn peer_config(mut self, config: PeerConfig) -> Self {
        self.config = config;
        self
    }

    /// Registers connections in `handle`, made before the router when its handlers
    /// need it (to broadcast, say).
    pub fn with_handle(mut self, handle: ServerHandle) -> Self {
        self.handle = handle;
        self
    }

    /// The registry of this endpoint's live connections.
    pub fn handle(&self) -> ServerHandle {
        self.handle.clone()
    }

    /// The `GET` route that upgrades to a WebSocket and runs a peer on it.
    pub fn into_route<T: Clone + Send + Sync + 'static>(self) -> MethodRouter<T> {
        let endpoint = Arc::new(self);
        axum::routing::get(move |request: Request| {
            let endpoint = endpoint.clone();
            async move { endpoint.upgrade(request) }
        })
    }

    fn upgrade(self: Arc<Self>, mut request: Request) -> Response {
        // A shutdown that starts after the check below waits for this connection.
        let admission = self.handle.admission();
        if self.handle.is_shutting_down() {
            crate::metrics::handshake("refused", Some(503));
            return (StatusCode::SERVICE_UNAVAILABLE, "shutting down").into_response();
        }
        let accept = match handshake::check(request.method(), request.version(), request.headers())
        {
            Ok(accept) => accept,
            Err(rejection) => return rejected(rejection),
        };
        let remote_addr = request
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map(|c| c.0);
        let mut handshake = http::Request::new(());
        // Nested under a prefix (`Router::nest`), the request's URI is what the nesting
        // left of it: the hook and the handlers see the one the client asked for.
        *handshake.uri_mut() = match request.extensions().get::<OriginalUri>() {
            Some(OriginalUri(uri)) => uri.clone(),
            None => request.uri().clone(),
        };
        *handshake.headers_mut() = request.headers().clone();
        // The request's own faults before the limits: a client told 403 or 401 stops
        // dialling, one told 503 (full) dials again, and would for good.
        let auth = match self.policy.check(&handshake) {
            Ok(auth) => auth,
            Err(refusal) => return refuse(&refusal),
        };
        let slot = match self.slots.take(remote_addr.map(|a| a.ip())) {
            Ok(slot) => slot,
            Err(refusal) => return refuse(&refusal),
        };
        let (parts, ()) = handshake.into_parts();
        let info = PeerInfo {
            remote_addr,
            path: Some(parts.uri.to_string()),
            headers: parts.headers,
            auth,
        };
        let on_upgrade = hyper::upgrade::on(&mut request);
        let timeout = self.policy.handshake_timeout;
        // In the registry before hyper writes the 101 this handler returns: a broadcast
        // made once the client's connect has resolved reaches it.
        let starting = self
            .handle
            .admit(&self.config, info, Some(slot), self.policy.keep_headers);
        drop(admission);
        tokio::spawn(async move {
            let upgraded = match tokio::time::timeout(timeout, on_upgrade).await {
                Ok(Ok(upgraded)) => {
                    crate::metrics::handshake("accepted", Some(101));
                    upgraded
                }
                Ok(Err(e)) => {
                    crate::metrics::handshake("gone", None);
                    tracing::debug!(error = %e, "WebSocket upgrade failed");
                    starting.abandon(&self.config);
                    return;
                }
                Err(_) => {
                    crate::metrics::handshake("timeout", None);
                    tracing::debug!("WebSocket upgrade timed out");
                    starting.abandon(&self.config);
                    return;
                }
            };
            let ws = WebSocketStream::from_raw_socket(
                crate::transport::ReadAhead::new(TokioIo::new(upgraded)),
                Role::Server,
                Some(self.config.websocket()),
            )
            .await;
            starting.run(WebSocket::new(ws), self.router.clone(), &self.config);
        });
        let mut response = Response::new(Body::empty());
        *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
        let headers = response.headers_mut();
        headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        headers.insert(header::SEC_WEBSOCKET_ACCEPT, accept);
        response
    }
}

fn refuse(refusal: &Refusal) -> Response {
    crate::metrics::handshake("refused", Some(refusal.http_status().as_u16()));
    (refusal.http_status(), refusal.reason.clone()).into_response()
}

fn rejected(rejection: Rejection) -> Response {
    crate::metrics::handshake("refused", Some(rejection.status.as_u16()));
    let mut response = (rejection.status, rejection.body).into_response();
    for (name, value) in rejection.headers {
        response
            .headers_mut()
            .insert(name, HeaderValue::from_static(value));
    }
    response
}

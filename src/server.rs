//! Accepting WebSocket connections; the live ones are kept in the registry.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, ToSocketAddrs};
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::http::StatusCode;

use crate::policy::{HandshakePolicy, Refusal, Slots};

use crate::config::PeerConfig;
use crate::error::{Error, Result};
use crate::peer::ConnectionInfo;
use crate::registry::ServerHandle;
use crate::router::Router;
use crate::transport::WebSocket;

/// A WebSocket server: every connection gets its own [`Peer`](crate::Peer) serving the router.
///
/// ```no_run
/// use jsonrpc_peer::{Context, Router, RpcError, Server};
///
/// # async fn run() -> jsonrpc_peer::Result<()> {
/// let router = Router::new().method("ping", |_cx: Context, (): ()| async {
///     Ok::<_, RpcError>("pong")
/// });
/// let server = Server::bind("127.0.0.1:9000").await?;
/// println!("listening on ws://{}", server.local_addr()?);
/// server.serve(router).await
/// # }
/// ```
pub struct Server {
    listener: TcpListener,
    config: PeerConfig,
    handshake_timeout: Duration,
    policy: HandshakePolicy,
    registry: ServerHandle,
    #[cfg(feature = "rustls")]
    tls: Option<tokio_rustls::TlsAcceptor>,
}

impl Server {
    /// Binds a TCP listener to `addr` (port 0 picks a free port).
    ///
    /// # Errors
    ///
    /// [`Error::Transport`] when the address cannot be bound.
    pub async fn bind(addr: impl ToSocketAddrs) -> Result<Server> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|e| Error::Transport(Box::new(e)))?;
        Ok(Server::from_listener(listener))
    }

    /// A server on a listener bound elsewhere.
    pub fn from_listener(listener: TcpListener) -> Server {
        Server {
            listener,
            config: PeerConfig::default(),
            handshake_timeout: Duration::from_secs(10),
            policy: HandshakePolicy::default(),
            registry: ServerHandle::new(),
            #[cfg(feature = "rustls")]
            tls: None,
        }
    }

    /// Settings for every connection this server accepts.
    pub fn peer_config(mut self, config: PeerConfig) -> Self {
        self.config = config;
        self
    }

    /// Who may connect: connection limit, Origin allow-list, authentication.
    pub fn handshake_policy(mut self, policy: HandshakePolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Serves `wss://`: every connection is a TLS connection with this configuration
    /// (feature `rustls`). The handshake timeout applies to the TLS handshake too.
    #[cfg(feature = "rustls")]
    pub fn tls(mut self, config: Arc<rustls::ServerConfig>) -> Self {
        self.tls = Some(tokio_rustls::TlsAcceptor::from(config));
        self
    }

    /// How long a client may take to complete the WebSocket handshake (default 10 s).
    pub fn handshake_timeout(mut self, timeout: Duration) -> Self {
        self.handshake_timeout = timeout;
        self
    }

    /// The address the server listens on.
    ///
    /// # Errors
    ///
    /// [`Error::Transport`] if the socket cannot tell (it can, once bound).
    pub fn local_addr(&self) -> Result<SocketAddr> {
        self.listener
            .local_addr()
            .map_err(|e| Error::Transport(Box::new(e)))
    }

    /// A handle to the live connections: count, broadcast, shutdown. It stays usable
    /// while [`serve`](Self::serve) runs.
    pub fn handle(&self) -> ServerHandle {
        self.registry.clone()
    }

    /// Accepts connections until [`ServerHandle::shutdown`], then closes every
    /// connection with 1001 and returns once they are gone.
    ///
    /// # Errors
    ///
    /// None yet: failures to accept one connection are logged and the server goes on.
    pub async fn serve<S: Send + Sync + 'static>(self, router: Router<S>) -> Result<()> {
        let router = Arc::new(router);
        let gate = Arc::new(Gate {
            slots: Slots::new(self.policy.max_connections),
            policy: self.policy.clone(),
            timeout: self.handshake_timeout,
            #[cfg(feature = "rustls")]
            tls: self.tls.clone(),
        });
        let mut shutdown = self.registry.shutdown_signal();
        loop {
            let accepted = tokio::select! {
                biased;
                _ = shutdown.wait_for(Option::is_some) => break,
                accepted = self.listener.accept() => accepted,
            };
            match accepted {
                Ok((stream, addr)) => {
                    let router = router.clone();
                    let config = self.config.clone();
                    let registry = self.registry.clone();
                    let gate = gate.clone();
                    tokio::spawn(async move {
                        // Frames are coalesced by the writer task; Nagle's delay would
                        // only add latency.
                        let _ = stream.set_nodelay(true);
                        #[cfg(feature = "rustls")]
                        if let Some(tls) = &gate.tls {
                            let stream = match tokio::time::timeout(
                                gate.timeout,
                                tls.accept(stream),
                            )
                            .await
                            {
                                Ok(Ok(stream)) => stream,
                                Ok(Err(e)) => {
                                    tracing::debug!(%addr, error = %e, "TLS handshake failed");
                                    return;
                                }
                                Err(_) => {
                                    tracing::debug!(%addr, "TLS handshake timed out");
                                    return;
                                }
                            };
                            accept(stream, addr, router, config, registry, gate).await;
                            return;
                        }
                        accept(stream, addr, router, config, registry, gate).await;
                    });
                }
                Err(e) => {
                    // Out of file descriptors, most often: wait a little rather than spin.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
        drop(self.listener);
        // Whoever called shutdown is closing the connections, within its grace period;
        // wait for them to be gone, and close any still open after that.
        let grace = (*shutdown.borrow()).unwrap_or_default();
        let registry = &self.registry;
        if !registry.wait_gone(grace + Duration::from_secs(5)).await {
            let peers = registry.peers();
            futures_util::future::join_all(
                peers
                    .iter()
                    .map(|p| p.close_with(1001, "server shutting down")),
            )
            .await;
            registry.wait_gone(Duration::from_secs(5)).await;
        }
        Ok(())
    }
}

/// What every handshake on one server shares.
struct Gate {
    policy: HandshakePolicy,
    slots: Slots,
    timeout: Duration,
    #[cfg(feature = "rustls")]
    tls: Option<tokio_rustls::TlsAcceptor>,
}

async fn accept<S: Send + Sync + 'static, IO>(
    stream: IO,
    addr: SocketAddr,
    router: Arc<Router<S>>,
    config: PeerConfig,
    registry: ServerHandle,
    gate: Arc<Gate>,
) where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    // The slot is taken before the handshake and held until the connection ends; a
    // client past the limit still gets its answer: 503.
    let slot = gate.slots.take();
    let mut admitted = None;
    // tungstenite's callback type fixes the (large) error type.
    #[allow(clippy::result_large_err)]
    let decide = |req: &Request, response: Response| {
        if let Err(refusal) = &slot {
            return Err(refuse(refusal));
        }
        match gate.policy.check(req) {
            Ok(attached) => {
                admitted = Some((req.uri().to_string(), req.headers().clone(), attached));
                Ok(response)
            }
            Err(refusal) => Err(refuse(&refusal)),
        }
    };
    let handshake =
        tokio_tungstenite::accept_hdr_async_with_config(stream, decide, Some(config.websocket()));
    let ws = match tokio::time::timeout(gate.timeout, handshake).await {
        Ok(Ok(ws)) => ws,
        Ok(Err(e)) => {
            tracing::debug!(%addr, error = %e, "handshake failed or refused");
            return;
        }
        Err(_) => {
            tracing::debug!(%addr, "handshake timed out");
            return;
        }
    };
    let (Ok(slot), Some((path, headers, auth))) = (slot, admitted) else {
        return;
    };
    let info = ConnectionInfo {
        remote_addr: Some(addr),
        path: Some(path),
        headers,
        auth,
    };
    let keep_headers = gate.policy.keep_headers;
    registry.start(
        WebSocket::new(ws),
        router,
        &config,
        info,
        Some(slot),
        keep_headers,
    );
}

/// The HTTP answer to a refused handshake.
fn refuse(refusal: &Refusal) -> ErrorResponse {
    let mut response = ErrorResponse::new(Some(refusal.reason.clone()));
    *response.status_mut() = StatusCode::from_u16(refusal.status).unwrap_or(StatusCode::FORBIDDEN);
    response
}

//! Dialing a WebSocket server.

use std::sync::Arc;

use crate::config::PeerConfig;
use crate::error::{Error, Result};
use crate::peer::{ConnectionInfo, Peer};
use crate::router::Router;
use crate::transport::WebSocket;

/// Connects to a `ws://` URL and runs a peer on the connection, serving `router`: the
/// server may call this side as this side calls it.
///
/// ```no_run
/// # async fn run() -> jsonrpc_peer::Result<()> {
/// let peer = jsonrpc_peer::connect("ws://127.0.0.1:9000", jsonrpc_peer::Router::new()).await?;
/// let diff: i64 = peer.call("subtract", [42, 23]).await?;
/// # Ok(()) }
/// ```
///
/// # Errors
///
/// [`Error::Transport`] when the connection or the handshake fails, [`Error::Timeout`]
/// when it takes longer than [`PeerConfig::connect_timeout`].
pub async fn connect<S: Send + Sync + 'static>(url: &str, router: Router<S>) -> Result<Peer> {
    connect_with_config(url, router, &PeerConfig::default()).await
}

/// [`connect`] with settings of its own.
///
/// # Errors
///
/// [`Error::Transport`] when the connection or the handshake fails.
pub async fn connect_with_config<S: Send + Sync + 'static>(
    url: &str,
    router: Router<S>,
    config: &PeerConfig,
) -> Result<Peer> {
    connect_shared(url, Arc::new(router), config).await
}

/// Connects to a `wss://` URL trusting what `tls` trusts (feature `rustls`): a
/// private CA, a self-signed certificate in tests. [`connect`] takes `wss://` URLs
/// too, trusting the webpki roots.
///
/// # Errors
///
/// As for [`connect`].
#[cfg(feature = "rustls")]
pub async fn connect_with_tls<S: Send + Sync + 'static>(
    url: &str,
    router: Router<S>,
    config: &PeerConfig,
    tls: Arc<rustls::ClientConfig>,
) -> Result<Peer> {
    dial(url, Arc::new(router), config, Some(tls)).await
}

/// Connects with a router shared by successive connections (the reconnecting client).
pub(crate) async fn connect_shared<S: Send + Sync + 'static>(
    url: &str,
    router: Arc<Router<S>>,
    config: &PeerConfig,
) -> Result<Peer> {
    dial(url, router, config, None).await
}

#[cfg(feature = "rustls")]
type TlsConfig = Arc<rustls::ClientConfig>;
#[cfg(not(feature = "rustls"))]
type TlsConfig = std::convert::Infallible;

async fn dial<S: Send + Sync + 'static>(
    url: &str,
    router: Arc<Router<S>>,
    config: &PeerConfig,
    tls: Option<TlsConfig>,
) -> Result<Peer> {
    // Frames are coalesced by the writer task, so Nagle's delay is turned off.
    #[cfg(feature = "rustls")]
    let dial = tokio_tungstenite::connect_async_tls_with_config(
        url,
        Some(config.websocket()),
        true,
        tls.map(tokio_tungstenite::Connector::Rustls),
    );
    #[cfg(not(feature = "rustls"))]
    let dial = {
        if let Some(never) = tls {
            match never {}
        }
        tokio_tungstenite::connect_async_with_config(url, Some(config.websocket()), true)
    };
    let (ws, response) = tokio::time::timeout(config.connect_timeout, dial)
        .await
        .map_err(|_| Error::Timeout(config.connect_timeout))?
        .map_err(|e| Error::Transport(Box::new(e)))?;
    let remote = match ws.get_ref() {
        tokio_tungstenite::MaybeTlsStream::Plain(tcp) => tcp.peer_addr().ok(),
        #[cfg(feature = "rustls")]
        tokio_tungstenite::MaybeTlsStream::Rustls(tls) => tls.get_ref().0.peer_addr().ok(),
        _ => None,
    };
    let info = ConnectionInfo {
        remote_addr: remote,
        path: None,
        headers: response.headers().clone(),
        auth: None,
    };
    Ok(crate::driver::spawn(
        WebSocket::new(ws),
        router,
        config,
        info,
        Default::default(),
    ))
}

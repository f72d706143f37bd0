//! Dialing a WebSocket server.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::handshake::client::{Request, Response};

use crate::config::PeerConfig;
use crate::error::{Error, Result};
use crate::peer::{ConnectionInfo, Peer};
use crate::router::Router;
use crate::transport::{ReadAhead, WebSocket};

/// Connects to a `ws://` URL and runs a peer on the connection, serving `router`: the
/// server may call this side as this side calls it.
///
/// `request` is what tokio-tungstenite takes ([`IntoClientRequest`]): a URL, or a
/// handshake request with headers of its own, such as a token in `Authorization`
/// (where the server's [`HandshakePolicy::authenticate`](crate::HandshakePolicy::authenticate)
/// reads it, and where it stays out of URLs that get logged), or subprotocols (for a
/// server that picks one: tungstenite refuses an answer that names none):
///
/// ```no_run
/// use jsonrpc_peer::{connect, Caller, ClientRequestBuilder, Router};
///
/// # async fn run() -> jsonrpc_peer::Result<()> {
/// let peer = connect("ws://127.0.0.1:9000", Router::new()).await?;
/// let diff: i64 = peer.call("subtract", [42, 23]).await?;
///
/// let uri = "ws://127.0.0.1:9000/rpc".parse().expect("a valid URI");
/// let request = ClientRequestBuilder::new(uri).with_header("Authorization", "Bearer s3cret");
/// let peer = connect(request, Router::new()).await?;
/// # Ok(()) }
/// ```
///
/// Dropping the last handle of the returned [`Peer`] closes the connection (1000):
/// nothing keeps a connection alive that nobody can reach. (Handles a handler gets
/// through [`Context::peer`](crate::Context::peer) do not count.)
///
/// # Errors
///
/// [`Error::Refused`] when the server answers the handshake with an HTTP error status
/// (401, 403, 503...); [`Error::Transport`] when the request is not valid, or the
/// connection or the handshake fails otherwise; [`Error::Timeout`] when it takes longer
/// than [`PeerConfig::connect_timeout`].
pub async fn connect<S: Send + Sync + 'static>(
    request: impl IntoClientRequest,
    router: Router<S>,
) -> Result<Peer> {
    connect_with_config(request, router, &PeerConfig::default()).await
}

/// [`connect`] with settings of its own.
///
/// # Errors
///
/// As for [`connect`].
pub async fn connect_with_config<S: Send + Sync + 'static>(
    request: impl IntoClientRequest,
    router: Router<S>,
    config: &PeerConfig,
) -> Result<Peer> {
    let request = client_request(request)?;
    let peer = dial(request, Arc::new(router), config, None)
        .await
        .map_err(|failed| failed.error)?;
    Ok(peer.close_on_drop())
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
    request: impl IntoClientRequest,
    router: Router<S>,
    config: &PeerConfig,
    tls: Arc<rustls::ClientConfig>,
) -> Result<Peer> {
    let request = client_request(request)?;
    let peer = dial(request, Arc::new(router), config, Some(tls))
        .await
        .map_err(|failed| failed.error)?;
    Ok(peer.close_on_drop())
}

/// The handshake request, checked once: a bad URL is an error here, not at each dial.
pub(crate) fn client_request(request: impl IntoClientRequest) -> Result<Request> {
    let request = request
        .into_client_request()
        .map_err(|e| Error::Transport(Box::new(e)))?;
    // tungstenite checks the scheme only once the TCP connection is up: an `http://`
    // URL would fail every attempt of a reconnecting client, never its request.
    tungstenite::client::uri_mode(request.uri()).map_err(|e| Error::Transport(Box::new(e)))?;
    Ok(request)
}

/// The same request for another attempt, with a fresh `Sec-WebSocket-Key` (a key is
/// for one handshake). `http::Request` is not `Clone`, so it is rebuilt.
pub(crate) fn again(request: &Request) -> Request {
    let mut next = Request::new(());
    *next.method_mut() = request.method().clone();
    *next.uri_mut() = request.uri().clone();
    *next.version_mut() = request.version();
    *next.headers_mut() = request.headers().clone();
    if let Ok(key) = tungstenite::handshake::client::generate_key().parse() {
        next.headers_mut().insert("sec-websocket-key", key);
    }
    next
}

/// Connects with a router shared by successive connections (the reconnecting client,
/// which closes its connections itself).
pub(crate) async fn connect_shared<S: Send + Sync + 'static>(
    request: Request,
    router: Arc<Router<S>>,
    config: &PeerConfig,
) -> Result<Peer, DialFailed> {
    dial(request, router, config, None).await
}

/// A dial that failed, and how long the server asked the client to wait before the
/// next one (a refusal's `Retry-After`).
#[derive(Debug)]
pub(crate) struct DialFailed {
    pub(crate) error: Error,
    pub(crate) retry_after: Option<Duration>,
    /// The request cannot be dialed at all, however often it is tried: its URL is not
    /// one tungstenite dials (a scheme other than `ws` or `wss`, no host, `wss` without
    /// TLS support).
    pub(crate) for_good: bool,
}

impl From<Error> for DialFailed {
    fn from(error: Error) -> Self {
        DialFailed {
            error,
            retry_after: None,
            for_good: false,
        }
    }
}

/// A refusal's `Retry-After` in seconds (RFC 9110 10.2.3). The other form, an HTTP
/// date, is not read: the backoff alone applies then.
fn retry_after(headers: &crate::http::HeaderMap) -> Option<Duration> {
    let seconds = headers.get("retry-after")?.to_str().ok()?.trim();
    seconds.parse::<u64>().ok().map(Duration::from_secs)
}

#[cfg(feature = "rustls")]
type TlsConfig = Arc<rustls::ClientConfig>;
#[cfg(not(feature = "rustls"))]
type TlsConfig = std::convert::Infallible;

/// The largest refusal body kept in [`Error::Refused`].
const MAX_REFUSAL_BODY: usize = 1024;

/// A handshake error as this crate's: an HTTP refusal gets its own variant.
fn handshake_error(e: tungstenite::Error) -> DialFailed {
    match e {
        tungstenite::Error::Http(response) => {
            let body = response
                .body()
                .as_deref()
                .filter(|b| b.len() <= MAX_REFUSAL_BODY)
                .and_then(|b| std::str::from_utf8(b).ok())
                .map(str::to_owned);
            DialFailed {
                error: Error::Refused {
                    status: response.status(),
                    body,
                },
                retry_after: retry_after(response.headers()),
                for_good: false,
            }
        }
        other => {
            use tungstenite::error::UrlError;
            let for_good = matches!(
                &other,
                tungstenite::Error::Url(
                    UrlError::TlsFeatureNotEnabled
                        | UrlError::NoHostName
                        | UrlError::UnsupportedUrlScheme
                        | UrlError::EmptyHostName
                        | UrlError::NoPathOrQuery
                )
            );
            DialFailed {
                error: Error::Transport(Box::new(other)),
                retry_after: None,
                for_good,
            }
        }
    }
}

async fn dial<S: Send + Sync + 'static>(
    request: Request,
    router: Arc<Router<S>>,
    config: &PeerConfig,
    tls: Option<TlsConfig>,
) -> Result<Peer, DialFailed> {
    let (ws, response, remote) =
        tokio::time::timeout(config.connect_timeout, open(request, config, tls))
            .await
            .map_err(|_| Error::timeout(None, config.connect_timeout))?
            .map_err(handshake_error)?;
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

/// The client's stream: TCP (through TLS for `wss://` with the `rustls` feature), read
/// through [`ReadAhead`].
#[cfg(feature = "rustls")]
type ClientStream = tokio_tungstenite::MaybeTlsStream<ReadAhead<TcpStream>>;
#[cfg(not(feature = "rustls"))]
type ClientStream = ReadAhead<TcpStream>;

/// Dials `request`'s host and makes the WebSocket handshake over it: what
/// tokio-tungstenite's `connect_async` does, with our own stream under it, so that
/// reads go through [`ReadAhead`]. The same errors for the same faults.
async fn open(
    request: Request,
    config: &PeerConfig,
    tls: Option<TlsConfig>,
) -> std::result::Result<
    (
        tokio_tungstenite::WebSocketStream<ClientStream>,
        Response,
        Option<SocketAddr>,
    ),
    tungstenite::Error,
> {
    use tungstenite::error::UrlError;
    let uri = request.uri();
    let tls_asked = match uri.scheme_str() {
        Some("ws") => false,
        Some("wss") => true,
        _ => return Err(UrlError::UnsupportedUrlScheme.into()),
    };
    #[cfg(not(feature = "rustls"))]
    if tls_asked {
        return Err(UrlError::TlsFeatureNotEnabled.into());
    }
    let host = uri.host().ok_or(UrlError::NoHostName)?;
    let port = uri.port_u16().unwrap_or(if tls_asked { 443 } else { 80 });
    // An IPv6 host keeps its brackets here: `[::1]:80` is an address.
    let tcp = TcpStream::connect(format!("{host}:{port}")).await?;
    // Frames are coalesced by the connection's task, so Nagle's delay is turned off.
    tcp.set_nodelay(true)?;
    let remote = tcp.peer_addr().ok();
    let stream = ReadAhead::new(tcp);
    #[cfg(feature = "rustls")]
    let (ws, response) = tokio_tungstenite::client_async_tls_with_config(
        request,
        stream,
        Some(config.websocket()),
        tls.map(tokio_tungstenite::Connector::Rustls),
    )
    .await?;
    #[cfg(not(feature = "rustls"))]
    let (ws, response) = {
        if let Some(never) = tls {
            match never {}
        }
        tokio_tungstenite::client_async_with_config(request, stream, Some(config.websocket()))
            .await?
    };
    Ok((ws, response, remote))
}

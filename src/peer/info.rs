//! Where a connection comes from: what its handshake said.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio_tungstenite::tungstenite::http::HeaderMap;

/// Where a connection comes from: what the WebSocket handshake said.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct ConnectionInfo {
    /// The other side's address, when the transport has one.
    pub remote_addr: Option<SocketAddr>,
    /// The request path and query of the handshake (server side), e.g. `/rpc?room=1`.
    pub path: Option<String>,
    /// The handshake's headers: the client's request on the server side, the
    /// server's response on the client side. On the server side, hooks always see
    /// them, but the peer keeps them only with
    /// [`HandshakePolicy::keep_headers`](crate::HandshakePolicy::keep_headers).
    pub headers: HeaderMap,
    /// What the authentication hook attached, if any.
    pub(crate) auth: Option<Attached>,
}

/// What an authentication hook attached to a connection; read it with
/// [`Peer::auth`](crate::Peer::auth).
pub(crate) type Attached = Arc<dyn std::any::Any + Send + Sync>;

impl ConnectionInfo {
    /// Info with only a remote address.
    pub fn from_addr(remote_addr: Option<SocketAddr>) -> Self {
        ConnectionInfo {
            remote_addr,
            ..Default::default()
        }
    }
}

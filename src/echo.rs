//! An echo endpoint on the server's own path (feature `fuzzing`): the handshake of
//! [`Server`], tungstenite with the limits a peer gets, and the [`WebSocket`]
//! adapter, with an echo in place of the JSON-RPC engine. It is what the Autobahn
//! test suite grades (its cases send arbitrary text and binary and expect them back).

use futures_util::{SinkExt, StreamExt};

use crate::error::Result;
use crate::router::Router;
use crate::server::Server;
use crate::transport::{Frame, Transport, TransportError};

/// Serves an echo of every text and binary message until the process ends.
///
/// # Errors
///
/// Those of [`Server::serve`].
pub async fn serve_echo(server: Server) -> Result<()> {
    server.echo_only().serve(Router::new()).await
}

/// The close code for a transport failure (RFC 6455 7.4.1).
fn close_code(error: &TransportError) -> u16 {
    use tokio_tungstenite::tungstenite::Error as Ws;
    match error {
        TransportError::MessageTooBig { .. } => 1009,
        TransportError::Protocol { code, .. } => *code,
        TransportError::Other(e) => match e.downcast_ref::<Ws>() {
            Some(Ws::Utf8(_)) => 1007,
            Some(Ws::Capacity(_)) => 1009,
            _ => 1002,
        },
        #[allow(unreachable_patterns)]
        _ => 1002,
    }
}

/// Echoes one connection.
pub(crate) async fn echo<T: Transport>(mut transport: T) {
    while let Some(frame) = transport.next().await {
        match frame {
            Ok(frame @ (Frame::Text(_) | Frame::Binary(_))) => {
                if transport.send(frame).await.is_err() {
                    return;
                }
            }
            // tungstenite answers pings and the closing handshake itself.
            Ok(_) => {}
            Err(e) => {
                let reason = match close_code(&e) {
                    1007 => "invalid UTF-8",
                    1009 => "message too big",
                    _ => "protocol error",
                };
                let _ = transport
                    .send(Frame::Close(Some((close_code(&e), reason.to_owned()))))
                    .await;
                break;
            }
        }
    }
    let _ = transport.close().await;
}

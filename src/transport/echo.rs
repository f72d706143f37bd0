//! Echoing a transport (feature `fuzzing`): every text and binary message sent back as
//! it came, and a transport failure answered with its close code. What the Autobahn
//! endpoint ([`crate::fuzzing::serve_echo`]) runs in place of a peer; it sits with the
//! transport so that the server, which starts it, imports nothing above itself.

use futures_util::{SinkExt, StreamExt};

use super::{Frame, Transport, TransportError};

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

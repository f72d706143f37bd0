//! An echo endpoint on the server's own path (feature `fuzzing`): the handshake of
//! [`Server`], tungstenite with the limits a peer gets, and the [`WebSocket`](crate::transport::WebSocket)
//! adapter, with an echo in place of the JSON-RPC engine. It is what the Autobahn
//! test suite grades (its cases send arbitrary text and binary and expect them back).

use crate::error::Result;
use crate::router::Router;
use crate::server::Server;

/// Serves an echo of every text and binary message until the process ends.
///
/// # Errors
///
/// Those of [`Server::serve`].
pub async fn serve_echo(server: Server) -> Result<()> {
    server.echo_only().serve(Router::new()).await
}

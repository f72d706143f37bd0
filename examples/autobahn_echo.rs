//! Run with `cargo run --example autobahn_echo --features fuzzing` (`--listen ADDR`,
//! default 127.0.0.1:9001). The first line on stdout is `listening on ws://HOST:PORT`.
//!
//! An echo endpoint on the server's own path (its handshake, tungstenite with a peer's
//! limits, the WebSocket adapter), for the Autobahn test suite's fuzzingclient:
//! `.ci/autobahn` runs every case against it.

#[path = "common/cli.rs"]
mod cli;

use std::io::Write;

use jsonrpc_peer::{HandshakePolicy, Server};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = cli::Args::parse("127.0.0.1:9001", &[])?;
    // The suite opens its cases one after another; its larger cases send 16 MiB.
    let server = Server::bind(args.listen.as_str())
        .await?
        .peer_config(jsonrpc_peer::PeerConfig::default().max_message_size(20 << 20))
        .handshake_policy(HandshakePolicy::default());
    println!("listening on ws://{}", server.local_addr()?);
    std::io::stdout().flush()?;
    jsonrpc_peer::fuzzing::serve_echo(server).await?;
    Ok(())
}

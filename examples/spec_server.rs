//! Run with `cargo run --example spec_server -- --listen 127.0.0.1:9000` (the default
//! address; port 0 picks a free one). Serves the methods the JSON-RPC 2.0
//! specification's examples use; the first line on stdout is `listening on ws://HOST:PORT`.

#[path = "common/cli.rs"]
mod cli;
#[path = "common/spec_methods.rs"]
mod spec_methods;

use std::io::Write;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = cli::Args::parse("127.0.0.1:9000", &[])?;
    let server = jsonrpc_peer::Server::bind(args.listen.as_str()).await?;
    println!("listening on ws://{}", server.local_addr()?);
    // Tools start this example and read the line above: make sure it leaves now.
    std::io::stdout().flush()?;
    server.serve(spec_methods::spec_router()).await?;
    Ok(())
}

//! Run with `cargo run --example spec_server -- --listen 127.0.0.1:9000` (the default
//! address; port 0 picks a free one). Serves the methods the JSON-RPC 2.0
//! specification's examples use; the first line on stdout is `listening on ws://HOST:PORT`.
//! `rpc.discover` answers with an OpenRPC document of exactly those methods and
//! notifications.

#[path = "common/cli.rs"]
mod cli;
#[path = "common/spec_methods.rs"]
mod spec_methods;

use std::io::Write;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = cli::Args::parse("127.0.0.1:9000", &[])?;
    // The description must match what is served, or the program stops here.
    let api = spec_methods::spec_api("jsonrpc-peer spec_server");
    let router = spec_methods::spec_router();
    api.check_exact(&router)?;
    let server = jsonrpc_peer::Server::bind(args.listen.as_str()).await?;
    println!("listening on ws://{}", server.local_addr()?);
    // Tools start this example and read the line above: make sure it leaves now.
    std::io::stdout().flush()?;
    server.serve(router.discover(&api)).await?;
    Ok(())
}

//! Run with `cargo run --example spec_server -- --listen 127.0.0.1:9000` (the default
//! address; port 0 picks a free one). Serves the methods the JSON-RPC 2.0
//! specification's examples use; the first line on stdout is `listening on ws://HOST:PORT`.

#[path = "common/spec_methods.rs"]
mod spec_methods;

use std::io::Write;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let listen = listen_arg("127.0.0.1:9000")?;
    let server = jsonrpc_peer::Server::bind(listen.as_str()).await?;
    println!("listening on ws://{}", server.local_addr()?);
    // Tools start this example and read the line above: make sure it leaves now.
    std::io::stdout().flush()?;
    server.serve(spec_methods::spec_router()).await?;
    Ok(())
}

/// The value of `--listen ADDR` (or `--listen=ADDR`), or `default`.
fn listen_arg(default: &str) -> Result<String, String> {
    let mut args = std::env::args().skip(1);
    let mut listen = default.to_owned();
    while let Some(arg) = args.next() {
        match arg.strip_prefix("--listen") {
            Some("") => listen = args.next().ok_or("--listen needs an address")?,
            Some(v) if v.starts_with('=') => listen = v[1..].to_owned(),
            _ => {
                return Err(format!(
                    "unknown argument `{arg}`; usage: spec_server [--listen ADDR]"
                ))
            }
        }
    }
    Ok(listen)
}

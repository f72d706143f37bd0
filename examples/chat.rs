//! Run the server with `cargo run --example chat -- server --listen 127.0.0.1:9001`
//! (it prints `listening on ws://HOST:PORT` first), then a terminal client or more with
//! `cargo run --example chat -- client --url ws://127.0.0.1:9001 --name alice`. Each
//! line typed is sent with `chat.send`; the server broadcasts it to every client as a
//! `chat.message` notification. Ctrl-D leaves.

#[path = "common/cli.rs"]
mod cli;

use std::io::Write;

use jsonrpc_peer::{connect, Caller, Context, Router, RpcError, Server, ServerHandle};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, BufReader};

#[derive(Serialize, Deserialize)]
struct Line {
    name: String,
    text: String,
}

async fn server(args: cli::Args) -> Result<(), Box<dyn std::error::Error>> {
    let server = Server::bind(args.listen.as_str()).await?;
    println!("listening on ws://{}", server.local_addr()?);
    std::io::stdout().flush()?;
    let everyone = server.handle();
    let router = Router::with_state(everyone.clone()).method(
        "chat.send",
        |cx: Context<ServerHandle>, line: Line| async move {
            if line.name.trim().is_empty() || line.text.trim().is_empty() || line.text.len() > 1000
            {
                return Err(RpcError::invalid_params(
                    "a name, and a text of 1 to 1000 bytes",
                ));
            }
            println!("{}: {}", line.name, line.text);
            cx.state()
                .broadcast("chat.message", &line)
                .map_err(RpcError::internal_error)
        },
    );
    server.serve(router).await?;
    Ok(())
}

async fn client(args: cli::Args) -> Result<(), Box<dyn std::error::Error>> {
    let url = args.text("url", "ws://127.0.0.1:9001");
    let name = args.text("name", "anonymous");
    let router =
        Router::new().notification("chat.message", |_cx: Context, line: Line| async move {
            println!("{}: {}", line.name, line.text);
        });
    let peer = connect(&url, router).await?;
    eprintln!("connected to {url} as {name}; type lines, Ctrl-D to leave");
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    loop {
        tokio::select! {
            line = lines.next_line() => match line? {
                Some(text) if text.trim().is_empty() => continue,
                Some(text) => {
                    let delivered: usize = peer.call("chat.send", Line { name: name.clone(), text }).await?;
                    eprintln!("(delivered to {delivered})");
                }
                None => break,
            },
            reason = peer.closed() => {
                eprintln!("the server closed the connection: {reason}");
                return Ok(());
            }
        }
    }
    peer.close().await;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut argv = std::env::args().skip(1);
    let mode = argv.next().unwrap_or_default();
    let args = cli::Args::parse_from(argv, "127.0.0.1:9001", &["url", "name"])?;
    match mode.as_str() {
        "server" => server(args).await,
        "client" => client(args).await,
        _ => {
            Err("usage: chat server [--listen ADDR] | chat client [--url URL] [--name NAME]".into())
        }
    }
}

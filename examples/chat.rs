//! Run the server with `cargo run --example chat -- server --listen 127.0.0.1:9001`
//! (it prints `listening on ws://HOST:PORT` first), then a terminal client or more with
//! `cargo run --example chat -- client --url ws://127.0.0.1:9001 --name alice`. Each
//! line typed is sent with `chat.send`; the server broadcasts it to every client as a
//! `chat.message` notification. Ctrl-D leaves.
//!
//! The server takes a name of 1 to 64 bytes and a text of 1 to 1,000 bytes, neither
//! with control characters (a newline would forge a line from someone else, an escape
//! sequence would reach every terminal); anything else is `-32602`, which the client
//! prints and goes on. The client shows control characters escaped all the same.

#[path = "common/cli.rs"]
mod cli;

use std::io::Write;

use jsonrpc_peer::{connect, Caller, Context, Error, Router, RpcError, Server, ServerHandle};
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
            let fits = |s: &str, max: usize| {
                !s.trim().is_empty() && s.len() <= max && !s.chars().any(char::is_control)
            };
            if !fits(&line.name, 64) || !fits(&line.text, 1000) {
                return Err(RpcError::invalid_params(
                    "a name of 1 to 64 bytes and a text of 1 to 1000 bytes, without control characters",
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
            println!("{}: {}", printable(&line.name), printable(&line.text));
        });
    let peer = connect(&url, router).await?;
    eprintln!("connected to {url} as {name}; type lines, Ctrl-D to leave");
    // Lines as bytes: one that is not UTF-8 is shown with replacement characters rather
    // than ending the client.
    let mut lines = BufReader::new(tokio::io::stdin()).split(b'\n');
    loop {
        tokio::select! {
            line = lines.next_segment() => match line? {
                Some(bytes) => {
                    let text = String::from_utf8_lossy(&bytes);
                    let text = text.trim_end_matches('\r');
                    if text.trim().is_empty() {
                        continue;
                    }
                    let line = Line { name: name.clone(), text: text.to_owned() };
                    match peer.call::<usize>("chat.send", line).await {
                        Ok(delivered) => eprintln!("(delivered to {delivered})"),
                        // Refused (too long, a control character): this line only.
                        Err(Error::Rpc { error, .. }) => eprintln!("(not sent: {})", error.message),
                        Err(e) => return Err(e.into()),
                    }
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

/// `text` with its control characters escaped (`\n`, `\u{1b}`), for a terminal.
fn printable(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
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

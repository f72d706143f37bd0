//! Run with `cargo run --example push_client -- --url ws://127.0.0.1:9000 --topic prices
//! --count 10` against `cargo run --example push_ticker`. Connects (and reconnects, with
//! backoff, if the server goes away), subscribes to the topic after every connect, and
//! prints what it receives; exits 0 after `--count` topic messages (default: never).

#[path = "common/cli.rs"]
mod cli;

use std::io::Write;
use std::time::Duration;

use jsonrpc_peer::{Context, Reconnecting, Router};
use serde_json::Value;
use tokio::sync::mpsc;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = cli::Args::parse("", &["url", "topic", "count"])?;
    let url = args.text("url", "ws://127.0.0.1:9000");
    let topic = args.text("topic", "prices");
    let count = args.number("count", u64::MAX)?;

    let (tx, mut received) = mpsc::unbounded_channel::<(String, Value)>();
    let router = Router::with_state(tx)
        .notification("tick", |cx: Context<_>, params: Value| async move {
            let _ = cx.state().send(("tick".to_owned(), params));
        })
        .notification(&topic, {
            let topic = topic.clone();
            move |cx: Context<_>, params: Value| {
                let topic = topic.clone();
                async move {
                    let _ = cx.state().send((topic, params));
                }
            }
        });
    let client = Reconnecting::builder(url.clone(), router)
        .on_connect({
            let topic = topic.clone();
            move |peer| {
                let topic = topic.clone();
                async move {
                    match peer.call::<bool>("subscribe", (topic.as_str(),)).await {
                        Ok(_) => eprintln!("connected; subscribed to `{topic}`"),
                        Err(e) => eprintln!("connected; subscribing to `{topic}` failed: {e}"),
                    }
                }
            }
        })
        .start();
    client.connected(Duration::from_secs(30)).await?;

    let mut seen = 0u64;
    while seen < count {
        let Some((method, params)) = received.recv().await else {
            break;
        };
        println!("{method} {params}");
        std::io::stdout().flush()?;
        seen += u64::from(method == topic);
    }
    client.close().await;
    Ok(())
}

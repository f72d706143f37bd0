//! Run with `cargo run --example push_client -- --url ws://127.0.0.1:9000 --topic prices
//! --count 10` against `cargo run --example push_ticker`. Connects (and reconnects, with
//! backoff, if the server goes away), subscribes to the topic after every connect, and
//! prints what it receives; exits 0 after `--count` topic messages (default: never).
//!
//! Against `push_ticker --history N` it resumes: after a reconnect it subscribes from
//! the last offset it has, so no message is lost or seen twice; each topic line then
//! ends with its offset, and a line `missed TOPIC {...}` says when the server could not
//! replay what was missed.

#[path = "common/cli.rs"]
mod cli;

use std::io::Write;
use std::time::Duration;

use jsonrpc_peer::{Context, Reconnecting, Router, TopicEvent};
use serde_json::{json, Value};
use tokio::sync::mpsc;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = cli::Args::parse("", &["url", "topic", "count"])?;
    let url = args.text("url", "ws://127.0.0.1:9000");
    let topic = args.text("topic", "prices");
    let count = args.number("count", u64::MAX)?;

    // Bounded: while the output is slow, the handler waits for room, later ticks wait in
    // the connection's notification queue, and then reading pauses (the server decides
    // what a client that lags gets), instead of every tick piling up here.
    let (tx, mut ticks) = mpsc::channel::<Value>(64);
    let router =
        Router::with_state(tx).notification("tick", |cx: Context<_>, params: Value| async move {
            let _ = cx.state().send(params).await;
        });
    // The topic: subscribed after every connect, from the last offset once there is one.
    let (builder, mut events) = Reconnecting::builder(url.clone(), router).topic::<Value>(&topic);
    let client = builder
        .on_connect(|_peer| async { eprintln!("connected") })
        .start();
    client.connected(Duration::from_secs(30)).await?;

    let mut seen = 0u64;
    while seen < count {
        let line = tokio::select! {
            Some(params) = ticks.recv() => format!("tick {params}"),
            event = events.recv() => match event {
                Some(TopicEvent::Data(data)) => {
                    seen += 1;
                    match events.position() {
                        Some(at) => format!("{topic} {data} (offset {})", at.offset),
                        None => format!("{topic} {data}"),
                    }
                }
                Some(TopicEvent::Missed { epoch, offset }) => {
                    format!("missed {topic} {}", json!({ "epoch": epoch, "offset": offset }))
                }
                Some(TopicEvent::Failed(error)) => {
                    eprintln!("{topic}: {error}");
                    continue;
                }
                Some(_) => continue,
                None => break,
            },
        };
        println!("{line}");
        std::io::stdout().flush()?;
    }
    client.close().await;
    Ok(())
}

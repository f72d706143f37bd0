//! Run with `cargo run --example push_ticker -- --listen 127.0.0.1:9000 --interval-ms 100`
//! (port 0 picks a free one). The first line on stdout is `listening on ws://HOST:PORT`.
//!
//! Pushes a `tick` notification to every connected client, no subscription needed, and
//! offers topics: a client calls `subscribe` / `unsubscribe` with `["prices"]` or
//! `["heartbeat"]` and then receives notifications whose method is the topic's name.
//! `cargo run --example push_client` is a client for it.
//!
//! With `--history N` both topics keep their last N publications: a notification's
//! params are then `{"offset":K,"data":{...}}`, `subscribe ["prices"]` answers
//! `{"epoch":E,"offset":K}`, and `subscribe ["prices", {"epoch":E,"offset":K0}]` replays
//! what came after K0 and answers `{"epoch":E,"offset":K,"recovered":true}` (or
//! `"recovered":false`, replaying nothing, when K0 is no longer kept or E is not this
//! process's epoch).

#[path = "common/cli.rs"]
mod cli;

use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jsonrpc_peer::{Context, HistoryConfig, Router, RpcError, Server, TopicMethods, Topics};
use serde_json::json;

const TOPICS: [&str; 2] = ["prices", "heartbeat"];

fn router(topics: Topics) -> Router<Topics> {
    // `subscribe` and `unsubscribe`, for these two topics only.
    let methods = TopicMethods::new(&topics).only(TOPICS);
    Router::with_state(topics)
        .topics(methods)
        .method("topics", |_cx: Context<Topics>, (): ()| async {
            Ok::<_, RpcError>(TOPICS)
        })
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or_default()
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = cli::Args::parse("127.0.0.1:9000", &["interval-ms", "history"])?;
    let interval = Duration::from_millis(args.number("interval-ms", 100)?.max(1));
    let topics = Topics::new();
    match args.number("history", 0)? {
        0 => {}
        // The last N, whatever their age: the publications are this program's own and
        // small, so N bounds the bytes too.
        n => topics.keep_history_for_all(
            HistoryConfig::default()
                .max_len(usize::try_from(n).unwrap_or(usize::MAX))
                .max_bytes(usize::MAX)
                .max_age(Duration::MAX),
        ),
    }
    let server = Server::bind(args.listen.as_str()).await?;
    println!("listening on ws://{}", server.local_addr()?);
    std::io::stdout().flush()?;

    let clients = server.handle();
    clients.on_connect(|peer, info| {
        eprintln!(
            "+ {} {:?} ({})",
            peer.id(),
            info.remote_addr,
            info.path.as_deref().unwrap_or("/")
        );
    });
    clients.on_disconnect(|peer, _| {
        let why = peer
            .close_reason()
            .map(|r| r.to_string())
            .unwrap_or_default();
        eprintln!("- {} ({why})", peer.id());
    });
    let publisher = topics.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval);
        let mut price = 100.0f64;
        for seq in 0u64.. {
            tick.tick().await;
            // Every client, no subscription needed.
            let _ = clients.broadcast("tick", &json!({ "seq": seq, "time_ms": now_ms() }));
            // Subscribers only.
            price = (price * (1.0 + (fastrand::f64() - 0.5) / 50.0)).max(1.0);
            let _ = publisher
                .publish(
                    "prices",
                    &json!({ "seq": seq, "BTC": (price * 100.0).round() / 100.0 }),
                )
                .await;
            if seq % 10 == 0 {
                let _ = publisher.publish("heartbeat", &json!({ "seq": seq })).await;
            }
        }
    });
    server.serve(router(topics)).await?;
    Ok(())
}

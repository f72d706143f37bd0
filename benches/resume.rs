//! How long a client takes to get 1,000 messages it missed once it resumes, against the
//! same 1,000 pushed to it live, on one node, in one run.
//!
//! ```text
//! cargo bench --bench resume              # 40 rounds of each, about ten seconds
//! cargo bench --bench resume -- --quick   # 5 rounds (CI)
//! ```
//!
//! One server (`Server` with `TopicMethods`) and one client (`connect`, whose
//! notification handler reads each `{"offset":N,"data":...}`), both on 127.0.0.1 in
//! this process, a topic keeping 10,000 publications of about 100 bytes of data each.
//!
//! | measure | from | until |
//! |---|---|---|
//! | live (baseline) | the first of 1,000 `Topics::publish` calls, made back to back, the client subscribed | the client has read the 1,000th |
//! | resume | the client sends `subscribe [topic, {"epoch":E,"offset":K0}]`, the 1,000 published after K0 while it was not subscribed | the client has read the 1,000th (the answer comes after them) |
//!
//! Rounds alternate the two; the figures are the median and the 90th percentile. The
//! design's target: the 1,000 missed arrive within 50 ms of the resume. The machine is
//! shared and noisy: compare within one run.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use jsonrpc_peer::{
    connect, Caller, Context, HistoryConfig, Peer, PeerConfig, Router, Server, TopicMethods, Topics,
};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use tokio::sync::Notify;

const TOPIC: &str = "bench";
const MISSED: u64 = 1000;

/// The newest offset the client has read, and a wake-up for whoever waits on it.
#[derive(Default)]
struct Seen {
    offset: AtomicU64,
    changed: Notify,
}

impl Seen {
    async fn until(&self, offset: u64) {
        let wait = async {
            loop {
                let notified = self.changed.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if self.offset.load(Ordering::Acquire) >= offset {
                    return;
                }
                notified.await;
            }
        };
        tokio::time::timeout(Duration::from_secs(60), wait)
            .await
            .expect("the client got every message within 60 s");
    }
}

#[derive(Deserialize)]
struct Item<'a> {
    offset: u64,
    #[serde(borrow)]
    #[allow(dead_code)] // read, as a client would; its content does not matter here
    data: &'a RawValue,
}

async fn client(url: &str, seen: Arc<Seen>) -> Peer {
    let router = Router::with_state(seen).notification(
        TOPIC,
        |cx: Context<Arc<Seen>>, params: Box<RawValue>| async move {
            if let Ok(item) = serde_json::from_str::<Item>(params.get()) {
                cx.state().offset.store(item.offset, Ordering::Release);
                cx.state().changed.notify_waiters();
            }
        },
    );
    connect(url, router).await.expect("connect")
}

async fn publish_burst(topics: &Topics, payload: &Value) {
    for _ in 0..MISSED {
        topics.publish(TOPIC, &payload).await.expect("publish");
    }
}

fn summary(samples: &mut [f64]) -> (f64, f64) {
    samples.sort_by(f64::total_cmp);
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.9))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let rounds = if quick { 5 } else { 40 };

    let topics = Topics::new();
    topics.keep_history(TOPIC, HistoryConfig::default().max_len(10_000));
    let server = Server::bind("127.0.0.1:0")
        .await
        .expect("bind")
        .peer_config(PeerConfig::default());
    let url = format!("ws://{}", server.local_addr().expect("addr"));
    tokio::spawn(server.serve(Router::new().topics(TopicMethods::new(&topics))));
    let seen = Arc::new(Seen::default());
    let peer = client(&url, seen.clone()).await;
    let payload = json!({ "text": "x".repeat(79), "n": 12345 });
    assert_eq!(payload.to_string().len(), 100);

    // Warm-up: one of each, not counted.
    let subscribed: Value = peer.call("subscribe", [TOPIC]).await.expect("subscribe");
    let epoch = subscribed["epoch"].as_str().expect("epoch").to_owned();
    publish_burst(&topics, &payload).await;
    seen.until(topics.position(TOPIC).expect("history").offset)
        .await;

    let mut live = Vec::new();
    let mut resume = Vec::new();
    for _ in 0..rounds {
        // Live: subscribed, 1,000 published back to back.
        let target = topics.position(TOPIC).expect("history").offset + MISSED;
        let start = Instant::now();
        publish_burst(&topics, &payload).await;
        seen.until(target).await;
        live.push(start.elapsed().as_secs_f64() * 1e3);

        // Resume: gone while 1,000 are published, then back from the last offset.
        let _: bool = peer
            .call("unsubscribe", [TOPIC])
            .await
            .expect("unsubscribe");
        let from = topics.position(TOPIC).expect("history").offset;
        publish_burst(&topics, &payload).await;
        let start = Instant::now();
        let answer: Value = peer
            .call(
                "subscribe",
                json!([TOPIC, {"epoch": epoch, "offset": from}]),
            )
            .await
            .expect("resume");
        seen.until(from + MISSED).await;
        resume.push(start.elapsed().as_secs_f64() * 1e3);
        assert_eq!(answer["recovered"], true, "{answer}");
    }
    peer.close().await;

    let (live_p50, live_p90) = summary(&mut live);
    let (resume_p50, resume_p90) = summary(&mut resume);
    println!(
        "resume bench: {MISSED} messages of {} bytes of data, {rounds} rounds of each (median, p90)",
        payload.to_string().len()
    );
    println!("| measure | p50 | p90 |");
    println!("|---|---|---|");
    println!(
        "| live: 1,000 published back to back (baseline) | {live_p50:.2} ms | {live_p90:.2} ms |"
    );
    println!(
        "| resume: 1,000 missed, from the subscribe | {resume_p50:.2} ms | {resume_p90:.2} ms |"
    );
    println!(
        "resume / live: {:.2}x at p50; target: the 1,000 within 50 ms of the resume: {}",
        resume_p50 / live_p50,
        if resume_p50 <= 50.0 { "met" } else { "missed" }
    );
}

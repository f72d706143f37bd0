//! The history rows of the cluster bench: a topic with history against one without and
//! against raw Redis (`XADD` + `PUBLISH` in one pipeline), and a resume of 1,000 missed
//! messages on another node.
//!
//! Both throughputs are driven the same way: `WINDOW` publishes in flight at once from
//! node A (a publish on a topic with history waits for Redis to record it, so one
//! after another would measure round trips, not throughput), until B's client has
//! them all.

use std::sync::Arc;
use std::time::Instant;

use futures_util::StreamExt;
use jsonrpc_peer::{connect, Caller, Context, HistoryConfig, Peer, Position, Router, Topics};
use redis::aio::MultiplexedConnection;
use serde_json::Value;

use super::{percentile, raw_subscriber, resp3_client, steady, Arrivals, Node, Opts};

/// Publishes in flight at once in the throughput runs. 1,024: with 256 the path with
/// history still waited on its round trips to Redis (two script calls on their way at
/// once, each carrying what the publishers had in flight), so the row measured the
/// window more than the path. Alternated runs of `--only history`, the median of five
/// rounds' ratios to the path without: 256 gave 0.51x and 0.49x (its throughput
/// 347-510 k msg/s), 1,024 gave 0.61x, 0.69x and 0.67x (423-713 k), 4,096 gave 0.69x
/// and 0.64x (362-755 k): the path's throughput stops growing past 1,024. The path
/// without history and the raw pipelines moved by a tenth or less.
pub const WINDOW: usize = 1024;

/// The topic with history.
pub const HISTORY_TOPIC: &str = "hist";

/// The history every bench node keeps for its history topics.
pub fn config() -> HistoryConfig {
    HistoryConfig::default()
        .max_len(200_000)
        .max_bytes(64 << 20)
}

pub struct HistoryFigures {
    pub raw_p50: f64,
    pub plain_p50: f64,
    pub hist_p50: f64,
    /// The throughputs, alternated rounds.
    pub rounds: Vec<Round>,
    /// Resume of 1,000 missed messages on a node that reads them from Redis.
    pub resume_redis_ms: Vec<f64>,
    /// The same on a node whose cache has them.
    pub resume_cache_ms: Vec<f64>,
}

/// A notification of a topic with history, as the client reads it: typed, as the
/// plain path's client reads its `[seq]`, so that both clients do the same work.
#[derive(serde::Deserialize)]
struct Recorded {
    #[allow(dead_code)] // read, as a client would; the bench needs the seq alone
    offset: u64,
    data: (usize,),
}

/// A client whose notifications on `topic` (`{"offset":N,"data":[seq]}`) mark arrivals
/// by `seq`.
async fn history_client(url: &str, topic: &str, arrivals: Arc<Arrivals>) -> Peer {
    let router = Router::with_state(arrivals).notification(
        topic,
        |cx: Context<Arc<Arrivals>>, note: Recorded| {
            cx.state().hit(note.data.0);
            std::future::ready(())
        },
    );
    connect(url, router).await.expect("connect")
}

async fn subscribe_from(peer: &Peer, topic: &str, from: Option<&Position>) -> Value {
    peer.call("subscribe_from", (topic, from))
        .await
        .expect("subscribe_from")
}

/// Publishes `0..n` on `topic` from `topics`, `WINDOW` at a time.
async fn burst(topics: &Topics, topic: &str, n: usize) {
    futures_util::stream::iter(0..n)
        .map(|seq| {
            let topics = topics.clone();
            async move { topics.publish(topic, &[seq]).await.expect("publish") }
        })
        .buffer_unordered(WINDOW)
        .for_each(|_| async {})
        .await;
}

/// Every node of `nodes` keeps history for the history topic; the raw side's subscriber
/// (kept while its connection is) and publishing connection, its arrivals sized `n`.
async fn set_up(
    redis_url: &str,
    nodes: &[&Node],
    n: usize,
) -> (Arc<Arrivals>, MultiplexedConnection, MultiplexedConnection) {
    for node in nodes {
        node.cluster.topics().keep_history(HISTORY_TOPIC, config());
    }
    // Raw: XADD (exact MAXLEN, as the script trims) and PUBLISH in one pipeline.
    let raw_arrivals = Arrivals::new(n);
    let sub = raw_subscriber(redis_url, "rawh", raw_arrivals.clone()).await;
    let conn = resp3_client(redis_url)
        .get_multiplexed_async_connection()
        .await
        .expect("publisher connection");
    (raw_arrivals, sub, conn)
}

pub async fn run(opts: &Opts, redis_url: &str, a: &Node, b: &Node, c: &Node) -> HistoryFigures {
    let (raw_arrivals, _sub, conn) = set_up(redis_url, &[a, b, c], opts.latency_msgs).await;
    let sent = steady(opts.latency_msgs, |seq| {
        let (mut conn, pipe) = (conn.clone(), raw_pipe(seq));
        async move { pipe.exec_async(&mut conn).await.expect("raw pipeline") }
    })
    .await;
    raw_arrivals.wait("raw history latency").await;
    let raw_p50 = percentile(&mut raw_arrivals.latencies_ms(&sent), 0.5);

    // Ours, without history and with it: node A publishes, B's client receives.
    let topics = a.cluster.topics();
    let (plain, plain_peer) = plain_receiver(b, opts.latency_msgs).await;
    let (hist, hist_peer) = history_receiver(b, opts.latency_msgs).await;
    let mut p50 = Vec::new();
    for (topic, arrivals) in [(super::TOPIC, &plain), (HISTORY_TOPIC, &hist)] {
        let sent = steady(opts.latency_msgs, |seq| {
            let topics = topics.clone();
            async move {
                topics.publish(topic, &[seq]).await.expect("publish");
            }
        })
        .await;
        arrivals.wait("latency").await;
        p50.push(percentile(&mut arrivals.latencies_ms(&sent), 0.5));
    }
    let rounds = Throughputs {
        opts,
        conn: &conn,
        topics: &topics,
        raw: &raw_arrivals,
        plain: &plain,
        hist: &hist,
    }
    .alternated(false)
    .await;
    plain_peer.close().await;
    hist_peer.close().await;

    let (resume_redis_ms, resume_cache_ms) = resumes(opts, a, b, c).await;
    HistoryFigures {
        raw_p50,
        plain_p50: p50[0],
        hist_p50: p50[1],
        rounds,
        resume_redis_ms,
        resume_cache_ms,
    }
}

/// A client of node `b` subscribed to the plain topic (no history).
async fn plain_receiver(b: &Node, n: usize) -> (Arc<Arrivals>, Peer) {
    let arrivals = Arrivals::new(n);
    let peer = super::client(&b.url, arrivals.clone()).await;
    let _: bool = peer.call("subscribe", ()).await.expect("subscribe");
    (arrivals, peer)
}

/// A client of node `b` subscribed to the topic with history, live.
async fn history_receiver(b: &Node, n: usize) -> (Arc<Arrivals>, Peer) {
    let arrivals = Arrivals::new(n);
    let peer = history_client(&b.url, HISTORY_TOPIC, arrivals.clone()).await;
    subscribe_from(&peer, HISTORY_TOPIC, None).await;
    (arrivals, peer)
}

/// One round of the three throughputs, msg/s.
pub struct Round {
    pub raw: f64,
    pub plain: f64,
    pub hist: f64,
}

/// What the throughput rounds publish on and count with.
struct Throughputs<'a> {
    opts: &'a Opts,
    conn: &'a MultiplexedConnection,
    topics: &'a Topics,
    raw: &'a Arc<Arrivals>,
    plain: &'a Arc<Arrivals>,
    hist: &'a Arc<Arrivals>,
}

impl Throughputs<'_> {
    /// `throughput_rounds` rounds of ours with history, raw and ours without, in that
    /// order (alternated, so that a slow spell of the machine falls on all three), a
    /// line each when `print`.
    async fn alternated(&self, print: bool) -> Vec<Round> {
        let n = self.opts.throughput_msgs;
        let mut rounds = Vec::new();
        for round in 0..self.opts.throughput_rounds {
            let hist = ours_throughput(n, self.topics, HISTORY_TOPIC, self.hist).await;
            let raw = raw_throughput(n, self.conn, self.raw).await;
            let plain = ours_throughput(n, self.topics, super::TOPIC, self.plain).await;
            if print {
                println!(
                    "history only, round {round}, {n} messages: raw XADD+PUBLISH {raw:.0} msg/s, ours without history {plain:.0}, with {hist:.0} ({:.2}x without, {:.2}x raw)",
                    hist / plain,
                    hist / raw
                );
            }
            rounds.push(Round { raw, plain, hist });
        }
        rounds
    }
}

/// XADD (exact MAXLEN, as the script trims) and PUBLISH of `seq` in one pipeline.
fn raw_pipe(seq: usize) -> redis::Pipeline {
    let mut pipe = redis::pipe();
    pipe.cmd("XADD")
        .arg("rawh:stream")
        .arg("MAXLEN")
        .arg(200_000)
        .arg("*")
        .arg("d")
        .arg(seq.to_string())
        .ignore()
        .cmd("PUBLISH")
        .arg("rawh")
        .arg(seq.to_string())
        .ignore();
    pipe
}

/// `n` raw pipelines, `WINDOW` in flight, until the raw subscriber has them all.
async fn raw_throughput(n: usize, conn: &MultiplexedConnection, arrivals: &Arrivals) -> f64 {
    arrivals.reset(n);
    let start = Instant::now();
    futures_util::stream::iter(0..n)
        .map(|seq| {
            let (mut conn, pipe) = (conn.clone(), raw_pipe(seq));
            async move { pipe.exec_async(&mut conn).await.expect("raw pipeline") }
        })
        .buffer_unordered(WINDOW)
        .for_each(|_| async {})
        .await;
    arrivals.wait("raw history throughput").await;
    rate(n, arrivals, start)
}

/// `n` publishes on `topic`, `WINDOW` in flight, until the subscriber has them all.
async fn ours_throughput(n: usize, topics: &Topics, topic: &str, arrivals: &Arrivals) -> f64 {
    arrivals.reset(n);
    let start = Instant::now();
    burst(topics, topic, n).await;
    arrivals.wait("throughput").await;
    rate(n, arrivals, start)
}

/// `--only history`: ours with history, raw and ours without, `throughput_rounds`
/// rounds in that order, a line each round; `--only history-alone`: ours with history
/// alone (for profiling).
pub async fn only(opts: &Opts, redis_url: &str, a: &Node, b: &Node) {
    let (raw_arrivals, _sub, conn) = set_up(redis_url, &[a, b], opts.throughput_msgs).await;
    let (plain, _plain_peer) = plain_receiver(b, opts.throughput_msgs).await;
    let (hist, _hist_peer) = history_receiver(b, opts.throughput_msgs).await;
    let topics = a.cluster.topics();
    if opts.only_history_alone {
        for round in 0..opts.throughput_rounds {
            let with = ours_throughput(opts.throughput_msgs, &topics, HISTORY_TOPIC, &hist).await;
            println!("history alone, round {round}: with history {with:.0} msg/s");
        }
        return;
    }
    Throughputs {
        opts,
        conn: &conn,
        topics: &topics,
        raw: &raw_arrivals,
        plain: &plain,
        hist: &hist,
    }
    .alternated(true)
    .await;
}

fn rate(n: usize, arrivals: &Arrivals, start: Instant) -> f64 {
    n as f64 / (arrivals.last().unwrap_or(start) - start).as_secs_f64()
}

/// The time from a resuming `subscribe` until the client has the 1,000th missed message:
/// on node C, which has no subscriber of the topic (its cache is empty: the 1,000 come
/// from Redis), and on node B, which has one (they come from its cache). A new topic
/// each round, so C's cache is empty every time.
async fn resumes(opts: &Opts, a: &Node, b: &Node, c: &Node) -> (Vec<f64>, Vec<f64>) {
    const MISSED: usize = 1000;
    let (mut from_redis, mut from_cache) = (Vec::new(), Vec::new());
    for round in 0..=opts.resume_rounds {
        let topic = format!("resume{round}");
        for node in [a, b, c] {
            node.cluster.topics().keep_history(&topic, config());
        }
        // A subscriber that stays on B: B's cache follows the topic.
        let stay = Arrivals::new(MISSED);
        let staying = history_client(&b.url, &topic, stay.clone()).await;
        let answer = subscribe_from(&staying, &topic, None).await;
        let at: Position = serde_json::from_value(answer).expect("a position");
        burst(&a.cluster.topics(), &topic, MISSED).await;
        stay.wait("the staying subscriber").await;
        for (node, times) in [(c, &mut from_redis), (b, &mut from_cache)] {
            let arrivals = Arrivals::new(MISSED);
            let resumer = history_client(&node.url, &topic, arrivals.clone()).await;
            let start = Instant::now();
            let answer = subscribe_from(&resumer, &topic, Some(&at)).await;
            assert_eq!(answer["recovered"], true, "{answer}");
            arrivals.wait("resume").await;
            let ms = (arrivals.last().unwrap_or(start) - start).as_secs_f64() * 1e3;
            if round > 0 {
                times.push(ms);
            }
            resumer.close().await;
        }
        staying.close().await;
    }
    (from_redis, from_cache)
}

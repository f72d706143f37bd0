//! jsonrpc-peer against a raw tokio-tungstenite baseline, on 127.0.0.1, in one run.
//!
//! ```text
//! cargo bench -p harness --bench rpc              # full run, about a minute
//! cargo bench -p harness --bench rpc -- --quick   # a few seconds: CI runs it so the bench never rots
//! ```
//!
//! Each scenario runs both contenders on the same connections setup, alternating which
//! goes first round by round, and reports the median over rounds. The **baseline** is
//! the physical limit of the stack: a tokio-tungstenite server that parses each request
//! with serde_json and writes the answer frame from the connection's own task, and a
//! client with one reader and one writer task; the same frames, the same in-flight
//! depth, writes coalesced (feed, flush when idle). **jsonrpc-peer** does the same work
//! through `Server`, `connect` and `Peer::call`.
//!
//! | scenario | what is measured |
//! |---|---|
//! | (a) | one call at a time: rate, p50 and p99 latency |
//! | (b) | 64 calls in flight on one connection: rate |
//! | (c) | 16 connections x 16 calls in flight: rate |
//! | (d) | server-to-client notifications received per second on one connection |
//! | (e) | one broadcast to 1,000 connections: time until the last one has it |
//! | (f) | server memory (RSS) per idle connection at 5,000 connections |
//!
//! Beside every rate is the CPU time per call: client and server together, from
//! `/proc/self/stat`, summed over all rounds (it counts in 10 ms ticks).
//!
//! **Pinning.** The bench re-executes itself under `taskset -c N` (the last CPU it may
//! use; `RPC_BENCH_CPU=<n>` picks another, `RPC_BENCH_CPU=none` does not pin), so the
//! server's and the client's threads share one vCPU: on small VMs a wake-up across
//! vCPUs costs tens of microseconds and swamps what is measured. Server and client each
//! run on their own current-thread tokio runtime on their own OS thread.
//!
//! **Memory (f)** is read from a separate process: the bench runs its own binary with
//! `--child-server ours|raw`, which serves on 127.0.0.1:0, prints its port and answers
//! `rss` (VmRSS from `/proc/self/status`) and `count` on stdin. RSS is read before and
//! after 5,000 idle connections. Needs about 5,100 file descriptors in each process;
//! the bench raises the soft `RLIMIT_NOFILE` to the hard limit with `prlimit` when it
//! is lower, and uses fewer connections (and says so) if that is not enough.
//!
//! Options (after `--`): `--quick`; `--only abd` runs only those scenarios;
//! `--contender ours|raw` runs one side only; `--rounds N`, `--round-ms N` change the
//! length of (a) to (c). To count instructions per call, run one side of one scenario
//! unpinned under callgrind (valgrind does not follow the `taskset` re-execution):
//!
//! ```text
//! CARGO_PROFILE_BENCH_DEBUG=true cargo bench -p harness --bench rpc --no-run
//! RPC_BENCH_CPU=none valgrind --tool=callgrind target/release/deps/rpc-<hash> \
//!     --only b --contender ours --rounds 1 --round-ms 3000
//! ```
//!
//! Do it with two `--round-ms` values: the difference in instructions over the
//! difference in the `messages:` count printed on stderr is the cost of one call,
//! without the setup.
//!
//! The table goes to stdout and, as Markdown, to `target/bench/rpc.md`. Unknown flags
//! (cargo passes `--bench`) are ignored. The machine is shared and noisy: ratios, not
//! absolute numbers, are what count.

use std::collections::HashMap;
use std::future::Future;
use std::io::{BufRead, BufReader, Write as _};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{FutureExt, SinkExt, StreamExt};
use hdrhistogram::Histogram;
use jsonrpc_peer::{connect, Context, Peer, Router, RpcError, Server, ServerHandle};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Handle;
use tokio::sync::{mpsc, Notify};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{Message, Utf8Bytes};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

const ADD: &str = "add";
const FLOOD: &str = "flood";
const TICK: &str = "tick";
/// Set in the re-executed, pinned process.
const PINNED_ENV: &str = "RPC_BENCH_PINNED";
/// Which CPU to pin to, or `none`.
const CPU_ENV: &str = "RPC_BENCH_CPU";
/// Outgoing queue of a raw connection, as `PeerConfig::outgoing_queue`'s default.
const QUEUE: usize = 1024;

type ClientWs = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// How much of everything: `--quick` or the full run.
struct Opts {
    quick: bool,
    rounds: usize,
    round_time: Duration,
    warmup: Duration,
    /// Notifications per round in (d).
    flood: u64,
    /// Connections in (e).
    broadcast_conns: usize,
    /// Idle connections in (f).
    idle_conns: usize,
    /// The scenarios to run, by letter (`--only bd`); all by default.
    only: String,
    /// Which contenders run (`--contender ours|raw`); both by default.
    ours: bool,
    raw: bool,
}

impl Opts {
    fn parse(args: &[String]) -> Self {
        let value = |flag: &str| {
            let i = args.iter().position(|a| a == flag)?;
            args.get(i + 1).map(String::as_str)
        };
        let number = |flag: &str| value(flag).map(|v| v.parse::<u64>().expect("a number"));
        let mut opts = Opts::new(args.iter().any(|a| a == "--quick"));
        if let Some(only) = value("--only") {
            opts.only = only.to_owned();
        }
        match value("--contender") {
            Some("ours") => opts.raw = false,
            Some("raw") => opts.ours = false,
            _ => {}
        }
        if let Some(rounds) = number("--rounds") {
            opts.rounds = rounds.max(1) as usize;
        }
        if let Some(ms) = number("--round-ms") {
            opts.round_time = Duration::from_millis(ms);
        }
        opts
    }

    fn new(quick: bool) -> Self {
        let all = |opts: Opts| Opts {
            only: "abcdef".to_owned(),
            ours: true,
            raw: true,
            ..opts
        };
        if quick {
            all(Opts {
                quick,
                rounds: 2,
                round_time: Duration::from_millis(150),
                warmup: Duration::from_millis(50),
                flood: 5_000,
                broadcast_conns: 100,
                idle_conns: 300,
                only: String::new(),
                ours: true,
                raw: true,
            })
        } else {
            all(Opts {
                quick,
                rounds: 7,
                round_time: Duration::from_secs(1),
                warmup: Duration::from_millis(300),
                flood: 1_000_000,
                broadcast_conns: 1_000,
                idle_conns: 5_000,
                only: String::new(),
                ours: true,
                raw: true,
            })
        }
    }

    fn runs(&self, scenario: char) -> bool {
        self.only.contains(scenario)
    }

    /// The contenders of one round, in the order they run, alternating who goes
    /// first; `true` is jsonrpc-peer.
    fn order(&self, round: usize) -> Vec<bool> {
        let order = if round % 2 == 0 {
            [true, false]
        } else {
            [false, true]
        };
        order
            .into_iter()
            .filter(|&ours| if ours { self.ours } else { self.raw })
            .collect()
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(i) = args.iter().position(|a| a == "--child-server") {
        child_server(args.get(i + 1).map_or("ours", String::as_str));
        return;
    }
    raise_nofile_limit();
    pin_to_one_cpu(&args);
    let opts = Opts::parse(&args);

    let server = ServerThread::start();
    let client = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("client runtime");
    let started = Instant::now();
    let rows = client.block_on(run(&opts, server.handle.clone()));
    drop(client);
    server.stop();

    let report = render(&opts, &rows, started.elapsed());
    println!("\n{report}");
    let path = target_dir().join("bench").join("rpc.md");
    match std::fs::create_dir_all(path.parent().expect("has a parent"))
        .and_then(|()| std::fs::write(&path, &report))
    {
        Ok(()) => println!("written to {}", path.display()),
        Err(e) => eprintln!("could not write {}: {e}", path.display()),
    }
}

/// Runs every scenario; returns the table's rows.
async fn run(opts: &Opts, server_rt: Handle) -> Vec<Row> {
    let servers = server_rt.spawn(Servers::start()).await.expect("servers");
    let mut rows = Vec::new();

    if opts.runs('a') {
        eprintln!("(a) one call at a time");
        let (ours, raw) = calls_scenario(opts, &servers, 1, 1).await;
        rows.push(Row::info(
            "(a) 1 in flight",
            "rate (calls/s)",
            rate(&ours),
            rate(&raw),
        ));
        rows.push(Row::new(
            "",
            "p50 latency (µs)",
            p(&ours, 0.5),
            p(&raw, 0.5),
            Target::AtMost(1.1),
        ));
        rows.push(Row::new(
            "",
            "p99 latency (µs)",
            p(&ours, 0.99),
            p(&raw, 0.99),
            Target::AtMost(1.3),
        ));
        rows.push(Row::info("", "CPU per call (µs)", cpu(&ours), cpu(&raw)));
    }

    for (letter, connections, depth) in [('b', 1, 64), ('c', 16, 16)] {
        if !opts.runs(letter) {
            continue;
        }
        let label = format!("({letter}) {connections} x {depth} in flight");
        eprintln!("{label}");
        let (ours, raw) = calls_scenario(opts, &servers, connections, depth).await;
        rows.push(Row::new(
            &label,
            "rate (calls/s)",
            rate(&ours),
            rate(&raw),
            Target::AtLeast(0.5),
        ));
        rows.push(Row::info(
            "",
            "p50 latency (µs)",
            p(&ours, 0.5),
            p(&raw, 0.5),
        ));
        rows.push(Row::info("", "CPU per call (µs)", cpu(&ours), cpu(&raw)));
    }

    if opts.runs('d') {
        eprintln!("(d) server-to-client notifications on one connection");
        let (ours, raw) = flood_scenario(opts, &servers).await;
        rows.push(Row::new(
            "(d) server pushes",
            "notifications/s",
            rate(&ours),
            rate(&raw),
            Target::AtLeast(0.7),
        ));
        rows.push(Row::info(
            "",
            "CPU per notification (µs)",
            cpu(&ours),
            cpu(&raw),
        ));
    }

    if opts.runs('e') {
        let n = opts.broadcast_conns;
        eprintln!("(e) one broadcast to {n} connections");
        let (ours, raw) = broadcast_scenario(opts, &servers, &server_rt).await;
        rows.push(Row::new(
            &format!("(e) broadcast to {n}"),
            "last one has it (ms)",
            median(ours),
            median(raw),
            Target::OursAtMost(50.0),
        ));
    }

    if opts.runs('f') {
        let (conns, note) = idle_connections(opts.idle_conns);
        eprintln!("(f) memory per idle connection at {conns} connections{note}");
        let ours = if opts.ours {
            idle_memory("ours", conns).await
        } else {
            f64::NAN
        };
        let raw = if opts.raw {
            idle_memory("raw", conns).await
        } else {
            f64::NAN
        };
        rows.push(Row::new(
            &format!("(f) {conns} idle conns{note}"),
            "server RSS per conn (KiB)",
            ours,
            raw,
            Target::OursAtMost(8.0),
        ));
    }
    rows
}

// ---------------------------------------------------------------------------------
// Scenarios
// ---------------------------------------------------------------------------------

/// (a), (b), (c): `conns` connections, each with `depth` calls in flight.
async fn calls_scenario(
    opts: &Opts,
    servers: &Servers,
    conns: usize,
    depth: usize,
) -> (Vec<Sample>, Vec<Sample>) {
    let tracker = Arc::new(Tracker::default());
    let ours_peers = join_all((0..conns).map(|_| connect_ours(&servers.ours_url, &tracker))).await;
    let mut raw_conns = join_all((0..conns).map(|_| RawConn::connect(&servers.raw_url))).await;

    let (mut ours, mut raw) = (Vec::new(), Vec::new());
    // Round 0 warms up and is not counted.
    for round in 0..=opts.rounds {
        let time = if round == 0 {
            opts.warmup
        } else {
            opts.round_time
        };
        for is_ours in opts.order(round) {
            if is_ours {
                ours.push(ours_calls(&ours_peers, depth, time).await);
            } else {
                raw.push(raw_calls(&mut raw_conns, depth, time).await);
            }
        }
    }
    report_totals(&ours, &raw);
    ours.drain(..ours.len().min(1));
    raw.drain(..raw.len().min(1));
    join_all(ours_peers.iter().map(Peer::close)).await;
    (ours, raw)
}

/// One round of calls through jsonrpc-peer: `depth` tasks per peer, each calling in a
/// loop until the round's time is up.
async fn ours_calls(peers: &[Peer], depth: usize, time: Duration) -> Sample {
    let latencies = Latencies::default();
    let meter = Meter::start();
    let deadline = meter.start + time;
    let tasks: Vec<_> = peers
        .iter()
        .flat_map(|peer| (0..depth).map(move |_| peer.clone()))
        .map(|peer| {
            let latencies = latencies.clone();
            tokio::spawn(async move {
                let mut i = 0i64;
                loop {
                    let sent = Instant::now();
                    let sum: i64 = peer.call(ADD, [i, 1]).await.expect("call");
                    let now = Instant::now();
                    assert_eq!(sum, i + 1);
                    latencies.record(now - sent);
                    i += 1;
                    if now >= deadline {
                        return;
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("caller");
    }
    meter.finish(latencies)
}

/// One round of calls through the raw client: per connection, one reader task that
/// sends the next request (through the writer task) as each answer comes in.
async fn raw_calls(conns: &mut [RawConn], depth: usize, time: Duration) -> Sample {
    let latencies = Latencies::default();
    let meter = Meter::start();
    let deadline = meter.start + time;
    let tasks: Vec<_> = conns
        .iter_mut()
        .map(|conn| {
            let stream = conn.stream.take().expect("stream is home between rounds");
            let (tx, latencies) = (conn.tx.clone(), latencies.clone());
            tokio::spawn(raw_call_loop(stream, tx, depth, deadline, latencies))
        })
        .collect();
    for (conn, task) in conns.iter_mut().zip(tasks) {
        conn.stream = Some(task.await.expect("raw reader"));
    }
    meter.finish(latencies)
}

async fn raw_call_loop(
    mut stream: SplitStream<ClientWs>,
    tx: mpsc::Sender<Message>,
    depth: usize,
    deadline: Instant,
    latencies: Latencies,
) -> SplitStream<ClientWs> {
    let mut sent_at: HashMap<u64, Instant> = HashMap::with_capacity(depth);
    let mut next_id = 0u64;
    let mut send = |sent_at: &mut HashMap<u64, Instant>| {
        let id = next_id;
        next_id += 1;
        sent_at.insert(id, Instant::now());
        let frame = serde_json::to_string(&RawCall {
            jsonrpc: "2.0",
            method: ADD,
            params: [id as i64, 1],
            id,
        })
        .expect("serializes");
        Message::text(frame)
    };
    for _ in 0..depth {
        let frame = send(&mut sent_at);
        tx.send(frame).await.expect("raw writer");
    }
    while !sent_at.is_empty() {
        let Message::Text(text) = stream.next().await.expect("open").expect("frame") else {
            continue;
        };
        let reply: RawReply = serde_json::from_str(&text).expect("a response");
        let sent = sent_at.remove(&reply.id).expect("an id we sent");
        assert_eq!(reply.result, reply.id as i64 + 1);
        let now = Instant::now();
        latencies.record(now - sent);
        if now < deadline {
            let frame = send(&mut sent_at);
            tx.send(frame).await.expect("raw writer");
        }
    }
    stream
}

/// (d): the client asks for `flood` notifications; the time until the last one has
/// been read (and its params parsed) by the client.
async fn flood_scenario(opts: &Opts, servers: &Servers) -> (Vec<Sample>, Vec<Sample>) {
    let tracker = Arc::new(Tracker::default());
    let peer = connect_ours(&servers.ours_url, &tracker).await;
    let mut conn = RawConn::connect(&servers.raw_url).await;
    let (mut ours, mut raw) = (Vec::new(), Vec::new());
    // Round 0 warms up and is not counted.
    for round in 0..=opts.rounds {
        let n = if round == 0 {
            (opts.flood / 10).max(100)
        } else {
            opts.flood
        };
        for is_ours in opts.order(round) {
            if is_ours {
                ours.push(ours_flood(&peer, &tracker, n).await);
            } else {
                raw.push(raw_flood(&mut conn, n).await);
            }
        }
    }
    report_totals(&ours, &raw);
    ours.drain(..ours.len().min(1));
    raw.drain(..raw.len().min(1));
    peer.close().await;
    (ours, raw)
}

async fn ours_flood(peer: &Peer, tracker: &Tracker, n: u64) -> Sample {
    tracker.arm(n as usize);
    let meter = Meter::start();
    let answered: u64 = peer.call(FLOOD, [n]).await.expect("flood");
    assert_eq!(answered, n);
    let last = tracker.wait().await;
    meter.finish_count(n, last)
}

async fn raw_flood(conn: &mut RawConn, n: u64) -> Sample {
    let stream = conn.stream.as_mut().expect("stream");
    let meter = Meter::start();
    let request = serde_json::to_string(&RawCall {
        jsonrpc: "2.0",
        method: FLOOD,
        params: [n],
        id: 0,
    })
    .expect("serializes");
    conn.tx.send(Message::text(request)).await.expect("writer");
    let (mut seen, mut answered, mut last) = (0u64, false, meter.start);
    while seen < n || !answered {
        let Message::Text(text) = stream.next().await.expect("open").expect("frame") else {
            continue;
        };
        let msg: RawIncoming = serde_json::from_str(&text).expect("JSON-RPC");
        match (msg.method, msg.params, msg.id) {
            (Some(TICK), Some([_]), None) => {
                seen += 1;
                last = Instant::now();
            }
            (None, None, Some(0)) => answered = true,
            _ => panic!("unexpected frame {text}"),
        }
    }
    meter.finish_count(n, last)
}

/// (e): milliseconds from the server's broadcast call until the last of the
/// connections has read (and parsed) it, per round.
async fn broadcast_scenario(
    opts: &Opts,
    servers: &Servers,
    server_rt: &Handle,
) -> (Vec<f64>, Vec<f64>) {
    let n = opts.broadcast_conns;
    let ours_tracker = Arc::new(Tracker::default());
    let raw_tracker = Arc::new(Tracker::default());
    let mut ours_peers = Vec::with_capacity(n);
    let mut raw_readers = Vec::with_capacity(n);
    // In chunks, so the listen backlog never overflows.
    for chunk in (0..n).collect::<Vec<_>>().chunks(100) {
        ours_peers.extend(
            join_all(
                chunk
                    .iter()
                    .map(|_| connect_ours(&servers.ours_url, &ours_tracker)),
            )
            .await,
        );
        for ws in join_all(chunk.iter().map(|_| raw_connect(&servers.raw_url))).await {
            let tracker = raw_tracker.clone();
            raw_readers.push(tokio::spawn(async move {
                let mut ws = ws;
                while let Some(Ok(msg)) = ws.next().await {
                    if let Message::Text(text) = msg {
                        let note: RawNotification<[u64; 1]> =
                            serde_json::from_str(&text).expect("a notification");
                        assert_eq!(note.method, TICK);
                        tracker.hit();
                    }
                }
            }));
        }
    }
    // Every server-side connection registered, and none of earlier scenarios left.
    let ours_handle = servers.ours.clone();
    let raw_server = servers.raw.clone();
    wait_until("connections registered", || {
        ours_handle.connection_count() == n && raw_server.live() == n
    })
    .await;

    let broadcast = |is_ours: bool, seq: u64| {
        let (ours, raw) = (servers.ours.clone(), servers.raw.clone());
        let tracker = if is_ours { &ours_tracker } else { &raw_tracker };
        tracker.arm(n);
        async move {
            let sent = server_rt
                .spawn(async move {
                    let start = Instant::now();
                    let queued = if is_ours {
                        ours.broadcast(TICK, [seq]).expect("broadcast")
                    } else {
                        raw.broadcast(seq)
                    };
                    assert_eq!(queued, n);
                    start
                })
                .await
                .expect("broadcast task");
            let last = tracker.wait().await;
            (last - sent).as_secs_f64() * 1e3
        }
    };
    let (mut ours, mut raw) = (Vec::new(), Vec::new());
    // Broadcasts are quick: five per contender and round. Round 0 warms up (the
    // clients' notification tasks start) and is not counted.
    for round in 0..=opts.rounds * 5 {
        for is_ours in opts.order(round) {
            let ms = broadcast(is_ours, round as u64).await;
            if round > 0 {
                if is_ours { &mut ours } else { &mut raw }.push(ms);
            }
        }
    }
    join_all(ours_peers.iter().map(Peer::close)).await;
    for reader in raw_readers {
        reader.abort();
    }
    (ours, raw)
}

/// How many idle connections (f) can open within the file descriptor limit, and a
/// note for the table when that is fewer than asked.
fn idle_connections(wanted: usize) -> (usize, String) {
    let (soft, _) = nofile_limit().unwrap_or((1024, 1024));
    let room = (soft as usize).saturating_sub(200);
    if room >= wanted {
        (wanted, String::new())
    } else {
        (room, format!(" (RLIMIT_NOFILE {soft} allows no more)"))
    }
}

/// (f): KiB of server RSS per idle connection, measured in a child process.
async fn idle_memory(kind: &str, conns: usize) -> f64 {
    let mut child = ChildServer::spawn(kind);
    let before = child.ask("rss");
    let url = format!("ws://127.0.0.1:{}", child.port);
    let mut clients = Vec::with_capacity(conns);
    for chunk in (0..conns).collect::<Vec<_>>().chunks(100) {
        clients.extend(join_all(chunk.iter().map(|_| raw_connect(&url))).await);
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.ask("count") < conns as u64 {
        assert!(
            Instant::now() < deadline,
            "child server did not see every connection"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Let the server settle (buffers released after the handshakes).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = child.ask("rss");
    child.quit();
    drop(clients);
    after.saturating_sub(before) as f64 / conns as f64 / 1024.0
}

// ---------------------------------------------------------------------------------
// The servers (in this process, on the server thread)
// ---------------------------------------------------------------------------------

struct Servers {
    ours_url: String,
    ours: ServerHandle,
    raw_url: String,
    raw: RawServer,
}

impl Servers {
    async fn start() -> Servers {
        let server = Server::bind("127.0.0.1:0").await.expect("bind");
        let ours_url = format!("ws://{}", server.local_addr().expect("address"));
        let ours = server.handle();
        tokio::spawn(server.serve(ours_router()));
        let (raw, addr) = RawServer::start().await;
        Servers {
            ours_url,
            ours,
            raw_url: format!("ws://{addr}"),
            raw,
        }
    }
}

/// The server's methods: `add` answers at once; `flood` sends `n` notifications to
/// the caller, then answers.
fn ours_router() -> Router {
    Router::new()
        .method(ADD, |_cx: Context, [a, b]: [i64; 2]| async move {
            Ok::<_, RpcError>(a + b)
        })
        .method(FLOOD, |cx: Context, [n]: [u64; 1]| async move {
            for i in 0..n {
                cx.peer()
                    .notify(TICK, [i])
                    .await
                    .map_err(|e| RpcError::internal_error().with_data(e.to_string()))?;
            }
            Ok::<_, RpcError>(n)
        })
}

/// A jsonrpc-peer client whose `tick` notifications count on `tracker`.
async fn connect_ours(url: &str, tracker: &Arc<Tracker>) -> Peer {
    let tracker = tracker.clone();
    let router = Router::new().notification(TICK, move |_cx: Context, _: [u64; 1]| {
        tracker.hit();
        std::future::ready(())
    });
    connect(url, router).await.expect("connect")
}

/// The same limits as `PeerConfig::default()` gives tungstenite.
fn ws_config() -> WebSocketConfig {
    WebSocketConfig::default()
        .read_buffer_size(4 * 1024)
        .write_buffer_size(64 * 1024)
        .max_message_size(Some(1 << 20))
        .max_frame_size(Some(1 << 20))
}

#[derive(Serialize)]
struct RawCall<P> {
    jsonrpc: &'static str,
    method: &'static str,
    params: P,
    id: u64,
}

#[derive(Deserialize)]
struct RawRequest<'a> {
    jsonrpc: &'a str,
    method: &'a str,
    #[serde(borrow)]
    params: &'a RawValue,
    #[serde(borrow)]
    id: &'a RawValue,
}

#[derive(Serialize)]
struct RawResponse<'a, T> {
    jsonrpc: &'static str,
    result: T,
    id: &'a RawValue,
}

#[derive(Serialize, Deserialize)]
struct RawNotification<'a, P> {
    jsonrpc: &'a str,
    method: &'a str,
    params: P,
}

#[derive(Deserialize)]
struct RawReply {
    result: i64,
    id: u64,
}

#[derive(Deserialize)]
struct RawIncoming<'a> {
    #[serde(borrow, default)]
    method: Option<&'a str>,
    #[serde(default)]
    params: Option<[u64; 1]>,
    #[serde(default)]
    id: Option<u64>,
}

/// The baseline server: one task per connection reads a frame, parses it, feeds the
/// answer, and flushes only when no further frame is ready. Broadcasts reach each
/// connection's task through a queue, like jsonrpc-peer's.
#[derive(Clone, Default)]
struct RawServer {
    queues: Arc<Mutex<Vec<mpsc::Sender<Utf8Bytes>>>>,
    live: Arc<AtomicUsize>,
}

impl RawServer {
    async fn start() -> (RawServer, std::net::SocketAddr) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        let server = RawServer::default();
        let accepting = server.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(accepting.clone().connection(stream));
            }
        });
        (server, addr)
    }

    fn live(&self) -> usize {
        self.live.load(Ordering::SeqCst)
    }

    /// Serializes once and queues the same bytes for every live connection.
    fn broadcast(&self, seq: u64) -> usize {
        let note = RawNotification {
            jsonrpc: "2.0",
            method: TICK,
            params: [seq],
        };
        let frame = Utf8Bytes::from(serde_json::to_string(&note).expect("serializes"));
        let mut queues = self.queues.lock().expect("not poisoned");
        queues.retain(|q| !q.is_closed());
        queues
            .iter()
            .filter(|q| q.try_send(frame.clone()).is_ok())
            .count()
    }

    async fn connection(self, stream: TcpStream) {
        let _ = stream.set_nodelay(true);
        let Ok(mut ws) =
            tokio_tungstenite::accept_async_with_config(stream, Some(ws_config())).await
        else {
            return;
        };
        let (tx, mut pushes) = mpsc::channel(QUEUE);
        self.queues.lock().expect("not poisoned").push(tx);
        self.live.fetch_add(1, Ordering::SeqCst);
        let _live = LiveGuard(self.live.clone());
        loop {
            let event = match next_event(&mut ws, &mut pushes).now_or_never() {
                Some(event) => event,
                None => {
                    if ws.flush().await.is_err() {
                        return;
                    }
                    next_event(&mut ws, &mut pushes).await
                }
            };
            let written = match event {
                RawEvent::Frame(Some(Ok(Message::Text(text)))) => raw_answer(&mut ws, &text).await,
                RawEvent::Frame(Some(Ok(Message::Close(_)) | Err(_)) | None) => return,
                RawEvent::Frame(Some(Ok(_))) => Ok(()),
                RawEvent::Push(frame) => ws.feed(Message::Text(frame)).await,
            };
            if written.is_err() {
                return;
            }
        }
    }
}

struct LiveGuard(Arc<AtomicUsize>);

impl Drop for LiveGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

enum RawEvent {
    Frame(Option<Result<Message, tokio_tungstenite::tungstenite::Error>>),
    Push(Utf8Bytes),
}

/// The next incoming frame or queued broadcast, whichever is ready first.
fn next_event<'a>(
    ws: &'a mut WebSocketStream<TcpStream>,
    pushes: &'a mut mpsc::Receiver<Utf8Bytes>,
) -> impl Future<Output = RawEvent> + 'a {
    std::future::poll_fn(move |cx| {
        if let Poll::Ready(frame) = ws.poll_next_unpin(cx) {
            return Poll::Ready(RawEvent::Frame(frame));
        }
        match pushes.poll_recv(cx) {
            Poll::Ready(Some(frame)) => Poll::Ready(RawEvent::Push(frame)),
            _ => Poll::Pending,
        }
    })
}

/// Parses one request with serde_json and feeds its answer (and, for `flood`, the
/// notifications before it).
async fn raw_answer(
    ws: &mut WebSocketStream<TcpStream>,
    text: &str,
) -> Result<(), tokio_tungstenite::tungstenite::Error> {
    let Ok(request) = serde_json::from_str::<RawRequest>(text) else {
        return Ok(());
    };
    assert_eq!(request.jsonrpc, "2.0");
    let answer = match request.method {
        ADD => {
            let [a, b]: [i64; 2] = serde_json::from_str(request.params.get()).expect("params");
            serde_json::to_string(&RawResponse {
                jsonrpc: "2.0",
                result: a + b,
                id: request.id,
            })
        }
        FLOOD => {
            let [n]: [u64; 1] = serde_json::from_str(request.params.get()).expect("params");
            for i in 0..n {
                let note = RawNotification {
                    jsonrpc: "2.0",
                    method: TICK,
                    params: [i],
                };
                let frame = serde_json::to_string(&note).expect("serializes");
                ws.feed(Message::text(frame)).await?;
            }
            serde_json::to_string(&RawResponse {
                jsonrpc: "2.0",
                result: n,
                id: request.id,
            })
        }
        _ => return Ok(()),
    };
    ws.feed(Message::text(answer.expect("serializes"))).await
}

// ---------------------------------------------------------------------------------
// The raw client
// ---------------------------------------------------------------------------------

/// A baseline client connection: a writer task that feeds what is queued and flushes
/// when the queue is empty; the reading half stays here for each round's reader task.
struct RawConn {
    tx: mpsc::Sender<Message>,
    stream: Option<SplitStream<ClientWs>>,
}

impl RawConn {
    async fn connect(url: &str) -> RawConn {
        let (sink, stream) = raw_connect(url).await.split();
        let (tx, rx) = mpsc::channel(QUEUE);
        tokio::spawn(raw_writer(sink, rx));
        RawConn {
            tx,
            stream: Some(stream),
        }
    }
}

async fn raw_connect(url: &str) -> ClientWs {
    let (ws, _) = tokio_tungstenite::connect_async_with_config(url, Some(ws_config()), true)
        .await
        .expect("raw connect");
    ws
}

async fn raw_writer(mut sink: SplitSink<ClientWs, Message>, mut rx: mpsc::Receiver<Message>) {
    while let Some(first) = rx.recv().await {
        if sink.feed(first).await.is_err() {
            return;
        }
        while let Ok(more) = rx.try_recv() {
            if sink.feed(more).await.is_err() {
                return;
            }
        }
        if sink.flush().await.is_err() {
            return;
        }
    }
}

// ---------------------------------------------------------------------------------
// Measuring
// ---------------------------------------------------------------------------------

/// One contender's round.
struct Sample {
    count: u64,
    elapsed: Duration,
    cpu: Duration,
    latencies: Option<Histogram<u64>>,
}

/// Wall clock and process CPU time from the start of a round.
struct Meter {
    start: Instant,
    cpu: Duration,
}

impl Meter {
    fn start() -> Meter {
        Meter {
            start: Instant::now(),
            cpu: cpu_time(),
        }
    }

    fn finish(self, latencies: Latencies) -> Sample {
        let latencies = latencies.0.lock().expect("not poisoned").clone();
        Sample {
            count: latencies.len(),
            elapsed: self.start.elapsed(),
            cpu: cpu_time().saturating_sub(self.cpu),
            latencies: Some(latencies),
        }
    }

    fn finish_count(self, count: u64, last: Instant) -> Sample {
        Sample {
            count,
            elapsed: last - self.start,
            cpu: cpu_time().saturating_sub(self.cpu),
            latencies: None,
        }
    }
}

/// One round's call latencies in nanoseconds, shared by every caller of the round
/// (one histogram: making one is a 300 KB memset, too dear to do per task).
#[derive(Clone)]
struct Latencies(Arc<Mutex<Histogram<u64>>>);

impl Default for Latencies {
    fn default() -> Self {
        let histogram = Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid bounds");
        Latencies(Arc::new(Mutex::new(histogram)))
    }
}

impl Latencies {
    fn record(&self, latency: Duration) {
        let nanos = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        self.0
            .lock()
            .expect("not poisoned")
            .saturating_record(nanos);
    }
}

/// Counts arrivals of a broadcast or a flood; remembers when the last one came.
#[derive(Default)]
struct Tracker {
    seen: AtomicUsize,
    target: AtomicUsize,
    last: Mutex<Option<Instant>>,
    done: Notify,
}

impl Tracker {
    fn arm(&self, target: usize) {
        self.seen.store(0, Ordering::SeqCst);
        *self.last.lock().expect("not poisoned") = None;
        self.target.store(target, Ordering::SeqCst);
    }

    fn hit(&self) {
        let seen = self.seen.fetch_add(1, Ordering::SeqCst) + 1;
        if seen == self.target.load(Ordering::SeqCst) {
            *self.last.lock().expect("not poisoned") = Some(Instant::now());
            self.done.notify_one();
        }
    }

    async fn wait(&self) -> Instant {
        tokio::time::timeout(Duration::from_secs(60), self.done.notified())
            .await
            .expect("every message arrives within a minute");
        self.last
            .lock()
            .expect("not poisoned")
            .expect("set before notified")
    }
}

async fn wait_until(what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !ready() {
        assert!(Instant::now() < deadline, "timed out waiting: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// CPU time (user + system) of this whole process, from `/proc/self/stat`.
fn cpu_time() -> Duration {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return Duration::ZERO;
    };
    // The fields after the command name, which is in parentheses: utime and stime are
    // fields 14 and 15 of the line, in clock ticks (USER_HZ, 100 on Linux).
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<u64> = after
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|f| f.parse().ok())
        .collect();
    Duration::from_millis(fields.iter().sum::<u64>() * 10)
}

/// Prints how many calls each side made, warm-up included: with the instruction count
/// of a profiler, that gives instructions per call.
fn report_totals(ours: &[Sample], raw: &[Sample]) {
    let total = |samples: &[Sample]| samples.iter().map(|s| s.count).sum::<u64>();
    eprintln!(
        "    messages: {} through jsonrpc-peer, {} through the baseline (warm-up included)",
        total(ours),
        total(raw)
    );
}

fn median(mut values: Vec<f64>) -> f64 {
    values.retain(|v| v.is_finite());
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    }
}

fn rate(samples: &[Sample]) -> f64 {
    median(
        samples
            .iter()
            .map(|s| s.count as f64 / s.elapsed.as_secs_f64())
            .collect(),
    )
}

/// CPU time per call over all rounds together: `/proc/self/stat` counts in 10 ms ticks,
/// too coarse for one short round.
fn cpu(samples: &[Sample]) -> f64 {
    let cpu: Duration = samples.iter().map(|s| s.cpu).sum();
    let count: u64 = samples.iter().map(|s| s.count).sum();
    cpu.as_secs_f64() * 1e6 / count as f64
}

/// The median over rounds of each round's latency quantile, in microseconds.
fn p(samples: &[Sample], quantile: f64) -> f64 {
    median(
        samples
            .iter()
            .filter_map(|s| s.latencies.as_ref())
            .map(|h| h.value_at_quantile(quantile) as f64 / 1e3)
            .collect(),
    )
}

// ---------------------------------------------------------------------------------
// The report
// ---------------------------------------------------------------------------------

/// What a row's figure must meet.
#[derive(Clone, Copy)]
enum Target {
    /// Shown only.
    None,
    /// ours / baseline at least this.
    AtLeast(f64),
    /// ours / baseline at most this.
    AtMost(f64),
    /// Our own figure at most this, in the row's unit.
    OursAtMost(f64),
}

struct Row {
    scenario: String,
    metric: &'static str,
    ours: f64,
    base: f64,
    target: Target,
}

impl Row {
    fn new(scenario: &str, metric: &'static str, ours: f64, base: f64, target: Target) -> Row {
        Row {
            scenario: scenario.to_owned(),
            metric,
            ours,
            base,
            target,
        }
    }

    fn info(scenario: &str, metric: &'static str, ours: f64, base: f64) -> Row {
        Row::new(scenario, metric, ours, base, Target::None)
    }

    fn ratio(&self) -> f64 {
        self.ours / self.base
    }

    fn cells(&self) -> [String; 7] {
        let (target, mut verdict) = match self.target {
            Target::None => (String::new(), ""),
            Target::AtLeast(t) => (format!(">= {t}x"), met(self.ratio() >= t)),
            Target::AtMost(t) => (format!("<= {t}x"), met(self.ratio() <= t)),
            Target::OursAtMost(t) => (format!("ours <= {t}"), met(self.ours <= t)),
        };
        let ratio = self.ratio();
        if !ratio.is_finite() {
            verdict = "";
        }
        [
            self.scenario.clone(),
            self.metric.to_owned(),
            number(self.ours),
            number(self.base),
            if ratio.is_finite() {
                format!("{ratio:.2}x")
            } else {
                "n/a".to_owned()
            },
            target,
            verdict.to_owned(),
        ]
    }
}

fn met(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "MISSED"
    }
}

fn number(v: f64) -> String {
    if !v.is_finite() {
        "n/a".to_owned()
    } else if v >= 1000.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// The table as Markdown, which also reads well as plain text.
fn render(opts: &Opts, rows: &[Row], took: Duration) -> String {
    let header = [
        "scenario",
        "metric",
        "jsonrpc-peer",
        "baseline",
        "ratio",
        "target",
        "",
    ];
    let cells: Vec<[String; 7]> = rows.iter().map(Row::cells).collect();
    let widths: Vec<usize> = (0..header.len())
        .map(|i| {
            cells
                .iter()
                .map(|c| c[i].chars().count())
                .chain([header[i].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cols: &[&str]| {
        let padded: Vec<String> = cols
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(i, (c, &w))| {
                let pad = w - c.chars().count();
                // Numbers align right.
                if (2..=4).contains(&i) {
                    format!("{}{c}", " ".repeat(pad))
                } else {
                    format!("{c}{}", " ".repeat(pad))
                }
            })
            .collect();
        format!("| {} |\n", padded.join(" | "))
    };
    let mut out = String::from("# jsonrpc-peer vs raw tokio-tungstenite\n\n");
    out += &format!(
        "Mode: {}, {} rounds (medians), took {:.0} s. Runs on CPU(s) {} (online: {}); \
         server and client on separate current-thread runtimes. \
         CPU per call is client + server, over all rounds.\n\n",
        if opts.quick { "--quick" } else { "full" },
        opts.rounds,
        took.as_secs_f64(),
        allowed_cpus(),
        std::fs::read_to_string("/sys/devices/system/cpu/online")
            .map_or_else(|_| "?".to_owned(), |s| s.trim().to_owned()),
    );
    out += &line(&header);
    let rule: Vec<String> = widths
        .iter()
        .enumerate()
        .map(|(i, &w)| {
            if (2..=4).contains(&i) {
                format!("{}:", "-".repeat(w.max(2) - 1))
            } else {
                "-".repeat(w)
            }
        })
        .collect();
    out += &line(&rule.iter().map(String::as_str).collect::<Vec<_>>());
    for row in &cells {
        out += &line(&row.iter().map(String::as_str).collect::<Vec<_>>());
    }
    out
}

fn target_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(dir);
    }
    // target/<profile>/deps/rpc-<hash>
    std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.parent()?.to_path_buf()))
        .unwrap_or_else(|| PathBuf::from("target"))
}

// ---------------------------------------------------------------------------------
// Process setup: threads, pinning, file descriptors
// ---------------------------------------------------------------------------------

/// The server's current-thread runtime, on its own OS thread.
struct ServerThread {
    handle: Handle,
    stop: tokio::sync::oneshot::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl ServerThread {
    fn start() -> ServerThread {
        let (handle_tx, handle_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("bench-server".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("server runtime");
                handle_tx.send(rt.handle().clone()).expect("main waits");
                rt.block_on(async {
                    let _ = stopped.await;
                });
            })
            .expect("server thread");
        ServerThread {
            handle: handle_rx.recv().expect("server runtime handle"),
            stop,
            thread,
        }
    }

    fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.thread.join();
    }
}

/// Re-executes this binary under `taskset -c N` unless that is already done (or
/// `RPC_BENCH_CPU=none`). Returns only in the process that runs the bench.
fn pin_to_one_cpu(args: &[String]) {
    if std::env::var_os(PINNED_ENV).is_some() {
        return;
    }
    let cpu = match std::env::var(CPU_ENV) {
        Ok(cpu) if cpu == "none" => return,
        Ok(cpu) => cpu,
        Err(_) => {
            let allowed = allowed_cpus();
            let last = allowed.rsplit([',', '-']).next().unwrap_or("0");
            last.trim().to_owned()
        }
    };
    // taskset may be missing, or not allowed to pin here: then run unpinned.
    let usable = Command::new("taskset")
        .args(["-c", &cpu, "true"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !usable {
        eprintln!("taskset -c {cpu} does not work here; running unpinned");
        return;
    }
    let exe = std::env::current_exe().expect("own path");
    let status = Command::new("taskset")
        .arg("-c")
        .arg(&cpu)
        .arg(exe)
        .args(args)
        .env(PINNED_ENV, &cpu)
        .status();
    match status {
        Ok(status) => std::process::exit(status.code().unwrap_or(1)),
        Err(e) => eprintln!("taskset unavailable ({e}); running unpinned"),
    }
}

/// The CPUs this process may run on, as the kernel lists them (`1`, `0-1`).
fn allowed_cpus() -> String {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                .map(|v| v.trim().to_owned())
        })
        .unwrap_or_else(|| "?".to_owned())
}

/// The soft and hard limits on open files.
fn nofile_limit() -> Option<(u64, u64)> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    let mut numbers = line["Max open files".len()..]
        .split_whitespace()
        .map(|v| v.parse::<u64>().unwrap_or(u64::MAX));
    Some((numbers.next()?, numbers.next()?))
}

/// Raises the soft open-files limit to the hard one with `prlimit`, when the soft
/// one is too low for (f); children (the pinned re-execution, the child servers)
/// inherit it.
fn raise_nofile_limit() {
    let Some((soft, hard)) = nofile_limit() else {
        return;
    };
    if soft >= 12_000 || soft >= hard {
        return;
    }
    let hard = if hard == u64::MAX {
        "unlimited".to_owned()
    } else {
        hard.to_string()
    };
    let _ = Command::new("prlimit")
        .arg("--pid")
        .arg(std::process::id().to_string())
        .arg(format!("--nofile={hard}:{hard}"))
        .status();
}

// ---------------------------------------------------------------------------------
// (f)'s child server process
// ---------------------------------------------------------------------------------

/// A server in a child process, asked questions over its stdin.
struct ChildServer {
    child: std::process::Child,
    stdout: BufReader<std::process::ChildStdout>,
    port: u16,
}

impl ChildServer {
    fn spawn(kind: &str) -> ChildServer {
        let mut child = Command::new(std::env::current_exe().expect("own path"))
            .arg("--child-server")
            .arg(kind)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("child server");
        let mut stdout = BufReader::new(child.stdout.take().expect("piped"));
        let mut line = String::new();
        stdout.read_line(&mut line).expect("child's port");
        let port = line.trim().parse().expect("a port number");
        ChildServer {
            child,
            stdout,
            port,
        }
    }

    /// Sends one command line; reads the number it answers.
    fn ask(&mut self, command: &str) -> u64 {
        let stdin = self.child.stdin.as_mut().expect("piped");
        writeln!(stdin, "{command}").expect("child alive");
        stdin.flush().expect("child alive");
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("child answers");
        line.trim().parse().expect("a number")
    }

    fn quit(mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

/// `--child-server ours|raw`: serves on 127.0.0.1:0 with the default configuration,
/// prints the port, then answers `rss` (bytes) and `count` (connections) lines on
/// stdin until it closes.
fn child_server(kind: &str) {
    let (tx, rx) = std::sync::mpsc::channel::<(u16, Box<dyn Fn() -> usize + Send>)>();
    let kind = kind.to_owned();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            if kind == "raw" {
                let (server, addr) = RawServer::start().await;
                let _ = tx.send((addr.port(), Box::new(move || server.live())));
            } else {
                let server = Server::bind("127.0.0.1:0").await.expect("bind");
                let port = server.local_addr().expect("address").port();
                let handle = server.handle();
                let _ = tx.send((port, Box::new(move || handle.connection_count())));
                let _ = server.serve(ours_router()).await;
            }
            std::future::pending::<()>().await;
        });
    });
    let (port, count) = rx.recv().expect("child server started");
    println!("{port}");
    for line in std::io::stdin().lock().lines() {
        match line.as_deref().map(str::trim) {
            Ok("rss") => println!("{}", rss_bytes()),
            Ok("count") => println!("{}", count()),
            _ => break,
        }
        let _ = std::io::stdout().flush();
    }
}

/// Resident set size of this process, in bytes, from `/proc/self/status`.
fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("VmRSS:"))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .map_or(0, |kib| kib * 1024)
}

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
//!
//! The files: `main.rs` (options, the run, the table's rows), `scenarios.rs` (what each
//! scenario does with both contenders), `servers.rs` (jsonrpc-peer's server and client),
//! `raw.rs` (the baseline: raw server and client, reviewable on its own), `measure.rs`
//! (samples, CPU time, latencies, medians), `report.rs` (targets and the Markdown table),
//! `process.rs` (threads, pinning, file descriptors, (f)'s child server).

mod measure;
mod process;
mod raw;
mod report;
mod scenarios;
mod servers;

use std::time::{Duration, Instant};
use tokio::net::TcpStream;
use tokio::runtime::Handle;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::measure::{cpu, median, p, rate};
use crate::process::{child_server, pin_to_one_cpu, raise_nofile_limit, ServerThread};
use crate::report::{render, target_dir, Row, Target};
use crate::scenarios::{
    broadcast_scenario, calls_scenario, flood_scenario, idle_connections, idle_memory,
};
use crate::servers::Servers;

pub(crate) const ADD: &str = "add";
pub(crate) const FLOOD: &str = "flood";
pub(crate) const TICK: &str = "tick";
/// Set in the re-executed, pinned process.
pub(crate) const PINNED_ENV: &str = "RPC_BENCH_PINNED";
/// Which CPU to pin to, or `none`.
pub(crate) const CPU_ENV: &str = "RPC_BENCH_CPU";
/// Outgoing queue of a raw connection, as `PeerConfig::outgoing_queue`'s default.
pub(crate) const QUEUE: usize = 1024;

pub(crate) type ClientWs = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// How much of everything: `--quick` or the full run.
pub(crate) struct Opts {
    pub(crate) quick: bool,
    pub(crate) rounds: usize,
    pub(crate) round_time: Duration,
    pub(crate) warmup: Duration,
    /// Notifications per round in (d).
    pub(crate) flood: u64,
    /// Connections in (e).
    pub(crate) broadcast_conns: usize,
    /// Idle connections in (f).
    pub(crate) idle_conns: usize,
    /// The scenarios to run, by letter (`--only bd`); all by default.
    pub(crate) only: String,
    /// Which contenders run (`--contender ours|raw`); both by default.
    pub(crate) ours: bool,
    pub(crate) raw: bool,
}

impl Opts {
    pub(crate) fn parse(args: &[String]) -> Self {
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

    pub(crate) fn new(quick: bool) -> Self {
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

    pub(crate) fn runs(&self, scenario: char) -> bool {
        self.only.contains(scenario)
    }

    /// The contenders of one round, in the order they run, alternating who goes
    /// first; `true` is jsonrpc-peer.
    pub(crate) fn order(&self, round: usize) -> Vec<bool> {
        let order = if round.is_multiple_of(2) {
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

pub(crate) fn main() {
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
pub(crate) async fn run(opts: &Opts, server_rt: Handle) -> Vec<Row> {
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

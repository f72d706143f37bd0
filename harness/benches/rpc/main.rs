//! jsonrpc-peer against a raw tokio-tungstenite baseline and against jsonrpsee 0.26.1,
//! on 127.0.0.1, in one run.
//!
//! ```text
//! cargo bench -p harness --bench rpc              # full run, about two and a half minutes
//! cargo bench -p harness --bench rpc -- --quick   # a few seconds: CI runs it so the bench never rots
//! ```
//!
//! Three contenders, the same methods, payloads and in-flight depths:
//!
//! - The **baseline** is the physical limit of the stack: a tokio-tungstenite server
//!   that parses each request with serde_json and writes the answer frame from the
//!   connection's own task, and a client with one reader and one writer task; the same
//!   frames, the same in-flight depth, writes coalesced (feed, flush when idle).
//! - **jsonrpc-peer** does the same work through `Server`, `connect` and `Peer::call`.
//! - **jsonrpsee** 0.26.1 (another Rust JSON-RPC library) does it through its
//!   WebSocket server (`RpcModule`) and client (`WsClient`), default configuration
//!   except what `jsonrpsee.rs` names (`max_connections`, the client's subscription
//!   buffer). It cannot push a plain notification: (d) and (e) use subscriptions.
//!
//! **The reference rows** of (b), (c) and (d) hold ours against a fourth run: the
//! baseline **shaped as ours**, the same raw tokio-tungstenite and serde_json code
//! given the structure our API has. (b) and (c): the raw server, and a client whose
//! calls are each awaited by the task that made it (`depth` tasks per connection, as
//! ours), answers routed to them by id through a map of pending calls and a oneshot
//! each, by one reader task (`raw::RawShaped`). (d): the raw server sends the
//! notifications from a task of its own (`flood_task`), apart from the connection's,
//! through the connection's bounded queue of 1,024 frames, as our handler does. The
//! targets stay against the baseline; these rows say how much of ours / baseline is
//! that structure's (what any library with a `call(...).await` and handlers on tasks
//! of their own pays) and how much is ours. Its figure is in the baseline's column.
//!
//! Each scenario runs every contender on the same setup, rotating which goes first
//! round by round, and reports the median over rounds. The table has each contender's
//! figure, ours / baseline (what the targets are about) and ours / jsonrpsee.
//!
//! | scenario | what is measured |
//! |---|---|
//! | (a) | one call at a time: rate, p50 and p99 latency |
//! | (b) | 64 calls in flight on one connection: rate |
//! | (c) | 16 connections x 16 calls in flight: rate |
//! | (d) | server-to-client pushes received per second on one connection |
//! | (e) | one broadcast to 1,000 and to 10,000 idle connections: time until the last one has it, and server CPU per recipient |
//! | (f) | server memory (RSS) per idle connection at 2,000 and at 10,000 connections, each having made one call |
//!
//! Beside every rate in (a) to (d) is the CPU time per call: client and server
//! together, from `/proc/self/stat`, summed over all rounds (it counts in 10 ms ticks).
//!
//! **(d)** compares: ours and the baseline answer a call `flood [n]` by sending `n`
//! notifications `tick [i]` on the connection, then the answer; jsonrpsee answers a
//! subscription `subscribe_flood [n]` with its id, then sends `n` subscription
//! notifications `tick {"subscription": id, "result": [i]}` (a slightly larger frame)
//! through the subscription's sink, awaiting room as ours does. The time runs until
//! the client has read and parsed the last notification.
//!
//! **(e)** compares: ours calls `ServerHandle::broadcast` (serializes once, queues the
//! frame for every connection), the baseline does the same by hand, and jsonrpsee,
//! whose clients each subscribed once (`subscribe_tick`), `try_send`s the params to
//! every stored subscription sink, which frames them with its own subscription id (one
//! serialization per recipient: that is what reaching every connection costs there).
//! The clients are jsonrpc-peer clients for ours, raw tokio-tungstenite readers for the
//! baseline and `WsClient` subscriptions for jsonrpsee; each parses what it gets. Each
//! contender's server runs in a child process (`--child-server`, below) on the same
//! CPU: the broadcast starts when the child reads `broadcast SEQ` on stdin, and the
//! time runs from its clock reading just before the broadcast call (as nanoseconds
//! since the Unix epoch) to the bench's when the last client has it. The **server CPU
//! per recipient** is the child's CPU time over that span, all threads, from
//! `/proc/PID/task/*/schedstat` (nanoseconds; the child does nothing else meanwhile),
//! divided by the recipients. Five broadcasts per contender and round, after one
//! round of warm-up. When all contenders' connections fit in `RLIMIT_NOFILE` together
//! they are open at once and alternate; otherwise (10,000 here, with a hard limit of
//! 20,000) the contenders run one after another, each on its own connections, and the
//! row says so; with fewer descriptors than one contender needs, fewer connections
//! (said too). --quick runs 1,000 only.
//!
//! **Pinning.** The bench re-executes itself under `taskset -c N` (the last CPU it may
//! use; `RPC_BENCH_CPU=<n>` picks another, `RPC_BENCH_CPU=none` does not pin), so the
//! server's and the client's threads share one vCPU: on small VMs a wake-up across
//! vCPUs costs tens of microseconds and swamps what is measured. Server and client each
//! run on their own current-thread tokio runtime on their own OS thread; the child
//! servers inherit the pinning.
//!
//! **Memory (f)** is read from a separate process: the bench runs its own binary with
//! `--child-server ours|raw|jsonrpsee`, which serves on 127.0.0.1:0 with the default
//! configuration (jsonrpsee: `max_connections` raised from 100), prints its port and
//! answers `rss` (VmRSS from `/proc/self/status`), `count` and `broadcast SEQ` on
//! stdin. RSS is read before and after 2,000 (then 10,000) connections that each made
//! one `add` call and read its answer, then sit idle; the growth divided by the
//! connections is the figure (--quick: 2,000 only). Each process needs a descriptor
//! per connection and some 200 more; the bench raises the soft `RLIMIT_NOFILE` to the
//! hard limit with `prlimit` when it is lower, and uses fewer connections (and says
//! so) if that is not enough.
//!
//! Options (after `--`): `--quick`; `--only abd` runs only those scenarios;
//! `--contender ours|raw|jsonrpsee|shaped` runs one side only (`shaped`: the
//! reference alone, in (b) to (d)); `--shaped-to-ours` points the reference's client
//! of (b) and (c) at our server (the two rows then differ in the client alone);
//! `--rounds N`, `--round-ms N` change the length of (a) to (c) (`--rounds` also of
//! (d) and (e)); `--metrics` gives ours the `Metrics` call layer, with
//! metrics-exporter-prometheus's recorder installed (what README's "Metrics" section
//! measures: run it and the same command without the flag in turn). To count
//! instructions per call, run one side of one scenario unpinned under callgrind
//! (valgrind does not follow the `taskset` re-execution):
//!
//! ```text
//! CARGO_PROFILE_BENCH_DEBUG=true cargo bench -p harness --bench rpc --no-run
//! RPC_BENCH_CPU=none valgrind --tool=callgrind target/release/deps/rpc-<hash> \
//!     --only b --contender ours --rounds 1 --round-ms 3000
//! ```
//!
//! Do it with two `--round-ms` values: the difference in instructions over the
//! difference in the `messages:` count printed on stderr is the cost of one call,
//! without the setup. (d)'s length is a count of notifications, not a time: use
//! `--only d --rounds 1` and `--rounds 2` instead.
//!
//! The table goes to stdout and, as Markdown, to `target/bench/rpc.md`. Unknown flags
//! (cargo passes `--bench`) are ignored. The machine is shared and noisy: ratios, not
//! absolute numbers, are what count. Targets are reported, never asserted.
//!
//! The files: `main.rs` (options, the run, the table's rows), `scenarios.rs` (what each
//! scenario does with every contender), `servers.rs` (the in-process servers and
//! jsonrpc-peer's client), `raw.rs` (the baseline: raw server and client, reviewable on
//! its own), `jsonrpsee.rs` (jsonrpsee's server and client, likewise), `measure.rs`
//! (samples, CPU time, latencies, medians), `report.rs` (targets and the Markdown
//! table), `process.rs` (threads, pinning, file descriptors, the child server of (e)
//! and (f), its CPU time).

mod jsonrpsee;
mod measure;
mod process;
mod raw;
mod report;
mod scenarios;
mod servers;

use std::ops::{Index, IndexMut};
use std::time::{Duration, Instant};
use tokio::net::TcpStream;
use tokio::runtime::Handle;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::measure::{cpu, median, p, rate, Sample};
use crate::process::{child_server, pin_to_one_cpu, raise_nofile_limit, ServerThread};
use crate::report::{render, target_dir, targets, Row, Target};
use crate::scenarios::{
    broadcast_scenario, calls_scenario, flood_scenario, idle_connections, idle_memory,
};
use crate::servers::Servers;

pub(crate) const ADD: &str = "add";
pub(crate) const FLOOD: &str = "flood";
/// The baseline's `flood` from a task of its own (the reference rows).
pub(crate) const FLOOD_TASK: &str = "flood_task";
pub(crate) const TICK: &str = "tick";
/// Set in the re-executed, pinned process.
pub(crate) const PINNED_ENV: &str = "RPC_BENCH_PINNED";
/// Which CPU to pin to, or `none`.
pub(crate) const CPU_ENV: &str = "RPC_BENCH_CPU";
/// Outgoing queue of a raw connection, as `PeerConfig::outgoing_queue`'s default.
pub(crate) const QUEUE: usize = 1024;

pub(crate) type ClientWs = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// Who is measured.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Contender {
    /// jsonrpc-peer.
    Ours,
    /// The raw tokio-tungstenite baseline.
    Raw,
    /// jsonrpsee 0.26.1.
    Jsonrpsee,
}

impl Contender {
    pub(crate) const ALL: [Contender; 3] = [Contender::Ours, Contender::Raw, Contender::Jsonrpsee];

    /// As `--contender` and `--child-server` spell it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Contender::Ours => "ours",
            Contender::Raw => "raw",
            Contender::Jsonrpsee => "jsonrpsee",
        }
    }

    pub(crate) fn parse(name: &str) -> Option<Contender> {
        Contender::ALL.into_iter().find(|c| c.name() == name)
    }
}

/// One value per contender.
#[derive(Clone, Debug, Default)]
pub(crate) struct Each<T>(pub(crate) [T; 3]);

impl<T> Each<T> {
    pub(crate) fn map<U>(&self, f: impl FnMut(&T) -> U) -> Each<U> {
        Each(self.0.each_ref().map(f))
    }
}

impl<T> Index<Contender> for Each<T> {
    type Output = T;
    fn index(&self, c: Contender) -> &T {
        &self.0[c as usize]
    }
}

impl<T> IndexMut<Contender> for Each<T> {
    fn index_mut(&mut self, c: Contender) -> &mut T {
        &mut self.0[c as usize]
    }
}

/// How much of everything: `--quick` or the full run.
pub(crate) struct Opts {
    pub(crate) quick: bool,
    pub(crate) rounds: usize,
    pub(crate) round_time: Duration,
    pub(crate) warmup: Duration,
    /// Notifications per round in (d).
    pub(crate) flood: u64,
    /// Audiences of (e), one row each.
    pub(crate) broadcast_conns: Vec<usize>,
    /// Idle connections in (f), one row each.
    pub(crate) idle_conns: Vec<usize>,
    /// The scenarios to run, by letter (`--only bd`); all by default.
    pub(crate) only: String,
    /// Which contenders run (`--contender ours|raw|jsonrpsee`); all by default.
    pub(crate) contenders: Vec<Contender>,
    /// `--metrics`: ours with the `Metrics` call layer and a Prometheus recorder.
    pub(crate) metrics: bool,
    /// Whether the reference rows' contender (the baseline shaped as ours) runs: with
    /// every contender, or alone (`--contender shaped`).
    pub(crate) reference: bool,
    /// `--shaped-to-ours`: the reference's client of (b) and (c) calls our server, not
    /// the baseline's (so ours and it differ in the client alone).
    pub(crate) shaped_to_ours: bool,
}

/// One turn in a round: a contender, or the reference (the baseline shaped as ours).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Turn {
    Contender(Contender),
    Reference,
}

impl Opts {
    pub(crate) fn parse(args: &[String]) -> Self {
        let value = |flag: &str| {
            let i = args.iter().position(|a| a == flag)?;
            args.get(i + 1).map(String::as_str)
        };
        let number = |flag: &str| value(flag).map(|v| v.parse::<u64>().expect("a number"));
        let mut opts = Opts::new(args.iter().any(|a| a == "--quick"));
        opts.metrics = args.iter().any(|a| a == "--metrics");
        opts.shaped_to_ours = args.iter().any(|a| a == "--shaped-to-ours");
        if let Some(only) = value("--only") {
            opts.only = only.to_owned();
        }
        if let Some(name) = value("--contender") {
            opts.reference = name == "shaped";
            opts.contenders = match Contender::parse(name) {
                Some(one) => vec![one],
                None if opts.reference => Vec::new(),
                None => panic!("--contender ours|raw|jsonrpsee|shaped, not {name}"),
            };
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
        let (rounds, round_time, warmup, flood, broadcast_conns, idle_conns) = if quick {
            (2, 150, 50, 5_000, vec![1_000], vec![2_000])
        } else {
            (
                7,
                1_000,
                300,
                1_000_000,
                vec![1_000, 10_000],
                vec![2_000, 10_000],
            )
        };
        Opts {
            quick,
            rounds,
            round_time: Duration::from_millis(round_time),
            warmup: Duration::from_millis(warmup),
            flood,
            broadcast_conns,
            idle_conns,
            only: "abcdef".to_owned(),
            contenders: Contender::ALL.to_vec(),
            metrics: false,
            reference: true,
            shaped_to_ours: false,
        }
    }

    pub(crate) fn runs(&self, scenario: char) -> bool {
        self.only.contains(scenario)
    }

    pub(crate) fn has(&self, contender: Contender) -> bool {
        self.contenders.contains(&contender)
    }

    /// The contenders of one round, in the order they run: the order rotates round by
    /// round, so each goes first, second and third in turn.
    pub(crate) fn order(&self, round: usize) -> Vec<Contender> {
        let mut order = Contender::ALL;
        order.rotate_left(round % Contender::ALL.len());
        order.into_iter().filter(|&c| self.has(c)).collect()
    }

    /// The turns of one round of a scenario with a reference row: the contenders and,
    /// when it runs, the reference, the four rotating round by round.
    pub(crate) fn turns(&self, round: usize) -> Vec<Turn> {
        let mut turns = Contender::ALL.map(Turn::Contender).to_vec();
        turns.push(Turn::Reference);
        let first = round % turns.len();
        turns.rotate_left(first);
        turns
            .into_iter()
            .filter(|&t| match t {
                Turn::Contender(c) => self.has(c),
                Turn::Reference => self.reference,
            })
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
    if opts.metrics {
        eprintln!("ours with the Metrics call layer and a Prometheus recorder");
        servers::with_metrics();
    }

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

/// The reference rows of (b), (c) or (d), when the reference ran: ours against the
/// baseline shaped as ours (its figure in the baseline's column), rate and CPU.
fn reference_rows(
    letter: char,
    s: &Each<Vec<Sample>>,
    shaped: &[Sample],
    metric: &'static str,
) -> Vec<Row> {
    if shaped.is_empty() {
        return Vec::new();
    }
    let against =
        |f: &dyn Fn(&[Sample]) -> f64| Each([f(&s[Contender::Ours]), f(shaped), f64::NAN]);
    vec![
        Row::info(
            &format!("({letter}) reference: the baseline shaped as ours"),
            metric,
            against(&rate),
        ),
        Row::info("", "CPU per message (µs)", against(&cpu)),
    ]
}

/// Runs every scenario; returns the table's rows.
pub(crate) async fn run(opts: &Opts, server_rt: Handle) -> Vec<Row> {
    let servers = server_rt.spawn(Servers::start()).await.expect("servers");
    let mut rows = Vec::new();
    let fig = |samples: &Each<Vec<Sample>>, f: &dyn Fn(&[Sample]) -> f64| samples.map(|s| f(s));

    if opts.runs('a') {
        eprintln!("(a) one call at a time");
        let (s, _) = calls_scenario(opts, &servers, 1, 1, false).await;
        rows.push(Row::info(
            "(a) 1 in flight",
            "rate (calls/s)",
            fig(&s, &rate),
        ));
        rows.push(Row::new(
            "",
            "p50 latency (µs)",
            fig(&s, &|s| p(s, 0.5)),
            targets::A_P50,
        ));
        rows.push(Row::info("", "p99 latency (µs)", fig(&s, &|s| p(s, 0.99))));
        rows.push(Row::info("", "CPU per call (µs)", fig(&s, &cpu)));
    }

    for (letter, connections, depth, target) in [
        ('b', 1, 64, targets::B_RATE),
        ('c', 16, 16, targets::C_RATE),
    ] {
        if !opts.runs(letter) {
            continue;
        }
        let label = format!("({letter}) {connections} x {depth} in flight");
        eprintln!("{label}");
        let (s, shaped) = calls_scenario(opts, &servers, connections, depth, true).await;
        rows.push(Row::new(&label, "rate (calls/s)", fig(&s, &rate), target));
        rows.push(Row::info("", "p50 latency (µs)", fig(&s, &|s| p(s, 0.5))));
        rows.push(Row::info("", "CPU per call (µs)", fig(&s, &cpu)));
        rows.extend(reference_rows(letter, &s, &shaped, "rate (calls/s)"));
    }

    if opts.runs('d') {
        eprintln!("(d) server-to-client notifications on one connection");
        let (s, shaped) = flood_scenario(opts, &servers).await;
        rows.push(Row::new(
            "(d) server pushes",
            "notifications/s",
            fig(&s, &rate),
            targets::D_RATE,
        ));
        rows.push(Row::info("", "CPU per notification (µs)", fig(&s, &cpu)));
        rows.extend(reference_rows('d', &s, &shaped, "notifications/s"));
    }

    if opts.runs('e') {
        for &wanted in &opts.broadcast_conns {
            let run = broadcast_scenario(opts, wanted).await;
            let n = run.conns;
            let target = if n <= 1_000 {
                targets::E_LAST_1000
            } else {
                Target::None
            };
            rows.push(Row::new(
                &format!("(e) broadcast to {n}{}", run.note),
                "last one has it (ms)",
                run.ms.map(|v| median(v.clone())),
                target,
            ));
            rows.push(Row::info(
                "",
                "server CPU per recipient (µs)",
                run.cpu_us.map(|v| median(v.clone())),
            ));
        }
    }

    if opts.runs('f') {
        for &wanted in &opts.idle_conns {
            let (conns, note) = idle_connections(wanted);
            eprintln!("(f) memory per idle connection at {conns} connections{note}");
            let mut kib = Each([f64::NAN; 3]);
            for &c in &opts.contenders {
                kib[c] = idle_memory(c, conns).await;
            }
            rows.push(Row::new(
                &format!("(f) {conns} idle conns{note}"),
                "server RSS per conn (KiB)",
                kib,
                targets::F_KIB,
            ));
        }
    }
    rows
}

//! Scale: how many peers one process and a cluster hold, what a message to all of them
//! costs, and how fast they all come back after a restart. Every server and every
//! client fleet is a process of its own; the clients are spread over several loopback
//! source addresses (127.0.0.10 and up: one address has only some 28,000 ephemeral
//! ports toward one server port).
//!
//! ```text
//! cargo bench -p harness --bench scale                              # all three, full (8 min or more)
//! cargo bench -p harness --bench scale -- --scenario one-node       # 1,000 / 10,000 / 19,000 on one server
//! cargo bench -p harness --bench scale -- --scenario cluster        # 1,000 / 10,000 / 100,000 on six nodes
//! cargo bench -p harness --bench scale -- --scenario storm          # 10,000 reconnecting, ours vs raw
//! cargo bench -p harness --bench scale -- --quick                   # 500 peers, two nodes: under a minute (CI)
//! ```
//!
//! The cluster scenario runs `examples/cluster_node.rs` processes: the bench builds it
//! first with `cargo build --release --example cluster_node --features redis` (a no-op
//! when it is fresh; `SCALE_NODE_BIN=PATH` uses that binary instead), and starts its
//! own `redis-server` on a unix socket in a temp dir (`.ci/install` installs it).
//!
//! | scenario | what is measured |
//! |---|---|
//! | `one-node` | one jsonrpc-peer `Server` process (`--serve ours`, default configuration but `max_connections`) with 1,000, 10,000 and 19,000 clients that each made one call (`whoami`) and sit idle: the server's RSS per connection (VmRSS of `/proc/PID/status` after, minus before the clients); `ServerHandle::broadcast` to all of them: the time until the last client has it and the server's CPU per recipient; then every client subscribes to one topic (`Topics::subscribe`): RSS per connection again, and `Topics::publish` like the broadcast. Then, at each size, the same clients and broadcast on the baseline (`--serve raw-push`, server.rs: tokio-tungstenite with a queue per connection, the frame serialized once), rows "one node, baseline": how the baseline's figures grow beside ours says how much of what is not linear is the machine's (caches, the kernel) and how much ours |
//! | `cluster` | six `cluster_node` processes over one Redis with 1,000, 10,000 and 100,000 clients in all (one fleet per node): RSS per connection over the nodes; a broadcast (`broadcast [[SEQ]]` called on node 0) and a topic publish (`publish ["scale", [SEQ]]` on node 0, every client subscribed on its node): time until the last client of all has it, the nodes' CPU (all six, all threads) per recipient, Redis's CPU per message |
//! | `storm` | 10,000 clients connected and subscribed; the server is killed (SIGKILL) and another started on the same port, in turn the raw baseline and ours; once it listens every client reconnects, makes its call and subscribes again: time until all are connected, have called, have resubscribed, and the server's CPU per client over that span. Paced (at most `--inflight`, 100, dials at once: the server's handshake path) and as a herd (all 10,000 at once, as after a real restart); then a herd whose clients only connect (no call, no subscribe: the handshake path alone, at a herd's pace). Three storms each, medians |
//!
//! **Times** are from the bench's clock just before the trigger (the control client's
//! call `broadcast` / `publish`, or the `connect` command to the fleets) to the last
//! client's clock when it had the message (nanoseconds since the Unix epoch, one clock
//! for all processes). **CPU** is from `/proc/PID/task/*/schedstat` (nanoseconds, every
//! thread) over the same span. Before the messages every process sits idle for
//! `--idle-secs` (30, one keepalive ping interval, so every connection pings once; 1
//! in --quick): that idle CPU per connection is a row of its own, and each group's
//! idle rate over a message's span is taken off its CPU for that message (at 100,000
//! peers the pings alone keep the nodes busy, and Redis's cron costs some 2 ms per
//! second: over spans of seconds they outweigh the message). Each message figure is
//! the median of `--rounds` (5; --quick 2) after one that warms up. The
//! client fleets share the machine's cores with the servers: their reading is part
//! of "last has it".
//!
//! **The clients** (`--fleet`, fleet.rs) are raw tokio-tungstenite clients on one
//! current-thread runtime per process, each TCP socket bound to a source address of
//! the fleet's own before it connects; at most `--inflight` (100, shared out over the
//! fleets) are in their TCP connect and handshake at once, but in the storm's herd. A
//! dial that fails (refused, dropped, timed out after 10 s) is retried after 10-50 ms,
//! 50 times at most. Both servers listen as `Server::bind` does, with a backlog of
//! `Server::DEFAULT_BACKLOG` (4,096; `--backlog N` gives both another): tokio's
//! `TcpListener::bind` asks for 128 (mio copies std's), and more dials at once than
//! that overflow the accept queue, the kernel drops their SYNs, and they come back
//! after a second. Paced, the figures time the servers; the herd times what a restart
//! meets, where the calls and subscribes of the clients already back share the CPU
//! with the handshakes still under way; the herd of handshakes only takes those away.
//!
//! **The storm's baseline** (`--serve raw`, server.rs) accepts with tokio, shakes hands
//! with tokio-tungstenite and answers every call frame `true`: what ours adds (HTTP
//! parse, Origin and auth checks, the registry, the router, topics) is the difference.
//! The ratio is the raw server's time over ours (target: an accept and handshake
//! rate at least 0.9x raw's). `--history` runs the storm with a topic that keeps its
//! history: ours is then a cluster node (`examples/cluster_node.rs --history 1000`)
//! over a Redis of the storm's own, where the history outlives the node, and every
//! client resumes from the position its first subscribe answered, ten publications
//! back, so that each of ours' storms replays them to every client before it answers
//! (how many were recovered and replayed is in the notes).
//!
//! Options (after `--`): `--quick`; `--scenario one-node|cluster|storm|all`;
//! `--one-node-sizes 1000,10000,19000`, `--cluster-sizes 1000,10000,100000`,
//! `--nodes 6`, `--storm-clients 10000`, `--storm-rounds 3`, `--rounds 5`,
//! `--idle-secs 30`,
//! `--inflight 100`, `--backlog N` (one-node and storm servers), `--history`. The tables go to stdout and, as Markdown, to
//! `target/bench/scale.md`, with the load average before and after (the machine is
//! shared: note it). Targets are reported, never asserted; a message that does not
//! reach every client within 60 s is reported in the row's note.
//!
//! Everything the bench starts is killed when it ends, on every path: each child is
//! killed and reaped on drop (Redis too), and SIGINT, SIGTERM or SIGHUP kill them all
//! before the bench exits. Fleets and one-process servers also exit when their stdin
//! closes, so even a bench killed with SIGKILL leaves none of them behind (cluster
//! nodes and Redis do not read stdin: after a SIGKILL they stay).

#[allow(dead_code)] // the tests use more of it
#[path = "../../../tests/common/redis_server.rs"]
mod redis_server;

mod fleet;
mod fleets;
mod procs;
mod report;
mod scenarios;
mod server;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::procs::{kill_children_on_signals, load_average, nofile_limit, raise_nofile_limit};
use crate::report::{notes, render_sizes, render_storm};

pub(crate) struct Opts {
    pub(crate) quick: bool,
    pub(crate) scenarios: Vec<String>,
    pub(crate) one_node_sizes: Vec<usize>,
    pub(crate) cluster_sizes: Vec<usize>,
    pub(crate) nodes: usize,
    pub(crate) storm_clients: usize,
    pub(crate) storm_rounds: usize,
    pub(crate) rounds: usize,
    pub(crate) inflight: usize,
    /// How long the servers sit idle (with every client connected) to measure what
    /// idle costs: a keepalive ping interval (30 s), so every connection pings once.
    pub(crate) idle: Duration,
    /// The servers' listen backlog; `Server::DEFAULT_BACKLOG` when not given.
    pub(crate) backlog: Option<u32>,
    pub(crate) history: bool,
}

impl Opts {
    fn parse(args: &[String]) -> Opts {
        let value = |flag: &str| {
            let i = args.iter().position(|a| a == flag)?;
            args.get(i + 1).cloned()
        };
        let number = |flag: &str, default: usize| {
            value(flag).map_or(default, |v| {
                v.parse().unwrap_or_else(|e| panic!("{flag} {v}: {e}"))
            })
        };
        let sizes = |flag: &str, default: &[usize]| {
            value(flag).map_or(default.to_vec(), |v| {
                v.split(',')
                    .map(|n| n.parse().unwrap_or_else(|e| panic!("{flag} {n}: {e}")))
                    .collect()
            })
        };
        let quick = args.iter().any(|a| a == "--quick");
        let scenarios = match value("--scenario").as_deref() {
            None | Some("all") => vec!["one-node".into(), "cluster".into(), "storm".into()],
            Some(one @ ("one-node" | "cluster" | "storm")) => vec![one.to_owned()],
            Some(other) => panic!("--scenario one-node|cluster|storm|all, not {other}"),
        };
        let (one_node, cluster, nodes, storm, storm_rounds, rounds, idle) = if quick {
            (vec![500], vec![500], 2, 500, 1, 2, 1)
        } else {
            (
                vec![1_000, 10_000, 19_000],
                vec![1_000, 10_000, 100_000],
                6,
                10_000,
                3,
                5,
                30,
            )
        };
        Opts {
            quick,
            scenarios,
            one_node_sizes: sizes("--one-node-sizes", &one_node),
            cluster_sizes: sizes("--cluster-sizes", &cluster),
            nodes: number("--nodes", nodes).max(1),
            storm_clients: number("--storm-clients", storm).max(1),
            storm_rounds: number("--storm-rounds", storm_rounds).max(1),
            rounds: number("--rounds", rounds).max(1),
            idle: Duration::from_secs(number("--idle-secs", idle).max(1) as u64),
            inflight: number("--inflight", 100).max(1),
            backlog: value("--backlog").map(|b| b.parse().expect("--backlog N")),
            history: args.iter().any(|a| a == "--history"),
        }
    }

    fn runs(&self, scenario: &str) -> bool {
        self.scenarios.iter().any(|s| s == scenario)
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |flag: &str| {
        let i = args.iter().position(|a| a == flag)?;
        args.get(i + 1).cloned()
    };
    if args.iter().any(|a| a == "--fleet") {
        fleet::run(fleet::FleetArgs::parse(&args));
        return;
    }
    if let Some(kind) = value("--serve") {
        let listen = value("--listen").unwrap_or_else(|| "127.0.0.1:0".to_owned());
        let backlog = value("--backlog").map(|b| b.parse().expect("--backlog N"));
        server::run(&kind, &listen, backlog);
        return;
    }
    raise_nofile_limit();
    kill_children_on_signals();
    let opts = Opts::parse(&args);
    let (soft, _) = nofile_limit();
    let load_before = load_average();
    let started = Instant::now();

    let node_bin =
        (opts.runs("cluster") || opts.runs("storm") && opts.history).then(cluster_node_binary);
    let mut sizes = Vec::new();
    let mut storm_rows = Vec::new();
    let mut storm_notes = Vec::new();
    let mut size_notes = vec![
        "per peer vs smallest: the figure per peer (a time divided by the peers) over the \
         same at the scenario's smallest size; 1.00x is linear"
            .to_owned(),
    ];
    if opts.runs("one-node") {
        size_notes.extend(scenarios::one_node(&opts, &mut sizes));
    }
    if let (true, Some(bin)) = (opts.runs("cluster"), &node_bin) {
        size_notes.extend(scenarios::cluster(&opts, bin, &mut sizes));
    }
    if opts.runs("storm") {
        let history_node = node_bin.as_deref().filter(|_| opts.history);
        storm_notes = scenarios::storm(&opts, history_node, &mut storm_rows);
    }

    let mut out = String::from("# jsonrpc-peer at scale\n\n");
    out += &format!(
        "Mode: {}, took {:.0} s, {} CPUs online, open files {soft} per process. Load \
         average (1, 5, 15 min) before: {load_before}; after: {}. Servers, nodes, Redis \
         and client fleets are separate processes sharing the machine.\n\n",
        if opts.quick { "--quick" } else { "full" },
        started.elapsed().as_secs_f64(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load_average(),
    );
    if !sizes.is_empty() {
        out += &render_sizes(&sizes);
        out += "\n";
        out += &notes(&size_notes);
        out += "\n";
    }
    if !storm_rows.is_empty() || !storm_notes.is_empty() {
        out += &render_storm(&storm_rows);
        out += "\n";
        out += &notes(&storm_notes);
    }
    println!("\n{out}");
    let path = target_dir().join("bench").join("scale.md");
    match std::fs::create_dir_all(path.parent().expect("has a parent"))
        .and_then(|()| std::fs::write(&path, &out))
    {
        Ok(()) => println!("written to {}", path.display()),
        Err(e) => eprintln!("could not write {}: {e}", path.display()),
    }
}

/// The workspace's root (the harness's parent).
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("harness/ is in the workspace")
        .to_path_buf()
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| workspace().join("target"), PathBuf::from)
}

/// `examples/cluster_node.rs`, built in release (or `SCALE_NODE_BIN`).
fn cluster_node_binary() -> PathBuf {
    if let Some(bin) = std::env::var_os("SCALE_NODE_BIN") {
        return PathBuf::from(bin);
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    eprintln!("building examples/cluster_node.rs (release, feature redis)");
    let mut build = Command::new(cargo)
        .args([
            "build",
            "--release",
            "--example",
            "cluster_node",
            "--features",
            "redis",
        ])
        .current_dir(workspace())
        .spawn()
        .expect("run cargo");
    let deadline = Instant::now() + Duration::from_secs(30 * 60);
    let status = loop {
        if let Some(status) = build.try_wait().expect("cargo runs") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = build.kill();
            let _ = build.wait();
            panic!("building cluster_node took over 30 minutes");
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        status.success(),
        "cargo build --release --example cluster_node --features redis failed"
    );
    target_dir()
        .join("release")
        .join("examples")
        .join("cluster_node")
}

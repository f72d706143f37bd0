//! The three scenarios: one node near its limit, a cluster of nodes over one Redis, and
//! a reconnect storm against the raw baseline.

use std::path::Path;
use std::time::Duration;

use crate::fleets::{
    deliver, idle_rates, median, split, start_server, Control, Delivered, Fleets, Trigger,
    MAX_PER_FLEET,
};
use crate::procs::{cpu_ns, listen_overflows, rss_kib, unix_nanos, Proc, Registered};
use crate::redis_server::RedisServer;
use crate::report::{Growth, Row, StormRow, Target};
use crate::Opts;

/// The topic every client subscribes to.
const TOPIC: &str = "scale";
/// Today's server RSS per idle connection (bench rpc (f)), the bound.
const RSS_KIB: f64 = 5.0;
/// How long connecting a whole size may take.
const CONNECT: Duration = Duration::from_secs(300);

/// Clients per fleet process in the one-node scenario: 19,000 become two fleets.
const ONE_NODE_FLEET: usize = 10_000;

fn settle() {
    // Buffers of the handshakes freed, the allocator's caches trimmed: RSS is read
    // after the server has been idle a moment.
    std::thread::sleep(Duration::from_millis(500));
}

fn ms_since(start: u128, t: u128) -> f64 {
    t.saturating_sub(start) as f64 / 1e6
}

fn check_connected(what: &str, fleets: &Fleets, c: &crate::fleets::Connected) {
    assert!(
        c.called == fleets.total,
        "{what}: only {} of {} clients connected and called ({} connected, {} retries, {} errors)",
        c.called,
        fleets.total,
        c.connected,
        c.retries,
        c.errors
    );
}

/// What went missing: messages some clients never got, `$/gap` notifications.
fn loss_note(d: &Delivered, of: usize) -> String {
    let mut note = Vec::new();
    if d.reached < of {
        note.push(format!("only {} of {of} got every message", d.reached));
    }
    if d.gaps > 0 {
        note.push(format!("{} `$/gap` notifications", d.gaps));
    }
    note.join("; ")
}

/// One server process with `n` idle connections (each made one call): RSS per
/// connection, a broadcast to all, a topic all of them subscribed to.
pub(crate) fn one_node(opts: &Opts, rows: &mut Vec<Row>) -> Vec<String> {
    const S: &str = ONE_NODE;
    // Per size: (connections, KiB grown idle, KiB grown subscribed).
    let mut grown = Vec::new();
    for &n in &opts.one_node_sizes {
        eprintln!("one node: {n} connections");
        let mut held = Held::start(opts, "ours", S, n, 0, rows);
        let (pids, fleet_pids) = ([held.pid], held.fleets.pids());
        let groups: [&[u32]; 2] = [&pids, &fleet_pids];
        let (subscribed, _, errors) = held.fleets.subscribe(TOPIC, CONNECT);
        assert_eq!(
            subscribed, n,
            "every client subscribed ({errors} error answers)"
        );
        settle();
        let rss2 = rss_kib(held.pid);
        grown.push((
            n,
            held.rss1.saturating_sub(held.rss0),
            rss2.saturating_sub(held.rss0),
        ));
        rows.push(Row::new(
            S,
            n,
            "server RSS per subscribed conn (KiB)",
            rss2.saturating_sub(held.rss0) as f64 / n as f64,
            Growth::PerPeer,
        ));
        let t = deliver(
            &held.control,
            &mut held.fleets,
            Trigger::Publish(TOPIC),
            &groups,
            &held.idle,
            opts.rounds,
        );
        delivery_rows(rows, S, n, "topic publish", &t);
        drop(held);
        // The same clients and broadcast on the baseline, right after ours, from
        // source addresses of its own (ours' closed connections hold their ports).
        eprintln!("one node, baseline: {n} connections");
        drop(Held::start(
            opts,
            "raw-push",
            BASELINE,
            n,
            BASELINE_FLEETS,
            rows,
        ));
    }
    let mut notes = slopes("one node: server", &grown);
    notes.extend(growth_beside_baseline(rows));
    notes
}

/// The one-node scenario's rows of ours, and of the baseline (`--serve raw-push`).
const ONE_NODE: &str = "one node";
const BASELINE: &str = "one node, baseline";
/// The baseline's fleets take the source addresses of fleets 50 and up
/// (127.0.0.110 and up), away from ours'.
const BASELINE_FLEETS: usize = 50;

/// A one-process server of `kind` holding `n` clients that each made one call, after
/// the rows every kind has: the time until all are connected and called, RSS per idle
/// connection, idle CPU, and a broadcast to all of them.
struct Held {
    fleets: Fleets,
    control: Control,
    pid: u32,
    /// RSS before the clients came, and with all of them idle.
    rss0: u64,
    rss1: u64,
    /// What the server and the fleets spend idle (as `idle_rates`).
    idle: Vec<f64>,
    // Dropped last: the fleets and the control client go before their server.
    _server: Proc,
}

impl Held {
    /// Its fleets on the source addresses of fleets `first_fleet` and up.
    fn start(
        opts: &Opts,
        kind: &str,
        s: &'static str,
        n: usize,
        first_fleet: usize,
        rows: &mut Vec<Row>,
    ) -> Held {
        let (server, url) = serve(opts, kind, "127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
        let pid = server.pid();
        settle();
        let rss0 = rss_kib(pid);
        let fleet_count = n.div_ceil(ONE_NODE_FLEET);
        let groups: Vec<(String, usize)> = split(n, fleet_count)
            .into_iter()
            .map(|k| (url.clone(), k))
            .collect();
        let mut fleets = Fleets::start_at(&groups, "whoami", opts.inflight, first_fleet);
        let start = unix_nanos();
        let c = fleets.connect(CONNECT, None);
        check_connected(s, &fleets, &c);
        rows.push(
            Row::new(
                s,
                n,
                "all connected and called (ms)",
                ms_since(start, c.t_called),
                Growth::Total,
            )
            .note(format!(
                "{} dials in flight, {} retried",
                opts.inflight, c.retries
            )),
        );
        settle();
        let rss1 = rss_kib(pid);
        rows.push(
            Row::new(
                s,
                n,
                "server RSS per idle conn (KiB)",
                rss1.saturating_sub(rss0) as f64 / n as f64,
                Growth::PerPeer,
            )
            .target(if kind == "ours" {
                Target::AtMost(RSS_KIB)
            } else {
                Target::None
            }),
        );
        let control = Control::connect(&url);
        let (pids, fleet_pids) = ([pid], fleets.pids());
        let groups: [&[u32]; 2] = [&pids, &fleet_pids];
        eprintln!("    idle for {} s", opts.idle.as_secs());
        let idle = idle_rates(&groups, opts.idle);
        rows.push(
            Row::new(
                s,
                n,
                "idle: server CPU per conn (µs per s)",
                idle[0] / 1e3 / n as f64,
                Growth::PerPeer,
            )
            .note(if kind == "ours" {
                "keepalive pings (every 30 s)"
            } else {
                "no keepalive"
            }),
        );
        let b = deliver(
            &control,
            &mut fleets,
            Trigger::Broadcast,
            &groups,
            &idle,
            opts.rounds,
        );
        delivery_rows(rows, s, n, "broadcast", &b);
        Held {
            fleets,
            control,
            pid,
            rss0,
            rss1,
            idle,
            _server: server,
        }
    }
}

/// A delivery's rows: the time until the last has it, the server's and the clients'
/// CPU per recipient.
fn delivery_rows(rows: &mut Vec<Row>, s: &'static str, n: usize, what: &str, d: &Delivered) {
    rows.push(
        Row::new(
            s,
            n,
            format!("{what}: last has it (ms)"),
            d.ms,
            Growth::Total,
        )
        .note(loss_note(d, n)),
    );
    rows.push(Row::new(
        s,
        n,
        format!("{what}: server CPU per recipient (µs)"),
        d.cpu_us[0],
        Growth::PerPeer,
    ));
    rows.push(
        Row::new(
            s,
            n,
            format!("{what}: clients' CPU per recipient (µs)"),
            d.cpu_us[1],
            Growth::PerPeer,
        )
        .note("the fleets: reading and parsing, for scale"),
    );
}

/// Notes putting the growth of ours' broadcast beside the baseline's, from each size
/// to the next: how much of what is not linear the baseline has too (the machine's:
/// the kernel's loopback path, caches) and how much is ours.
fn growth_beside_baseline(rows: &[Row]) -> Vec<String> {
    let find = |s: &str, metric: &str| -> Vec<(usize, f64)> {
        rows.iter()
            .filter(|r| r.scenario == s && r.metric == metric)
            .map(|r| (r.peers, r.per_peer()))
            .collect()
    };
    let mut notes = Vec::new();
    for metric in [
        "broadcast: server CPU per recipient (µs)",
        "broadcast: last has it (ms)",
    ] {
        let (ours, base) = (find(ONE_NODE, metric), find(BASELINE, metric));
        let steps: Vec<String> = ours
            .windows(2)
            .zip(base.windows(2))
            .map(|(o, b)| {
                let ((n0, o0), (n1, o1)) = (o[0], o[1]);
                let (b0, b1) = (b[0].1, b[1].1);
                format!(
                    "{n0} to {n1}: ours {:.2}x, baseline {:.2}x (ours / baseline {:.2}x at \
                     {n0}, {:.2}x at {n1})",
                    o1 / o0,
                    b1 / b0,
                    o0 / b0,
                    o1 / b1
                )
            })
            .collect();
        if !steps.is_empty() {
            notes.push(format!(
                "one node, {metric}, per peer from each size to the next: {}",
                steps.join("; ")
            ));
        }
    }
    notes
}

/// The RSS per connection between one size and the next (the slope, without the
/// fixed costs that weigh on the smallest size), as notes.
fn slopes(what: &str, grown: &[(usize, u64, u64)]) -> Vec<String> {
    grown
        .windows(2)
        .filter(|w| w[1].0 > w[0].0)
        .map(|w| {
            let (n0, idle0, sub0) = w[0];
            let (n1, idle1, sub1) = w[1];
            let per = |a: u64, b: u64| (b as f64 - a as f64) / (n1 - n0) as f64;
            format!(
                "{what} RSS per connection from {n0} to {n1} connections (the slope, without \
                 fixed costs): {:.2} KiB idle, {:.2} KiB subscribed",
                per(idle0, idle1),
                per(sub0, sub1)
            )
        })
        .collect()
}

/// `total` peers on `opts.nodes` cluster nodes (examples/cluster_node.rs) over one
/// Redis: a broadcast and a topic publish from node 0 reaching all of them.
pub(crate) fn cluster(opts: &Opts, node_bin: &Path, rows: &mut Vec<Row>) -> Vec<String> {
    const S: &str = "cluster";
    let redis = RedisServer::start();
    let redis_pid = [redis.pid().expect("redis runs")];
    // Dropped before `redis` (declared after it), so no stale pid stays listed.
    let _registered = Registered::new(redis_pid[0], redis.socket().parent().map(Path::to_path_buf));
    let mut grown = Vec::new();
    let mut notes = Vec::new();
    for &total in &opts.cluster_sizes {
        eprintln!("cluster: {total} peers on {} nodes", opts.nodes);
        let per_node = split(total, opts.nodes);
        assert!(
            per_node[0] <= MAX_PER_FLEET,
            "{total} peers on {} nodes is {} per node: more than one process holds here",
            opts.nodes,
            per_node[0]
        );
        let mut nodes = Vec::new();
        let mut urls = Vec::new();
        for i in 0..opts.nodes {
            let mut command = std::process::Command::new(node_bin);
            command.args([
                "--listen",
                "127.0.0.1:0",
                "--redis",
                &redis.url(),
                "--node",
                &format!("n{i}"),
                "--max-connections",
                "100000",
            ]);
            let (node, url) =
                start_server(&format!("node n{i}"), &mut command).unwrap_or_else(|e| panic!("{e}"));
            nodes.push(node);
            urls.push(url);
        }
        let pids: Vec<u32> = nodes.iter().map(Proc::pid).collect();
        settle();
        let dialed = redis_connections(&redis);
        let rss0: Vec<u64> = pids.iter().map(|&p| rss_kib(p)).collect();
        let groups: Vec<(String, usize)> = urls.iter().cloned().zip(per_node).collect();
        let mut fleets = Fleets::start(&groups, "whoami", opts.inflight);
        let start = unix_nanos();
        let c = fleets.connect(CONNECT, None);
        check_connected(S, &fleets, &c);
        rows.push(
            Row::new(
                S,
                total,
                "all connected and called (ms)",
                ms_since(start, c.t_called),
                Growth::Total,
            )
            .note(format!(
                "{} nodes, {} dials in flight",
                opts.nodes, opts.inflight
            )),
        );
        settle();
        let rss_grown = |pids: &[u32]| -> u64 {
            pids.iter()
                .zip(&rss0)
                .map(|(&p, &before)| rss_kib(p).saturating_sub(before))
                .sum()
        };
        let idle_kib = rss_grown(&pids);
        rows.push(
            Row::new(
                S,
                total,
                "node RSS per idle conn (KiB)",
                idle_kib as f64 / total as f64,
                Growth::PerPeer,
            )
            .target(Target::AtMost(RSS_KIB)),
        );
        let control = Control::connect(&urls[0]);
        let fleet_pids = fleets.pids();
        let groups: [&[u32]; 3] = [&pids, &redis_pid, &fleet_pids];
        eprintln!("    idle for {} s", opts.idle.as_secs());
        let idle = idle_rates(&groups, opts.idle);
        // RESETSTAT zeroes `total_connections_received` too: the redials so far are
        // taken now, and counted again from zero after it (this once read 0 redials
        // whatever happened, and hid the nodes' redials behind the `$/gap`s).
        let redials_before = redis_connections(&redis).saturating_sub(dialed + 1);
        redis.cli(&["CONFIG", "RESETSTAT"]);
        rows.push(
            Row::new(
                S,
                total,
                "idle: nodes' CPU per conn (µs per s)",
                idle[0] / 1e3 / total as f64,
                Growth::PerPeer,
            )
            .note("keepalive pings, heartbeats, probes"),
        );
        notes.push(format!(
            "cluster {total}: Redis idle (its cron, the nodes' heartbeats and probes) {:.0} µs \
             of CPU per second, taken off its per-message figures as the others' idle are",
            idle[1] / 1e3
        ));
        let b = deliver(
            &control,
            &mut fleets,
            Trigger::Broadcast,
            &groups,
            &idle,
            opts.rounds,
        );
        let (subscribed, _, errors) = fleets.subscribe(TOPIC, CONNECT);
        assert_eq!(
            subscribed, total,
            "every client subscribed ({errors} error answers)"
        );
        settle();
        grown.push((total, idle_kib, rss_grown(&pids)));
        let t = deliver(
            &control,
            &mut fleets,
            Trigger::Publish(TOPIC),
            &groups,
            &idle,
            opts.rounds,
        );
        for (what, d) in [("broadcast", &b), ("topic publish", &t)] {
            rows.push(
                Row::new(
                    S,
                    total,
                    format!("{what}: last has it (ms)"),
                    d.ms,
                    Growth::Total,
                )
                .note(loss_note(d, total)),
            );
            rows.push(Row::new(
                S,
                total,
                format!("{what}: nodes' CPU per recipient (µs)"),
                d.cpu_us[0],
                Growth::PerPeer,
            ));
            // Redis works per node, not per client: its CPU per message is the figure.
            // Its cron costs ~2 ms per second: over a span of a second or more, what
            // is left after taking it off is noise, and is not shown.
            let (redis_us, idle_us) = (d.cpu_us[1] * total as f64, d.idle_us[1] * total as f64);
            let (redis_us, note) = if idle_us > 3.0 * redis_us.max(30.0) {
                (
                    f64::NAN,
                    format!("lost in Redis's idle CPU over the span ({idle_us:.0} µs)"),
                )
            } else {
                (
                    redis_us,
                    "per message, not per recipient; idle taken off".to_owned(),
                )
            };
            rows.push(
                Row::new(
                    S,
                    total,
                    format!("{what}: Redis CPU per message (µs)"),
                    redis_us,
                    Growth::PerPeer,
                )
                .note(note),
            );
            rows.push(
                Row::new(
                    S,
                    total,
                    format!("{what}: clients' CPU per recipient (µs)"),
                    d.cpu_us[2],
                    Growth::PerPeer,
                )
                .note("the fleets: reading and parsing, for scale"),
            );
        }
        notes.push(format!(
            "cluster {total}: Redis's own count (INFO commandstats) over the messages: {}",
            publish_stats(&redis)
        ));
        // Since the RESETSTAT: less the two redis-cli connections (publish_stats' and
        // this one's), which ask.
        let redials = redials_before + redis_connections(&redis).saturating_sub(2);
        notes.push(format!(
            "cluster {total}: the nodes dialed Redis {redials} times while measured (a node \
             that hears nothing back within its probe deadline, 2 s by default, counts the \
             link as lost, dials again and sends its subscribers `$/gap`: what was \
             published meanwhile is lost to it)"
        ));
        drop(control);
        drop(fleets);
        drop(nodes);
    }
    drop(redis);
    notes.extend(slopes("cluster: the nodes'", &grown));
    notes
}

/// What `INFO commandstats` says of PUBLISH since the last `CONFIG RESETSTAT`: the
/// time Redis spends in the command itself, fan-out to the subscribed nodes included.
fn publish_stats(redis: &RedisServer) -> String {
    let stats = redis.cli(&["INFO", "commandstats"]);
    let line = stats
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_publish:"))
        .unwrap_or("");
    let field = |name: &str| {
        line.split(',')
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            .unwrap_or("?")
            .to_owned()
    };
    format!(
        "{} PUBLISH calls (the messages, heartbeats and probes), {} µs each on average",
        field("calls"),
        field("usec_per_call")
    )
}

/// Connections Redis has accepted since it started (`INFO stats`).
fn redis_connections(redis: &RedisServer) -> u64 {
    redis
        .cli(&["INFO", "stats"])
        .lines()
        .find_map(|l| l.strip_prefix("total_connections_received:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// The storm's figures of one server kind, one value per storm.
#[derive(Default)]
struct StormRuns {
    connected_ms: Vec<f64>,
    called_ms: Vec<f64>,
    subscribed_ms: Vec<f64>,
    cpu_us: Vec<f64>,
    retries: u64,
    errors: u64,
    /// Listen queue overflows (SYNs the kernel dropped) during the storms.
    overflows: u64,
}

/// A one-process server (server.rs): ours or raw, on `listen`.
fn serve(opts: &Opts, kind: &str, listen: &str) -> Result<(Proc, String), String> {
    let backlog = opts.backlog.map(|b| b.to_string());
    let mut args = vec!["--serve", kind, "--listen", listen];
    if let Some(backlog) = &backlog {
        args.extend(["--backlog", backlog]);
    }
    start_server(&format!("server {kind}"), &mut Proc::own(&args))
}

/// Publications a storm with history replays to every client of ours.
const REPLAYED: usize = 10;

/// Where the storm's server with history keeps it: a Redis of its own, and the
/// cluster node binary that serves over it.
struct HistoryServer<'a> {
    node_bin: &'a Path,
    redis: RedisServer,
    _registered: Registered,
    /// Each start is a node of a new name: the killed one's membership lingers in
    /// Redis until its heartbeats are missed.
    starts: usize,
}

impl HistoryServer<'_> {
    fn start(node_bin: &Path) -> HistoryServer<'_> {
        let redis = RedisServer::start();
        let pid = redis.pid().expect("redis runs");
        let _registered = Registered::new(pid, redis.socket().parent().map(Path::to_path_buf));
        HistoryServer {
            node_bin,
            redis,
            _registered,
            starts: 0,
        }
    }

    /// `examples/cluster_node.rs --history 1000` on `listen`, over the Redis.
    fn serve(&mut self, listen: &str) -> Result<(Proc, String), String> {
        self.starts += 1;
        let name = format!("s{}", self.starts);
        let mut command = std::process::Command::new(self.node_bin);
        command.args([
            "--listen",
            listen,
            "--redis",
            &self.redis.url(),
            "--node",
            &name,
            "--max-connections",
            "100000",
            "--history",
            "1000",
        ]);
        start_server(&format!("node {name} (history)"), &mut command)
    }
}

/// `opts.storm_clients` clients connected and subscribed; the server is killed and a
/// server started on the same port, alternately ours and the raw baseline; every
/// client reconnects, calls and subscribes again. Twice: paced (`opts.inflight` dials
/// at once, which times the server's handshake path) and as a herd (every client at
/// once, as after a real restart). Returns the notes for the table.
///
/// With `node_bin` (`--history`), ours is a cluster node over a Redis of the storm's
/// own whose topic keeps a history there, which outlives the node: after the first
/// subscribe [`REPLAYED`] messages are published, and every client resumes from the
/// position its first subscribe answered, so each of ours' storms replays them to
/// every client before its answer (the raw baseline answers the resuming subscribe
/// `true`, as any other call).
pub(crate) fn storm(opts: &Opts, node_bin: Option<&Path>, rows: &mut Vec<StormRow>) -> Vec<String> {
    let n = opts.storm_clients;
    eprintln!("storm: {n} clients");
    let mut history = node_bin.map(HistoryServer::start);
    let mut serve_ours = |listen: &str| match &mut history {
        Some(history) => history.serve(listen),
        None => serve(opts, "ours", listen),
    };
    let (mut server, url) = serve_ours("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
    let listen = url.trim_start_matches("ws://").to_owned();
    let fleet_count = n.div_ceil(ONE_NODE_FLEET).max(2);
    let groups: Vec<(String, usize)> = split(n, fleet_count)
        .into_iter()
        .map(|k| (url.clone(), k))
        .collect();
    let mut fleets = Fleets::start(&groups, "whoami", opts.inflight);
    let c = fleets.connect(CONNECT, None);
    check_connected("storm", &fleets, &c);
    let (subscribed, _, errors) = fleets.subscribe(TOPIC, CONNECT);
    assert_eq!(
        subscribed, n,
        "every client subscribed ({errors} error answers)"
    );
    if node_bin.is_some() {
        let control = Control::connect(&url);
        for i in 0..REPLAYED {
            control.call("publish", serde_json::json!([TOPIC, [i]]));
        }
    }

    let mut notes = Vec::new();
    // (name, dials at once, whether the clients only connect)
    let variants = [
        (
            format!("paced ({} at once)", opts.inflight),
            opts.inflight,
            false,
        ),
        ("herd (all at once)".to_owned(), n, false),
        ("herd, handshakes only".to_owned(), n, true),
    ];
    for (variant, inflight, quiet) in variants {
        eprintln!("  {variant}");
        let (mut ours, mut raw) = (StormRuns::default(), StormRuns::default());
        let (mut recovered, mut replayed) = (Vec::new(), Vec::new());
        // The first storm brings the raw server up, the next ours, and so on.
        for storm in 0..2 * opts.storm_rounds {
            let kind = if storm % 2 == 0 { "raw" } else { "ours" };
            server.kill();
            let dropped = fleets.dropped(Duration::from_secs(60));
            assert_eq!(dropped, n, "every client saw its connection end");
            let started = match kind {
                "ours" => serve_ours(&listen),
                _ => serve(opts, kind, &listen),
            };
            server = started.unwrap_or_else(|e| panic!("{e}")).0;
            let cpu0 = cpu_ns(server.pid());
            let overflows0 = listen_overflows();
            let go = unix_nanos();
            let c = match quiet {
                true => fleets.connect_quiet(CONNECT, inflight),
                false => fleets.connect(CONNECT, Some(inflight)),
            };
            let cpu = cpu_ns(server.pid()).saturating_sub(cpu0) as f64 / 1e3 / n as f64;
            let overflows = listen_overflows().saturating_sub(overflows0);
            let runs = if kind == "ours" { &mut ours } else { &mut raw };
            if kind == "ours" {
                recovered.push(c.recovered.to_string());
                replayed.push(c.replayed.to_string());
            }
            runs.retries += c.retries;
            runs.overflows += overflows;
            runs.errors += c.errors;
            if quiet && c.connected < n {
                notes.push(format!(
                    "{variant}, storm {storm} ({kind}): only {} of {n} back",
                    c.connected
                ));
            } else if !quiet && c.subscribed < n {
                notes.push(format!(
                    "{variant}, storm {storm} ({kind}): only {} of {n} back and subscribed \
                     ({} connected, {} called)",
                    c.subscribed, c.connected, c.called
                ));
            }
            runs.connected_ms.push(ms_since(go, c.t_connected));
            runs.cpu_us.push(cpu);
            let mut after_call = String::new();
            if !quiet {
                runs.called_ms.push(ms_since(go, c.t_called));
                runs.subscribed_ms.push(ms_since(go, c.t_subscribed));
                after_call = format!(
                    ", called {:.0} ms, subscribed {:.0} ms",
                    ms_since(go, c.t_called),
                    ms_since(go, c.t_subscribed)
                );
            }
            eprintln!(
                "    {kind}: all connected {:.0} ms{after_call}, server CPU {cpu:.1} µs per \
                 client, {} retries, {overflows} listen overflows",
                ms_since(go, c.t_connected),
                c.retries
            );
        }
        storm_rows(rows, &variant, n, &ours, &raw, quiet);
        if node_bin.is_some() && !quiet {
            notes.push(format!(
                "{variant}, with history: resuming subscribes answered `recovered: true`, \
                 each of ours' storms: {} of {n}; notifications replayed: {} ({} expected)",
                recovered.join(", "),
                replayed.join(", "),
                REPLAYED * n
            ));
        }
        notes.push(format!(
            "{variant}: retries (dials refused, dropped or failed, each retried after 10-50 ms): \
             ours {}, raw {}; clients that gave up: ours {}, raw {}",
            ours.retries, raw.retries, ours.errors, raw.errors
        ));
    }
    notes.push(format!(
        "{n} clients in {fleet_count} fleet processes; listen backlog {}; median of {} \
         storms per server and variant",
        opts.backlog
            .unwrap_or(jsonrpc_peer::Server::DEFAULT_BACKLOG),
        opts.storm_rounds,
    ));
    notes.push(match node_bin {
        Some(_) => format!(
            "with history (`--history`): ours is `examples/cluster_node.rs --history 1000` \
             over a Redis of its own (the history outlives the node), and every client \
             resumes from the position of its first subscribe, {REPLAYED} publications \
             back: each of ours' storms replays them to every client before its answer"
        ),
        None => "without history (`--history` runs the storm with it)".to_owned(),
    });
    notes
}

/// One figure of the storm's, as the runs hold it.
type Figure = fn(&StormRuns) -> &Vec<f64>;

/// The table's rows of one storm variant (`quiet`: the clients only connected, so
/// without the call's and the subscribe's rows).
fn storm_rows(
    rows: &mut Vec<StormRow>,
    variant: &str,
    n: usize,
    ours: &StormRuns,
    raw: &StormRuns,
    quiet: bool,
) {
    let pair = |f: Figure| (median(f(ours).clone()), median(f(raw).clone()));
    // (metric, figure, whether it needs the clients' call)
    let times: [(&'static str, Figure, bool); 4] = [
        ("all connected (ms)", |s| &s.connected_ms, false),
        ("all made their first call (ms)", |s| &s.called_ms, true),
        ("all resubscribed (ms)", |s| &s.subscribed_ms, true),
        ("server CPU per reconnect (µs)", |s| &s.cpu_us, false),
    ];
    for (metric, figure, _) in times.into_iter().filter(|&(_, _, call)| !(quiet && call)) {
        let (o, r) = pair(figure);
        rows.push(StormRow {
            variant: variant.to_owned(),
            metric,
            ours: o,
            raw: r,
            lower_is_better: true,
            target: None,
        });
    }
    let (o, r) = pair(|s| &s.connected_ms);
    rows.push(StormRow {
        variant: variant.to_owned(),
        metric: "accept + handshake rate (conn/s)",
        ours: n as f64 / o * 1e3,
        raw: n as f64 / r * 1e3,
        lower_is_better: false,
        target: Some(0.9),
    });
}

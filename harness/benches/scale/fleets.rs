//! The bench's side of the client fleets and servers: starting them, asking them, and
//! adding up what they answer; the control client that triggers broadcasts and
//! publishes; one measured delivery.

use std::future::IntoFuture;
use std::time::Duration;

use jsonrpc_peer::{connect, Caller, Peer, Router};
use serde_json::Value;

use crate::procs::{cpu_ns_of, unix_nanos, Proc};

/// Most clients one fleet process holds (the hard open-files limit is 20,000).
pub(crate) const MAX_PER_FLEET: usize = 19_000;

/// The source addresses of fleet number `index`: two of its own, 127.0.0.(10 + 2i) and
/// the next, so that no address nears its 28,000 ephemeral ports.
fn sources(index: usize) -> String {
    let first = 10 + 2 * index;
    assert!(first + 1 < 255, "too many fleets for 127.0.0.x");
    format!("127.0.0.{first},127.0.0.{}", first + 1)
}

/// `n` split into `parts` near-equal counts.
pub(crate) fn split(n: usize, parts: usize) -> Vec<usize> {
    let parts = parts.max(1);
    (0..parts)
        .map(|i| n / parts + usize::from(i < n % parts))
        .collect()
}

/// What `connect` gave, over all fleets.
#[derive(Debug, Default)]
pub(crate) struct Connected {
    pub(crate) connected: usize,
    pub(crate) called: usize,
    pub(crate) subscribed: usize,
    /// When the last client connected, called, subscribed (ns since the epoch).
    pub(crate) t_connected: u128,
    pub(crate) t_called: u128,
    pub(crate) t_subscribed: u128,
    pub(crate) retries: u64,
    pub(crate) errors: u64,
    /// Resuming subscribes answered `"recovered":true` (a topic with history).
    pub(crate) recovered: u64,
    /// Notifications with an offset the clients got (a topic with history).
    pub(crate) replayed: u64,
}

/// Client processes, each with its clients on one server URL.
pub(crate) struct Fleets {
    pub(crate) procs: Vec<Proc>,
    /// Clients per fleet.
    pub(crate) counts: Vec<usize>,
    pub(crate) total: usize,
}

impl Fleets {
    /// One fleet per `(url, clients)`, fleet `i` on its own source addresses; at most
    /// `inflight` dials at once across them all.
    pub(crate) fn start(groups: &[(String, usize)], call: &str, inflight: usize) -> Fleets {
        Fleets::start_at(groups, call, inflight, 0)
    }

    /// As [`start`](Self::start), fleet `i` on the source addresses of fleet `first +
    /// i`: fleets that follow others within a minute get addresses of their own, away
    /// from the ports the others' closed connections hold in TIME_WAIT.
    pub(crate) fn start_at(
        groups: &[(String, usize)],
        call: &str,
        inflight: usize,
        first: usize,
    ) -> Fleets {
        let per_fleet = (inflight / groups.len().max(1)).max(1).to_string();
        let procs = groups
            .iter()
            .enumerate()
            .map(|(i, (url, count))| {
                assert!(
                    *count <= MAX_PER_FLEET,
                    "{count} clients do not fit in one process"
                );
                let (count, sources) = (count.to_string(), sources(first + i));
                let mut command = Proc::own(&[
                    "--fleet",
                    "--url",
                    url,
                    "--sources",
                    &sources,
                    "--count",
                    &count,
                    "--call",
                    call,
                    "--inflight",
                    &per_fleet,
                ]);
                Proc::spawn(format!("fleet {i}"), &mut command)
            })
            .collect();
        Fleets {
            procs,
            counts: groups.iter().map(|(_, n)| *n).collect(),
            total: groups.iter().map(|(_, n)| n).sum(),
        }
    }

    pub(crate) fn pids(&self) -> Vec<u32> {
        self.procs.iter().map(Proc::pid).collect()
    }

    fn ask_all(&mut self, command: &str, answer: &str, timeout: Duration) -> Vec<Vec<u128>> {
        for fleet in &mut self.procs {
            fleet.send(command);
        }
        // Every fleet has the same deadline; the answers come within it and a second.
        let grace = timeout + Duration::from_secs(5);
        self.procs
            .iter_mut()
            .map(|fleet| {
                fleet
                    .expect(answer, grace)
                    .iter()
                    .map(|w| w.parse().expect("a number"))
                    .collect()
            })
            .collect()
    }

    /// (Re)connects every client that is not connected, at most `inflight` dials at
    /// once across the fleets (as started when `None`); each calls, and subscribes
    /// again once `subscribe` was used.
    pub(crate) fn connect(&mut self, timeout: Duration, inflight: Option<usize>) -> Connected {
        let per_fleet = inflight.map_or(String::new(), |n| format!(" {}", self.per_fleet(n)));
        self.connect_with(timeout, &per_fleet)
    }

    /// As [`connect`](Self::connect), but the clients only connect, `inflight` dials at
    /// once: no call and no subscribe (the server's handshake path alone).
    pub(crate) fn connect_quiet(&mut self, timeout: Duration, inflight: usize) -> Connected {
        let options = format!(" {} quiet", self.per_fleet(inflight));
        self.connect_with(timeout, &options)
    }

    /// `n` dials at once across the fleets: each fleet's share.
    fn per_fleet(&self, n: usize) -> usize {
        (n / self.procs.len().max(1)).max(1)
    }

    /// The `connect` command with `per_fleet` (its optional words), summed over the fleets.
    fn connect_with(&mut self, timeout: Duration, per_fleet: &str) -> Connected {
        let command = format!("connect {}{per_fleet}", timeout.as_millis());
        let mut sum = Connected::default();
        for w in self.ask_all(&command, "connected", timeout) {
            sum.connected += w[0] as usize;
            sum.called += w[1] as usize;
            sum.subscribed += w[2] as usize;
            sum.t_connected = sum.t_connected.max(w[3]);
            sum.t_called = sum.t_called.max(w[4]);
            sum.t_subscribed = sum.t_subscribed.max(w[5]);
            sum.retries += w[6] as u64;
            sum.errors += w[7] as u64;
            sum.recovered += w[8] as u64;
            sum.replayed += w[9] as u64;
        }
        sum
    }

    /// Subscribes every client to `topic`: (how many did, when the last did, how many
    /// were answered with an error).
    pub(crate) fn subscribe(&mut self, topic: &str, timeout: Duration) -> (usize, u128, u64) {
        let command = format!("subscribe {topic} {}", timeout.as_millis());
        self.ask_all(&command, "subscribed", timeout)
            .iter()
            .fold((0, 0, 0), |(n, t, e), w| {
                (n + w[0] as usize, t.max(w[1]), e + w[2] as u64)
            })
    }

    /// Waits until every client has message `seq`: (how many have it, when the last
    /// got it, how many `$/gap` notifications came since the last call). A fleet whose
    /// clients did not all get it, or had gaps, is named on stderr.
    pub(crate) fn arrivals(&mut self, seq: u64, timeout: Duration) -> (usize, u128, u64) {
        let command = format!("await {seq} {}", timeout.as_millis());
        let answers = self.ask_all(&command, "got", timeout);
        for (i, (w, &count)) in answers.iter().zip(&self.counts).enumerate() {
            if (w[1] as usize) < count || w[3] > 0 {
                eprintln!(
                    "    fleet {i}: {} of {count} got message {seq}; {} `$/gap` notifications",
                    w[1], w[3]
                );
            }
        }
        answers.iter().fold((0, 0, 0), |(n, t, g), w| {
            (n + w[1] as usize, t.max(w[2]), g + w[3] as u64)
        })
    }

    /// Waits until every connection has ended: how many have.
    pub(crate) fn dropped(&mut self, timeout: Duration) -> usize {
        let command = format!("dropped {}", timeout.as_millis());
        self.ask_all(&command, "dropped", timeout)
            .iter()
            .map(|w| w[0] as usize)
            .sum()
    }
}

/// Starts a server process and reads its `listening on ws://HOST:PORT ...` line:
/// the process and its URL, or why it did not start.
pub(crate) fn start_server(
    name: &str,
    command: &mut std::process::Command,
) -> Result<(Proc, String), String> {
    let mut server = Proc::spawn(name, command);
    match server.try_line(Duration::from_secs(30)) {
        Some(line) => {
            let url = line
                .strip_prefix("listening on ")
                .and_then(|rest| rest.split_whitespace().next())
                .ok_or_else(|| format!("{name}: expected `listening on ...`, got `{line}`"))?
                .to_owned();
            Ok((server, url))
        }
        None => Err(format!("{name} did not start (see its error above)")),
    }
}

/// A jsonrpc-peer client on its own runtime thread that asks a server to broadcast or
/// publish.
pub(crate) struct Control {
    runtime: tokio::runtime::Runtime,
    peer: Peer,
}

impl Control {
    pub(crate) fn connect(url: &str) -> Control {
        // A worker thread of its own, so the connection answers pings while the bench
        // waits on its children.
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("control runtime");
        let peer = runtime
            .block_on(connect(url, Router::new()))
            .unwrap_or_else(|e| panic!("control client to {url}: {e}"));
        Control { runtime, peer }
    }

    pub(crate) fn call(&self, method: &str, params: Value) -> Value {
        self.runtime
            .block_on(self.peer.call::<Value>(method, params).into_future())
            .unwrap_or_else(|e| panic!("{method}: {e}"))
    }
}

impl Drop for Control {
    fn drop(&mut self) {
        self.runtime.block_on(self.peer.close());
    }
}

/// How a message is triggered: `broadcast [[SEQ]]` or `publish [TOPIC, [SEQ]]`.
#[derive(Clone, Copy)]
pub(crate) enum Trigger {
    Broadcast,
    Publish(&'static str),
}

/// Medians over the measured rounds of one kind of delivery.
pub(crate) struct Delivered {
    /// ms from just before the trigger call until the last client has it.
    pub(crate) ms: f64,
    /// µs of CPU per recipient for each group of processes.
    pub(crate) cpu_us: Vec<f64>,
    /// µs of idle CPU per recipient taken off `cpu_us`, for each group.
    pub(crate) idle_us: Vec<f64>,
    /// The fewest recipients any round reached (all of them, unless something is lost).
    pub(crate) reached: usize,
    /// `$/gap` notifications the clients had over all rounds.
    pub(crate) gaps: u64,
}

/// A sequence number no other message of this run has.
fn next_seq() -> u64 {
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// What each group of processes spends idle, in CPU ns per second of wall time,
/// measured over `span`: subtracted from the per-message figures, whose spans grow
/// with the peers (Redis's cron alone is some 2 ms per second).
pub(crate) fn idle_rates(groups: &[&[u32]], span: Duration) -> Vec<f64> {
    let before: Vec<u64> = groups.iter().map(|g| cpu_ns_of(g)).collect();
    let start = std::time::Instant::now();
    std::thread::sleep(span);
    let took = start.elapsed().as_secs_f64();
    groups
        .iter()
        .zip(before)
        .map(|(g, b)| cpu_ns_of(g).saturating_sub(b) as f64 / took)
        .collect()
}

/// `rounds` messages (after one not counted, which warms up), one at a time, each
/// waited for at every client. CPU is read per group of processes over the span from
/// before the trigger until the fleets report the last arrival, less the group's
/// `idle` rate (ns per second) over that span.
pub(crate) fn deliver(
    control: &Control,
    fleets: &mut Fleets,
    trigger: Trigger,
    groups: &[&[u32]],
    idle: &[f64],
    rounds: usize,
) -> Delivered {
    let recipients = fleets.total;
    let (mut ms, mut cpu) = (Vec::new(), vec![Vec::new(); groups.len()]);
    let mut idle_off = vec![Vec::new(); groups.len()];
    let (mut reached, mut gaps) = (recipients, 0);
    for round in 0..=rounds {
        let seq = next_seq();
        let params = match trigger {
            Trigger::Broadcast => serde_json::json!([[seq]]),
            Trigger::Publish(topic) => serde_json::json!([topic, [seq]]),
        };
        let method = match trigger {
            Trigger::Broadcast => "broadcast",
            Trigger::Publish(_) => "publish",
        };
        let before: Vec<u64> = groups.iter().map(|g| cpu_ns_of(g)).collect();
        let start = unix_nanos();
        control.call(method, params);
        let (n, last, gapped) = fleets.arrivals(seq, Duration::from_secs(60));
        gaps += gapped;
        let after: Vec<u64> = groups.iter().map(|g| cpu_ns_of(g)).collect();
        let span_s = unix_nanos().saturating_sub(start) as f64 / 1e9;
        reached = reached.min(n);
        if round == 0 {
            continue;
        }
        ms.push(last.saturating_sub(start) as f64 / 1e6);
        for (i, (b, a)) in before.iter().zip(&after).enumerate() {
            let off = idle.get(i).copied().unwrap_or(0.0) * span_s;
            let busy = a.saturating_sub(*b) as f64 - off;
            cpu[i].push(busy.max(0.0) / 1e3 / recipients as f64);
            idle_off[i].push(off / 1e3 / recipients as f64);
        }
    }
    Delivered {
        ms: median(ms),
        cpu_us: cpu.into_iter().map(median).collect(),
        idle_us: idle_off.into_iter().map(median).collect(),
        reached,
        gaps,
    }
}

pub(crate) fn median(mut values: Vec<f64>) -> f64 {
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

//! One Redis against a Redis Cluster of three masters, in one run: cross-node throughput
//! with 1,000 topics (publishes spread over them) and with one hot topic, and the load
//! each Redis process took (`INFO commandstats` and `INFO cpu`), which is what says how
//! the bus grows with more shards on a machine with a core per Redis.
//!
//! Both buses are on loopback TCP (a Redis on another machine is reached over TCP; the
//! cluster has no unix sockets), the cluster without replicas (they would take the
//! same stream again, on the same two cores). On each: node A publishes as fast as it
//! can, node B's WebSocket client is subscribed to every topic and has them all.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use jsonrpc_peer::cluster::{
    Cluster, ClusterBuilder, RedisBackplane, RedisClusterBackplane, RedisOptions,
};
use jsonrpc_peer::{connect, Caller, Context, Peer, Router, RpcError, Server, Topics};

use super::redis_cluster::RedisCluster;
use super::redis_server::RedisServer;
use super::{median, Arrivals};

/// The topics of the spread run; the hot run uses the first.
const TOPICS: usize = 1000;

/// A bus and the Redis processes behind it.
enum Redis {
    One(RedisServer),
    Cluster(RedisCluster),
}

impl Redis {
    /// The cumulative load of every process serving the bus.
    fn load(&self) -> Vec<Load> {
        let read = |info_stats: String, info_cpu: String, label: String| {
            // cmdstat_publish:calls=N,usec=U,usec_per_call=...
            let (calls, usec) = info_stats
                .lines()
                .filter_map(|l| {
                    let rest = l
                        .strip_prefix("cmdstat_publish:calls=")
                        .or_else(|| l.strip_prefix("cmdstat_spublish:calls="))?;
                    let mut fields = rest.split(',');
                    let calls = fields.next()?.parse::<u64>().ok()?;
                    let usec = fields.next()?.strip_prefix("usec=")?.parse::<u64>().ok()?;
                    Some((calls, usec))
                })
                .fold((0, 0), |(c, u), (c1, u1)| (c + c1, u + u1));
            let cpu = info_cpu
                .lines()
                .filter_map(|l| {
                    let rest = l
                        .strip_prefix("used_cpu_sys:")
                        .or_else(|| l.strip_prefix("used_cpu_user:"))?;
                    rest.trim().parse::<f64>().ok()
                })
                .sum();
            Load {
                label,
                calls,
                usec,
                cpu,
            }
        };
        match self {
            Redis::One(r) => vec![read(
                r.cli(&["INFO", "commandstats"]),
                r.cli(&["INFO", "cpu"]),
                "one Redis".into(),
            )],
            Redis::Cluster(c) => c
                .masters()
                .into_iter()
                .map(|(port, _)| {
                    read(
                        c.cli(port, &["INFO", "commandstats"]),
                        c.cli(port, &["INFO", "cpu"]),
                        format!("master :{port}"),
                    )
                })
                .collect(),
        }
    }
}

/// What one Redis process did: (S)PUBLISH calls, the microseconds Redis counted in
/// them (`INFO commandstats`), its CPU seconds (`INFO cpu`, user + system).
#[derive(Clone)]
struct Load {
    label: String,
    calls: u64,
    usec: u64,
    cpu: f64,
}

/// One bus with its two nodes and B's client.
struct Side {
    label: &'static str,
    redis: Redis,
    a: Cluster,
    _b: Cluster,
    _client: Peer,
    arrivals: Arc<Arrivals>,
    topics: Vec<String>,
}

/// What one run measured: the rate, and each process's load during it.
struct Run {
    rate: f64,
    load: Vec<Load>,
}

async fn start_node(builder: ClusterBuilder, server: Server, name: &str) -> Cluster {
    let cluster = builder
        .node_id(name)
        .outbox_limit(64 << 20)
        .start()
        .await
        .expect("cluster");
    let router = Router::with_state(cluster.topics()).method(
        "subscribe_all",
        |cx: Context<Topics>, (topics,): (Vec<String>,)| async move {
            for topic in &topics {
                cx.state()
                    .subscribe_ready(cx.peer(), topic)
                    .await
                    .map_err(|e| RpcError::new(-32000, e.to_string()))?;
            }
            Ok::<_, RpcError>(topics.len())
        },
    );
    tokio::spawn(server.serve(router));
    cluster
}

impl Side {
    async fn start(label: &'static str, redis: Redis, n: usize) -> Side {
        // The stream of a throughput run is one burst: the receiving node's events hold
        // it whole (see `node` in cluster.rs).
        let options = || RedisOptions::default().event_capacity(128 * 1024);
        let mut nodes = Vec::new();
        for name in ["a", "b"] {
            let server = Server::bind("127.0.0.1:0")
                .await
                .expect("bind")
                .peer_config(super::bench_peers());
            let url = format!("ws://{}", server.local_addr().expect("addr"));
            let builder = match &redis {
                Redis::One(r) => {
                    let bus = RedisBackplane::connect(&r.url(), options()).await;
                    Cluster::builder(bus.expect("redis"), server.handle())
                }
                Redis::Cluster(c) => {
                    let bus = RedisClusterBackplane::connect(c.seeds(), options()).await;
                    Cluster::builder(bus.expect("redis cluster"), server.handle())
                }
            };
            nodes.push((start_node(builder, server, name).await, url));
        }
        let topics: Vec<String> = (0..TOPICS).map(|i| format!("t{i}")).collect();
        let arrivals = Arrivals::new(n);
        let on_note = |cx: Context<Arc<Arrivals>>, (seq,): (usize,)| {
            cx.state().hit(seq);
            std::future::ready(())
        };
        let router = topics
            .iter()
            .fold(Router::with_state(arrivals.clone()), |r, topic| {
                r.notification(topic, on_note)
            });
        let client = connect(&nodes[1].1, router).await.expect("connect");
        let subscribed: usize = client
            .call("subscribe_all", (topics.clone(),))
            .await
            .expect("subscribe");
        assert_eq!(subscribed, TOPICS);
        let (b, _) = nodes.pop().expect("b");
        let (a, _) = nodes.pop().expect("a");
        Side {
            label,
            redis,
            a,
            _b: b,
            _client: client,
            arrivals,
            topics,
        }
    }

    /// A publishes `n` messages over the first `spread` topics in turn, as fast as it
    /// can; the rate is until B's client has them all.
    async fn run(&self, n: usize, spread: usize) -> Run {
        let before = self.redis.load();
        self.arrivals.reset(n);
        let topics = self.a.topics();
        let start = Instant::now();
        for seq in 0..n {
            let _ = topics.publish(&self.topics[seq % spread], &[seq]).await;
            if seq % 64 == 63 {
                tokio::task::yield_now().await;
            }
        }
        self.arrivals.wait(self.label).await;
        let rate = n as f64 / (self.arrivals.last().unwrap_or(start) - start).as_secs_f64();
        let after = self.redis.load();
        let load = before
            .into_iter()
            .zip(after)
            .map(|(b, a)| Load {
                label: a.label,
                calls: a.calls.saturating_sub(b.calls),
                usec: a.usec.saturating_sub(b.usec),
                cpu: a.cpu - b.cpu,
            })
            .collect();
        assert_eq!(self.a.stats().outbox_refused, 0, "{}", self.label);
        Run { rate, load }
    }
}

/// The figures of the comparison.
pub(super) struct Shards {
    messages: usize,
    /// Median rates, per side: (1,000 topics, one hot topic).
    rates: HashMap<&'static str, (f64, f64)>,
    /// Per side and workload, the load of the last round.
    load: HashMap<(&'static str, &'static str), Vec<Load>>,
}

const ONE: &str = "one Redis";
const CLUSTER: &str = "Redis Cluster, 3 masters";

/// Starts both buses, runs `rounds` rounds of both workloads on each (alternating which
/// bus goes first), and stops them.
pub(super) async fn compare(messages: usize, rounds: usize) -> Shards {
    let one = Side::start(ONE, Redis::One(RedisServer::start_tcp()), messages).await;
    let cluster = RedisCluster::start(3, 0);
    let cluster = Side::start(CLUSTER, Redis::Cluster(cluster), messages).await;
    let mut samples: HashMap<(&str, &str), Vec<f64>> = HashMap::new();
    let mut load = HashMap::new();
    for round in 0..rounds {
        let order = if round % 2 == 0 {
            [&one, &cluster]
        } else {
            [&cluster, &one]
        };
        for side in order {
            for (workload, spread) in [("spread", TOPICS), ("hot", 1)] {
                let run = side.run(messages, spread).await;
                samples
                    .entry((side.label, workload))
                    .or_default()
                    .push(run.rate);
                load.insert((side.label, workload), run.load);
            }
        }
    }
    let rate = |side, workload| median(samples[&(side, workload)].clone());
    let rates = [ONE, CLUSTER]
        .into_iter()
        .map(|side| (side, (rate(side, "spread"), rate(side, "hot"))))
        .collect();
    Shards {
        messages,
        rates,
        load,
    }
}

impl Shards {
    pub(super) fn print(&self, rounds: usize) {
        let (one_spread, one_hot) = self.rates[ONE];
        let (cl_spread, cl_hot) = self.rates[CLUSTER];
        println!();
        println!(
            "one Redis against a Redis Cluster of 3 masters ({} messages a run, median of {rounds} rounds, loopback TCP)",
            self.messages
        );
        println!("| workload | one Redis | Redis Cluster, 3 masters | ratio | target | |");
        println!("|---|---|---|---|---|---|");
        println!(
            "| {TOPICS} topics, publishes spread | {one_spread:.0} msg/s | {cl_spread:.0} msg/s | {:.2}x | > 1x | {} |",
            cl_spread / one_spread,
            super::verdict(cl_spread > one_spread)
        );
        println!(
            "| one hot topic | {one_hot:.0} msg/s | {cl_hot:.0} msg/s | {:.2}x | | |",
            cl_hot / one_hot
        );
        println!();
        println!(
            "Each Redis process in the last round: its (S)PUBLISH calls, the time Redis counted in them, \
             and its CPU (user + system) per message of the whole stream"
        );
        println!("| workload | process | calls | share | in the command, per call | CPU per message of the stream | |");
        println!("|---|---|---|---|---|---|---|");
        for (workload, name) in [("spread", "1,000 topics"), ("hot", "one hot topic")] {
            let per_msg = |cpu: f64| cpu * 1e6 / self.messages as f64;
            let single = &self.load[&(ONE, workload)];
            let single_cost: f64 = single.iter().map(|l| per_msg(l.cpu)).sum();
            let masters = &self.load[&(CLUSTER, workload)];
            let total: u64 = masters.iter().map(|l| l.calls).sum::<u64>().max(1);
            let row = |l: &Load, share: f64| {
                println!(
                    "| {name} | {} | {} | {:.0}% | {:.2} us | {:.2} us | |",
                    l.label,
                    l.calls,
                    share,
                    l.usec as f64 / l.calls.max(1) as f64,
                    per_msg(l.cpu)
                )
            };
            for l in single {
                row(l, 100.0);
            }
            for l in masters {
                row(l, 100.0 * l.calls as f64 / total as f64);
            }
            let busiest = masters.iter().map(|l| per_msg(l.cpu)).fold(0.0, f64::max);
            println!(
                "| {name} | the busiest master | | | | {busiest:.2} us | {:.2}x one Redis's messages per CPU-second, each master on a core of its own |",
                single_cost / busiest.max(f64::MIN_POSITIVE)
            );
        }
    }
}

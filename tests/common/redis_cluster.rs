//! A real Redis Cluster for a test: `redis-server` processes on free loopback ports
//! (each also listens on port + 10000 for the cluster bus; both below the kernel's
//! ephemeral ports, see `free_ports`),
//! joined by `redis-cli --cluster create`, every one killed when dropped. Needs the
//! Debian `redis-server` (`.ci/install`). Every wait is bounded.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a Redis node may go silent before the others fail it over (ms). Low, so a
/// killed master's replica takes over in about three seconds; not so low that a busy
/// test machine makes a master look dead.
pub const NODE_TIMEOUT_MS: u64 = 2000;

/// One `redis-server` of the cluster.
struct Server {
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

/// A running Redis Cluster; every process is killed (SIGKILL) on drop, its directory
/// removed.
pub struct RedisCluster {
    servers: Vec<Server>,
    dir: PathBuf,
}

impl RedisCluster {
    /// `masters` masters, each with `replicas` replicas, serving every slot; waits (at
    /// most 30 s) until every node says `cluster_state:ok`, knows every other node, and
    /// every replica is in sync with its master.
    pub fn start(masters: usize, replicas: usize) -> RedisCluster {
        let count = masters * (1 + replicas);
        for _ in 0..20 {
            if let Some(cluster) = Self::try_start(count, masters, replicas) {
                return cluster;
            }
        }
        panic!("could not start a Redis Cluster on free ports in 20 tries");
    }

    fn try_start(count: usize, masters: usize, replicas: usize) -> Option<RedisCluster> {
        let dir = std::env::temp_dir().join(format!(
            "jp-rcluster-{}-{:016x}",
            std::process::id(),
            fastrand::u64(..)
        ));
        std::fs::create_dir_all(&dir).expect("create the cluster's temp dir");
        let mut cluster = RedisCluster {
            servers: Vec::new(),
            dir,
        };
        for port in free_ports(count)? {
            let dir = cluster.dir.join(port.to_string());
            std::fs::create_dir_all(&dir).expect("create a node's dir");
            cluster.servers.push(Server {
                port,
                dir,
                child: None,
            });
        }
        for i in 0..count {
            // Another process took the port meanwhile: try other ports.
            if !cluster.launch(i) {
                return None;
            }
        }
        let mut create = Command::new("redis-cli");
        create.arg("--cluster").arg("create");
        for port in cluster.ports() {
            create.arg(format!("127.0.0.1:{port}"));
        }
        let out = create
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .expect("run redis-cli --cluster create");
        assert!(
            out.status.success(),
            "redis-cli --cluster create: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        cluster.wait_ready();
        assert_eq!(cluster.masters().len(), masters);
        Some(cluster)
    }

    /// Starts server `i` in its directory (its nodes.conf kept); false if it would not
    /// answer PING within 10 s (its port taken).
    fn launch(&mut self, i: usize) -> bool {
        let server = &mut self.servers[i];
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &server.port.to_string()])
            .args([
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
            ])
            .args(["--cluster-node-timeout", &NODE_TIMEOUT_MS.to_string()])
            .args(["--save", "", "--appendonly", "no", "--dir"])
            .arg(&server.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("run redis-server (apt-get install redis-server; .ci/install does)");
        server.child = Some(child);
        let port = server.port;
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.cli(port, &["PING"]) != "PONG" {
            let exited = self.servers[i]
                .child
                .as_mut()
                .is_some_and(|c| c.try_wait().ok().flatten().is_some());
            if exited || Instant::now() > deadline {
                self.kill(port);
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        true
    }

    /// Every node's port.
    pub fn ports(&self) -> Vec<u16> {
        self.servers.iter().map(|s| s.port).collect()
    }

    /// The seeds as the backplane takes them: `redis://127.0.0.1:PORT` of every node.
    pub fn seeds(&self) -> Vec<String> {
        self.ports()
            .iter()
            .map(|p| format!("redis://127.0.0.1:{p}"))
            .collect()
    }

    /// Runs one command through `redis-cli` on `port` and returns its output.
    pub fn cli(&self, port: u16, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &port.to_string()])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run redis-cli");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// A live node's port, to ask things of the cluster.
    fn any_live(&self) -> u16 {
        self.servers
            .iter()
            .find(|s| s.child.is_some())
            .map(|s| s.port)
            .expect("a live node")
    }

    /// `(port, node id)` of every master serving slots, as a live node sees them.
    pub fn masters(&self) -> Vec<(u16, String)> {
        let nodes = self.cli(self.any_live(), &["CLUSTER", "NODES"]);
        let mut masters: Vec<(u16, String)> = nodes
            .lines()
            .filter_map(|line| {
                let f: Vec<&str> = line.split_whitespace().collect();
                let serving = f.len() > 8 && f[2].contains("master") && !f[2].contains("fail");
                let port = f.get(1)?.split(['@', ':']).nth(1)?.parse().ok()?;
                serving.then(|| (port, f[0].to_owned()))
            })
            .collect();
        masters.sort();
        masters
    }

    /// The port of the master serving `slot`, as a live node sees it.
    pub fn master_of(&self, slot: u16) -> u16 {
        let port = self.any_live();
        self.master_of_seen_by(port, slot).unwrap_or_else(|| {
            let nodes = self.cli(port, &["CLUSTER", "NODES"]);
            panic!("no master serves slot {slot}: {nodes}")
        })
    }

    /// The master serving `slot` as the node on `port` sees it: none for a moment
    /// while a failover goes on.
    fn master_of_seen_by(&self, port: u16, slot: u16) -> Option<u16> {
        let nodes = self.cli(port, &["CLUSTER", "NODES"]);
        for line in nodes.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 9 || !f[2].contains("master") {
                continue;
            }
            let serves = f[8..].iter().any(|range| {
                let mut ends = range.split('-').map(|n| n.parse::<u16>());
                match (ends.next(), ends.next()) {
                    (Some(Ok(a)), Some(Ok(b))) => (a..=b).contains(&slot),
                    (Some(Ok(a)), None) => a == slot,
                    _ => false,
                }
            });
            if serves {
                if let Some(port) = f[1].split(['@', ':']).nth(1).and_then(|p| p.parse().ok()) {
                    return Some(port);
                }
            }
        }
        None
    }

    /// The slot of a key or channel, as Redis computes it.
    pub fn keyslot(&self, key: &str) -> u16 {
        self.cli(self.any_live(), &["CLUSTER", "KEYSLOT", key])
            .parse()
            .expect("a slot number")
    }

    /// The node id of the node on `port`.
    pub fn id(&self, port: u16) -> String {
        self.cli(port, &["CLUSTER", "MYID"])
    }

    /// Kills the node on `port` (SIGKILL: no goodbye to clients) and waits until it is
    /// gone.
    pub fn kill(&mut self, port: u16) {
        if let Some(server) = self.servers.iter_mut().find(|s| s.port == port) {
            if let Some(mut child) = server.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }

    /// Kills every node.
    pub fn kill_all(&mut self) {
        for port in self.ports() {
            self.kill(port);
        }
    }

    /// Starts every killed node again in its directory (its nodes.conf kept: it comes
    /// back empty, in the same role and slots) and waits until the cluster is ready.
    pub fn restart_all(&mut self) {
        for i in 0..self.servers.len() {
            if self.servers[i].child.is_none() {
                assert!(
                    self.launch(i),
                    "node {} did not restart",
                    self.servers[i].port
                );
            }
        }
        self.wait_ready();
    }

    /// Waits (at most 30 s) until every live node says `cluster_state:ok` and knows
    /// every node, and every live replica is in sync with its master.
    pub fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        let total = self.servers.len();
        loop {
            let ready = self.servers.iter().filter(|s| s.child.is_some()).all(|s| {
                let info = self.cli(s.port, &["CLUSTER", "INFO"]);
                let replication = self.cli(s.port, &["INFO", "replication"]);
                info.contains("cluster_state:ok")
                    && info.contains(&format!("cluster_known_nodes:{total}"))
                    && (replication.contains("role:master")
                        || replication.contains("master_link_status:up"))
            });
            if ready {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the Redis Cluster was not ready in 30 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits (at most 30 s) until every live node sees a master other than `old` serving
    /// `slot` (a replica promoted) and the cluster is ok again; returns its port.
    pub fn wait_failover(&self, slot: u16, old: u16) -> u16 {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let live: Vec<u16> = self
                .servers
                .iter()
                .filter(|s| s.child.is_some())
                .map(|s| s.port)
                .collect();
            let seen: Vec<Option<u16>> = live
                .iter()
                .map(|p| self.master_of_seen_by(*p, slot))
                .collect();
            let ok = live.iter().all(|p| {
                self.cli(*p, &["CLUSTER", "INFO"])
                    .contains("cluster_state:ok")
            });
            match seen[0] {
                Some(new) if ok && new != old && seen.iter().all(|m| *m == Some(new)) => {
                    return new;
                }
                _ => {}
            }
            assert!(
                Instant::now() < deadline,
                "no replica took over slot {slot} from {old} in 30 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// First half of moving `slot` to the master on `to` by hand: the target imports
    /// it, the source migrates it, and the keys in it move (`MIGRATE`). The source
    /// still serves the slot (with `ASK` for keys already moved) until
    /// [`finish_move`](Self::finish_move).
    pub fn begin_move(&self, slot: u16, to: u16) -> u16 {
        let from = self.master_of(slot);
        assert_ne!(from, to, "slot {slot} is already on {to}");
        let (from_id, to_id) = (self.id(from), self.id(to));
        let slot_arg = slot.to_string();
        assert_eq!(
            self.cli(
                to,
                &["CLUSTER", "SETSLOT", &slot_arg, "IMPORTING", &from_id]
            ),
            "OK"
        );
        assert_eq!(
            self.cli(
                from,
                &["CLUSTER", "SETSLOT", &slot_arg, "MIGRATING", &to_id]
            ),
            "OK"
        );
        for _ in 0..1000 {
            let keys = self.cli(from, &["CLUSTER", "GETKEYSINSLOT", &slot_arg, "100"]);
            let keys: Vec<&str> = keys.lines().filter(|k| !k.is_empty()).collect();
            if keys.is_empty() {
                break;
            }
            let port = to.to_string();
            let mut args = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
            args.extend(keys);
            assert_eq!(self.cli(from, &args), "OK");
        }
        from
    }

    /// Second half: the slot is the target's; every master is told, the source last
    /// (which then sends its shard subscribers of that slot `sunsubscribe`).
    pub fn finish_move(&self, slot: u16, from: u16, to: u16) {
        let to_id = self.id(to);
        let slot_arg = slot.to_string();
        assert_eq!(
            self.cli(to, &["CLUSTER", "SETSLOT", &slot_arg, "NODE", &to_id]),
            "OK"
        );
        for (port, _) in self.masters() {
            if port != to && port != from {
                let _ = self.cli(port, &["CLUSTER", "SETSLOT", &slot_arg, "NODE", &to_id]);
            }
        }
        assert_eq!(
            self.cli(from, &["CLUSTER", "SETSLOT", &slot_arg, "NODE", &to_id]),
            "OK"
        );
    }

    /// `INFO commandstats` of `port`: calls of `command` (lower case, e.g. `spublish`).
    pub fn calls(&self, port: u16, command: &str) -> u64 {
        let stats = self.cli(port, &["INFO", "commandstats"]);
        stats
            .lines()
            .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:calls=")))
            .and_then(|rest| rest.split(',').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        self.kill_all();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `n` ports that are free now, each with its cluster bus port (+ 10,000) free too.
/// Another process may take one before Redis binds it: the caller tries again.
///
/// Both below the kernel's ephemeral range (`ip_local_port_range`, 32768 and up by
/// default) where it leaves room: a node killed and started again binds its ports
/// anew, and a bus port inside that range could meanwhile be the local port of any
/// outgoing connection (the clients redialing the dead node, say), which made the
/// restart fail (`.ci/stress cluster_redis_cluster`, once in two runs of
/// `the_whole_cluster_down_and_back_...`: its bus port was 33234).
fn free_ports(n: usize) -> Option<Vec<u16>> {
    let ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32_768);
    // Room for a few thousand ports below the range, with their bus ports; else the
    // old span, and a restart may meet the race above.
    let span = match ephemeral.checked_sub(10_000) {
        Some(top) if top >= 15_000 => 10_000..top,
        _ => 20_000..45_000,
    };
    let mut ports = Vec::new();
    for _ in 0..1000 {
        let port = fastrand::u16(span.clone());
        let bus = port + 10_000;
        let free = |p: u16| TcpListener::bind(("127.0.0.1", p)).is_ok();
        let clash = ports
            .iter()
            .any(|&p| p == port || p + 10_000 == port || port + 10_000 == p);
        if !clash && free(port) && free(bus) {
            ports.push(port);
            if ports.len() == n {
                return Some(ports);
            }
        }
    }
    None
}

//! `examples/cluster_node.rs` as a process of its own, for the tests over a real Redis or
//! a real Redis Cluster (the [`Bus`] it is started on), and a client of it that records
//! the notifications it gets. `cargo test` builds the example
//! with the test's features; by hand: `cargo build --features redis-cluster --example
//! cluster_node`.

use jsonrpc_peer::{connect, Caller, Context, Peer, Router, RpcError};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

use super::redis_cluster::RedisCluster;
use super::redis_server::RedisServer;
use super::within;

/// The bus the nodes share.
pub trait Bus {
    /// The example's flags that name it (`--redis URL`, `--redis-cluster SEEDS`).
    fn args(&self) -> Vec<String>;
    /// How many nodes listen to `channel` now.
    fn subscribers(&self, channel: &str) -> u64;
    /// The whole bus goes away (SIGKILL: no goodbye to anyone).
    fn kill(&mut self);
    /// And comes back, empty; returns once it answers.
    fn restart(&mut self);
    /// `redis-cli` with `args` on every Redis process holding the bus's data (one
    /// Redis, or each master), the answers in that order.
    fn cli_each(&self, args: &[&str]) -> Vec<String>;
}

/// The count `redis-cli` prints for `PUBSUB NUMSUB` or `SHARDNUMSUB` ("channel\ncount").
fn count(answer: &str) -> u64 {
    answer
        .lines()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// One Redis: `--redis URL`.
impl Bus for RedisServer {
    fn args(&self) -> Vec<String> {
        vec!["--redis".into(), self.url()]
    }

    fn subscribers(&self, channel: &str) -> u64 {
        count(&self.cli(&["PUBSUB", "NUMSUB", channel]))
    }

    fn kill(&mut self) {
        RedisServer::kill(self);
    }

    fn restart(&mut self) {
        RedisServer::restart(self);
    }

    fn cli_each(&self, args: &[&str]) -> Vec<String> {
        vec![self.cli(args)]
    }
}

/// A Redis Cluster: `--redis-cluster` with every node as a seed.
impl Bus for RedisCluster {
    fn args(&self) -> Vec<String> {
        vec!["--redis-cluster".into(), self.seeds().join(",")]
    }

    fn subscribers(&self, channel: &str) -> u64 {
        let master = self.master_of(self.keyslot(channel));
        count(&self.cli(master, &["PUBSUB", "SHARDNUMSUB", channel]))
    }

    fn kill(&mut self) {
        self.kill_all();
    }

    fn restart(&mut self) {
        self.restart_all();
    }

    fn cli_each(&self, args: &[&str]) -> Vec<String> {
        self.masters()
            .into_iter()
            .map(|(port, _)| self.cli(port, args))
            .collect()
    }
}

/// One `cluster_node` process; killed (SIGKILL) when dropped.
pub struct Node {
    pub child: Child,
    pub url: String,
}

impl Node {
    /// A node named `name` on `bus`, with `--heartbeat-ms` and any `extra` flags;
    /// returns once it printed its first line.
    pub async fn start(bus: &dyn Bus, name: &str, heartbeat_ms: u64, extra: &[&str]) -> Node {
        let bin = super::example_binary("cluster_node", "--features redis-cluster ");
        let mut child = Command::new(bin)
            .args(["--listen", "127.0.0.1:0"])
            .args(bus.args())
            .args(["--node", name])
            .args(["--heartbeat-ms", &heartbeat_ms.to_string()])
            .args(extra)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start cluster_node");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut lines = BufReader::new(stdout).lines();
        let first = within(lines.next_line())
            .await
            .expect("read stdout")
            .expect("a first line");
        let rest = first
            .strip_prefix("listening on ")
            .expect("`listening on ...` first");
        let (url, node) = rest.split_once(" node ").expect("`... node NAME`");
        assert_eq!(node, name);
        Node {
            child,
            url: url.to_owned(),
        }
    }

    /// The node's address, `127.0.0.1:PORT`.
    pub fn addr(&self) -> std::net::SocketAddr {
        self.url
            .trim_start_matches("ws://")
            .parse()
            .expect("a socket address")
    }

    /// Sends the process signal `name` (`INT`, `TERM`, ...).
    pub fn signal(&self, name: &str) {
        let pid = self.child.id().expect("running");
        let ok = std::process::Command::new("kill")
            .arg(format!("-{name}"))
            .arg(pid.to_string())
            .status()
            .expect("run kill")
            .success();
        assert!(ok);
    }

    /// Waits for the process to exit.
    pub async fn wait_exit(&mut self) {
        within(self.child.wait()).await.expect("wait for the node");
    }
}

/// A client of a node that records every notification it gets as (method, params).
pub struct NodeClient {
    pub peer: Peer,
    pub notes: mpsc::UnboundedReceiver<(String, Value)>,
}

impl NodeClient {
    pub async fn connect(node: &Node) -> NodeClient {
        let (tx, notes) = mpsc::unbounded_channel();
        let mut router = Router::with_state(tx);
        for method in ["presence.join", "presence.leave", "$/gap", "broadcast"] {
            router = router.notification(
                method,
                move |cx: Context<mpsc::UnboundedSender<(String, Value)>>, params: Value| {
                    let _ = cx.state().send((method.to_owned(), params));
                    std::future::ready(())
                },
            );
        }
        let peer = within(connect(&node.url, router))
            .await
            .expect("connect to the node");
        NodeClient { peer, notes }
    }

    pub async fn call(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        match within(self.peer.call::<Value>(method, params)).await {
            Ok(v) => Ok(v),
            Err(e) => Err(e.rpc().cloned().unwrap_or_else(|| panic!("{method}: {e}"))),
        }
    }

    pub async fn ok(&self, method: &str, params: Value) -> Value {
        self.call(method, params)
            .await
            .unwrap_or_else(|e| panic!("{method}: {e:?}"))
    }

    pub async fn next_note(&mut self) -> (String, Value) {
        within(self.notes.recv())
            .await
            .expect("the client is alive")
    }
}

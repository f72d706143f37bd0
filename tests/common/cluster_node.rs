//! A `cluster_node` example process against a test's Redis, and a client of it that
//! records the notifications it gets. Build the example first:
//! `cargo build --features redis --example cluster_node`.

use std::path::PathBuf;

use jsonrpc_peer::{connect, Caller, Context, Peer, Router, RpcError};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

use super::redis_server::RedisServer;
use super::within;

/// The example binary, next to this test's own `deps/` folder.
fn example_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let dir = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("target/<profile>");
    let bin = dir.join("examples").join("cluster_node");
    assert!(
        bin.exists(),
        "{} is missing: run `cargo build --features redis --example cluster_node` first",
        bin.display()
    );
    bin
}

/// One `cluster_node` process; killed (SIGKILL) when dropped.
pub struct ClusterNode {
    child: Child,
    pub url: String,
}

impl ClusterNode {
    pub async fn start(redis: &RedisServer, name: &str, heartbeat_ms: u64) -> ClusterNode {
        let mut child = Command::new(example_binary())
            .args([
                "--listen",
                "127.0.0.1:0",
                "--redis",
                &redis.url(),
                "--node",
                name,
            ])
            .args(["--heartbeat-ms", &heartbeat_ms.to_string()])
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
        ClusterNode {
            child,
            url: url.to_owned(),
        }
    }

    /// Sends a signal (`INT`, `TERM`, `KILL`) to the process.
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
    pub async fn connect(node: &ClusterNode) -> NodeClient {
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

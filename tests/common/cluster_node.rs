//! `examples/cluster_node.rs` as a process of its own, for the tests over a real Redis.
//! Build the example first: `cargo build --features redis --example cluster_node`.

use std::path::PathBuf;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

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
pub struct Node {
    pub child: Child,
    pub url: String,
}

impl Node {
    /// A node named `name` on `redis`, with `--heartbeat-ms` and any `extra` flags;
    /// returns once it printed its first line.
    pub async fn start(redis: &RedisServer, name: &str, heartbeat_ms: u64, extra: &[&str]) -> Node {
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

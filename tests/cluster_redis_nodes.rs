//! Three `cluster_node` example processes against one real Redis (started by the test
//! on a unix socket), with WebSocket clients on each: broadcast, topics, calls across
//! nodes, counts, and a Redis outage (the suite is in `common/cluster_suite.rs`); and a
//! node whose Redis does not answer at start. Build the example first: `cargo build
//! --features redis --example cluster_node`.

#[path = "common/cluster_suite.rs"]
mod cluster_suite;
mod common;

use common::redis_server::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_share_broadcasts_topics_calls_and_counts() {
    let redis = RedisServer::start();
    cluster_suite::three_nodes_share_broadcasts_topics_calls_and_counts(&redis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_for_two_seconds_local_goes_on_then_resubscribe_flush_and_one_gap() {
    let mut redis = RedisServer::start();
    cluster_suite::bus_down_for_two_seconds_local_goes_on_then_resubscribe_flush_and_one_gap(
        &mut redis,
    )
    .await;
}

/// A node connects its Redis before it binds its listener (`Server::with_handle`): while
/// Redis has not answered, the node holds no listening socket, so a client dialing it is
/// refused at once (and tries again on its own schedule) rather than left in a listen
/// queue nothing serves; and a node whose Redis never answers exits with an error,
/// never having listened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_binds_only_once_its_redis_answers() {
    use tokio::io::AsyncReadExt;

    // The check below sees a listening socket: this test's own.
    let own = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = own.local_addr().unwrap().port();
    assert!(listening(std::process::id()).contains(&port));
    drop(own);

    // A "Redis" that takes the node's connections and never answers them.
    let dir = std::env::temp_dir().join(format!(
        "jp-mute-redis-{}-{:016x}",
        std::process::id(),
        fastrand::u64(..)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("r.sock");
    let mute = tokio::net::UnixListener::bind(&socket).unwrap();
    let bin = common::example_binary("cluster_node", "--features redis ");
    let mut node = tokio::process::Command::new(bin)
        .args(["--listen", "127.0.0.1:0"])
        .args(["--redis", &format!("redis+unix://{}", socket.display())])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start cluster_node");

    // The node is dialing Redis: it listens nowhere yet.
    let (redis_link, _) = common::within(mute.accept()).await.unwrap();
    let pid = node.id().expect("the node runs");
    assert_eq!(
        listening(pid),
        Vec::<u16>::new(),
        "the node listened before its Redis had answered"
    );

    // Redis goes away without a word: the node gives up and exits, never having listened.
    drop(mute);
    drop(redis_link);
    let status = common::within(node.wait()).await.unwrap();
    assert!(
        !status.success(),
        "a node without its Redis exits with an error"
    );
    let mut out = String::new();
    node.stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .await
        .unwrap();
    assert!(!out.contains("listening on"), "stdout: {out}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The local ports of the TCP sockets process `pid` holds in the LISTEN state, as `ss
/// -ltnp` shows them: its descriptors' socket inodes among `/proc/net/tcp{,6}`'s lines
/// in state `0A`.
fn listening(pid: u32) -> Vec<u16> {
    let inodes: std::collections::HashSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("the process's descriptors")
        .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
        .filter_map(|link| {
            let inode = link.to_str()?.strip_prefix("socket:[")?.strip_suffix(']')?;
            Some(inode.to_owned())
        })
        .collect();
    let mut ports = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(table) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in table.lines().skip(1) {
            // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.get(3) != Some(&"0A") || !fields.get(9).is_some_and(|i| inodes.contains(*i)) {
                continue;
            }
            let port = fields[1].rsplit(':').next().unwrap_or_default();
            ports.push(u16::from_str_radix(port, 16).expect("a port in hex"));
        }
    }
    ports
}

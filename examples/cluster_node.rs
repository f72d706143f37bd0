//! Run with `cargo run --example cluster_node --features redis -- --listen 127.0.0.1:0
//! --redis redis+unix:///tmp/r.sock --node a` (or `--redis redis://127.0.0.1:6379`),
//! or on a Redis Cluster with `--features redis-cluster` and `--redis-cluster
//! redis://HOST:PORT[,redis://HOST:PORT...]` (some of its nodes, any one answering is
//! enough) in place of `--redis`. The first line on stdout is `listening on
//! ws://HOST:PORT node NAME`.
//!
//! One node of a cluster over Redis. Start several against one Redis (or one Redis
//! Cluster): broadcasts, topics and calls to a peer by address reach clients on every
//! node. Methods, with positional params:
//! - `whoami []` -> the caller's address, `"NAME/ID"`;
//! - `subscribe [topic]` -> `true` once the subscription is live across the cluster;
//!   `unsubscribe [topic]` -> `true`;
//! - `subscribe [topic, since_or_null, info]` -> as `subscribe [topic]`, and the caller
//!   joins the topic's presence with `info` (any JSON but `null`); with
//!   `"presence": true` in an info object it also gets `presence.join` and
//!   `presence.leave` notifications, params `{"topic": topic, "addr": "b/7", "info":
//!   info}`, for every other member of the topic on every node (the `presence` member is
//!   taken out of the info the others see). `since` is for topics with history and is
//!   ignored without `--history`;
//! - `presence [topic]` -> the members on every node, `[{"addr": "b/7", "info": ...}]`;
//!   `presence_count [topic]` -> how many (from memory on a node with subscribers);
//! - `publish [topic, payload]` -> how many of this node's subscribers it reached; every
//!   subscriber on every node gets `{"method": topic, "params": payload}`;
//! - `broadcast [payload]` -> every client on every node gets `{"method": "broadcast",
//!   "params": payload}`; answers this node's count;
//! - `call_peer [addr, method, params]` -> the peer's result, or its error as the error;
//! - `notify_peer [addr, method, params]` -> `true` once sent;
//! - `cluster_count []` -> connections across all live nodes.
//!
//! Errors between nodes (no such peer, node down, bus down, timeout) answer -32000 with
//! the reason as the message. `--heartbeat-ms N` (default 2000) sets the heartbeat; a
//! node is dropped after three missed ones. `--max-connections N` (default 10,000, the
//! `HandshakePolicy` default) caps this node's connections. Ctrl-C (SIGINT) or SIGTERM
//! says goodbye. The node connects to Redis before it listens: until Redis has answered
//! its port refuses connections, and a node whose Redis does not answer exits with an
//! error without ever having listened. Subscribers of a topic that may have missed
//! messages (Redis was down, say) get the notification `$/gap` with `{"topic": topic}`.
//!
//! `--history N`: every topic keeps its last N publications in Redis (at most 1 MiB of
//! data, 5 minutes), with offsets Redis gives, one order on every node. Then:
//! - every subscriber gets `{"method": topic, "params": {"offset": N, "data": payload}}`
//!   (any JSON value is a payload), from the bus, in offset order, on every node;
//! - `subscribe [topic]` -> `{"epoch": E, "offset": K}` (live from K + 1);
//!   `subscribe [topic, {"epoch": E, "offset": K0}]` -> `{"epoch": E, "offset": K,
//!   "recovered": true}` once K0 + 1 ..= K are queued, on whichever node (or
//!   `"recovered": false`, nothing replayed, when K0 is no longer kept or E is not the
//!   current epoch); `unsubscribe [topic]` -> `true`, or `false` if not subscribed;
//! - `subscribe [topic, since_or_null, info]` -> as above, and joins the topic's
//!   presence as without `--history`; `presence` and `presence_count` as there;
//! - `publish [topic, payload]` -> `{"offset": N}` once Redis recorded it (an error when
//!   it could not be: Redis down, too many waiting);
//! - a history Redis lost (it came back empty) reaches each subscriber as `$/gap` with
//!   `{"topic": T, "epoch": E2, "offset": K}`, once per topic; the next notification
//!   carries K + 1.

#[path = "common/cli.rs"]
mod cli;

use std::io::Write;
use std::time::Duration;

use jsonrpc_peer::cluster::{Cluster, ClusterBuilder, PeerAddr, RedisBackplane, RedisOptions};
use jsonrpc_peer::{
    Caller, Context, Error, HandshakePolicy, HistoryConfig, Peer, Router, RpcError, Server,
    ServerHandle, TopicMethods, Topics,
};
use serde::Deserialize;
use serde_json::{json, Value};

/// Local errors of a cross-node call, as the answer's error.
fn answer_error(e: Error) -> RpcError {
    match e {
        Error::Rpc { error: e, .. } => e,
        other => RpcError::new(-32000, other.to_string()),
    }
}

fn payload_ok(payload: &Value) -> Result<(), RpcError> {
    if payload.is_array() || payload.is_object() {
        Ok(())
    } else {
        Err(RpcError::invalid_params(
            "payload must be an array or an object",
        ))
    }
}

/// `subscribe`'s params: `[topic]`, `[topic, since_or_null]`, `[topic, since_or_null,
/// info]`.
#[derive(Deserialize)]
struct Subscribe {
    topic: String,
    #[serde(default, rename = "since")]
    _since: Option<Value>,
    #[serde(default)]
    info: Option<Value>,
}

/// The caller joins `topic`'s presence with `info` (without its `presence` member), and
/// watches it if that member is `true`.
async fn join_presence(
    topics: &Topics,
    peer: &Peer,
    topic: &str,
    info: Value,
) -> Result<(), RpcError> {
    let mut info = info;
    let watch = match info.as_object_mut().and_then(|o| o.remove("presence")) {
        Some(Value::Bool(watch)) => watch,
        Some(_) => return Err(RpcError::invalid_params("`presence` must be true or false")),
        None => false,
    };
    topics
        .join_presence(peer, topic, info)
        .await
        .map_err(answer_error)?;
    if watch {
        topics
            .watch_presence(peer, topic)
            .await
            .map_err(answer_error)?;
    }
    Ok(())
}

fn router(cluster: Cluster, history: bool) -> Router<Cluster> {
    let router = Router::with_state(cluster.clone()).method(
        "whoami",
        |cx: Context<Cluster>, (): ()| async move {
            Ok::<_, RpcError>(cx.state().addr(cx.peer()).to_string())
        },
    );
    let router = if history {
        // The ready-made subscribe (with presence), unsubscribe, presence and
        // presence_count; publish answers the offset.
        router
            .topics(TopicMethods::new(&cluster.topics()).presence())
            .method(
                "publish",
                |cx: Context<Cluster>, (topic, payload): (String, Value)| async move {
                    let published = cx.state().topics().publish(&topic, &payload).await;
                    let published = published.map_err(answer_error)?;
                    Ok::<_, RpcError>(json!({ "offset": published.offset }))
                },
            )
    } else {
        router
            .method(
                "subscribe",
                |cx: Context<Cluster>, Subscribe { topic, info, .. }: Subscribe| async move {
                    let topics = cx.state().topics();
                    topics
                        .subscribe_ready(cx.peer(), &topic)
                        .await
                        .map_err(answer_error)?;
                    if let Some(info) = info.filter(|i| !i.is_null()) {
                        join_presence(&topics, cx.peer(), &topic, info).await?;
                    }
                    Ok::<_, RpcError>(true)
                },
            )
            .method(
                "presence",
                |cx: Context<Cluster>, (topic,): (String,)| async move {
                    cx.state()
                        .topics()
                        .presence(&topic)
                        .await
                        .map_err(answer_error)
                },
            )
            .method(
                "presence_count",
                |cx: Context<Cluster>, (topic,): (String,)| async move {
                    cx.state()
                        .topics()
                        .presence_count(&topic)
                        .await
                        .map_err(answer_error)
                },
            )
            .method(
                "unsubscribe",
                |cx: Context<Cluster>, (topic,): (String,)| async move {
                    cx.state().topics().unsubscribe(cx.peer(), &topic);
                    Ok::<_, RpcError>(true)
                },
            )
            .method(
                "publish",
                |cx: Context<Cluster>, (topic, payload): (String, Value)| async move {
                    payload_ok(&payload)?;
                    cx.state()
                        .topics()
                        .publish(&topic, &payload)
                        .await
                        .map(|published| published.delivered)
                        .map_err(answer_error)
                },
            )
    };
    router
        .method(
            "broadcast",
            |cx: Context<Cluster>, (payload,): (Value,)| async move {
                payload_ok(&payload)?;
                cx.state()
                    .handle()
                    .broadcast("broadcast", &payload)
                    .map_err(answer_error)
            },
        )
        .method(
            "call_peer",
            |cx: Context<Cluster>, (addr, method, params): (PeerAddr, String, Value)| async move {
                cx.state()
                    .peer(&addr)
                    .call::<Value>(&method, params)
                    .await
                    .map_err(answer_error)
            },
        )
        .method(
            "notify_peer",
            |cx: Context<Cluster>, (addr, method, params): (PeerAddr, String, Value)| async move {
                cx.state()
                    .peer(&addr)
                    .notify(&method, params)
                    .await
                    .map_err(answer_error)?;
                Ok::<_, RpcError>(true)
            },
        )
        .method("cluster_count", |cx: Context<Cluster>, (): ()| async move {
            Ok::<_, RpcError>(cx.state().connection_count())
        })
}

/// A node on the Redis Cluster whose nodes `seeds` names (comma-separated).
#[cfg(feature = "redis-cluster")]
async fn on_redis_cluster(
    seeds: &str,
    handle: ServerHandle,
) -> Result<ClusterBuilder, Box<dyn std::error::Error>> {
    use jsonrpc_peer::cluster::RedisClusterBackplane;
    let seeds = seeds.split(',').map(str::trim).filter(|s| !s.is_empty());
    let bus = RedisClusterBackplane::connect(seeds, RedisOptions::default()).await?;
    Ok(Cluster::builder(bus, handle))
}

#[cfg(not(feature = "redis-cluster"))]
async fn on_redis_cluster(
    _seeds: &str,
    _handle: ServerHandle,
) -> Result<ClusterBuilder, Box<dyn std::error::Error>> {
    Err("--redis-cluster needs the `redis-cluster` feature: \
         cargo run --example cluster_node --features redis-cluster -- ..."
        .into())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = cli::Args::parse(
        "127.0.0.1:9000",
        &[
            "redis",
            "redis-cluster",
            "node",
            "heartbeat-ms",
            "max-connections",
            "history",
        ],
    )?;
    let history = args.number("history", 0)?;
    let seeds = args.text("redis-cluster", "");
    let heartbeat = Duration::from_millis(args.number("heartbeat-ms", 2000)?.max(10));
    let policy = HandshakePolicy::default();
    let max_connections = args.number("max-connections", policy.max_connections as u64)?;
    // The cluster is set up on a handle of its own first and the listener bound last:
    // while Redis connects nothing would accept, and the clients of a restarted node,
    // all dialing again, could overflow the listen queue (see `Server::with_handle`).
    let handle = ServerHandle::new();
    let builder = if seeds.is_empty() {
        let url = args.text("redis", "redis://127.0.0.1:6379");
        let bus = RedisBackplane::connect(&url, RedisOptions::default()).await?;
        Cluster::builder(bus, handle.clone())
    } else if !args.text("redis", "").is_empty() {
        return Err("give --redis or --redis-cluster, not both".into());
    } else {
        on_redis_cluster(&seeds, handle.clone()).await?
    };
    let mut builder = builder
        .heartbeat_interval(heartbeat)
        .gap_notification("$/gap");
    let name = args.text("node", "");
    if !name.is_empty() {
        builder = builder.node_id(name);
    }
    let cluster = builder.start().await?;
    if history > 0 {
        let kept = HistoryConfig::default().max_len(usize::try_from(history)?);
        cluster.topics().keep_history_for_all(kept);
    }
    let server = match Server::bind(args.listen.as_str()).await {
        Ok(server) => server
            .with_handle(handle)
            .handshake_policy(policy.max_connections(max_connections as usize)),
        Err(e) => {
            cluster.shutdown().await;
            return Err(e.into());
        }
    };
    println!(
        "listening on ws://{} node {}",
        server.local_addr()?,
        cluster.node_id()
    );
    std::io::stdout().flush()?;

    let serving = tokio::spawn(server.serve(router(cluster.clone(), history > 0)));
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
        done = serving => { done??; }
    }
    // Goodbye: the other nodes drop this one's connections from their counts at once.
    cluster.shutdown().await;
    Ok(())
}

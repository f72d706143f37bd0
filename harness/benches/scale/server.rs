//! `--serve ours|raw --listen ADDR [--backlog N]`: the one-process servers.
//! Each prints
//! `listening on ws://HOST:PORT` first (as examples/cluster_node.rs does) and exits
//! when its stdin closes. Both listen as `Server::bind` does (SO_REUSEADDR, a backlog
//! of `Server::DEFAULT_BACKLOG`, 4,096), or with `--backlog N` (ours through
//! `Server::bind_with_backlog`, the baseline on a `TcpSocket` of its own). Both run on tokio's multi-thread runtime with its default
//! workers (one per CPU), as `#[tokio::main]` and the cluster nodes do.
//!
//! - `ours`: jsonrpc-peer's `Server` with the default `PeerConfig` and
//!   `HandshakePolicy` except `max_connections` (raised from 10,000 to 100,000), and the
//!   methods of examples/cluster_node.rs the bench uses, without a cluster: `whoami []`,
//!   `subscribe [topic]` (`Topics::subscribe`), `publish [topic, payload]`
//!   (`Topics::publish`), `broadcast [payload]` (`ServerHandle::broadcast`, method
//!   `broadcast`).
//! - `raw`: the storm's baseline, the least a server can do: tokio's `TcpListener`,
//!   tokio-tungstenite's `accept_async_with_config` (the same buffer sizes as
//!   `PeerConfig::default()`), and every text frame with an `id` answered
//!   `{"jsonrpc":"2.0","result":true,"id":ID}` (parsed with serde_json). No registry,
//!   no policy, no topics.
//!
//! The storm with history (`--history`) serves with `examples/cluster_node.rs` instead,
//! whose history lives in Redis and so outlives a restart (scenarios.rs).

use std::io::Write as _;

use futures_util::{SinkExt, StreamExt};
use jsonrpc_peer::{Context, HandshakePolicy, Router, RpcError, Server, ServerHandle, Topics};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;

pub(crate) fn run(kind: &str, listen: &str, backlog: Option<u32>) {
    // The bench closes our stdin to stop us, or dies: either way we go.
    std::thread::spawn(|| {
        for line in std::io::stdin().lines() {
            if line.is_err() {
                break;
            }
        }
        std::process::exit(0);
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let served = runtime.block_on(async {
        match kind {
            "ours" => ours(listen, backlog).await,
            "raw" => raw(listen, backlog).await,
            other => panic!("--serve ours|raw, not {other}"),
        }
    });
    if let Err(e) = served {
        eprintln!("server: {e}");
        std::process::exit(1);
    }
}

fn listening(addr: std::net::SocketAddr) {
    println!("listening on ws://{addr}");
    let _ = std::io::stdout().flush();
}

#[derive(Clone)]
struct State {
    topics: Topics,
    handle: ServerHandle,
}

fn rpc_error(e: jsonrpc_peer::Error) -> RpcError {
    RpcError::new(-32000, e.to_string())
}

/// A listener with a backlog of `backlog`, `Server::bind`'s by default: the
/// baseline's, so that both servers meet a herd with the same queue.
async fn listener(listen: &str, backlog: Option<u32>) -> std::io::Result<TcpListener> {
    let addr: std::net::SocketAddr = listen.parse().map_err(std::io::Error::other)?;
    let socket = TcpSocket::new_v4()?;
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(backlog.unwrap_or(Server::DEFAULT_BACKLOG))
}

async fn ours(listen: &str, backlog: Option<u32>) -> Result<(), Box<dyn std::error::Error>> {
    let backlog = backlog.unwrap_or(Server::DEFAULT_BACKLOG);
    let server = Server::bind_with_backlog(listen, backlog)
        .await?
        .handshake_policy(HandshakePolicy::default().max_connections(100_000));
    let state = State {
        topics: Topics::new(),
        handle: server.handle(),
    };
    let router = Router::with_state(state)
        .method("whoami", |cx: Context<State>, (): ()| async move {
            Ok::<_, RpcError>(cx.peer().id().to_string())
        })
        .method(
            "subscribe",
            |cx: Context<State>, (topic,): (String,)| async move {
                cx.state().topics.subscribe(cx.peer(), &topic);
                Ok::<_, RpcError>(true)
            },
        )
        .method(
            "publish",
            |cx: Context<State>, (topic, payload): (String, Value)| async move {
                cx.state()
                    .topics
                    .publish(&topic, &payload)
                    .await
                    .map(|published| published.delivered)
                    .map_err(rpc_error)
            },
        )
        .method(
            "broadcast",
            |cx: Context<State>, (payload,): (Value,)| async move {
                cx.state()
                    .handle
                    .broadcast("broadcast", &payload)
                    .map_err(rpc_error)
            },
        );
    listening(server.local_addr()?);
    server.serve(router).await?;
    Ok(())
}

/// `PeerConfig::default()`'s buffers, for the raw server.
fn ws_config() -> WebSocketConfig {
    WebSocketConfig::default()
        .read_buffer_size(4 * 1024)
        .write_buffer_size(64 * 1024)
        .max_message_size(Some(1 << 20))
        .max_frame_size(Some(1 << 20))
}

async fn raw(listen: &str, backlog: Option<u32>) -> Result<(), Box<dyn std::error::Error>> {
    let listener = listener(listen, backlog).await?;
    listening(listener.local_addr()?);
    loop {
        let (stream, _) = listener.accept().await?;
        tokio::spawn(raw_connection(stream));
    }
}

#[derive(Deserialize)]
struct RawCall<'a> {
    #[serde(borrow)]
    id: Option<&'a RawValue>,
}

async fn raw_connection(stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let Ok(mut ws) = tokio_tungstenite::accept_async_with_config(stream, Some(ws_config())).await
    else {
        return;
    };
    while let Some(Ok(message)) = ws.next().await {
        let Message::Text(text) = message else {
            continue;
        };
        let Ok(RawCall { id: Some(id) }) = serde_json::from_str(&text) else {
            continue;
        };
        let answer = format!(r#"{{"jsonrpc":"2.0","result":true,"id":{}}}"#, id.get());
        if ws.send(Message::text(answer)).await.is_err() {
            return;
        }
    }
}

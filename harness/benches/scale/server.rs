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
//! - `raw-push`: the one-node scenario's baseline, `raw` with what a broadcast needs
//!   and nothing more: each connection's task also takes frames from a queue of its
//!   own (a tokio channel of 1,024, as the rpc bench's baseline has), every queue in
//!   one list under a mutex, and `broadcast [payload]` serializes the notification
//!   `{"jsonrpc":"2.0","method":"broadcast","params":payload}` once and `try_send`s
//!   the same bytes to every queue (answered with how many took it). Frames are fed as
//!   they come and flushed when none is ready. Kept apart from `raw` so that the
//!   storm's baseline stays the least a server can do.
//!
//! The storm with history (`--history`) serves with `examples/cluster_node.rs` instead,
//! whose history lives in Redis and so outlives a restart (scenarios.rs).

use std::io::Write as _;
use std::sync::{Arc, Mutex};
use std::task::Poll;

use futures_util::{FutureExt, SinkExt, StreamExt};
use jsonrpc_peer::{Context, HandshakePolicy, Router, RpcError, Server, ServerHandle, Topics};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{Message, Utf8Bytes};
use tokio_tungstenite::WebSocketStream;

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
            "raw-push" => raw_push(listen, backlog).await,
            other => panic!("--serve ours|raw|raw-push, not {other}"),
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

/// Frames one `raw-push` connection's queue holds (the rpc bench's baseline's).
const PUSH_QUEUE: usize = 1024;

/// Every `raw-push` connection's queue.
type Queues = Arc<Mutex<Vec<mpsc::Sender<Utf8Bytes>>>>;

async fn raw_push(listen: &str, backlog: Option<u32>) -> Result<(), Box<dyn std::error::Error>> {
    let listener = listener(listen, backlog).await?;
    listening(listener.local_addr()?);
    let queues = Queues::default();
    loop {
        let (stream, _) = listener.accept().await?;
        tokio::spawn(raw_push_connection(stream, queues.clone()));
    }
}

#[derive(Deserialize)]
struct RawRequest<'a> {
    #[serde(borrow)]
    id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    method: Option<&'a str>,
    #[serde(borrow, default)]
    params: Option<&'a RawValue>,
}

/// Queues `payload`'s notification, serialized once, on every connection; returns how
/// many queues took it.
fn broadcast(queues: &Queues, payload: &RawValue) -> usize {
    let frame = Utf8Bytes::from(format!(
        r#"{{"jsonrpc":"2.0","method":"broadcast","params":{}}}"#,
        payload.get()
    ));
    let mut queues = queues.lock().expect("not poisoned");
    queues.retain(|q| !q.is_closed());
    queues
        .iter()
        .filter(|q| q.try_send(frame.clone()).is_ok())
        .count()
}

enum Event {
    Frame(Option<Result<Message, tokio_tungstenite::tungstenite::Error>>),
    Push(Utf8Bytes),
}

/// The next incoming frame or queued push, whichever is ready first. This and the
/// loop in `raw_push_connection` are the rpc bench's baseline's (`benches/rpc/raw.rs`),
/// copied rather than shared: moved into a module of both benches, that baseline ran
/// 4-6% slower in (b) and (d) (four alternated pairs), and its figures must stay what
/// they were.
fn next_event<'a>(
    ws: &'a mut WebSocketStream<TcpStream>,
    pushes: &'a mut mpsc::Receiver<Utf8Bytes>,
) -> impl std::future::Future<Output = Event> + 'a {
    std::future::poll_fn(move |cx| {
        if let Poll::Ready(frame) = ws.poll_next_unpin(cx) {
            return Poll::Ready(Event::Frame(frame));
        }
        match pushes.poll_recv(cx) {
            Poll::Ready(Some(frame)) => Poll::Ready(Event::Push(frame)),
            _ => Poll::Pending,
        }
    })
}

async fn raw_push_connection(stream: TcpStream, queues: Queues) {
    let _ = stream.set_nodelay(true);
    let Ok(mut ws) = tokio_tungstenite::accept_async_with_config(stream, Some(ws_config())).await
    else {
        return;
    };
    let (tx, mut pushes) = mpsc::channel(PUSH_QUEUE);
    queues.lock().expect("not poisoned").push(tx);
    loop {
        let event = match next_event(&mut ws, &mut pushes).now_or_never() {
            Some(event) => event,
            None => {
                if ws.flush().await.is_err() {
                    return;
                }
                next_event(&mut ws, &mut pushes).await
            }
        };
        let frame = match event {
            Event::Frame(Some(Ok(Message::Text(text)))) => {
                let Ok(RawRequest {
                    id: Some(id),
                    method,
                    params,
                }) = serde_json::from_str(&text)
                else {
                    continue;
                };
                let payload =
                    params.and_then(|p| serde_json::from_str::<(&RawValue,)>(p.get()).ok());
                let result = match (method, payload) {
                    (Some("broadcast"), Some((payload,))) => {
                        broadcast(&queues, payload).to_string()
                    }
                    _ => "true".to_owned(),
                };
                Utf8Bytes::from(format!(
                    r#"{{"jsonrpc":"2.0","result":{result},"id":{}}}"#,
                    id.get()
                ))
            }
            Event::Frame(Some(Ok(Message::Close(_)) | Err(_)) | None) => return,
            Event::Frame(Some(Ok(_))) => continue,
            Event::Push(frame) => frame,
        };
        if ws.feed(Message::Text(frame)).await.is_err() {
            return;
        }
    }
}

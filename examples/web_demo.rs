//! Run with `cargo run --example web_demo --features axum`, then open http://127.0.0.1:8080
//! (`--listen ADDR` to change the address; port 0 picks a free one; `--allow-origin
//! URL` lets pages from another origin connect, besides the ones this demo serves). The first line on
//! stdout is `listening on http://HOST:PORT (WebSocket: ws://HOST:PORT/rpc)`. Bound to
//! every interface (`--listen 0.0.0.0:PORT`), the demo knows its page by the loopback
//! names only: a browser that opens it at one of the machine's other addresses needs
//! that origin named (`--allow-origin http://192.0.2.7:PORT`), and the demo says so on
//! stderr.
//!
//! One axum app serves the page (`web-demo/`, with the browser peer's package `js/src/`
//! at `/js/`) and the JSON-RPC endpoint (`/rpc`). The browser calls the server
//! (`subtract`, `sum`, `get_data`, `chat.send`), the server pushes `metrics` to every
//! page four times a second and publishes each chat line on the topic `chat.message`,
//! and `demo.ask_browser` makes the server call the page's own `ui.describe` before it
//! answers: a nested round trip. `demo.long_task {"seconds": S}` runs S seconds,
//! reporting progress to a caller that asks for it, and answers `"done"` (or `-32800`
//! when its caller cancels it); `demo.tasks_running []` says how many run now.
//!
//! The chat topic keeps its last lines (`--chat-history N`, default 1,000; 0: none), so a
//! page whose link dropped subscribes again from its last offset
//! (`subscribe ["chat.message", {"epoch":E,"offset":K}]`) and gets exactly the lines it
//! missed; where that is no longer possible it is told so and reloads `chat.recent`.
//!
//! The chat shows who is in it, live: each page subscribes with its name as presence
//! info and asks for joins and leaves (`subscribe ["chat.message", position_or_null,
//! {"name": N, "presence": true}]`), reads `presence ["chat.message"]` once per
//! connection, and then applies each `presence.join` / `presence.leave`
//! (`{"topic","addr","info"}`). Across servers the list holds every server's pages.
//!
//! With `--features axum,metrics` the demo also serves `/metrics`: every connection's
//! calls and notifications (the `Metrics` call layer) and the engine's own counters, in
//! the Prometheus text format (`curl http://127.0.0.1:8080/metrics`). The recorder
//! behind it is `examples/common/prometheus.rs`, made of the `metrics` facade alone.
//!
//! Across servers: `cargo run --example web_demo --features axum,redis -- --redis URL` (URL
//! `redis://HOST:PORT` or `redis+unix:///path`) joins a cluster over Redis; run two on
//! two ports and chat lines and "pages connected" span both. The chat's history lives in
//! Redis there, so a page that comes back to either server gets the lines it missed; when
//! it cannot, it reloads `chat.recent`, which holds the lines this server published.

#[path = "common/cli.rs"]
mod cli;
#[cfg(feature = "metrics")]
#[path = "common/prometheus.rs"]
mod prometheus;
#[path = "common/spec_methods.rs"]
mod spec_methods;
#[path = "common/web_api.rs"]
mod web_api;

use std::collections::VecDeque;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use jsonrpc_peer::axum::Endpoint;
use jsonrpc_peer::{
    Caller, Context, HandshakePolicy, HistoryConfig, Method, Notification, PeerConfig, Router,
    RpcError, ServerHandle, TopicMethods, Topics,
};
use serde::Deserialize;
use serde_json::json;
use tower_http::services::ServeDir;
use web_api::{
    AskAnswer, AskBrowser, ChatBroadcast, ChatMessage, ChatRecent, ChatSend, Delivered, Metrics,
    MetricsPush, RecentChat, RecentLine, UiDescribe,
};

/// The chat's topic: each line is published on it.
const CHAT: &str = ChatBroadcast::NAME;
/// How many lines `chat.recent` returns.
const RECENT: usize = 50;

/// What the demo's handlers share: the long tasks' count and the chat.
struct Demo {
    /// How many `demo.long_task` calls run now, on every connection.
    tasks: Arc<AtomicUsize>,
    topics: Topics,
    /// The chat's last lines, for `chat.recent`, and the epoch their offsets are in.
    /// Its lock is held while a line is published, so the list has every line published
    /// here, in offset order; a new epoch (the history lost: Redis came back empty)
    /// starts it afresh.
    chat: tokio::sync::Mutex<(Option<String>, VecDeque<RecentLine>)>,
}

#[derive(Deserialize)]
struct LongTask {
    seconds: f64,
}

/// Counts one running long task for as long as it lives: finished or cancelled (its
/// future dropped), the count goes down.
struct TaskCount(Arc<AtomicUsize>);

impl TaskCount {
    fn new(tasks: &Arc<AtomicUsize>) -> Self {
        tasks.fetch_add(1, Ordering::SeqCst);
        TaskCount(tasks.clone())
    }
}

impl Drop for TaskCount {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or_default()
}

fn invalid(reason: &str) -> RpcError {
    RpcError::invalid_params(reason)
}

fn router(topics: Topics) -> Router<Demo> {
    let tasks = Arc::new(AtomicUsize::new(0));
    // `subscribe` / `unsubscribe` for the chat topic: `subscribe ["chat.message", position?,
    // info?]`, and its presence: `presence` and `presence_count`.
    let chat_topic = TopicMethods::new(&topics).only([CHAT]).presence();
    let demo = Demo {
        tasks,
        topics,
        chat: tokio::sync::Mutex::new((None, VecDeque::with_capacity(RECENT))),
    };
    spec_methods::with_spec_methods(Router::with_state(demo))
        .topics(chat_topic)
        // A long call: progress ten times a second to a caller that asked; stopped
        // (and answered -32800 by the engine) when its caller cancels it.
        .method(
            "demo.long_task",
            |cx: Context<Demo>, task: LongTask| async move {
                if !(task.seconds > 0.0 && task.seconds <= 600.0) {
                    return Err(invalid("seconds must be more than 0 and at most 600"));
                }
                let _counted = TaskCount::new(&cx.state().tasks);
                let total = Duration::from_secs_f64(task.seconds);
                let started = tokio::time::Instant::now();
                let mut tick = tokio::time::interval(Duration::from_millis(100));
                loop {
                    tick.tick().await;
                    let done = started.elapsed().min(total);
                    let fraction = done.as_secs_f64() / total.as_secs_f64();
                    let progress = json!({
                        "fraction": (fraction * 1000.0).round() / 1000.0,
                        "elapsed_ms": done.as_millis() as u64,
                    });
                    if cx.progress(progress).await.is_err() {
                        break;
                    }
                    if done >= total {
                        break;
                    }
                }
                Ok("done")
            },
        )
        .method(
            "demo.tasks_running",
            |cx: Context<Demo>, (): ()| async move {
                Ok::<_, RpcError>(cx.state().tasks.load(Ordering::SeqCst))
            },
        )
        // The server needs the browser's answer before it can answer: it calls the
        // page that called it, while that page's own call is still waiting.
        .handle(AskBrowser, |cx, ()| async move {
            let started = Instant::now();
            // `?` turns a failed call back into the caller's -32603 (see `RpcError`'s
            // `From<Error>`): "`ui.describe`: no answer within 10s" in its data.
            let answer = cx
                .peer()
                .request(UiDescribe, &())
                .timeout(Duration::from_secs(10))
                .await?;
            Ok(AskAnswer {
                asked: UiDescribe::NAME.into(),
                answer,
                elapsed_ms: started.elapsed().as_secs_f64() * 1000.0,
            })
        })
        .handle(ChatSend, |cx, line| async move {
            let name = line.name.trim();
            let text = line.text.trim();
            if name.is_empty() || name.chars().count() > 40 {
                return Err(invalid("name must have 1 to 40 characters"));
            }
            if text.is_empty() || text.chars().count() > 500 {
                return Err(invalid("text must have 1 to 500 characters"));
            }
            let message = ChatMessage {
                name: name.into(),
                text: text.into(),
                at_ms: now_ms(),
            };
            let mut chat = cx.state().chat.lock().await;
            // With history, Ok means recorded: a page that is away gets it when it resumes.
            let published = cx
                .state()
                .topics
                .publish(CHAT, &message)
                .await
                .map_err(RpcError::internal_error)?;
            let (epoch, recent) = &mut *chat;
            let now = cx.state().topics.position(CHAT).map(|p| p.epoch);
            if *epoch != now {
                recent.clear();
                *epoch = now;
            }
            if recent.len() == RECENT {
                recent.pop_front();
            }
            recent.push_back(RecentLine {
                offset: published.offset,
                name: message.name,
                text: message.text,
                at_ms: message.at_ms,
            });
            Ok(Delivered {
                delivered: published.delivered,
            })
        })
        .handle(ChatRecent, |cx, ()| async move {
            let chat = cx.state().chat.lock().await;
            let epoch = cx.state().topics.position(CHAT).map(|p| p.epoch);
            // Only lines whose offsets are in the epoch named.
            let lines = if chat.0 == epoch {
                chat.1.iter().cloned().collect()
            } else {
                Vec::new()
            };
            Ok(RecentChat { epoch, lines })
        })
}

/// How many pages are connected: to this server, or to every server of the cluster.
type PageCount = Arc<dyn Fn() -> usize + Send + Sync>;

/// Pushes `metrics` to every page of this server four times a second: a smooth wave
/// with some noise. In a cluster each server pushes to its own pages only
/// (`broadcast_local`: a broadcast would reach every server's pages), with the
/// cluster-wide page count; a page that does not read is closed (1008) either way.
async fn push_metrics(pages: ServerHandle, count: PageCount) {
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    let start = Instant::now();
    for seq in 0u64.. {
        tick.tick().await;
        if pages.connection_count() == 0 {
            continue;
        }
        let t = start.elapsed().as_secs_f64();
        let value = 50.0 + 30.0 * (t / 2.0).sin() + 8.0 * (t * 1.7).sin() + fastrand::f64() * 4.0;
        let metrics = Metrics {
            seq,
            time_ms: now_ms(),
            connections: count(),
            value: (value * 100.0).round() / 100.0,
        };
        if let Err(e) = pages.broadcast_local(MetricsPush, &metrics) {
            eprintln!("metrics push failed: {e}");
        }
    }
}

/// The origins of the pages this demo serves at `addr`, and those given with
/// `--allow-origin` (repeat it, or separate with commas).
fn origins(addr: SocketAddr, args: &cli::Args) -> Vec<String> {
    let port = addr.port();
    let mut origins = vec![format!("http://{addr}")];
    if addr.ip().is_loopback() || addr.ip().is_unspecified() {
        origins.push(format!("http://localhost:{port}"));
        origins.push(format!("http://127.0.0.1:{port}"));
        origins.push(format!("http://[::1]:{port}"));
    }
    for extra in args.all("allow-origin") {
        origins.extend(extra.split(',').map(|o| o.trim().to_owned()));
    }
    origins
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let flags: &[&str] = if cfg!(feature = "redis") {
        &["allow-origin", "chat-history", "redis"]
    } else {
        &["allow-origin", "chat-history"]
    };
    let args = cli::Args::parse("127.0.0.1:8080", flags)?;
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let site = root.join("web-demo");
    // The browser peer is the jsonrpc-peer package: its modules (js/src, nothing else of
    // the package) at /js/, where the page's import map points.
    let package = root.join("js").join("src");

    let listener = tokio::net::TcpListener::bind(args.listen.as_str()).await?;
    let addr = listener.local_addr()?;

    // With the `metrics` feature: the recorder first, then the layer that counts every
    // call (which also turns the engine's own metrics on), served at /metrics.
    #[cfg(feature = "metrics")]
    let prometheus = prometheus::Prometheus::install()?;
    #[allow(unused_mut)]
    let mut peer_config = PeerConfig::default();
    #[cfg(feature = "metrics")]
    {
        peer_config = peer_config.layer(jsonrpc_peer::metrics::Metrics::new());
    }

    let pages = ServerHandle::new();
    let topics = Topics::new();
    let chat_history = args.number("chat-history", 1000)?;
    // Changed only when the `redis` feature joins a cluster.
    #[allow(unused_mut)]
    let mut count: PageCount = {
        let pages = pages.clone();
        Arc::new(move || pages.connection_count())
    };
    // With a cluster attached, `pages.broadcast` (chat lines) reaches every server's pages.
    #[cfg(feature = "redis")]
    let _cluster = {
        use jsonrpc_peer::cluster::{Cluster, RedisBackplane, RedisOptions};
        let url = args.text("redis", "");
        if url.is_empty() {
            None
        } else {
            let bus = RedisBackplane::connect(&url, RedisOptions::default()).await?;
            // Chat lines reach every node's pages; a bus outage reaches them as `$/gap`
            // (the page reloads the chat).
            let cluster = Cluster::builder(bus, pages.clone())
                .topics(topics.clone())
                .gap_notification("$/gap")
                .start()
                .await?;
            let across = cluster.clone();
            count = Arc::new(move || across.connection_count());
            Some(cluster)
        }
    };
    // The chat keeps its last lines, so that a page that comes back gets what it missed;
    // in a cluster they live in Redis, so a page that comes back to the other server
    // gets them too.
    if chat_history > 0 {
        let lines = usize::try_from(chat_history).unwrap_or(usize::MAX);
        topics.keep_history(CHAT, HistoryConfig::default().max_len(lines));
    }
    // What the demo serves, calls and pushes, checked now and served as rpc.discover.
    let api = web_api::web_api();
    let router = router(topics);
    api.check(&router)?;
    let endpoint = Endpoint::new(router.discover(&api))
        .with_handle(pages.clone())
        .peer_config(peer_config)
        // Only pages this demo serves (and any named with --allow-origin) may open
        // the socket: a page on another site could otherwise act as its visitor.
        .handshake_policy(HandshakePolicy::default().allowed_origins(origins(addr, &args)));
    let app = axum::Router::new()
        .route("/rpc", endpoint.into_route())
        .nest_service("/js", ServeDir::new(&package))
        .fallback_service(ServeDir::new(&site));
    #[cfg(feature = "metrics")]
    let app = app.route(
        "/metrics",
        axum::routing::get(move || {
            let text = prometheus.render();
            async move { ([("content-type", "text/plain; version=0.0.4")], text) }
        }),
    );

    println!("listening on http://{addr} (WebSocket: ws://{addr}/rpc)");
    if addr.ip().is_unspecified() {
        eprintln!(
            "note: pages opened at this machine's other addresses may open the socket only \
             once named with --allow-origin http://HOST:{}",
            addr.port()
        );
    }
    // Tools start this example and read the line above: make sure it leaves now.
    std::io::stdout().flush()?;

    tokio::spawn(push_metrics(pages.clone(), count));
    let shutdown = {
        let pages = pages.clone();
        async move {
            let _ = tokio::signal::ctrl_c().await;
            pages.shutdown().await;
        }
    };
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(shutdown)
    .await?;
    Ok(())
}

//! `--fleet`: a process of K raw tokio-tungstenite clients, each on a TCP socket bound
//! to one of the given loopback source addresses (one address has only some 28,000
//! ephemeral ports), told what to do over stdin, one command at a time, each with a
//! deadline, each answered by one line on stdout:
//!
//! | command | answer |
//! |---|---|
//! | `connect MS [INFLIGHT [quiet]]` | `connected CONN CALLED SUBSCRIBED T_CONN T_CALL T_SUB RETRIES ERRORS RECOVERED REPLAYED` |
//! | `subscribe TOPIC MS` | `subscribed N T_LAST ERRORS` |
//! | `await SEQ MS` | `got SEQ N T_LAST GAPS` |
//! | `dropped MS` | `dropped N` |
//!
//! `connect` (re)connects every client that is not connected, at most INFLIGHT (or
//! `--inflight`) of them in their TCP connect and handshake at once; each then makes its one call
//! (`--call METHOD`, params `[]`) and, once a topic was given, subscribes (`subscribe
//! [TOPIC]`) again; with `quiet`, they only connect (no call, no subscribe: the
//! server's handshake path alone). It answers when every client has done all that, or at its
//! deadline, with how many did each step and when the last did (nanoseconds since the
//! Unix epoch). On a topic with history (its first `subscribe` answered a position,
//! `{"epoch":E,"offset":K}`), a client resubscribes from that first position every
//! time (`subscribe [TOPIC, {"epoch":E,"offset":K}]`), so whatever was published since
//! is replayed to it before its answer: RECOVERED counts the answers with
//! `"recovered":true`, REPLAYED the notifications with an offset, in this round. A refused or failed attempt is retried after 10 to 50 ms (counted in
//! RETRIES), 50 times at most (then counted in ERRORS, as error answers are).
//! `await` waits until every client has a notification whose params are `[SEQ]` (a
//! broadcast or a topic message), and says how many `$/gap` notifications came since
//! the last `await` (a cluster node tells its subscribers so when it may have missed
//! messages); `dropped` until every connection has ended (its server was killed). The process ends when stdin closes.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use crate::procs::unix_nanos;

type Ws = WebSocketStream<TcpStream>;

/// How many times one client tries to (re)connect before it gives up.
const ATTEMPTS: u32 = 50;
/// One TCP connect and handshake at most.
const DIAL_TIMEOUT: Duration = Duration::from_secs(10);

/// What the fleet was started with.
pub(crate) struct FleetArgs {
    pub(crate) url: String,
    pub(crate) server: SocketAddr,
    pub(crate) sources: Vec<Ipv4Addr>,
    pub(crate) count: usize,
    pub(crate) call: String,
    pub(crate) inflight: usize,
}

impl FleetArgs {
    pub(crate) fn parse(args: &[String]) -> FleetArgs {
        let value = |flag: &str| {
            let i = args.iter().position(|a| a == flag)?;
            args.get(i + 1).cloned()
        };
        let url = value("--url").expect("--url ws://HOST:PORT");
        let server = url
            .trim_start_matches("ws://")
            .trim_end_matches('/')
            .parse()
            .unwrap_or_else(|e| panic!("--url {url}: {e}"));
        let sources = value("--sources")
            .unwrap_or_else(|| "127.0.0.1".to_owned())
            .split(',')
            .map(|a| a.parse().unwrap_or_else(|e| panic!("--sources {a}: {e}")))
            .collect();
        let number = |flag: &str, default: usize| {
            value(flag).map_or(default, |v| v.parse().expect("a number"))
        };
        FleetArgs {
            url,
            server,
            sources,
            count: number("--count", 100),
            call: value("--call").unwrap_or_else(|| "whoami".to_owned()),
            inflight: number("--inflight", 256).max(1),
        }
    }
}

/// How many clients did one step, and when the last of them did.
#[derive(Default, Clone, Copy)]
struct Step {
    count: usize,
    last: u128,
}

impl Step {
    fn hit(&mut self) {
        self.count += 1;
        self.last = self.last.max(unix_nanos());
    }
}

#[derive(Default)]
struct State {
    connected: Step,
    called: Step,
    subscribed: Step,
    dropped: usize,
    retries: u64,
    errors: u64,
    /// Error answers to `subscribe`.
    subscribe_errors: u64,
    /// `$/gap` notifications since the last `await`.
    gaps: u64,
    /// Resuming `subscribe` answers with `"recovered":true` in this round.
    recovered: u64,
    /// Notifications of a topic with history (params `{"offset":N,...}`) in this round.
    replayed: u64,
    /// This round's clients only connect (`connect ... quiet`).
    quiet: bool,
    /// Per sequence number: how many clients have it, and when the last got it.
    arrivals: std::collections::HashMap<u64, Step>,
}

struct Fleet {
    args: FleetArgs,
    state: Mutex<State>,
    /// Bumped by each `connect`: a client that is not connected dials again.
    round: watch::Sender<u64>,
    /// The topic every client subscribes to, once given.
    topic: watch::Sender<Option<String>>,
    /// The dials in flight at once, for this round.
    dialing: Mutex<Arc<Semaphore>>,
}

impl Fleet {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("not poisoned")
    }
}

/// Runs the fleet until stdin closes.
pub(crate) fn run(args: FleetArgs) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async move {
        let fleet = Arc::new(Fleet {
            dialing: Mutex::new(Arc::new(Semaphore::new(args.inflight))),
            args,
            state: Mutex::default(),
            round: watch::Sender::new(0),
            topic: watch::Sender::new(None),
        });
        for i in 0..fleet.args.count {
            tokio::spawn(client(i, fleet.clone()));
        }
        let (tx, mut commands) = tokio::sync::mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for line in std::io::stdin().lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        while let Some(line) = commands.recv().await {
            let words: Vec<&str> = line.split_whitespace().collect();
            let ms = |i: usize| {
                let ms = words.get(i).and_then(|w| w.parse().ok()).unwrap_or(60_000);
                Instant::now() + Duration::from_millis(ms)
            };
            let answer = match words.first().copied() {
                Some("connect") => {
                    let inflight = words.get(2).and_then(|w| w.parse().ok());
                    let inflight = inflight.unwrap_or(fleet.args.inflight).max(1);
                    *fleet.dialing.lock().expect("not poisoned") =
                        Arc::new(Semaphore::new(inflight));
                    connect(&fleet, ms(1), words.get(3) == Some(&"quiet")).await
                }
                Some("subscribe") => {
                    let topic = words.get(1).copied().unwrap_or("scale").to_owned();
                    fleet.topic.send_replace(Some(topic));
                    let n = fleet.args.count;
                    wait(ms(2), || fleet.state().subscribed.count >= n).await;
                    let state = fleet.state();
                    let s = state.subscribed;
                    format!(
                        "subscribed {} {} {}",
                        s.count, s.last, state.subscribe_errors
                    )
                }
                Some("await") => {
                    let seq: u64 = words.get(1).and_then(|w| w.parse().ok()).unwrap_or(0);
                    let n = fleet.args.count;
                    let got = || {
                        fleet
                            .state()
                            .arrivals
                            .get(&seq)
                            .copied()
                            .unwrap_or_default()
                    };
                    wait(ms(2), || got().count >= n).await;
                    let s = got();
                    let mut state = fleet.state();
                    state.arrivals.remove(&seq);
                    let gaps = std::mem::take(&mut state.gaps);
                    format!("got {seq} {} {} {gaps}", s.count, s.last)
                }
                Some("dropped") => {
                    let n = fleet.args.count;
                    wait(ms(1), || fleet.state().dropped >= n).await;
                    format!("dropped {}", fleet.state().dropped)
                }
                _ => break,
            };
            println!("{answer}");
        }
    });
}

/// `connect`: a new round; waits until every client has connected, called and (with a
/// topic) subscribed, or `deadline`. `quiet`: until every client has connected (and
/// they do nothing more).
async fn connect(fleet: &Fleet, deadline: Instant, quiet: bool) -> String {
    {
        let mut state = fleet.state();
        let (connected, called, subscribed) = (Step::default(), Step::default(), Step::default());
        state.connected = connected;
        state.called = called;
        state.subscribed = subscribed;
        state.dropped = 0;
        state.retries = 0;
        state.errors = 0;
        state.recovered = 0;
        state.replayed = 0;
        state.quiet = quiet;
    }
    fleet.round.send_modify(|r| *r += 1);
    let n = fleet.args.count;
    let subscribing = fleet.topic.borrow().is_some();
    wait(deadline, || {
        let s = fleet.state();
        match quiet {
            true => s.connected.count >= n,
            false => s.called.count >= n && (!subscribing || s.subscribed.count >= n),
        }
    })
    .await;
    let s = fleet.state();
    format!(
        "connected {} {} {} {} {} {} {} {} {} {}",
        s.connected.count,
        s.called.count,
        s.subscribed.count,
        s.connected.last,
        s.called.last,
        s.subscribed.last,
        s.retries,
        s.errors,
        s.recovered,
        s.replayed
    )
}

/// Polls `done` every 2 ms until it holds or `deadline` passes. The figures are the
/// times the clients recorded, so the polling step does not enter them.
async fn wait(deadline: Instant, done: impl Fn() -> bool) {
    while !done() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// One client for the fleet's whole life: dials in each round it is not connected,
/// then reads until its connection ends.
async fn client(i: usize, fleet: Arc<Fleet>) {
    let mut rounds = fleet.round.subscribe();
    let mut topics = fleet.topic.subscribe();
    let source = fleet.args.sources[i % fleet.args.sources.len()];
    let mut done_round = 0;
    // The position the first `subscribe` answered, on a topic with history.
    let mut position = None;
    loop {
        // Waits for a round this client has not dialed in.
        while *rounds.borrow_and_update() <= done_round {
            if rounds.changed().await.is_err() {
                return;
            }
        }
        done_round = *rounds.borrow();
        let Some(ws) = dial_retrying(&fleet, source).await else {
            continue;
        };
        let quiet = {
            let mut state = fleet.state();
            state.connected.hit();
            state.quiet
        };
        // A topic given before this connection is subscribed to after the call.
        topics.mark_changed();
        session(ws, &fleet, &mut topics, &mut position, quiet).await;
        fleet.state().dropped += 1;
    }
}

async fn dial_retrying(fleet: &Fleet, source: Ipv4Addr) -> Option<Ws> {
    for _ in 0..ATTEMPTS {
        let dialing = fleet.dialing.lock().expect("not poisoned").clone();
        let permit = dialing.acquire_owned().await.ok()?;
        let dialed = tokio::time::timeout(DIAL_TIMEOUT, dial(fleet, source)).await;
        drop(permit);
        if let Ok(Ok(ws)) = dialed {
            return Some(ws);
        }
        fleet.state().retries += 1;
        let pause = Duration::from_millis(fastrand::u64(10..=50));
        tokio::time::sleep(pause).await;
    }
    fleet.state().errors += 1;
    None
}

/// The client side of `PeerConfig::default()`'s buffers (4 KiB read buffer), so that
/// 16,000 clients in one process stay small.
fn ws_config() -> WebSocketConfig {
    WebSocketConfig::default()
        .read_buffer_size(4 * 1024)
        .write_buffer_size(0)
        .max_message_size(Some(1 << 20))
        .max_frame_size(Some(1 << 20))
}

async fn dial(fleet: &Fleet, source: Ipv4Addr) -> std::io::Result<Ws> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::V4(SocketAddrV4::new(source, 0)))?;
    let stream = socket.connect(fleet.args.server).await?;
    stream.set_nodelay(true)?;
    let (ws, _) =
        tokio_tungstenite::client_async_with_config(&fleet.args.url, stream, Some(ws_config()))
            .await
            .map_err(std::io::Error::other)?;
    Ok(ws)
}

/// What the client reads: an answer (by id) or a notification with params `[SEQ]`.
#[derive(Deserialize)]
struct Incoming<'a> {
    #[serde(default)]
    id: Option<u64>,
    #[serde(default, borrow)]
    method: Option<&'a str>,
    #[serde(default, borrow)]
    params: Option<&'a RawValue>,
    #[serde(default, borrow)]
    result: Option<&'a RawValue>,
    #[serde(default, borrow)]
    error: Option<&'a RawValue>,
}

const CALL_ID: u64 = 1;
const SUBSCRIBE_ID: u64 = 2;

/// Makes the call, subscribes once a topic is given (from `position`, once a topic
/// with history gave one), counts notifications; returns when the connection ends.
/// `quiet`: makes no call, so does not subscribe either.
async fn session(
    mut ws: Ws,
    fleet: &Fleet,
    topics: &mut watch::Receiver<Option<String>>,
    position: &mut Option<String>,
    quiet: bool,
) {
    let call = format!(
        r#"{{"jsonrpc":"2.0","method":"{}","params":[],"id":{CALL_ID}}}"#,
        fleet.args.call
    );
    if !quiet && ws.send(Message::text(call)).await.is_err() {
        return;
    }
    let (mut called, mut subscribing) = (false, false);
    loop {
        let frame = tokio::select! {
            frame = ws.next() => frame,
            changed = topics.changed(), if called && !subscribing => {
                if changed.is_err() {
                    return;
                }
                let topic = topics.borrow_and_update().clone();
                if let Some(topic) = topic {
                    subscribing = true;
                    let from = position.as_deref().map(|p| format!(",{p}")).unwrap_or_default();
                    let subscribe = format!(
                        r#"{{"jsonrpc":"2.0","method":"subscribe","params":["{topic}"{from}],"id":{SUBSCRIBE_ID}}}"#
                    );
                    if ws.send(Message::text(subscribe)).await.is_err() {
                        return;
                    }
                }
                continue;
            }
        };
        let text = match frame {
            Some(Ok(Message::Text(text))) => text,
            Some(Ok(Message::Close(_)) | Err(_)) | None => return,
            Some(Ok(_)) => continue,
        };
        let Ok(incoming) = serde_json::from_str::<Incoming>(&text) else {
            fleet.state().errors += 1;
            continue;
        };
        if incoming.method == Some("$/gap") {
            fleet.state().gaps += 1;
            continue;
        }
        match (incoming.id, incoming.params, incoming.error) {
            (Some(id), _, Some(error)) => {
                let mut state = fleet.state();
                state.errors += 1;
                // The first error answer of each kind shows why, on stderr.
                if state.errors == 1 || id == SUBSCRIBE_ID && state.subscribe_errors == 0 {
                    eprintln!("fleet: error answer to call {id}: {}", error.get());
                }
                if id == SUBSCRIBE_ID {
                    state.subscribe_errors += 1;
                }
            }
            (Some(CALL_ID), _, None) => {
                called = true;
                fleet.state().called.hit();
            }
            (Some(SUBSCRIBE_ID), _, None) => {
                let result = incoming.result.map_or("", |r| r.get());
                if position.is_none() && result.starts_with(r#"{"epoch":"#) {
                    *position = Some(result.to_owned());
                }
                let mut state = fleet.state();
                if result.contains(r#""recovered":true"#) {
                    state.recovered += 1;
                }
                state.subscribed.hit();
            }
            (None, Some(params), _) => {
                if params.get().starts_with(r#"{"offset":"#) {
                    fleet.state().replayed += 1;
                } else if let Ok([seq]) = serde_json::from_str::<[u64; 1]>(params.get()) {
                    fleet.state().arrivals.entry(seq).or_default().hit();
                }
            }
            _ => {}
        }
    }
}

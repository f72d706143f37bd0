//! The scenarios: what each measures, every contender on the same setup.

use futures_util::future::join_all;
use futures_util::stream::SplitStream;
use futures_util::{SinkExt, StreamExt};
use jsonrpc_peer::Caller;
use jsonrpc_peer::Peer;
use jsonrpsee::ws_client::WsClient;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;

use crate::jsonrpsee::{jsonrpsee_add, jsonrpsee_connect, jsonrpsee_flood, jsonrpsee_listener};
use crate::measure::{report_totals, Latencies, Meter, Sample, Tracker};
use crate::process::{nofile_limit, process_cpu_ns, unix_nanos, ChildServer};
use crate::raw::{
    raw_connect, RawCall, RawConn, RawIncoming, RawNotification, RawReply, RawShaped,
};
use crate::servers::{connect_ours, Servers};
use crate::{ClientWs, Contender, Each, Opts, Turn, ADD, FLOOD, FLOOD_TASK, TICK};

/// (a), (b), (c): `conns` connections, each with `depth` calls in flight; with
/// `reference`, the baseline's client shaped as ours beside them (its samples second,
/// empty without).
pub(crate) async fn calls_scenario(
    opts: &Opts,
    servers: &Servers,
    conns: usize,
    depth: usize,
    reference: bool,
) -> (Each<Vec<Sample>>, Vec<Sample>) {
    let tracker = Arc::new(Tracker::default());
    let ours_peers = join_all((0..conns).map(|_| connect_ours(&servers.ours_url, &tracker))).await;
    let mut raw_conns = join_all((0..conns).map(|_| RawConn::connect(&servers.raw_url))).await;
    let reference = reference && opts.reference;
    let shaped = match reference {
        true => {
            join_all((0..conns).map(|_| {
                RawShaped::connect(match opts.shaped_to_ours {
                    true => &servers.ours_url,
                    false => &servers.raw_url,
                })
            }))
            .await
        }
        false => Vec::new(),
    };
    let jsonrpsee_clients: Vec<Arc<WsClient>> =
        join_all((0..conns).map(|_| jsonrpsee_connect(&servers.jsonrpsee_url)))
            .await
            .into_iter()
            .map(Arc::new)
            .collect();

    let mut samples = Each::<Vec<Sample>>::default();
    let mut shaped_samples = Vec::new();
    // Round 0 warms up and is not counted.
    for round in 0..=opts.rounds {
        let time = if round == 0 {
            opts.warmup
        } else {
            opts.round_time
        };
        for turn in opts.turns(round) {
            let Turn::Contender(c) = turn else {
                if reference {
                    shaped_samples.push(shaped_calls(&shaped, depth, time).await);
                }
                continue;
            };
            let sample = match c {
                Contender::Ours => ours_calls(&ours_peers, depth, time).await,
                Contender::Raw => raw_calls(&mut raw_conns, depth, time).await,
                Contender::Jsonrpsee => jsonrpsee_calls(&jsonrpsee_clients, depth, time).await,
            };
            samples[c].push(sample);
        }
    }
    finish_rounds(&mut samples);
    finish_reference(&mut shaped_samples);
    join_all(ours_peers.iter().map(Peer::close)).await;
    (samples, shaped_samples)
}

/// Prints the reference's totals, then drops its warm-up round.
fn finish_reference(samples: &mut Vec<Sample>) {
    if samples.is_empty() {
        return;
    }
    let total: u64 = samples.iter().map(|s| s.count).sum();
    eprintln!("    messages: {total} through the baseline shaped as ours (warm-up included)");
    samples.remove(0);
}

/// Prints the totals (warm-up included), then drops each contender's warm-up round.
pub(crate) fn finish_rounds(samples: &mut Each<Vec<Sample>>) {
    report_totals(samples);
    for s in &mut samples.0 {
        s.drain(..s.len().min(1));
    }
}

/// One round of calls through jsonrpsee's client: `depth` tasks per client, each
/// calling in a loop until the round's time is up.
pub(crate) async fn jsonrpsee_calls(
    clients: &[Arc<WsClient>],
    depth: usize,
    time: Duration,
) -> Sample {
    calls_round(clients, depth, time, |client, i| async move {
        let sum = jsonrpsee_add(&client, i).await;
        (client, sum)
    })
    .await
}

/// One round of calls through jsonrpc-peer: `depth` tasks per peer, each calling in a
/// loop until the round's time is up.
pub(crate) async fn ours_calls(peers: &[Peer], depth: usize, time: Duration) -> Sample {
    calls_round(peers, depth, time, |peer, i| async move {
        let sum = peer.call::<i64>(ADD, [i, 1]).await.expect("call");
        (peer, sum)
    })
    .await
}

/// One round of calls through the baseline's client shaped as ours: `depth` tasks per
/// connection, each calling in a loop until the round's time is up.
async fn shaped_calls(clients: &[Arc<RawShaped>], depth: usize, time: Duration) -> Sample {
    calls_round(clients, depth, time, |client, i| async move {
        let sum = client.add(i).await;
        (client, sum)
    })
    .await
}

/// `depth` tasks per client, each calling `add(i, 1)` through `call` in a loop until
/// the round's time is up, every latency recorded. `call` takes the client and hands
/// it back, so no call pays for a clone.
async fn calls_round<C, F, Fut>(clients: &[C], depth: usize, time: Duration, call: F) -> Sample
where
    C: Clone + Send + 'static,
    F: Fn(C, i64) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = (C, i64)> + Send,
{
    let latencies = Latencies::default();
    let meter = Meter::start();
    let deadline = meter.start + time;
    let tasks: Vec<_> = clients
        .iter()
        .flat_map(|client| (0..depth).map(move |_| client.clone()))
        .map(|client| {
            let latencies = latencies.clone();
            let call = call.clone();
            tokio::spawn(async move {
                let mut i = 0i64;
                let mut client = client;
                loop {
                    let sent = Instant::now();
                    let (back, sum) = call(client, i).await;
                    client = back;
                    let now = Instant::now();
                    assert_eq!(sum, i + 1);
                    latencies.record(now - sent);
                    i += 1;
                    if now >= deadline {
                        return;
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("caller");
    }
    meter.finish(latencies)
}

/// One round of calls through the raw client: per connection, one reader task that
/// sends the next request (through the writer task) as each answer comes in.
pub(crate) async fn raw_calls(conns: &mut [RawConn], depth: usize, time: Duration) -> Sample {
    let latencies = Latencies::default();
    let meter = Meter::start();
    let deadline = meter.start + time;
    let tasks: Vec<_> = conns
        .iter_mut()
        .map(|conn| {
            let stream = conn.stream.take().expect("stream is home between rounds");
            let (tx, latencies) = (conn.tx.clone(), latencies.clone());
            tokio::spawn(raw_call_loop(stream, tx, depth, deadline, latencies))
        })
        .collect();
    for (conn, task) in conns.iter_mut().zip(tasks) {
        conn.stream = Some(task.await.expect("raw reader"));
    }
    meter.finish(latencies)
}

pub(crate) async fn raw_call_loop(
    mut stream: SplitStream<ClientWs>,
    tx: mpsc::Sender<Message>,
    depth: usize,
    deadline: Instant,
    latencies: Latencies,
) -> SplitStream<ClientWs> {
    let mut sent_at: HashMap<u64, Instant> = HashMap::with_capacity(depth);
    let mut next_id = 0u64;
    let mut send = |sent_at: &mut HashMap<u64, Instant>| {
        let id = next_id;
        next_id += 1;
        sent_at.insert(id, Instant::now());
        let frame = serde_json::to_string(&RawCall {
            jsonrpc: "2.0",
            method: ADD,
            params: [id as i64, 1],
            id,
        })
        .expect("serializes");
        Message::text(frame)
    };
    for _ in 0..depth {
        let frame = send(&mut sent_at);
        tx.send(frame).await.expect("raw writer");
    }
    while !sent_at.is_empty() {
        let Message::Text(text) = stream.next().await.expect("open").expect("frame") else {
            continue;
        };
        let reply: RawReply = serde_json::from_str(&text).expect("a response");
        let sent = sent_at.remove(&reply.id).expect("an id we sent");
        assert_eq!(reply.result, reply.id as i64 + 1);
        let now = Instant::now();
        latencies.record(now - sent);
        if now < deadline {
            let frame = send(&mut sent_at);
            tx.send(frame).await.expect("raw writer");
        }
    }
    stream
}

/// (d): the client asks for `flood` notifications (jsonrpsee: subscribes for them);
/// the time until the last one has been read (and its params parsed) by the client.
/// The baseline's samples shaped as ours (`flood_task`: from a task of its own, through
/// the connection's queue) come second, empty when it does not run.
pub(crate) async fn flood_scenario(
    opts: &Opts,
    servers: &Servers,
) -> (Each<Vec<Sample>>, Vec<Sample>) {
    let tracker = Arc::new(Tracker::default());
    let peer = connect_ours(&servers.ours_url, &tracker).await;
    let mut conn = RawConn::connect(&servers.raw_url).await;
    let client = jsonrpsee_connect(&servers.jsonrpsee_url).await;
    let mut samples = Each::<Vec<Sample>>::default();
    let mut shaped = Vec::new();
    // Round 0 warms up and is not counted.
    for round in 0..=opts.rounds {
        let n = if round == 0 {
            (opts.flood / 10).max(100)
        } else {
            opts.flood
        };
        for turn in opts.turns(round) {
            let c = match turn {
                Turn::Contender(c) => c,
                Turn::Reference => {
                    shaped.push(raw_flood(&mut conn, FLOOD_TASK, n).await);
                    continue;
                }
            };
            let sample = match c {
                Contender::Ours => ours_flood(&peer, &tracker, n).await,
                Contender::Raw => raw_flood(&mut conn, FLOOD, n).await,
                Contender::Jsonrpsee => jsonrpsee_flood(&client, n).await,
            };
            samples[c].push(sample);
        }
    }
    finish_rounds(&mut samples);
    finish_reference(&mut shaped);
    peer.close().await;
    (samples, shaped)
}

/// How long our `flood` call may take.
const FLOOD_TIMEOUT: Duration = Duration::from_secs(600);

pub(crate) async fn ours_flood(peer: &Peer, tracker: &Tracker, n: u64) -> Sample {
    tracker.arm(n as usize);
    let meter = Meter::start();
    // Answered once all `n` are sent: a million take over the default 30 s call
    // timeout under callgrind (the per-notification recipe in main.rs).
    let answered: u64 = peer
        .call(FLOOD, [n])
        .timeout(FLOOD_TIMEOUT)
        .await
        .expect("flood");
    assert_eq!(answered, n);
    let last = tracker.wait().await;
    meter.finish_count(n, last)
}

/// `method`: `flood`, or `flood_task` for the reference.
pub(crate) async fn raw_flood(conn: &mut RawConn, method: &'static str, n: u64) -> Sample {
    let stream = conn.stream.as_mut().expect("stream");
    let meter = Meter::start();
    let request = serde_json::to_string(&RawCall {
        jsonrpc: "2.0",
        method,
        params: [n],
        id: 0,
    })
    .expect("serializes");
    conn.tx.send(Message::text(request)).await.expect("writer");
    let (mut seen, mut answered, mut last) = (0u64, false, meter.start);
    while seen < n || !answered {
        let Message::Text(text) = stream.next().await.expect("open").expect("frame") else {
            continue;
        };
        let msg: RawIncoming = serde_json::from_str(&text).expect("JSON-RPC");
        match (msg.method, msg.params, msg.id) {
            (Some(TICK), Some([_]), None) => {
                seen += 1;
                last = Instant::now();
            }
            (None, None, Some(0)) => answered = true,
            _ => panic!("unexpected frame {text}"),
        }
    }
    meter.finish_count(n, last)
}

/// One audience size of (e).
pub(crate) struct BroadcastRun {
    /// Connections per contender.
    pub(crate) conns: usize,
    /// For the table, when fewer connections than asked or no alternation.
    pub(crate) note: String,
    /// Per broadcast: ms from the server's broadcast call until the last connection
    /// has read (and parsed) it.
    pub(crate) ms: Each<Vec<f64>>,
    /// Per broadcast: µs of server CPU time (the child server process, every thread)
    /// from just before the broadcast until the last one has it, per recipient.
    pub(crate) cpu_us: Each<Vec<f64>>,
}

/// One contender's side of (e): its server in a child process, `n` client connections
/// here counting every `tick` on `tracker`.
pub(crate) struct Audience {
    pub(crate) child: Option<ChildServer>,
    pub(crate) tracker: Arc<Tracker>,
    pub(crate) peers: Vec<Peer>,
    pub(crate) jsonrpsee: Vec<WsClient>,
    pub(crate) readers: Vec<tokio::task::JoinHandle<()>>,
}

impl Audience {
    pub(crate) async fn open(c: Contender, n: usize) -> Audience {
        let mut child = ChildServer::spawn(c);
        let url = format!("ws://127.0.0.1:{}", child.port);
        let tracker = Arc::new(Tracker::default());
        let mut audience = Audience {
            child: None,
            tracker: tracker.clone(),
            peers: Vec::new(),
            jsonrpsee: Vec::new(),
            readers: Vec::new(),
        };
        // In chunks, so the listen backlog never overflows.
        for chunk in (0..n).collect::<Vec<_>>().chunks(100) {
            match c {
                Contender::Ours => audience
                    .peers
                    .extend(join_all(chunk.iter().map(|_| connect_ours(&url, &tracker))).await),
                Contender::Raw => {
                    for ws in join_all(chunk.iter().map(|_| raw_connect(&url))).await {
                        audience
                            .readers
                            .push(tokio::spawn(raw_listener(ws, tracker.clone())));
                    }
                }
                Contender::Jsonrpsee => {
                    let listeners = chunk
                        .iter()
                        .map(|_| jsonrpsee_listener(&url, tracker.clone()));
                    for (client, reader) in join_all(listeners).await {
                        audience.jsonrpsee.push(client);
                        audience.readers.push(reader);
                    }
                }
            }
        }
        // Every server-side connection (jsonrpsee: subscription) registered.
        let deadline = Instant::now() + Duration::from_secs(30);
        while child.ask("count") < n as u64 {
            assert!(
                Instant::now() < deadline,
                "{} server did not see every connection",
                c.name()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        audience.child = Some(child);
        audience
    }

    /// One broadcast: (ms until the last of `n` has it, server CPU µs per recipient).
    pub(crate) async fn broadcast(&mut self, n: usize, seq: u64) -> (f64, f64) {
        self.tracker.arm(n);
        let mut child = self.child.take().expect("child is home");
        let pid = child.pid();
        let cpu_before = process_cpu_ns(pid);
        // The child's pipe is read on a blocking thread, so that this runtime's
        // clients read their notifications meanwhile.
        let (child, answer) = tokio::task::spawn_blocking(move || {
            let answer = child.ask_line(&format!("broadcast {seq}"));
            (child, answer)
        })
        .await
        .expect("asking the child");
        self.child = Some(child);
        let (queued, start) = answer.split_once(' ').expect("queued and start");
        assert_eq!(
            queued.parse::<usize>().expect("a count"),
            n,
            "every connection took it"
        );
        let start: u128 = start.parse().expect("nanoseconds");
        let last = self.tracker.wait().await;
        let cpu_after = process_cpu_ns(pid);
        // The tracker's Instant, on the wall clock the child's start is on.
        let last = std::time::SystemTime::now() - last.elapsed();
        let ms = (unix_nanos(last) as f64 - start as f64) / 1e6;
        let cpu_us = match (cpu_before, cpu_after) {
            (Some(before), Some(after)) => (after - before) as f64 / 1e3 / n as f64,
            _ => f64::NAN,
        };
        (ms, cpu_us)
    }

    pub(crate) async fn close(mut self) {
        join_all(self.peers.iter().map(Peer::close)).await;
        for reader in self.readers.drain(..) {
            reader.abort();
        }
        drop(self.jsonrpsee);
        if let Some(child) = self.child.take() {
            child.quit();
        }
    }
}

/// A baseline client connection of (e): reads and parses every notification.
pub(crate) async fn raw_listener(mut ws: ClientWs, tracker: Arc<Tracker>) {
    while let Some(Ok(msg)) = ws.next().await {
        if let Message::Text(text) = msg {
            let note: RawNotification<[u64; 1]> =
                serde_json::from_str(&text).expect("a notification");
            assert_eq!(note.method, TICK);
            tracker.hit();
        }
    }
}

/// (e): one broadcast from the server to `wanted` connections, five per contender and
/// round. Each contender's server runs in a child process (so its CPU time can be read
/// apart from the clients'), on the same CPU. When every contender's connections fit
/// in the file descriptor limit at once, the contenders alternate round by round as
/// elsewhere; otherwise they run one after another, each on its own connections; and
/// when not even one contender's fit, fewer connections are opened.
pub(crate) async fn broadcast_scenario(opts: &Opts, wanted: usize) -> BroadcastRun {
    let (soft, _) = nofile_limit().unwrap_or((1024, 1024));
    // This process holds the clients' sockets, the child the servers'.
    let room = (soft as usize).saturating_sub(200);
    let (n, mut note) = if room >= wanted {
        (wanted, String::new())
    } else {
        (
            room,
            format!(" (asked {wanted}; RLIMIT_NOFILE {soft} allows no more)"),
        )
    };
    let together = room >= n * opts.contenders.len();
    if !together && opts.contenders.len() > 1 {
        note += " (contenders one after another)";
    }
    eprintln!("(e) one broadcast to {n} connections{note}");
    let mut run = BroadcastRun {
        conns: n,
        note,
        ms: Each::default(),
        cpu_us: Each::default(),
    };
    let mut record = |c: Contender, round: usize, (ms, cpu): (f64, f64)| {
        // Round 0 warms up (the clients' notification tasks start) and is not counted.
        if round > 0 {
            run.ms[c].push(ms);
            run.cpu_us[c].push(cpu);
        }
    };
    let broadcasts = opts.rounds * 5;
    if together {
        let mut audiences = Vec::new();
        for &c in &opts.contenders {
            audiences.push((c, Audience::open(c, n).await));
        }
        for round in 0..=broadcasts {
            for c in opts.order(round) {
                let (_, audience) = audiences.iter_mut().find(|(a, _)| *a == c).expect("opened");
                record(c, round, audience.broadcast(n, round as u64).await);
            }
        }
        for (_, audience) in audiences {
            audience.close().await;
        }
    } else {
        for c in opts.order(0) {
            let mut audience = Audience::open(c, n).await;
            for round in 0..=broadcasts {
                record(c, round, audience.broadcast(n, round as u64).await);
            }
            audience.close().await;
        }
    }
    run
}

/// How many idle connections (f) can open within the file descriptor limit, and a
/// note for the table when that is fewer than asked.
pub(crate) fn idle_connections(wanted: usize) -> (usize, String) {
    let (soft, _) = nofile_limit().unwrap_or((1024, 1024));
    let room = (soft as usize).saturating_sub(200);
    if room >= wanted {
        (wanted, String::new())
    } else {
        (room, format!(" (RLIMIT_NOFILE {soft} allows no more)"))
    }
}

/// (f): KiB of server RSS per idle connection, each having made one `add` call,
/// measured in a child process.
pub(crate) async fn idle_memory(kind: Contender, conns: usize) -> f64 {
    let mut child = ChildServer::spawn(kind);
    let before = child.ask("rss");
    let url = format!("ws://127.0.0.1:{}", child.port);
    let mut clients = Vec::with_capacity(conns);
    for chunk in (0..conns).collect::<Vec<_>>().chunks(100) {
        clients.extend(join_all(chunk.iter().map(|_| one_call(&url))).await);
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.ask("count") < conns as u64 {
        assert!(
            Instant::now() < deadline,
            "child server did not see every connection"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Let the server settle (buffers released after the handshakes).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = child.ask("rss");
    child.quit();
    drop(clients);
    after.saturating_sub(before) as f64 / conns as f64 / 1024.0
}

/// A baseline client connection that has made one `add` call and read its answer.
pub(crate) async fn one_call(url: &str) -> ClientWs {
    let mut ws = raw_connect(url).await;
    let request = serde_json::to_string(&RawCall {
        jsonrpc: "2.0",
        method: ADD,
        params: [1, 2],
        id: 1,
    })
    .expect("serializes");
    ws.send(Message::text(request)).await.expect("send");
    loop {
        if let Message::Text(text) = ws.next().await.expect("open").expect("frame") {
            let reply: RawReply = serde_json::from_str(&text).expect("a response");
            assert_eq!((reply.id, reply.result), (1, 3));
            return ws;
        }
    }
}

//! The scenarios: what each measures, both contenders on the same setup.

use futures_util::future::join_all;
use futures_util::stream::SplitStream;
use futures_util::StreamExt;
use jsonrpc_peer::Peer;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::runtime::Handle;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;

use crate::measure::{report_totals, wait_until, Latencies, Meter, Sample, Tracker};
use crate::process::{nofile_limit, ChildServer};
use crate::raw::{raw_connect, RawCall, RawConn, RawIncoming, RawNotification, RawReply};
use crate::servers::{connect_ours, Servers};
use crate::{ClientWs, Opts, ADD, FLOOD, TICK};

/// (a), (b), (c): `conns` connections, each with `depth` calls in flight.
pub(crate) async fn calls_scenario(
    opts: &Opts,
    servers: &Servers,
    conns: usize,
    depth: usize,
) -> (Vec<Sample>, Vec<Sample>) {
    let tracker = Arc::new(Tracker::default());
    let ours_peers = join_all((0..conns).map(|_| connect_ours(&servers.ours_url, &tracker))).await;
    let mut raw_conns = join_all((0..conns).map(|_| RawConn::connect(&servers.raw_url))).await;

    let (mut ours, mut raw) = (Vec::new(), Vec::new());
    // Round 0 warms up and is not counted.
    for round in 0..=opts.rounds {
        let time = if round == 0 {
            opts.warmup
        } else {
            opts.round_time
        };
        for is_ours in opts.order(round) {
            if is_ours {
                ours.push(ours_calls(&ours_peers, depth, time).await);
            } else {
                raw.push(raw_calls(&mut raw_conns, depth, time).await);
            }
        }
    }
    report_totals(&ours, &raw);
    ours.drain(..ours.len().min(1));
    raw.drain(..raw.len().min(1));
    join_all(ours_peers.iter().map(Peer::close)).await;
    (ours, raw)
}

/// One round of calls through jsonrpc-peer: `depth` tasks per peer, each calling in a
/// loop until the round's time is up.
pub(crate) async fn ours_calls(peers: &[Peer], depth: usize, time: Duration) -> Sample {
    let latencies = Latencies::default();
    let meter = Meter::start();
    let deadline = meter.start + time;
    let tasks: Vec<_> = peers
        .iter()
        .flat_map(|peer| (0..depth).map(move |_| peer.clone()))
        .map(|peer| {
            let latencies = latencies.clone();
            tokio::spawn(async move {
                let mut i = 0i64;
                loop {
                    let sent = Instant::now();
                    let sum: i64 = peer.call(ADD, [i, 1]).await.expect("call");
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

/// (d): the client asks for `flood` notifications; the time until the last one has
/// been read (and its params parsed) by the client.
pub(crate) async fn flood_scenario(opts: &Opts, servers: &Servers) -> (Vec<Sample>, Vec<Sample>) {
    let tracker = Arc::new(Tracker::default());
    let peer = connect_ours(&servers.ours_url, &tracker).await;
    let mut conn = RawConn::connect(&servers.raw_url).await;
    let (mut ours, mut raw) = (Vec::new(), Vec::new());
    // Round 0 warms up and is not counted.
    for round in 0..=opts.rounds {
        let n = if round == 0 {
            (opts.flood / 10).max(100)
        } else {
            opts.flood
        };
        for is_ours in opts.order(round) {
            if is_ours {
                ours.push(ours_flood(&peer, &tracker, n).await);
            } else {
                raw.push(raw_flood(&mut conn, n).await);
            }
        }
    }
    report_totals(&ours, &raw);
    ours.drain(..ours.len().min(1));
    raw.drain(..raw.len().min(1));
    peer.close().await;
    (ours, raw)
}

pub(crate) async fn ours_flood(peer: &Peer, tracker: &Tracker, n: u64) -> Sample {
    tracker.arm(n as usize);
    let meter = Meter::start();
    let answered: u64 = peer.call(FLOOD, [n]).await.expect("flood");
    assert_eq!(answered, n);
    let last = tracker.wait().await;
    meter.finish_count(n, last)
}

pub(crate) async fn raw_flood(conn: &mut RawConn, n: u64) -> Sample {
    let stream = conn.stream.as_mut().expect("stream");
    let meter = Meter::start();
    let request = serde_json::to_string(&RawCall {
        jsonrpc: "2.0",
        method: FLOOD,
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

/// (e): milliseconds from the server's broadcast call until the last of the
/// connections has read (and parsed) it, per round.
pub(crate) async fn broadcast_scenario(
    opts: &Opts,
    servers: &Servers,
    server_rt: &Handle,
) -> (Vec<f64>, Vec<f64>) {
    let n = opts.broadcast_conns;
    let ours_tracker = Arc::new(Tracker::default());
    let raw_tracker = Arc::new(Tracker::default());
    let mut ours_peers = Vec::with_capacity(n);
    let mut raw_readers = Vec::with_capacity(n);
    // In chunks, so the listen backlog never overflows.
    for chunk in (0..n).collect::<Vec<_>>().chunks(100) {
        ours_peers.extend(
            join_all(
                chunk
                    .iter()
                    .map(|_| connect_ours(&servers.ours_url, &ours_tracker)),
            )
            .await,
        );
        for ws in join_all(chunk.iter().map(|_| raw_connect(&servers.raw_url))).await {
            let tracker = raw_tracker.clone();
            raw_readers.push(tokio::spawn(async move {
                let mut ws = ws;
                while let Some(Ok(msg)) = ws.next().await {
                    if let Message::Text(text) = msg {
                        let note: RawNotification<[u64; 1]> =
                            serde_json::from_str(&text).expect("a notification");
                        assert_eq!(note.method, TICK);
                        tracker.hit();
                    }
                }
            }));
        }
    }
    // Every server-side connection registered, and none of earlier scenarios left.
    let ours_handle = servers.ours.clone();
    let raw_server = servers.raw.clone();
    wait_until("connections registered", || {
        ours_handle.connection_count() == n && raw_server.live() == n
    })
    .await;

    let broadcast = |is_ours: bool, seq: u64| {
        let (ours, raw) = (servers.ours.clone(), servers.raw.clone());
        let tracker = if is_ours { &ours_tracker } else { &raw_tracker };
        tracker.arm(n);
        async move {
            let sent = server_rt
                .spawn(async move {
                    let start = Instant::now();
                    let queued = if is_ours {
                        ours.broadcast(TICK, [seq]).expect("broadcast")
                    } else {
                        raw.broadcast(seq)
                    };
                    assert_eq!(queued, n);
                    start
                })
                .await
                .expect("broadcast task");
            let last = tracker.wait().await;
            (last - sent).as_secs_f64() * 1e3
        }
    };
    let (mut ours, mut raw) = (Vec::new(), Vec::new());
    // Broadcasts are quick: five per contender and round. Round 0 warms up (the
    // clients' notification tasks start) and is not counted.
    for round in 0..=opts.rounds * 5 {
        for is_ours in opts.order(round) {
            let ms = broadcast(is_ours, round as u64).await;
            if round > 0 {
                if is_ours { &mut ours } else { &mut raw }.push(ms);
            }
        }
    }
    join_all(ours_peers.iter().map(Peer::close)).await;
    for reader in raw_readers {
        reader.abort();
    }
    (ours, raw)
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

/// (f): KiB of server RSS per idle connection, measured in a child process.
pub(crate) async fn idle_memory(kind: &str, conns: usize) -> f64 {
    let mut child = ChildServer::spawn(kind);
    let before = child.ask("rss");
    let url = format!("ws://127.0.0.1:{}", child.port);
    let mut clients = Vec::with_capacity(conns);
    for chunk in (0..conns).collect::<Vec<_>>().chunks(100) {
        clients.extend(join_all(chunk.iter().map(|_| raw_connect(&url))).await);
    }
    let deadline = Instant::now() + Duration::from_secs(20);
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

//! `RedisBackplane` against a real Redis started by each test on a unix socket: acks,
//! order, a Redis killed and restarted, a frozen Redis found by the probe.

mod common;
#[path = "common/redis_bus.rs"]
mod redis_bus;

use std::time::Duration;

use bytes::Bytes;
use common::redis_server::RedisServer;
use common::within;
use jsonrpc_peer::cluster::{
    Backplane, BackplaneError, BusEvent, Cluster, ClusterError, ClusterState, RedisBackplane,
    RedisOptions,
};
use jsonrpc_peer::{Error, ServerHandle};
use redis_bus::{backplane, fast_options};
use tokio::sync::mpsc;

/// The next message event, passing over subscriptions taking effect: any other event
/// fails the test.
async fn next_message(events: &mut mpsc::Receiver<BusEvent>) -> (String, Bytes) {
    loop {
        match within(events.recv()).await {
            Some(BusEvent::Message { channel, payload }) => return (channel, payload),
            Some(BusEvent::Subscribed { .. }) => {}
            other => panic!("expected a message, got {other:?}"),
        }
    }
}

/// The publications in one recorded message, with their offsets: an envelope alone
/// (`"off":N`, newline, the data), or a run (`"n":N,...,"off":FIRST`, newline, then each
/// one's data after its 4-byte big-endian length), as `Backplane::append` documents.
fn recorded(message: &[u8]) -> Vec<(u64, Vec<u8>)> {
    let newline = message
        .iter()
        .position(|&b| b == b'\n')
        .expect("a header line");
    let header: serde_json::Value = serde_json::from_slice(&message[..newline]).expect("JSON");
    let (off, body) = (
        header["off"].as_u64().expect("off"),
        &message[newline + 1..],
    );
    let Some(n) = header["n"].as_u64() else {
        return vec![(off, body.to_vec())];
    };
    let (mut rest, mut items) = (body, Vec::new());
    while let Some((len, after)) = rest.split_first_chunk::<4>() {
        let len = u32::from_be_bytes(*len) as usize;
        assert!(after.len() >= len, "a run cut short");
        items.push((off + items.len() as u64, after[..len].to_vec()));
        rest = &after[len..];
    }
    assert_eq!(items.len() as u64, n, "a run holds what its header says");
    items
}

/// Waits for `want` (Down or Up); messages seen on the way are returned.
async fn wait_for(events: &mut mpsc::Receiver<BusEvent>, want: BusEvent) -> Vec<(String, Bytes)> {
    let mut seen = Vec::new();
    loop {
        match within(events.recv()).await {
            Some(BusEvent::Message { channel, payload }) => seen.push((channel, payload)),
            Some(BusEvent::Subscribed { .. }) => {}
            Some(event) if event == want => return seen,
            other => panic!("waiting for {want:?}, got {other:?}"),
        }
    }
}

fn numsub(redis: &RedisServer, channel: &str) -> String {
    // redis-cli prints "channel\ncount".
    redis
        .cli(&["PUBSUB", "NUMSUB", channel])
        .lines()
        .nth(1)
        .unwrap_or("")
        .to_owned()
}

#[tokio::test]
async fn a_publish_right_after_the_subscribe_ack_arrives() {
    let redis = RedisServer::start();
    let (a, mut a_events) = backplane(&redis).await;
    let (b, mut b_events) = backplane(&redis).await;

    within(b.subscribe("jp:t:x"))
        .await
        .expect("subscribe acked");
    // Where the subscription took effect, in the stream: before what it brings.
    assert_eq!(
        within(b_events.recv()).await,
        Some(BusEvent::Subscribed {
            channel: "jp:t:x".into()
        })
    );
    within(a.publish("jp:t:x", Bytes::from_static(b"one")))
        .await
        .expect("published");
    assert_eq!(
        next_message(&mut b_events).await,
        ("jp:t:x".to_owned(), Bytes::from_static(b"one"))
    );

    // A publisher subscribed to its own channel gets its publish back (the layer above
    // filters its echoes); a channel nobody subscribed reaches nobody.
    within(a.subscribe("jp:all"))
        .await
        .expect("subscribe acked");
    within(a.publish("jp:nobody", Bytes::from_static(b"lost")))
        .await
        .expect("published");
    within(a.publish("jp:all", Bytes::from_static(b"echo")))
        .await
        .expect("published");
    assert_eq!(
        next_message(&mut a_events).await,
        ("jp:all".to_owned(), Bytes::from_static(b"echo"))
    );
    // Anything B got of those would come before a message published after them.
    within(a.publish("jp:t:x", Bytes::from_static(b"sync")))
        .await
        .expect("published");
    assert_eq!(
        next_message(&mut b_events).await,
        ("jp:t:x".to_owned(), Bytes::from_static(b"sync")),
        "B got something it did not subscribe to"
    );

    // Subscribing twice is one subscription; unsubscribing stops delivery. (B also
    // listens on a channel of the test's, to know when nothing more can come.)
    within(b.subscribe("jp:t:sync"))
        .await
        .expect("subscribe acked");
    within(b.subscribe("jp:t:x"))
        .await
        .expect("second subscribe acked");
    assert_eq!(numsub(&redis, "jp:t:x"), "1");
    within(b.unsubscribe("jp:t:x"))
        .await
        .expect("unsubscribe acked");
    assert_eq!(numsub(&redis, "jp:t:x"), "0");
    within(a.publish("jp:t:x", Bytes::from_static(b"after")))
        .await
        .expect("published");
    within(a.publish("jp:all", Bytes::from_static(b"marker")))
        .await
        .expect("published");
    assert_eq!(
        next_message(&mut a_events).await.1,
        Bytes::from_static(b"marker")
    );
    within(a.publish("jp:t:sync", Bytes::from_static(b"sync")))
        .await
        .expect("published");
    assert_eq!(
        next_message(&mut b_events).await,
        ("jp:t:sync".to_owned(), Bytes::from_static(b"sync")),
        "B still got a channel it left"
    );
    assert!(a.is_up() && b.is_up());
}

#[tokio::test]
async fn publishes_arrive_in_call_order_even_when_not_awaited_one_by_one() {
    let redis = RedisServer::start();
    let (a, _a_events) = backplane(&redis).await;
    let (b, mut b_events) = backplane(&redis).await;
    within(b.subscribe("jp:t:order"))
        .await
        .expect("subscribe acked");

    // Called one after another without awaiting in between: they go out as pipelines.
    let pending: Vec<_> = (0..2000)
        .map(|i| a.publish("jp:t:order", Bytes::from(i.to_string())))
        .collect();
    for (i, publish) in pending.into_iter().enumerate() {
        within(publish)
            .await
            .unwrap_or_else(|e| panic!("publish {i}: {e}"));
    }
    // And awaited one by one.
    for i in 2000..2100 {
        within(a.publish("jp:t:order", Bytes::from(i.to_string())))
            .await
            .expect("published");
    }
    // And in batches, one pipeline each, interleaved with single publishes.
    let mut pending = Vec::new();
    for chunk in 0..10 {
        let base = 2100 + chunk * 11;
        let batch = (base..base + 10)
            .map(|i| ("jp:t:order".to_owned(), Bytes::from(i.to_string())))
            .collect();
        pending.push(a.publish_many(batch));
        pending.push(a.publish("jp:t:order", Bytes::from((base + 10).to_string())));
    }
    for publish in pending {
        within(publish).await.expect("published");
    }
    for i in 0..2210 {
        let (_, payload) = next_message(&mut b_events).await;
        assert_eq!(
            payload,
            Bytes::from(i.to_string()),
            "message {i} out of order"
        );
    }
    assert_eq!(b.dropped(), 0);
}

#[tokio::test]
async fn redis_killed_and_restarted_gives_down_then_up_and_every_subscription_again() {
    let mut redis = RedisServer::start();
    let (a, mut a_events) = backplane(&redis).await;
    let (b, mut b_events) = backplane(&redis).await;
    for channel in ["jp:all", "jp:t:x", "jp:t:y"] {
        within(b.subscribe(channel)).await.expect("subscribe acked");
    }
    within(a.publish("jp:t:x", Bytes::from_static(b"before")))
        .await
        .expect("published");
    assert_eq!(
        next_message(&mut b_events).await.1,
        Bytes::from_static(b"before")
    );

    redis.kill();
    assert!(wait_for(&mut b_events, BusEvent::Down).await.is_empty());
    wait_for(&mut a_events, BusEvent::Down).await;
    assert!(!b.is_up());
    // Down: a publish fails at once, a subscribe fails but is kept for later.
    let err = within(a.publish("jp:t:x", Bytes::from_static(b"lost")))
        .await
        .unwrap_err();
    assert!(matches!(err, BackplaneError::Unavailable(_)), "{err:?}");
    let err = within(b.subscribe("jp:t:z")).await.unwrap_err();
    assert!(matches!(err, BackplaneError::Unavailable(_)), "{err:?}");
    within(b.unsubscribe("jp:t:y"))
        .await
        .expect("unsubscribe while down");

    // Redis stays down a moment (the scenario, not a wait for something): B's redials
    // fail meanwhile, and the one after the restart succeeds.
    tokio::time::sleep(Duration::from_millis(300)).await;
    redis.restart();
    wait_for(&mut b_events, BusEvent::Up).await;
    wait_for(&mut a_events, BusEvent::Up).await;
    assert!(b.is_up() && b.reconnects() >= 1);

    // The fresh Redis knows nothing of the old subscriptions: B issued its set again,
    // with the change made while down.
    for (channel, subscribers) in [
        ("jp:all", "1"),
        ("jp:t:x", "1"),
        ("jp:t:y", "0"),
        ("jp:t:z", "1"),
    ] {
        assert_eq!(
            numsub(&redis, channel),
            subscribers,
            "PUBSUB NUMSUB {channel}"
        );
    }
    for (i, channel) in ["jp:t:x", "jp:t:z", "jp:all"].into_iter().enumerate() {
        within(a.publish(channel, Bytes::from(format!("after {i}"))))
            .await
            .expect("published");
    }
    for (i, channel) in ["jp:t:x", "jp:t:z", "jp:all"].into_iter().enumerate() {
        assert_eq!(
            next_message(&mut b_events).await,
            (channel.to_owned(), Bytes::from(format!("after {i}")))
        );
    }
    // A duplicate of those would come before a message published after them.
    within(a.publish("jp:all", Bytes::from_static(b"end")))
        .await
        .expect("published");
    assert_eq!(
        next_message(&mut b_events).await,
        ("jp:all".to_owned(), Bytes::from_static(b"end")),
        "a duplicate or a message from before the restart"
    );
}

#[tokio::test]
async fn a_frozen_redis_is_found_by_the_probe_and_the_link_comes_back() {
    let redis = RedisServer::start();
    let (a, _a_events) = backplane(&redis).await;
    let (b, mut b_events) = backplane(&redis).await;
    within(b.subscribe("jp:t:x"))
        .await
        .expect("subscribe acked");

    // SIGSTOP: sockets stay open, nothing is answered, no disconnect is ever seen.
    redis.signal("STOP");
    let frozen = tokio::time::Instant::now();
    assert!(wait_for(&mut b_events, BusEvent::Down).await.is_empty());
    let found_in = frozen.elapsed();
    // Three 200 ms probe intervals, plus a tick of slack; far below any TCP timeout.
    assert!(
        found_in < Duration::from_secs(2),
        "silence noticed only after {found_in:?}"
    );
    assert!(!b.is_up());

    redis.signal("CONT");
    wait_for(&mut b_events, BusEvent::Up).await;
    assert_eq!(numsub(&redis, "jp:t:x"), "1");
    // A's own link may or may not have noticed the freeze; a fresh backplane publishes.
    drop(a);
    let (a, _a_events) = backplane(&redis).await;
    within(a.publish("jp:t:x", Bytes::from_static(b"thawed")))
        .await
        .expect("published");
    let seen = next_message(&mut b_events).await;
    assert_eq!(seen, ("jp:t:x".to_owned(), Bytes::from_static(b"thawed")));
}

#[tokio::test]
async fn a_bad_url_or_no_server_is_a_clear_error() {
    let err = RedisBackplane::connect("http://nope", fast_options())
        .await
        .unwrap_err();
    assert!(matches!(err, BackplaneError::Unavailable(_)), "{err:?}");

    let redis = RedisServer::start();
    let mut gone = RedisServer::start();
    let url = gone.url();
    gone.kill();
    let err = within(RedisBackplane::connect(&url, fast_options()))
        .await
        .unwrap_err();
    assert!(matches!(err, BackplaneError::Unavailable(_)), "{err:?}");
    drop(redis);
}

/// The scale bench's false `$/gap` (six nodes, 100,000 peers): a node busy delivering
/// one topic message to 16,667 subscribers ran its subscriber link's probe check
/// seconds late, found its last probe "too old" and redialed Redis, and its on-up sent
/// every subscriber a gap, though nothing was lost and Redis had answered at once.
/// Here the runtime's only thread is blocked for 1 s (five probe deadlines), as a node's
/// is when thousands of connection tasks are queued ahead of its subscriber's: the link
/// must not count that as silence from Redis.
#[tokio::test]
async fn a_starved_runtime_is_not_taken_for_a_silent_redis() {
    let redis = RedisServer::start();
    let fast = || {
        RedisOptions::default()
            .probe_interval(Duration::from_millis(100))
            .probe_misses(2)
    };
    let b = within(RedisBackplane::connect(&redis.url(), fast()))
        .await
        .expect("connect");
    let mut b_events = b.events().expect("events");
    let (a, _a_events) = backplane(&redis).await;
    within(b.subscribe("jp:t:x"))
        .await
        .expect("subscribe acked");
    for round in 0..3u8 {
        // The fault: nothing on this runtime runs for 1 s (the probe's deadline is
        // 200 ms). It is the process being busy, not a wait for anything.
        std::thread::sleep(Duration::from_secs(1));
        // Then each probe interval after it, a message gets through and nothing else
        // comes first (a lost link would say Down, then Up).
        for i in 0..4u8 {
            let payload = Bytes::from(vec![round, i]);
            within(a.publish("jp:t:x", payload.clone()))
                .await
                .expect("published");
            assert_eq!(
                next_message(&mut b_events).await,
                ("jp:t:x".to_owned(), payload),
                "round {round}: the link was dropped after the runtime was busy"
            );
            // Real time for the probe to be checked again (the link's timer is what
            // this test is about).
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    assert!(b.is_up());
    assert_eq!(b.reconnects(), 0);
}

#[tokio::test]
async fn the_history_script_numbers_trims_publishes_and_starts_an_epoch_when_redis_lost_it() {
    let redis = RedisServer::start();
    let (a, _a_events) = backplane(&redis).await;
    let (b, mut b_events) = backplane(&redis).await;
    common::history_bus::history_semantics(&a, &b, &mut b_events, || {
        // Empty, as after a restart without persistence; the script cache too, so the
        // next call meets NOSCRIPT and loads it again.
        redis.cli(&["FLUSHALL"]);
        redis.cli(&["SCRIPT", "FLUSH"]);
    })
    .await;
    // A topic only subscribed to keeps its meta a day; the first append keeps it.
    let keys = jsonrpc_peer::cluster::TopicKeys::new("jp", "{room}:new");
    let bounds = jsonrpc_peer::HistoryConfig::default();
    within(a.history_position(&keys, &bounds, "e"))
        .await
        .expect("position");
    let ttl: i64 = redis
        .cli(&["PTTL", "jp:m::{room}:new"])
        .trim()
        .parse()
        .unwrap();
    assert!(ttl > 3_600_000, "{ttl}");
    assert_eq!(redis.cli(&["PTTL", "jp:m:{prices}"]).trim(), "-1");
    // Within every bound a position reads no entry, and a read of entries is one XRANGE.
    let keys = jsonrpc_peer::cluster::TopicKeys::new("jp", "prices");
    redis.cli(&["CONFIG", "RESETSTAT"]);
    within(a.history_position(&keys, &bounds, "e"))
        .await
        .expect("position");
    within(a.read_history(&keys, &bounds, 0, 10))
        .await
        .expect("read");
    let stats = redis.cli(&["INFO", "commandstats"]);
    let xrange = stats
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_xrange:calls="))
        .and_then(|v| v.split(',').next())
        .unwrap_or("0");
    assert_eq!(xrange, "1", "{stats}");
    // The stream expires after max_age (an idle topic's data goes with it).
    let ttl: i64 = redis
        .cli(&["PTTL", "jp:h:{prices}"])
        .trim()
        .parse()
        .unwrap();
    assert!(ttl > 0 && ttl <= 300_000, "{ttl}");
}

fn command_calls(redis: &RedisServer, command: &str) -> u64 {
    redis
        .cli(&["INFO", "commandstats"])
        .lines()
        .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:calls=")))
        .and_then(|v| v.split(',').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// At the count bound, each append trims with one read of one entry (the bound gives
/// the new oldest at once), not a read of as many entries as go; and a history kept by
/// an older version (entries one per publication, no `f` in its meta) is taken as lost:
/// a new epoch from offset 1, as after Redis came back empty. An expired stream (its meta
/// left) goes on from its offsets with only what came since.
#[tokio::test]
async fn trimming_reads_one_entry_at_the_count_bound_and_expired_or_older_histories_are_gone() {
    use futures_util::StreamExt;
    use jsonrpc_peer::cluster::{Append, TopicKeys};
    use jsonrpc_peer::{HistoryConfig, Position};

    let redis = RedisServer::start();
    let (a, _a_events) = backplane(&redis).await;
    async fn append(
        a: &RedisBackplane,
        keys: &TopicKeys,
        bounds: &HistoryConfig,
        epoch: &str,
        data: &str,
    ) -> Position {
        let head = br#"{"v":1,"k":"x","o":"a","i":"i","s":0,"#;
        let append = Append::new(keys, bounds, epoch, head, data.as_bytes());
        within(a.append(append)).await.expect("append")
    }
    let keys = TopicKeys::new("jp", "steady");
    let ten = HistoryConfig::default().max_len(10);
    for n in 1..=40u64 {
        if n == 11 {
            redis.cli(&["CONFIG", "RESETSTAT"]);
        }
        append(&a, &keys, &ten, "e", &format!("[{n}]")).await;
    }
    assert_eq!(command_calls(&redis, "xrange"), 30, "one read per append");
    assert_eq!(command_calls(&redis, "xtrim"), 30);
    let read = within(a.read_history(&keys, &ten, 30, 100))
        .await
        .expect("read");
    assert_eq!((read.first, read.last, read.entries.len()), (31, 40, 10));
    assert_eq!(read.entries[0].data.as_ref(), b"[31]");

    // An idle topic's stream expires max_age after its last append, its meta stays: the
    // next append finds the expired offsets gone and keeps only itself. Redis says when
    // it expired the stream (a keyspace event): waited for, not polled.
    redis.cli(&["CONFIG", "SET", "notify-keyspace-events", "Ex"]);
    let client = redis::Client::open(redis.url()).expect("the url");
    let mut events = client.get_async_pubsub().await.expect("a pub/sub link");
    within(events.subscribe("__keyevent@0__:expired"))
        .await
        .expect("subscribe");
    let idle = TopicKeys::new("jp", "idle");
    let short = HistoryConfig::default().max_age(Duration::from_millis(100));
    for data in ["[1]", "[2]", "[3]"] {
        append(&a, &idle, &short, "e", data).await;
    }
    let mut expired = events.on_message();
    let mut gone = false;
    for _ in 0..10 {
        let event = within(expired.next()).await.expect("an expiry");
        if event.get_payload::<String>().ok() == Some(idle.stream.clone()) {
            gone = true;
            break;
        }
    }
    assert!(gone, "the stream expired");
    let at = append(&a, &idle, &short, "e", "[4]").await;
    assert_eq!(
        (at.epoch.as_str(), at.offset),
        ("e", 4),
        "the same epoch goes on"
    );
    let read = within(a.read_history(&idle, &short, 3, 100))
        .await
        .expect("read");
    assert_eq!((read.first, read.last, read.entries.len()), (4, 4, 1));
    assert_eq!(read.entries[0].data.as_ref(), b"[4]");

    let old = TopicKeys::new("jp", "old");
    redis.cli(&["HSET", &old.meta, "e", "before", "o", "2", "b", "6"]);
    redis.cli(&["XADD", &old.stream, "1-0", "t", "1", "d", "[1]"]);
    redis.cli(&["XADD", &old.stream, "2-0", "t", "1", "d", "[2]"]);
    let at = append(&a, &old, &ten, "e-new", "[3]").await;
    assert_eq!((at.epoch.as_str(), at.offset), ("e-new", 1));
    let read = within(a.read_history(&old, &ten, 0, 100))
        .await
        .expect("read");
    assert_eq!((read.first, read.last, read.entries.len()), (1, 1, 1));
    assert_eq!(read.entries[0].data.as_ref(), b"[3]");
}

/// Appends made at once go out together (one script call per topic for what waits),
/// and each still gets its own offset, its message published with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_made_at_once_are_committed_together_each_at_its_own_offset() {
    let redis = RedisServer::start();
    let (a, _a_events) = backplane(&redis).await;
    let (b, mut b_events) = backplane(&redis).await;
    let keys = jsonrpc_peer::cluster::TopicKeys::new("jp", "burst");
    let bounds = jsonrpc_peer::HistoryConfig::default();
    within(b.subscribe(&keys.channel)).await.expect("subscribe");
    redis.cli(&["CONFIG", "RESETSTAT"]);
    let head = br#"{"v":1,"k":"x","o":"a","i":"i","s":0,"#;
    let data: Vec<String> = (0..500).map(|i| format!("[{i}]")).collect();
    let appends = data.iter().map(|d| {
        let append = jsonrpc_peer::cluster::Append::new(&keys, &bounds, "e", head, d.as_bytes());
        a.append(append)
    });
    let positions = within(futures_util::future::join_all(appends)).await;
    let mut by_offset = std::collections::HashMap::new();
    for (d, at) in data.iter().zip(positions) {
        let at = at.expect("recorded");
        assert!(
            by_offset.insert(at.offset, d.clone()).is_none(),
            "one offset each"
        );
    }
    let mut offsets: Vec<u64> = by_offset.keys().copied().collect();
    offsets.sort_unstable();
    assert_eq!(offsets, (1..=500).collect::<Vec<_>>());
    // Published in runs (several recorded at once, one message): fewer messages than
    // appends, every publication in offset order, with its own data.
    let mut published = Vec::new();
    let mut messages = 0;
    while published.len() < 500 && messages < 500 {
        let (_, payload) = next_message(&mut b_events).await;
        messages += 1;
        published.extend(recorded(&payload));
    }
    assert!(
        messages < 250,
        "{messages} bus messages for 500 appends made at once"
    );
    assert_eq!(published.len(), 500);
    for (offset, (at, data)) in (1..=500u64).zip(&published) {
        assert_eq!(*at, offset, "in offset order");
        assert_eq!(String::from_utf8_lossy(data), by_offset[&offset]);
    }
    // The history has each at its own offset too.
    let read = within(a.read_history(&keys, &bounds, 0, 1000))
        .await
        .expect("read");
    let kept: Vec<(u64, String)> = read
        .entries
        .iter()
        .map(|e| (e.offset, String::from_utf8_lossy(&e.data).into_owned()))
        .collect();
    let want: Vec<(u64, String)> = (1..=500u64).map(|o| (o, by_offset[&o].clone())).collect();
    assert_eq!(kept, want);
    let calls: u64 = redis
        .cli(&["INFO", "commandstats"])
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|v| v.split(',').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    assert!(
        calls < 250,
        "{calls} script calls for 500 appends made at once"
    );
}

/// What an application's start-up looks like: `?` turns the backplane's error into
/// this crate's, so one function returning `jsonrpc_peer::Result` dials Redis and
/// starts the node.
async fn start_node(url: &str) -> jsonrpc_peer::Result<Cluster> {
    let bus = RedisBackplane::connect(url, fast_options()).await?;
    Cluster::builder(bus, ServerHandle::new())
        .node_id("a")
        .start()
        .await
}

#[tokio::test]
async fn a_backplane_error_converts_with_question_mark_and_the_counters_outlive_the_move() {
    let mut gone = RedisServer::start();
    let url = gone.url();
    gone.kill();
    let err = within(start_node(&url)).await.unwrap_err();
    assert!(
        matches!(err, Error::Cluster(ClusterError::Unavailable(_))),
        "{err:?}"
    );

    // The backplane moved into the builder; its counters are read through the node.
    let mut redis = RedisServer::start();
    let node = within(start_node(&redis.url())).await.expect("started");
    let before = node.stats();
    assert_eq!((before.bus_dropped, before.bus_reconnects), (0, 0));
    let mut state = node.watch_state();
    redis.kill();
    within(state.wait_for(|s| *s == ClusterState::Down))
        .await
        .expect("the node sees the bus go");
    redis.restart();
    within(state.wait_for(|s| *s == ClusterState::Up))
        .await
        .expect("the node sees the bus come back");
    assert!(node.stats().bus_reconnects >= 1, "{:?}", node.stats());
    node.shutdown().await;
}

/// `bus.dropped()` reaching `n`, looked at every 10 ms for at most 10 s: no event says
/// when the subscribing task has handled what Redis pushed.
async fn dropped_reaches(bus: &RedisBackplane, n: u64) {
    for _ in 0..1000 {
        if bus.dropped() >= n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(bus.dropped(), n);
}

/// A consumer that has fallen behind loses messages, counted (`event_capacity`). The
/// `Subscribed` of a subscribe made meanwhile went too, uncounted: what came after it on
/// the channel reached the consumer with no mark of where the subscription took effect
/// (the cluster starts the channel's sequence marks afresh there, so that what was
/// published while it was not subscribed is not reported as a gap).
#[tokio::test]
async fn a_subscribe_made_while_the_consumer_is_behind_is_still_placed_in_the_stream() {
    let redis = RedisServer::start();
    let url = redis.url();
    // No probe during the test: its answer would count in `dropped` too.
    let options = fast_options()
        .event_capacity(4)
        .probe_interval(Duration::from_secs(60));
    let connect = RedisBackplane::connect(&url, options);
    let bus = within(connect).await.unwrap();
    let mut events = bus.events().unwrap();
    let (other, _other_events) = backplane(&redis).await;

    // The consumer falls behind: a's Subscribed and three messages fill the stream, the
    // other 47 are dropped (and counted).
    within(bus.subscribe("jp:t:a")).await.unwrap();
    for n in 0..50u8 {
        within(other.publish("jp:t:a", Bytes::from(vec![n])))
            .await
            .unwrap();
    }
    dropped_reaches(&bus, 47).await;
    // Meanwhile b is subscribed. A message on b, after b's subscription in what Redis
    // pushes, is dropped too: by then the subscription has been handled.
    within(bus.subscribe("jp:t:b")).await.unwrap();
    within(other.publish("jp:t:b", Bytes::from_static(b"lost")))
        .await
        .unwrap();
    dropped_reaches(&bus, 48).await;

    // The consumer catches up; b gets a message.
    let first = within(events.recv()).await;
    assert_eq!(
        first,
        Some(BusEvent::Subscribed {
            channel: "jp:t:a".into()
        })
    );
    for _ in 0..3 {
        let message = within(events.recv()).await.unwrap();
        assert!(matches!(message, BusEvent::Message { .. }), "{message:?}");
    }
    within(other.publish("jp:t:b", Bytes::from_static(b"kept")))
        .await
        .unwrap();
    // Where b's subscription took effect comes first: before anything on b.
    let next = within(events.recv()).await;
    assert_eq!(
        next,
        Some(BusEvent::Subscribed {
            channel: "jp:t:b".into()
        })
    );
}

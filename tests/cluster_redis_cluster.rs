//! `RedisClusterBackplane` against a real Redis Cluster (three masters, three replicas)
//! started by each test on free loopback ports: channels spread over the masters and
//! in order; a master killed and its replica promoted; a slot moved by hand; the whole
//! cluster killed and started again.

mod common;

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use bytes::Bytes;
use common::redis_cluster::RedisCluster;
use common::within;
use jsonrpc_peer::cluster::{
    Append, Backplane, BackplaneError, BusEvent, RedisClusterBackplane, RedisOptions, TopicKeys,
};
use jsonrpc_peer::HistoryConfig;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// Fast probes and timeouts, with room for a loaded machine.
fn options() -> RedisOptions {
    RedisOptions::default()
        .probe_interval(Duration::from_millis(200))
        .probe_misses(5)
        .response_timeout(Duration::from_millis(1000))
        .connect_timeout(Duration::from_millis(500))
        .topology_interval(Duration::from_millis(500))
}

async fn backplane(cluster: &RedisCluster) -> (RedisClusterBackplane, mpsc::Receiver<BusEvent>) {
    let bus = within(RedisClusterBackplane::connect(cluster.seeds(), options()))
        .await
        .expect("connect to the test cluster");
    let events = bus.events().expect("events are taken once");
    (bus, events)
}

/// A longer wait than [`within`]: a failover takes a few seconds, more on a busy machine.
async fn within_30s<T>(fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(30), fut)
        .await
        .expect("a test step took longer than 30 s")
}

/// The next event that is not a message; the messages on the way are returned.
async fn next_state(events: &mut mpsc::Receiver<BusEvent>) -> (BusEvent, Vec<(String, Bytes)>) {
    let mut seen = Vec::new();
    loop {
        match within_30s(events.recv()).await {
            Some(BusEvent::Message { channel, payload }) => seen.push((channel, payload)),
            Some(BusEvent::Subscribed { .. }) => {}
            Some(other) => return (other, seen),
            None => panic!("the event stream ended"),
        }
    }
}

/// The next message; subscriptions taking effect on the way are passed over.
async fn next_message(events: &mut mpsc::Receiver<BusEvent>) -> (String, Bytes) {
    loop {
        match within(events.recv()).await {
            Some(BusEvent::Message { channel, payload }) => return (channel, payload),
            Some(BusEvent::Subscribed { .. }) => {}
            other => panic!("expected a message, got {other:?}"),
        }
    }
}

/// `PUBSUB SHARDNUMSUB channel` on the node at `port`.
fn shard_numsub(cluster: &RedisCluster, port: u16, channel: &str) -> u64 {
    let out = cluster.cli(port, &["PUBSUB", "SHARDNUMSUB", channel]);
    out.lines().nth(1).and_then(|n| n.parse().ok()).unwrap_or(0)
}

/// Channel names `{prefix}N` grouped by the master serving them, at least `each` per
/// master.
fn channels_per_master(
    cluster: &RedisCluster,
    prefix: &str,
    each: usize,
) -> HashMap<u16, Vec<String>> {
    let mut by_master: HashMap<u16, Vec<String>> = HashMap::new();
    for n in 0..10_000 {
        let channel = format!("{prefix}{n}");
        let master = cluster.master_of(cluster.keyslot(&channel));
        let list = by_master.entry(master).or_default();
        if list.len() < each {
            list.push(channel);
        }
        if by_master.len() == cluster.masters().len() && by_master.values().all(|l| l.len() >= each)
        {
            return by_master;
        }
    }
    panic!("could not find {each} channels per master");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shard_channels_spread_over_the_masters_and_keep_their_order() {
    let cluster = RedisCluster::start(3, 1);
    let (a, _a_events) = backplane(&cluster).await;
    let (b, mut b_events) = backplane(&cluster).await;
    assert_eq!(a.spread(), 16);
    let masters: Vec<u16> = cluster.masters().into_iter().map(|(p, _)| p).collect();
    let mut wanted = a.masters();
    wanted.sort();
    assert_eq!(
        wanted,
        masters
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect::<Vec<_>>()
    );

    // 100 channels: each is held by the master of its slot, and only there.
    let channels: Vec<String> = (0..100).map(|i| format!("jp:t:topic{i}")).collect();
    for channel in &channels {
        within(b.subscribe(channel)).await.expect("subscribe acked");
        // Where it took effect, in the stream, by the time the subscribe returns.
        assert_eq!(
            b_events.try_recv(),
            Ok(BusEvent::Subscribed {
                channel: channel.clone()
            })
        );
    }
    let mut per_master: HashMap<u16, usize> = HashMap::new();
    for channel in &channels {
        let owner = cluster.master_of(cluster.keyslot(channel));
        for &m in &masters {
            let want = u64::from(m == owner);
            assert_eq!(shard_numsub(&cluster, m, channel), want, "{channel} on {m}");
        }
        *per_master.entry(owner).or_default() += 1;
    }
    assert_eq!(
        per_master.len(),
        3,
        "spread over every master: {per_master:?}"
    );

    // 3,000 publishes over them, called without awaiting each (pipelines per master):
    // every channel's messages arrive in call order.
    let spublish_before: u64 = masters.iter().map(|&m| cluster.calls(m, "spublish")).sum();
    let pending: Vec<_> = (0..3000usize)
        .map(|i| {
            let channel = &channels[i % channels.len()];
            a.publish(channel, Bytes::from(i.to_string()))
        })
        .collect();
    for (i, publish) in pending.into_iter().enumerate() {
        within(publish)
            .await
            .unwrap_or_else(|e| panic!("publish {i}: {e}"));
    }
    let mut got: HashMap<String, Vec<usize>> = HashMap::new();
    for _ in 0..3000 {
        let (channel, payload) = next_message(&mut b_events).await;
        let n: usize = std::str::from_utf8(&payload).unwrap().parse().unwrap();
        got.entry(channel).or_default().push(n);
    }
    for (c, channel) in channels.iter().enumerate() {
        let want: Vec<usize> = (0..30).map(|k| k * 100 + c).collect();
        assert_eq!(got[channel], want, "{channel}: in call order, once each");
    }
    // Each master ran the SPUBLISHes of its own channels: none carried them all.
    for &m in &masters {
        let calls = cluster.calls(m, "spublish");
        assert!(calls > 300, "master {m} ran {calls} SPUBLISH");
    }
    let spublish_after: u64 = masters.iter().map(|&m| cluster.calls(m, "spublish")).sum();
    assert!(spublish_after - spublish_before >= 3000);

    // A batch in one call; unsubscribing stops delivery. Channels on different shards
    // have no order between them: the end is marked on a channel of the unsubscribed
    // one's slot (its name as a hash tag), after it in the same pipeline.
    let end = format!("end{{{}}}", channels[0]);
    assert_eq!(cluster.keyslot(&end), cluster.keyslot(&channels[0]));
    within(b.subscribe(&end)).await.expect("subscribe acked");
    within(b.unsubscribe(&channels[0]))
        .await
        .expect("unsubscribed");
    assert_eq!(
        shard_numsub(
            &cluster,
            cluster.master_of(cluster.keyslot(&channels[0])),
            &channels[0]
        ),
        0
    );
    let batch = channels
        .iter()
        .take(3)
        .map(|c| (c.clone(), Bytes::from_static(b"batch")))
        .chain([(end.clone(), Bytes::from_static(b"end"))])
        .collect();
    within(a.publish_many(batch)).await.expect("published");
    let mut rest = BTreeSet::new();
    for _ in 0..3 {
        rest.insert(next_message(&mut b_events).await.0);
    }
    let want: BTreeSet<String> = channels[1..3].iter().cloned().chain([end]).collect();
    assert_eq!(rest, want, "nothing on the channel b left");
    assert!(a.is_up() && b.is_up());
    assert_eq!(b.dropped(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_master_interrupts_only_its_channels_until_its_replica_takes_over() {
    let mut cluster = RedisCluster::start(3, 1);
    let (a, _a_events) = backplane(&cluster).await;
    let (b, mut b_events) = backplane(&cluster).await;
    let by_master = channels_per_master(&cluster, "jp:t:k", 3);
    for channel in by_master.values().flatten() {
        within(b.subscribe(channel)).await.expect("subscribe acked");
    }
    let victim = *by_master.keys().min().expect("a master");
    let victims: BTreeSet<String> = by_master[&victim].iter().cloned().collect();
    let survivor = by_master
        .iter()
        .find(|(m, _)| **m != victim)
        .expect("another master");
    let survivor_channel = survivor.1[0].clone();

    cluster.kill(victim);
    // Another shard goes on delivering while the victim's replica has not taken over.
    within(a.publish(&survivor_channel, Bytes::from_static(b"meanwhile")))
        .await
        .expect("the other shards still take publishes");
    assert_eq!(
        next_message(&mut b_events).await,
        (survivor_channel.clone(), Bytes::from_static(b"meanwhile"))
    );
    assert!(b.is_up(), "one master of three gone is not the bus down");

    // The replica takes over; b subscribes there and says which channels were cut.
    let promoted = cluster.wait_failover(cluster.keyslot(&by_master[&victim][0]), victim);
    let (event, _) = next_state(&mut b_events).await;
    let BusEvent::Interrupted { channels } = event else {
        panic!("expected Interrupted, got {event:?}");
    };
    assert_eq!(channels.into_iter().collect::<BTreeSet<_>>(), victims);
    for channel in &victims {
        assert_eq!(
            shard_numsub(&cluster, promoted, channel),
            1,
            "{channel} on {promoted}"
        );
    }
    // Publishes on the promoted master reach b; a followed the new map by itself.
    for channel in &victims {
        within_30s(a.publish(channel, Bytes::from_static(b"after")))
            .await
            .expect("published on the promoted master");
        assert_eq!(
            next_message(&mut b_events).await,
            (channel.clone(), Bytes::from_static(b"after"))
        );
    }
    assert!(a.is_up() && b.is_up());
    assert!(b.reconnects() >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_slot_is_followed_and_only_its_channel_is_interrupted() {
    let cluster = RedisCluster::start(3, 0);
    let (a, _a_events) = backplane(&cluster).await;
    let (b, mut b_events) = backplane(&cluster).await;
    let by_master = channels_per_master(&cluster, "jp:t:m", 2);
    let from = *by_master.keys().min().expect("a master");
    let (moving, staying) = (by_master[&from][0].clone(), by_master[&from][1].clone());
    let slot = cluster.keyslot(&moving);
    assert_ne!(slot, cluster.keyslot(&staying));
    let to = *by_master
        .keys()
        .find(|m| **m != from)
        .expect("another master");
    for channel in [&moving, &staying] {
        within(b.subscribe(channel)).await.expect("subscribe acked");
    }

    // While the slot migrates, the source still serves its shard channels.
    assert_eq!(cluster.begin_move(slot, to), from);
    within(a.publish(&moving, Bytes::from_static(b"migrating")))
        .await
        .expect("published");
    assert_eq!(
        next_message(&mut b_events).await,
        (moving.clone(), Bytes::from_static(b"migrating"))
    );
    // Then it is the target's: the source says `sunsubscribe`, b subscribes on the
    // target, and reports that channel alone.
    cluster.finish_move(slot, from, to);
    let (event, seen) = next_state(&mut b_events).await;
    assert!(seen.is_empty(), "{seen:?}");
    assert_eq!(
        event,
        BusEvent::Interrupted {
            channels: vec![moving.clone()]
        }
    );
    assert_eq!(shard_numsub(&cluster, to, &moving), 1);
    assert_eq!(shard_numsub(&cluster, from, &moving), 0);
    assert_eq!(shard_numsub(&cluster, from, &staying), 1);
    // A's map is stale: Redis answers MOVED, and it publishes on the target.
    for channel in [&moving, &staying] {
        within(a.publish(channel, Bytes::from_static(b"moved")))
            .await
            .expect("published after the move");
        assert_eq!(
            next_message(&mut b_events).await,
            (channel.clone(), Bytes::from_static(b"moved"))
        );
    }
    assert!(a.is_up() && b.is_up());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_whole_cluster_down_and_back_gives_down_then_up_and_every_channel_again() {
    let mut cluster = RedisCluster::start(3, 1);
    let (a, mut a_events) = backplane(&cluster).await;
    let (b, mut b_events) = backplane(&cluster).await;
    let by_master = channels_per_master(&cluster, "jp:t:d", 2);
    let channels: Vec<String> = by_master.values().flatten().cloned().collect();
    for channel in &channels {
        within(b.subscribe(channel)).await.expect("subscribe acked");
    }

    cluster.kill_all();
    let (event, _) = next_state(&mut b_events).await;
    assert_eq!(event, BusEvent::Down, "one Down, no partial report first");
    assert_eq!(next_state(&mut a_events).await.0, BusEvent::Down);
    assert!(!b.is_up());
    let err = within(a.publish(&channels[0], Bytes::from_static(b"lost")))
        .await
        .unwrap_err();
    assert!(matches!(err, BackplaneError::Unavailable(_)), "{err:?}");
    // Subscribed while down: refused now, held once the cluster is back.
    let err = within(b.subscribe("jp:t:while-down")).await.unwrap_err();
    assert!(matches!(err, BackplaneError::Unavailable(_)), "{err:?}");

    cluster.restart_all();
    assert_eq!(next_state(&mut b_events).await.0, BusEvent::Up);
    assert_eq!(next_state(&mut a_events).await.0, BusEvent::Up);
    assert!(a.is_up() && b.is_up());
    for channel in channels
        .iter()
        .map(String::as_str)
        .chain(["jp:t:while-down"])
    {
        let owner = cluster.master_of(cluster.keyslot(channel));
        assert_eq!(shard_numsub(&cluster, owner, channel), 1, "{channel}");
        within(a.publish(channel, Bytes::from(channel.to_owned())))
            .await
            .expect("published");
        assert_eq!(
            next_message(&mut b_events).await,
            (channel.to_owned(), Bytes::from(channel.to_owned()))
        );
    }
}

#[tokio::test]
async fn no_seed_or_a_bad_seed_is_a_clear_error() {
    let none: [&str; 0] = [];
    let err = RedisClusterBackplane::connect(none, options())
        .await
        .unwrap_err();
    assert!(matches!(err, BackplaneError::Unavailable(_)), "{err:?}");
    let err = RedisClusterBackplane::connect(["redis+unix:///tmp/x.sock"], options())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("TCP"), "{err}");
    // A port nobody listens on: refused at once.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let err = within(RedisClusterBackplane::connect(
        [format!("redis://127.0.0.1:{port}")],
        options(),
    ))
    .await
    .unwrap_err();
    assert!(matches!(err, BackplaneError::Unavailable(_)), "{err:?}");
}

#[tokio::test]
async fn a_process_too_busy_to_read_does_not_take_silence_for_a_dead_master() {
    let cluster = RedisCluster::start(3, 0);
    let (a, _a_events) = backplane(&cluster).await;
    let (b, mut b_events) = backplane(&cluster).await;
    within(b.subscribe("jp:t:busy"))
        .await
        .expect("subscribe acked");
    // The test's only runtime thread blocks for more than five probe intervals: the
    // probes come back meanwhile, but nobody reads them.
    std::thread::sleep(Duration::from_millis(1500));
    within(a.publish("jp:t:busy", Bytes::from_static(b"after")))
        .await
        .expect("published");
    assert_eq!(
        next_message(&mut b_events).await,
        ("jp:t:busy".to_owned(), Bytes::from_static(b"after")),
        "no Down or Interrupted first"
    );
    assert_eq!(b.reconnects(), 0, "no link dialed again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_history_script_runs_on_its_topics_master_and_publishes_there() {
    let cluster = RedisCluster::start(3, 0);
    let (a, _a_events) = backplane(&cluster).await;
    let (b, mut b_events) = backplane(&cluster).await;
    let masters: Vec<u16> = cluster.masters().into_iter().map(|(p, _)| p).collect();
    common::history_bus::history_semantics(&a, &b, &mut b_events, || {
        // Empty, as after a restart without persistence; the script caches too.
        for &m in &masters {
            cluster.cli(m, &["FLUSHALL"]);
            cluster.cli(m, &["SCRIPT", "FLUSH"]);
        }
    })
    .await;
    // The topic's stream, meta and channel share a slot: its calls run on its master,
    // which publishes there.
    let keys = TopicKeys::new("jp", "news");
    let home = cluster.master_of(cluster.keyslot(&keys.channel));
    for key in [&keys.stream, &keys.meta] {
        assert_eq!(cluster.master_of(cluster.keyslot(key)), home, "{key}");
    }
    // A listener of its own: what b heard of the checks above is b's business.
    let (c, mut c_events) = backplane(&cluster).await;
    within(c.subscribe(&keys.channel)).await.expect("subscribe");
    let evalsha_before: Vec<u64> = masters
        .iter()
        .map(|&m| cluster.calls(m, "evalsha"))
        .collect();
    let bounds = HistoryConfig::default();
    let head = br#"{"v":1,"k":"x","o":"a","i":"i1","s":0,"#;
    for n in 1..=3u64 {
        let data = format!("[{n}]");
        let append = Append::new(&keys, &bounds, "e", head, data.as_bytes());
        let at = within(a.append(append)).await.expect("append");
        assert_eq!(at.offset, n);
        let (channel, payload) = next_message(&mut c_events).await;
        assert_eq!(channel, keys.channel);
        assert!(payload.ends_with(data.as_bytes()), "{payload:?}");
    }
    for (i, &m) in masters.iter().enumerate() {
        let calls = cluster.calls(m, "evalsha") - evalsha_before[i];
        if m == home {
            assert!(calls > 0, "the topic's master ran the script");
        } else {
            assert_eq!(calls, 0, "master {m} ran {calls} of the topic's scripts");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_go_on_while_their_slot_moves_with_one_order_of_offsets() {
    let cluster = RedisCluster::start(3, 0);
    let (a, _a_events) = backplane(&cluster).await;
    let keys = TopicKeys::new("jp", "moving");
    let bounds = HistoryConfig::default();
    let head = br#"{"v":1,"k":"x","o":"a","i":"i1","s":0,"#;
    let slot = cluster.keyslot(&keys.channel);
    let from = cluster.master_of(slot);
    let to = cluster
        .masters()
        .into_iter()
        .map(|(p, _)| p)
        .find(|p| *p != from)
        .expect("another master");
    let append = |n: u64| {
        let data = format!("[{n}]");
        let a = &a;
        let keys = &keys;
        let bounds = &bounds;
        async move {
            let append = Append::new(keys, bounds, "e1", head, data.as_bytes());
            within_30s(a.append(append)).await
        }
    };
    let mut offsets = Vec::new();
    for n in 1..=10 {
        offsets.push(append(n).await.expect("appended before the move").offset);
    }
    // The keys move while the slot migrates: the source answers ASK for them, the
    // cluster client asks the target (ASKING), then MOVED once it is the target's.
    cluster.begin_move(slot, to);
    for n in 11..=20 {
        offsets.push(append(n).await.expect("appended while migrating").offset);
    }
    cluster.finish_move(slot, from, to);
    for n in 21..=30 {
        offsets.push(append(n).await.expect("appended after the move").offset);
    }
    assert_eq!(
        offsets,
        (1..=30).collect::<Vec<_>>(),
        "one order, no offset twice"
    );
    let read = within(a.read_history(&keys, &bounds, 0, 100))
        .await
        .expect("read after the move");
    let data: Vec<Vec<u8>> = read.entries.iter().map(|e| e.data.to_vec()).collect();
    let want: Vec<Vec<u8>> = (1..=30).map(|n| format!("[{n}]").into_bytes()).collect();
    assert_eq!((read.first, read.last), (1, 30));
    assert_eq!(data, want, "every entry, on the slot's new master");
    assert_eq!(cluster.master_of(cluster.keyslot(&keys.stream)), to);
}

/// The masters disagree about one slot (its owner gave it away by `CLUSTER SETSLOT ..
/// NODE` told to it alone, an operator's half-done move): every `SSUBSCRIBE` for a
/// channel of that slot is refused with `MOVED`, whichever master the map names. The
/// task backs off between tries, as it does for a master it cannot dial (it sent
/// `SSUBSCRIBE` and fetched the slot map back to back: thousands a second).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscribe_refused_again_and_again_is_retried_with_backoff() {
    let cluster = RedisCluster::start(3, 0);
    let masters: Vec<u16> = cluster.masters().into_iter().map(|(p, _)| p).collect();
    let (owner, other) = (masters[1], masters[2]);
    let channel = (0..10_000)
        .map(|n| format!("jp:t:s{n}"))
        .find(|c| cluster.master_of(cluster.keyslot(c)) == owner)
        .expect("a channel on the owner");
    let slot = cluster.keyslot(&channel).to_string();
    let (b, _b_events) = backplane(&cluster).await;
    within(b.subscribe(&channel)).await.expect("subscribed");

    // Slot map fetches, and commands refused with MOVED (not in commandstats).
    let moved = |port: u16| -> u64 {
        let stats = cluster.cli(port, &["INFO", "errorstats"]);
        stats
            .lines()
            .find_map(|l| l.strip_prefix("errorstat_MOVED:count="))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0)
    };
    let count = || -> u64 {
        masters
            .iter()
            .map(|m| moved(*m) + cluster.calls(*m, "cluster|slots"))
            .sum()
    };
    let before = count();
    // The owner alone is told that the slot is the other's.
    let other_id = cluster.id(other);
    assert_eq!(
        cluster.cli(owner, &["CLUSTER", "SETSLOT", &slot, "NODE", &other_id]),
        "OK"
    );
    // Three seconds of it: a task that backs off makes a few dozen tries at most.
    let start = Instant::now();
    let mut calls = 0;
    while start.elapsed() < Duration::from_secs(3) && calls < 5_000 {
        calls = count() - before;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let took = start.elapsed();
    let refused: u64 = masters.iter().map(|m| moved(*m)).sum();
    let slots: u64 = masters
        .iter()
        .map(|m| cluster.calls(*m, "cluster|slots"))
        .sum();
    assert!(
        calls < 500,
        "{calls} MOVED answers and slot map fetches in {took:?} for one channel of slot \
         {slot} (since the start: {refused} MOVED, {slots} CLUSTER SLOTS)"
    );
    assert!(b.is_up());
}

/// A channel left and joined again at once (the last subscriber of a topic leaves as a
/// new one comes): once `subscribe` answered Ok, the subscription holds, and a message
/// published after it arrives, with nothing interrupted (the two commands went out on
/// tasks of their own, and the late `SUNSUBSCRIBE` undid the subscribe).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsubscribe_then_subscribe_at_once_leaves_the_channel_subscribed() {
    let cluster = RedisCluster::start(3, 0);
    let (a, _a_events) = backplane(&cluster).await;
    let (b, mut b_events) = backplane(&cluster).await;
    let channel = "jp:t:{churn}";
    within(b.subscribe(channel)).await.expect("subscribed");
    for round in 0..20u32 {
        let (left, joined) = tokio::join!(b.unsubscribe(channel), b.subscribe(channel));
        left.expect("unsubscribed");
        joined.expect("subscribed");
        let marker = Bytes::from(format!("after {round}"));
        within(a.publish(channel, marker.clone()))
            .await
            .expect("published");
        // Everything up to the marker (or 5 s without it).
        let mut seen = Vec::new();
        let arrived = loop {
            match tokio::time::timeout(Duration::from_secs(5), b_events.recv()).await {
                Ok(Some(BusEvent::Message { payload, .. })) if payload == marker => break true,
                Ok(Some(BusEvent::Subscribed { .. })) => {}
                Ok(Some(other)) => seen.push(other),
                Ok(None) => panic!("the event stream ended"),
                Err(_) => break false,
            }
        };
        assert!(
            arrived && seen.is_empty(),
            "round {round}: subscribe answered Ok, then: {seen:?}; the message published \
             after it {}",
            if arrived {
                "arrived"
            } else {
                "never arrived (5 s)"
            }
        );
    }
    let owner = cluster.master_of(cluster.keyslot(channel));
    assert_eq!(shard_numsub(&cluster, owner, channel), 1);
}

/// The replica of the master on `master`.
fn replica_of(cluster: &RedisCluster, master: u16) -> u16 {
    let id = cluster.id(master);
    let nodes = cluster.cli(master, &["CLUSTER", "NODES"]);
    nodes
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.len() > 3 && f[2].contains("slave") && f[3] == id)
        .and_then(|f| f[1].split(['@', ':']).nth(1)?.parse().ok())
        .expect("the master has a replica")
}

/// Waits (at most 30 s) until every node sees `port` as a master and says
/// `cluster_state:ok` (a node's view may have no master for a slot for a moment).
fn wait_promoted(cluster: &RedisCluster, port: u16) {
    let id = cluster.id(port);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let done = cluster.ports().iter().all(|p| {
            let nodes = cluster.cli(*p, &["CLUSTER", "NODES"]);
            let master = nodes.lines().any(|l| {
                l.starts_with(&id)
                    && l.split_whitespace()
                        .nth(2)
                        .is_some_and(|f| f.contains("master"))
            });
            master
                && cluster
                    .cli(*p, &["CLUSTER", "INFO"])
                    .contains("cluster_state:ok")
        });
        if done {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{port} not promoted in 30 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A manual failover (`CLUSTER FAILOVER` on a replica) is one lost link: its channels
/// are reported interrupted once (one `$/gap` per topic at the node), not once when
/// they were subscribed again on the demoted master (now a replica, which takes
/// `SSUBSCRIBE` for its master's slots) and once more on the promoted one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manual_failover_reports_its_channels_interrupted_once() {
    let cluster = RedisCluster::start(3, 1);
    let (a, _a_events) = backplane(&cluster).await;
    // The slot map fetched every 5 s, the default.
    let b = within(RedisClusterBackplane::connect(
        cluster.seeds(),
        options().topology_interval(Duration::from_secs(5)),
    ))
    .await
    .expect("connect");
    let mut b_events = b.events().expect("events");
    let by_master = channels_per_master(&cluster, "jp:t:f", 2);
    for channel in by_master.values().flatten() {
        within(b.subscribe(channel)).await.expect("subscribe acked");
    }
    let victim = *by_master.keys().min().expect("a master");
    let victims: BTreeSet<String> = by_master[&victim].iter().cloned().collect();
    let replica = replica_of(&cluster, victim);
    assert_eq!(cluster.cli(replica, &["CLUSTER", "FAILOVER"]), "OK");
    let promoted = replica;
    wait_promoted(&cluster, promoted);
    // Wait until b holds the channels on the promoted master and nowhere else.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !victims
        .iter()
        .all(|c| shard_numsub(&cluster, promoted, c) == 1 && shard_numsub(&cluster, victim, c) == 0)
    {
        assert!(
            Instant::now() < deadline,
            "b never subscribed on {promoted} alone: {:?}",
            victims
                .iter()
                .map(|c| (
                    c,
                    shard_numsub(&cluster, victim, c),
                    shard_numsub(&cluster, promoted, c)
                ))
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Markers after it: everything b reports about the failover comes before them.
    for channel in &victims {
        within(a.publish(channel, Bytes::from_static(b"marker")))
            .await
            .expect("published on the promoted master");
    }
    let mut interrupted = Vec::new();
    let mut markers = BTreeSet::new();
    while markers != victims {
        match within(b_events.recv()).await {
            Some(BusEvent::Message { channel, payload }) if &payload[..] == b"marker" => {
                markers.insert(channel);
            }
            Some(BusEvent::Interrupted { channels }) => interrupted.push(channels),
            Some(_) => {}
            None => panic!("the event stream ended"),
        }
    }
    assert_eq!(
        interrupted.len(),
        1,
        "one failover, one Interrupted for {victims:?}; got {interrupted:?}"
    );
    assert_eq!(
        interrupted[0].iter().cloned().collect::<BTreeSet<_>>(),
        victims
    );
}

/// One topic on the master at `port`, by its channel's slot (its history's and
/// presence's keys share it).
fn topic_on(cluster: &RedisCluster, port: u16) -> String {
    (0..10_000)
        .map(|n| format!("t{n}"))
        .find(|t| {
            let channel = TopicKeys::new("jp", t).channel;
            cluster.master_of(cluster.keyslot(&channel)) == port
        })
        .expect("a topic on every master within 10,000 names")
}

/// A topic's history and presence on the bus: one append, a read, the position, one
/// member written and read back. Each call's time is returned with its outcome.
async fn history_and_presence(
    bus: &RedisClusterBackplane,
    topic: &str,
    n: u64,
) -> Vec<(&'static str, Duration, Result<(), BackplaneError>)> {
    let keys = TopicKeys::new("jp", topic);
    let bounds = HistoryConfig::default();
    let head = br#"{"v":1,"k":"x","o":"a","i":"i1","s":0,"#;
    let data = format!("[{n}]");
    let presence = jsonrpc_peer::cluster::PresenceKey::new("jp", topic);
    let mut write = jsonrpc_peer::cluster::PartWrite::new(
        presence.clone(),
        "a",
        "i1",
        n,
        Duration::from_secs(60),
    );
    write.replace = true;
    write.set.push((n, Bytes::from_static(b"{}")));
    let mut done = Vec::new();
    let start = Instant::now();
    let append = bus.append(Append::new(&keys, &bounds, "e1", head, data.as_bytes()));
    let result = within_30s(append).await.map(|_| ());
    done.push(("append", start.elapsed(), result));
    let start = Instant::now();
    let result = within_30s(bus.read_history(&keys, &bounds, 0, 10)).await;
    done.push(("read_history", start.elapsed(), result.map(|_| ())));
    let start = Instant::now();
    let result = within_30s(bus.history_position(&keys, &bounds, "e1")).await;
    done.push(("history_position", start.elapsed(), result.map(|_| ())));
    let start = Instant::now();
    let result = within_30s(bus.presence_write(vec![write])).await;
    done.push(("presence_write", start.elapsed(), result.map(|_| ())));
    let start = Instant::now();
    let read = jsonrpc_peer::cluster::PresenceRead::new(presence);
    let result = within_30s(bus.presence_read(read)).await;
    let result = result.and_then(|stored| match stored.parts.len() {
        1 => Ok(()),
        n => Err(BackplaneError::Unavailable(format!("{n} parts read"))),
    });
    done.push(("presence_read", start.elapsed(), result));
    done
}

/// A master dead with no replica to take over, in a cluster set to serve the other
/// slots meanwhile (`cluster-require-full-coverage no`): history and presence of the
/// topics on the other masters go on as before, each call at once, and all of them
/// work again once it is back. `frozen`: the master's process stopped (SIGSTOP, as a
/// host that stopped answering: connections open, nothing comes back) rather than
/// killed (connections refused).
async fn dead_master_fails_only_its_own_topics(frozen: bool) {
    let mut cluster = RedisCluster::start(3, 0);
    for (port, _) in cluster.masters() {
        let set = ["CONFIG", "SET", "cluster-require-full-coverage", "no"];
        assert_eq!(cluster.cli(port, &set), "OK");
    }
    let bus = within(RedisClusterBackplane::connect(cluster.seeds(), options()))
        .await
        .expect("connect to the test cluster");
    let masters: Vec<u16> = cluster.masters().into_iter().map(|(p, _)| p).collect();
    let victim = masters[0];
    let dead = topic_on(&cluster, victim);
    let live: Vec<String> = masters[1..]
        .iter()
        .map(|&m| topic_on(&cluster, m))
        .collect();
    for topic in live.iter().chain([&dead]) {
        for (call, _, result) in history_and_presence(&bus, topic, 1).await {
            assert!(result.is_ok(), "{call} on {topic} before: {result:?}");
        }
    }

    let info = cluster.cli(victim, &["INFO", "server"]);
    let pid = info
        .lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .expect("the master's process id")
        .trim()
        .to_owned();
    tokio::task::block_in_place(|| {
        let id = cluster.id(victim);
        if frozen {
            signal(&pid, "-STOP");
        } else {
            cluster.kill(victim);
        }
        wait_failed(&cluster, masters[1], &id);
    });
    // The dead master's topics asked all along, while the others are: whatever the
    // client does about the dead master (its recovery included) is under way then.
    // The live topics are asked round after round until the dead one's calls have
    // failed two rounds over (each fails after its tries), so the two overlap.
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let failed = std::cell::Cell::new(0);
    let dead_calls = async {
        while !*stopped.borrow() {
            for (call, _, result) in history_and_presence(&bus, &dead, 2).await {
                assert!(
                    result.is_err(),
                    "{call} on the dead master's topic: {result:?}"
                );
                failed.set(failed.get() + 1);
            }
        }
    };
    let live_calls = async {
        for round in 3.. {
            for topic in &live {
                for (call, took, result) in history_and_presence(&bus, topic, round).await {
                    assert!(result.is_ok(), "{call} on {topic}: {result:?}");
                    assert!(
                        took < Duration::from_millis(900),
                        "{call} on {topic}, a live master's topic, took {took:?}"
                    );
                }
            }
            if failed.get() >= 10 {
                break;
            }
            assert!(
                round < 100_000,
                "the dead master's calls never failed 10 times"
            );
        }
        stop.send_replace(true);
    };
    within_30s(async { tokio::join!(dead_calls, live_calls) }).await;

    tokio::task::block_in_place(|| {
        if frozen {
            signal(&pid, "-CONT");
            cluster.wait_ready();
        } else {
            cluster.restart_all();
        }
    });
    for topic in live.iter().chain([&dead]) {
        let start = Instant::now();
        loop {
            let calls = history_and_presence(&bus, topic, 5).await;
            if calls.iter().all(|(_, _, result)| result.is_ok()) {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "{topic} after the master came back: {:?}",
                calls.iter().map(|(c, _, r)| (c, r)).collect::<Vec<_>>()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_master_with_no_replica_fails_only_its_own_topics_history_and_presence() {
    dead_master_fails_only_its_own_topics(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_master_with_no_replica_fails_only_its_own_topics_history_and_presence() {
    dead_master_fails_only_its_own_topics(true).await;
}

/// Sends `signal` (`-STOP`, `-CONT`) to the process `pid`.
fn signal(pid: &str, signal: &str) {
    let status = std::process::Command::new("kill")
        .args([signal, pid])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill {signal} {pid}");
}

/// Waits (at most 30 s) until the node at `asked` takes the node `id` for failed
/// (`fail` in its `CLUSTER NODES`, not only suspected).
fn wait_failed(cluster: &RedisCluster, asked: u16, id: &str) {
    let start = std::time::Instant::now();
    loop {
        let nodes = cluster.cli(asked, &["CLUSTER", "NODES"]);
        let flags = nodes
            .lines()
            .find(|line| line.starts_with(id))
            .and_then(|line| line.split(' ').nth(2))
            .unwrap_or("")
            .to_owned();
        if flags.split(',').any(|f| f == "fail") {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{id} never failed: {flags}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

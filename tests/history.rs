//! Topic history on one node, frame by frame: offsets, epochs, resuming from a position
//! across dropped TCP connections, the bounds, long replays, concurrent publishers, and
//! a subscriber that falls behind.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{within, RawClient};
use futures_util::{SinkExt, StreamExt};
use jsonrpc_peer::transport::{self, Frame, Text};
use jsonrpc_peer::{
    Caller, Context, Error, HistoryConfig, HistoryError, Peer, PeerConfig, Router, SlowPeer,
    TopicMethods, Topics,
};
use serde_json::{json, Value};
use tokio::sync::mpsc;

/// A notification on a topic with history, exactly as it is on the wire.
fn notification(topic: &str, offset: u64, data: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","method":"{topic}","params":{{"offset":{offset},"data":{data}}}}}"#
    )
}

/// `subscribe [topic]` or `subscribe [topic, {"epoch":E,"offset":K}]` with `id`.
fn subscribe(id: u64, topic: &str, from: Option<(&str, u64)>) -> String {
    let params = match from {
        Some((epoch, offset)) => json!([topic, {"epoch": epoch, "offset": offset}]),
        None => json!([topic]),
    };
    json!({"jsonrpc": "2.0", "method": "subscribe", "params": params, "id": id}).to_string()
}

async fn serve(topics: &Topics, config: PeerConfig) -> String {
    let router = Router::new().topics(TopicMethods::new(topics));
    common::serve_with(router, config).await.0
}

/// The seed of a test's random choices: `HISTORY_SEED` if set, else a fresh one.
/// Printed, so a failure can be run again with it.
fn seed() -> u64 {
    let seed = std::env::var("HISTORY_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..));
    println!("HISTORY_SEED={seed}");
    seed
}

/// Reads frames until the answer with `id`; returns the notifications' texts read
/// before it, and the answer's `result`.
async fn until_answer(client: &mut RawClient, id: u64) -> (Vec<String>, Value) {
    let mut before = Vec::new();
    for _ in 0..100_000 {
        let text = client.recv_text().await.expect("the connection stays open");
        let frame: Value = serde_json::from_str(&text).unwrap();
        if frame.get("id").is_some() {
            assert_eq!(frame["id"], id, "{text}");
            return (before, frame["result"].clone());
        }
        before.push(text);
    }
    panic!("no answer to {id}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_drops_its_tcp_connection_at_random_points_resumes_every_offset_once_in_order(
) {
    let mut rng = fastrand::Rng::with_seed(seed());
    const N: u64 = 1500;
    let topics = Topics::new();
    topics.keep_history("feed", HistoryConfig::default().max_len(100_000));
    let url = serve(&topics, PeerConfig::default()).await;

    let mut client = RawClient::connect(&url).await;
    let answer = client.ask(&subscribe(1, "feed", None)).await;
    let epoch = answer["result"]["epoch"].as_str().unwrap().to_owned();
    assert_eq!(
        answer,
        json!({"jsonrpc": "2.0", "result": {"epoch": epoch, "offset": 0}, "id": 1}),
        "no `recovered` without a position"
    );

    // A steady stream: one publication a millisecond, each recorded at the next offset.
    let publisher = tokio::spawn({
        let topics = topics.clone();
        async move {
            let mut tick = tokio::time::interval(Duration::from_millis(1));
            for i in 1..=N {
                tick.tick().await;
                let published = topics.publish("feed", &[i]).await.unwrap();
                assert_eq!(published.offset, Some(i));
            }
        }
    });

    let mut last = 0u64;
    let mut drops = 0u64;
    let mut id = 1u64;
    // The position the current connection resumed from.
    let mut resumed_from = 0u64;
    while last < N {
        // Read a random number of notifications, then drop the TCP connection.
        let budget = rng.u64(1..=200);
        let mut read = 0;
        while read < budget && last < N {
            let text = client.recv_text().await.expect("the connection stays open");
            let frame: Value = serde_json::from_str(&text).unwrap();
            if frame.get("id").is_some() {
                assert_eq!(frame["id"], id);
                let result = &frame["result"];
                assert_eq!(result["epoch"], epoch.as_str());
                assert_eq!(result["recovered"], true, "{text}");
                // Live publications may come before the answer (README: offsets make
                // the order unambiguous), so the answer's position is only known to be
                // no older than the one resumed from, and no newer than what was
                // published.
                let offset = result["offset"].as_u64().unwrap();
                assert!((resumed_from..=N).contains(&offset), "{text}");
                continue;
            }
            assert_eq!(
                text,
                notification("feed", last + 1, &format!("[{}]", last + 1)),
                "after offset {last}, drop {drops}"
            );
            last += 1;
            read += 1;
        }
        if last == N {
            break;
        }
        // No close frame: the server sees the TCP connection end.
        drop(client);
        drops += 1;
        assert!(drops <= N, "bounded");
        client = RawClient::connect(&url).await;
        id += 1;
        resumed_from = last;
        client
            .send(&subscribe(id, "feed", Some((&epoch, last))))
            .await;
    }
    within(publisher).await.unwrap();
    assert!(
        drops >= 3,
        "the test dropped the connection only {drops} times"
    );
}

#[tokio::test]
async fn a_resume_from_outside_the_window_or_another_epoch_says_recovered_false_and_replays_nothing(
) {
    let topics = Topics::new();
    topics.keep_history("t", HistoryConfig::default().max_len(5));
    let url = serve(&topics, PeerConfig::default()).await;
    for i in 1..=10u64 {
        topics.publish("t", &[i]).await.unwrap();
    }
    let epoch = topics.position("t").unwrap().epoch;
    let mut client = RawClient::connect(&url).await;

    // 6..=10 are kept: 5 continues, 4 does not; nor does 11, nor another epoch.
    let refused = [
        (epoch.as_str(), 4),
        (epoch.as_str(), 0),
        (epoch.as_str(), 11),
        ("another-epoch", 10),
    ];
    for (n, (e, k)) in refused.into_iter().enumerate() {
        let id = n as u64 + 1;
        client.send(&subscribe(id, "t", Some((e, k)))).await;
        let (before, result) = until_answer(&mut client, id).await;
        assert_eq!(
            result,
            json!({"epoch": epoch, "offset": 10, "recovered": false})
        );
        assert!(before.is_empty(), "{before:?}");
    }
    // Nothing replayed after the answers either: the next frame is the next publication.
    topics.publish("t", &[11]).await.unwrap();
    assert_eq!(
        client.recv_text().await.unwrap(),
        notification("t", 11, "[11]")
    );

    // From the oldest kept minus one: everything kept, before the answer.
    client.send(&subscribe(9, "t", Some((&epoch, 6)))).await;
    let (before, result) = until_answer(&mut client, 9).await;
    assert_eq!(
        result,
        json!({"epoch": epoch, "offset": 11, "recovered": true})
    );
    let expected: Vec<String> = (7..=11)
        .map(|i| notification("t", i, &format!("[{i}]")))
        .collect();
    assert_eq!(before, expected);
}

#[tokio::test]
async fn a_resume_after_a_server_restart_says_recovered_false() {
    let first = Topics::new();
    first.keep_history("t", HistoryConfig::default());
    let (url, handle) = common::serve_with(
        Router::new().topics(TopicMethods::new(&first)),
        PeerConfig::default(),
    )
    .await;
    let mut client = RawClient::connect(&url).await;
    let (_, result) = {
        client.send(&subscribe(1, "t", None)).await;
        until_answer(&mut client, 1).await
    };
    let old_epoch = result["epoch"].as_str().unwrap().to_owned();
    for i in 1..=3u64 {
        first.publish("t", &[i]).await.unwrap();
        assert_eq!(
            client.recv_text().await.unwrap(),
            notification("t", i, &format!("[{i}]"))
        );
    }
    within(handle.shutdown()).await;
    assert_eq!(client.recv_text().await, None, "the server went away");

    // The process's state is new: new Topics, a new epoch, offsets from 1 again.
    let second = Topics::new();
    second.keep_history("t", HistoryConfig::default());
    let url = serve(&second, PeerConfig::default()).await;
    second.publish("t", &["new"]).await.unwrap();
    second.publish("t", &["newer"]).await.unwrap();
    let mut client = RawClient::connect(&url).await;
    client.send(&subscribe(2, "t", Some((&old_epoch, 3)))).await;
    let (before, result) = until_answer(&mut client, 2).await;
    let new_epoch = second.position("t").unwrap().epoch;
    assert_ne!(new_epoch, old_epoch);
    assert_eq!(
        result,
        json!({"epoch": new_epoch, "offset": 2, "recovered": false})
    );
    assert!(before.is_empty(), "nothing replayed: {before:?}");
    second.publish("t", &["live"]).await.unwrap();
    assert_eq!(
        client.recv_text().await.unwrap(),
        notification("t", 3, r#"["live"]"#)
    );
}

#[tokio::test]
async fn the_byte_bound_trims_the_oldest_and_refuses_what_cannot_fit() {
    let topics = Topics::new();
    topics.keep_history("t", HistoryConfig::default().max_bytes(100));
    let url = serve(&topics, PeerConfig::default()).await;
    // Each payload is 40 bytes as serialized: two fit in 100, three do not.
    let payload = |i: u64| format!("{i}{}", "x".repeat(37));
    for i in 1..=5u64 {
        let data = payload(i);
        assert_eq!(serde_json::to_string(&data).unwrap().len(), 40);
        topics.publish("t", &data).await.unwrap();
    }
    let epoch = topics.position("t").unwrap().epoch;
    let mut client = RawClient::connect(&url).await;
    client.send(&subscribe(1, "t", Some((&epoch, 2)))).await;
    let (before, result) = until_answer(&mut client, 1).await;
    assert_eq!(result["recovered"], false, "3 is gone");
    assert!(before.is_empty());
    client.send(&subscribe(2, "t", Some((&epoch, 3)))).await;
    let (before, result) = until_answer(&mut client, 2).await;
    assert_eq!(result["recovered"], true, "4 and 5 are kept");
    let expected: Vec<String> = (4..=5)
        .map(|i| notification("t", i, &format!("\"{}\"", payload(i))))
        .collect();
    assert_eq!(before, expected);

    // A publication larger than the whole bound is refused, takes no offset, and
    // reaches no one.
    let err = topics.publish("t", &"y".repeat(99)).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::History(HistoryError::TooLarge {
                bytes: 101,
                max_bytes: 100,
                ..
            })
        ),
        "{err:?}"
    );
    assert_eq!(topics.position("t").unwrap().offset, 5);
    topics.publish("t", &"z").await.unwrap();
    assert_eq!(
        client.recv_text().await.unwrap(),
        notification("t", 6, r#""z""#)
    );
}

/// A subscriber that asks to resume again (a second `subscribe` from a position) and
/// cancels that call while its replay waits for room stays subscribed, and live: the
/// next publication reaches it. (It was left counted but deaf: in the log's catch-up
/// set, which nothing emptied.)
#[tokio::test]
async fn a_resume_cancelled_mid_replay_leaves_a_subscriber_live() {
    use jsonrpc_peer::transport::Memory;

    async fn send(client: &mut Memory, text: String) {
        within(client.send(Frame::Text(Text::from(text))))
            .await
            .unwrap();
    }
    /// The offsets of the notifications read before the answer with `id`, and the answer.
    async fn answer(client: &mut Memory, id: u64) -> (Vec<u64>, Value) {
        let mut offsets = Vec::new();
        for _ in 0..100_000 {
            let Some(Ok(Frame::Text(text))) = within(client.next()).await else {
                panic!("the connection stays open");
            };
            let frame: Value = serde_json::from_str(&text).unwrap();
            if frame.get("id").is_some() {
                assert_eq!(frame["id"], id, "{frame}");
                return (offsets, frame);
            }
            offsets.push(frame["params"]["offset"].as_u64().unwrap());
        }
        panic!("no answer to {id}");
    }

    let topics = Topics::new();
    topics.keep_history("t", HistoryConfig::default());
    let (mut client, b) = transport::pair_with_capacity(4);
    let server = Peer::start(
        b,
        Arc::new(Router::new().topics(TopicMethods::new(&topics))),
        &PeerConfig::default().outgoing_queue(4),
    );
    send(&mut client, subscribe(1, "t", None)).await;
    let epoch = answer(&mut client, 1).await.1["result"]["epoch"]
        .as_str()
        .unwrap()
        .to_owned();
    for i in 1..=20u64 {
        topics.publish("t", &[i]).await.unwrap();
        assert_eq!(offset_of(within(client.next()).await), i);
    }
    // Again from 0: the replay fills the transport and the queue, then waits for room.
    send(&mut client, subscribe(2, "t", Some((&epoch, 0)))).await;
    for _ in 0..100_000 {
        if server.queued_bytes() > 0 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert!(server.queued_bytes() > 0, "the replay waits for room");
    let cancel = json!({"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":2}});
    send(&mut client, cancel.to_string()).await;
    let (replayed, cancelled) = answer(&mut client, 2).await;
    assert_eq!(cancelled["error"]["code"], -32800, "{cancelled}");
    assert!(replayed.len() < 20, "cut short: {replayed:?}");

    assert_eq!(topics.subscriber_count("t"), 1);
    assert_eq!(topics.topics_of(&server), ["t"]);
    let published = topics.publish("t", &[21]).await.unwrap();
    assert_eq!(published.delivered, 1, "subscribed, and live");
    assert_eq!(offset_of(within(client.next()).await), 21);
}

/// The offset of a notification frame read from a raw transport.
fn offset_of(frame: Option<Result<Frame, jsonrpc_peer::transport::TransportError>>) -> u64 {
    let Some(Ok(Frame::Text(text))) = frame else {
        panic!("a text frame, not {frame:?}");
    };
    let frame: Value = serde_json::from_str(&text).unwrap();
    frame["params"]["offset"]
        .as_u64()
        .unwrap_or_else(|| panic!("{frame}"))
}

/// With every topic keeping history, subscribing a peer whose connection has ended
/// leaves no history behind for a topic with no subscriber and nothing published (as a
/// leave would not).
#[tokio::test]
async fn subscribing_a_closed_peer_leaves_no_history_behind() {
    let topics = Topics::new();
    topics.keep_history_for_all(HistoryConfig::default());
    let (a, b) = transport::pair();
    let server = Peer::start(b, Arc::new(Router::new()), &PeerConfig::default());
    let client = Peer::start(a, Arc::new(Router::new()), &PeerConfig::default());
    client.close().await;
    within(server.closed()).await;
    for i in 0..100 {
        topics.subscribe(&server, &format!("user/{i}"));
    }
    assert!(topics.topics_of(&server).is_empty());
    let kept = (0..100)
        .filter(|i| topics.position(&format!("user/{i}")).is_some())
        .count();
    assert_eq!(
        kept, 0,
        "histories kept for topics with no one and nothing in them"
    );
}

/// A server peer over an in-memory transport and a client peer whose `t`
/// notifications go to the returned receiver as `(offset, data)`.
fn memory_pair(
    topics: &Topics,
    config: &PeerConfig,
) -> (Peer, Peer, mpsc::UnboundedReceiver<(u64, Value)>) {
    let (a, b) = transport::pair();
    let server = Peer::start(
        b,
        Arc::new(Router::new().topics(TopicMethods::new(topics))),
        config,
    );
    let (tx, rx) = mpsc::unbounded_channel();
    let client_router = Router::with_state(tx).notification(
        "t",
        |cx: Context<mpsc::UnboundedSender<(u64, Value)>>, p: Value| async move {
            let _ = cx
                .state()
                .send((p["offset"].as_u64().unwrap(), p["data"].clone()));
        },
    );
    let client = Peer::start(a, Arc::new(client_router), &PeerConfig::default());
    (server, client, rx)
}

#[tokio::test(start_paused = true)]
async fn the_age_bound_trims_what_is_older_than_max_age() {
    let topics = Topics::new();
    topics.keep_history(
        "t",
        HistoryConfig::default().max_age(Duration::from_secs(10)),
    );
    let (_server, client, mut rx) = memory_pair(&topics, &PeerConfig::default());
    topics.publish("t", &[1]).await.unwrap();
    tokio::time::advance(Duration::from_secs(6)).await;
    topics.publish("t", &[2]).await.unwrap();
    let epoch = topics.position("t").unwrap().epoch;
    let resume = |offset: u64| json!(["t", {"epoch": epoch, "offset": offset}]);

    // At 10 s the first is gone, the second (4 s old) is kept.
    tokio::time::advance(Duration::from_secs(4)).await;
    let answer: Value = within(client.call("subscribe", resume(0))).await.unwrap();
    assert_eq!(answer["recovered"], false);
    let answer: Value = within(client.call("subscribe", resume(1))).await.unwrap();
    assert_eq!(answer["recovered"], true);
    assert_eq!(within(rx.recv()).await.unwrap(), (2, json!([2])));

    // At 16 s the second is gone too; the newest offset still continues.
    tokio::time::advance(Duration::from_secs(6)).await;
    let answer: Value = within(client.call("subscribe", resume(1))).await.unwrap();
    assert_eq!(answer["recovered"], false);
    let answer: Value = within(client.call("subscribe", resume(2))).await.unwrap();
    assert_eq!(
        answer,
        json!({"epoch": epoch, "offset": 2, "recovered": true})
    );
    topics.publish("t", &[3]).await.unwrap();
    assert_eq!(within(rx.recv()).await.unwrap(), (3, json!([3])));
    assert!(rx.try_recv().is_err(), "nothing twice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_longer_than_the_outgoing_queue_does_not_close_the_subscriber() {
    // Far more than the buffers between the server's queue and the client's reads
    // hold (tungstenite's 64 KiB and both sockets' buffers, which the kernel sizes):
    // with 5,000, on a busy machine the whole replay was once in them before the
    // client had read 60 frames of it, and the subscriber caught up after 11
    // publications (1 run in 70). With 20,000: 3,900 to 4,900 in ten runs.
    const KEPT: u64 = 20_000;
    let topics = Topics::new();
    topics.keep_history("t", HistoryConfig::default().max_len(100_000));
    // A queue of 8 frames and 4 KiB: the replay is 2,500 times longer.
    let config = PeerConfig::default()
        .outgoing_queue(8)
        .outgoing_queue_bytes(4096);
    let url = serve(&topics, config).await;
    for i in 1..=KEPT {
        topics.publish("t", &[i]).await.unwrap();
    }
    let epoch = topics.position("t").unwrap().epoch;
    let mut client = RawClient::connect(&url).await;
    client.send(&subscribe(1, "t", Some((&epoch, 0)))).await;
    // Publications go on during the replay, one for every five frames the client has
    // read (and one when it has the answer), until one is queued live: then the
    // subscriber has caught up. (Going on live at that rate could still overflow a
    // queue this small, as TCP's buffers let the client read far behind the server:
    // that would be the slow-peer close, rightly, and not what this test is about.)
    let (read, mut reads) = mpsc::unbounded_channel::<()>();
    let mut publisher = Some(tokio::spawn({
        let topics = topics.clone();
        async move {
            for i in KEPT + 1..=KEPT * 10 {
                within(reads.recv()).await.unwrap();
                let published = topics.publish("t", &[i]).await.unwrap();
                if published.delivered == 1 {
                    return i;
                }
                assert_eq!(published.delivered, 0, "catching up: in the history only");
            }
            panic!("the subscriber never caught up");
        }
    }));
    let mut last = None;
    let mut next = 1;
    while last.is_none_or(|last| next <= last) {
        let text = client.recv_text().await.expect("not closed");
        if text.contains(r#""id":1"#) {
            let answer: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(answer["result"]["recovered"], true, "{text}");
            let _ = read.send(());
            let publisher = publisher.take().expect("one answer");
            last = Some(within(publisher).await.unwrap());
            continue;
        }
        assert_eq!(text, notification("t", next, &format!("[{next}]")));
        if next % 5 == 0 {
            let _ = read.send(());
        }
        next += 1;
    }
    let during = last.unwrap() - KEPT;
    println!("{during} publications during the replay");
    assert!(during > 100, "only {during} publications during the replay");
    // Still subscribed, live.
    topics.publish("t", &["after"]).await.unwrap();
    assert_eq!(
        client.recv_text().await.unwrap(),
        notification("t", last.unwrap() + 1, r#"["after"]"#)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_concurrent_publishers_give_every_subscriber_one_order() {
    const EACH: u64 = 1000;
    let topics = Topics::new();
    topics.keep_history("t", HistoryConfig::default());
    // Room for everything: the clients read only once both publishers are done.
    let url = serve(
        &topics,
        PeerConfig::default().outgoing_queue(4 * EACH as usize),
    )
    .await;
    let mut clients = Vec::new();
    for i in 0..3 {
        let mut client = RawClient::connect(&url).await;
        client.send(&subscribe(i, "t", None)).await;
        let (_, result) = until_answer(&mut client, i).await;
        assert_eq!(result["offset"], 0);
        clients.push(client);
    }
    let publish = |who: u64| {
        let topics = topics.clone();
        tokio::spawn(async move {
            for i in 0..EACH {
                topics.publish("t", &[who, i]).await.unwrap();
                if i % 8 == 0 {
                    tokio::task::yield_now().await;
                }
            }
        })
    };
    let (a, b) = (publish(0), publish(1));
    within(a).await.unwrap();
    within(b).await.unwrap();

    let mut orders = Vec::new();
    for client in &mut clients {
        let mut order = Vec::new();
        for offset in 1..=2 * EACH {
            let frame: Value = serde_json::from_str(&client.recv_text().await.unwrap()).unwrap();
            assert_eq!(frame["params"]["offset"], offset, "contiguous");
            order.push(frame["params"]["data"].clone());
        }
        orders.push(order);
    }
    assert_eq!(orders[0], orders[1]);
    assert_eq!(orders[0], orders[2]);
    // Each publisher's own order is kept within the one order.
    for who in 0..2u64 {
        let mine: Vec<u64> = orders[0]
            .iter()
            .filter(|d| d[0] == who)
            .map(|d| d[1].as_u64().unwrap())
            .collect();
        assert_eq!(mine, (0..EACH).collect::<Vec<_>>());
    }
    // Interleaved: neither ran wholly before the other (one order of two, not a queue).
    assert!(
        orders[0][..EACH as usize].iter().any(|d| d[0] == 1)
            || orders[0][EACH as usize..].iter().any(|d| d[0] == 0),
        "the two publishers did not overlap; the test proves less"
    );
}

/// Publishes 1..=20 on a topic keeping 20, subscribes a client that does not read from
/// offset 0, waits until the server's replay is stuck on the full queue, publishes
/// 21..=60 (the history now holds 41..=60), then reads everything the server sends.
async fn fall_behind(slow_peer: SlowPeer) -> Vec<Frame> {
    let topics = Topics::new();
    topics.keep_history("t", HistoryConfig::default().max_len(20));
    for i in 1..=20u64 {
        topics.publish("t", &[i]).await.unwrap();
    }
    let epoch = topics.position("t").unwrap().epoch;
    let (mut client, b) = transport::pair_with_capacity(4);
    let config = PeerConfig::default().outgoing_queue(4).slow_peer(slow_peer);
    let server = Peer::start(
        b,
        Arc::new(Router::new().topics(TopicMethods::new(&topics))),
        &config,
    );
    let request = subscribe(1, "t", Some((&epoch, 0)));
    within(client.send(Frame::Text(Text::from(request))))
        .await
        .unwrap();
    // The replay fills the transport (4) and the queue (4), then waits for room.
    for _ in 0..100_000 {
        if server.queued_bytes() >= 4 * notification("t", 1, "[1]").len() {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert!(server.queued_bytes() > 0, "the replay did not start");
    for i in 21..=60u64 {
        topics.publish("t", &[i]).await.unwrap();
    }
    let mut frames = Vec::new();
    for _ in 0..1000 {
        match within(client.next()).await {
            Some(Ok(frame)) => {
                let end = matches!(frame, Frame::Close(_));
                frames.push(frame);
                if end {
                    break;
                }
                if let Some(Frame::Text(text)) = frames.last() {
                    if text.contains(r#""id":1"#) {
                        // The answer: with SlowPeer::Drop the subscription is live.
                        topics.publish("t", &["live"]).await.unwrap();
                    } else if text.contains("live") {
                        break;
                    }
                }
            }
            _ => break,
        }
    }
    frames
}

fn offsets(frames: &[Frame]) -> Vec<u64> {
    frames
        .iter()
        .filter_map(|f| match f {
            Frame::Text(t) => serde_json::from_str::<Value>(t).ok(),
            _ => None,
        })
        .filter_map(|v| v["params"]["offset"].as_u64())
        .collect()
}

#[tokio::test]
async fn a_subscriber_that_falls_out_of_the_history_while_catching_up_is_closed_with_1008() {
    let frames = fall_behind(SlowPeer::Close).await;
    let got = offsets(&frames);
    assert!(!got.is_empty() && got.len() < 20, "{got:?}");
    assert_eq!(
        got,
        (1..=got.len() as u64).collect::<Vec<_>>(),
        "in order, then closed"
    );
    assert!(
        !frames
            .iter()
            .any(|f| matches!(f, Frame::Text(t) if t.contains(r#""id":1"#))),
        "no answer: the subscription did not take effect"
    );
    assert_eq!(
        frames.last(),
        Some(&Frame::Close(Some((
            1008,
            "fell behind the topic's history".to_owned()
        ))))
    );
}

#[tokio::test]
async fn with_slow_peer_drop_a_subscriber_that_falls_behind_skips_to_the_oldest_kept() {
    let frames = fall_behind(SlowPeer::Drop).await;
    let got = offsets(&frames);
    let jump = got.iter().position(|&o| o > 20).expect("it went on");
    assert_eq!(
        &got[..jump],
        (1..=jump as u64).collect::<Vec<_>>().as_slice()
    );
    assert_eq!(
        &got[jump..],
        (41..=61).collect::<Vec<_>>().as_slice(),
        "from the oldest kept, then live"
    );
    let answer = frames
        .iter()
        .find_map(|f| match f {
            Frame::Text(t) if t.contains(r#""id":1"#) => serde_json::from_str::<Value>(t).ok(),
            _ => None,
        })
        .expect("answered");
    assert_eq!(answer["result"]["offset"], 60);
    assert_eq!(answer["result"]["recovered"], true);
}

#[tokio::test]
async fn a_replay_that_ends_with_a_full_queue_goes_live_only_once_there_is_room() {
    let topics = Topics::new();
    topics.keep_history("t", HistoryConfig::default());
    for i in 1..=100u64 {
        topics.publish("t", &[i]).await.unwrap();
    }
    let epoch = topics.position("t").unwrap().epoch;
    let (mut client, b) = transport::pair_with_capacity(4);
    let server = Peer::start(
        b,
        Arc::new(Router::new().topics(TopicMethods::new(&topics))),
        &PeerConfig::default().outgoing_queue(4),
    );
    // The queue full: holding the last four, 97..=100.
    let last_four: usize = (97..=100)
        .map(|i| notification("t", i, &format!("[{i}]")).len())
        .sum();
    let queue_full = || server.queued_bytes() >= last_four;
    let request = subscribe(1, "t", Some((&epoch, 0)));
    within(client.send(Frame::Text(Text::from(request))))
        .await
        .unwrap();
    // Read all but the last 8: the replay has queued its last one, and the queue
    // (4 frames) is full again behind the transport (4 frames).
    let mut got = Vec::new();
    for _ in 0..92 {
        match within(client.next()).await {
            Some(Ok(Frame::Text(t))) => got.push(t.to_string()),
            other => panic!("{other:?}"),
        }
    }
    for _ in 0..100_000 {
        if queue_full() {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert!(
        queue_full(),
        "the replay did not refill the queue: {} of {last_four} bytes",
        server.queued_bytes()
    );
    for _ in 0..100 {
        tokio::task::yield_now().await;
    }
    // A live publication now finds the queue full: it must wait in the history (the
    // subscriber is not live yet), not close the subscriber as a slow peer.
    topics.publish("t", &[101]).await.unwrap();
    let mut answer = None;
    for _ in 0..100 {
        match within(client.next()).await {
            Some(Ok(Frame::Text(t))) if t.contains(r#""id":1"#) => {
                answer = Some(serde_json::from_str::<Value>(&t).unwrap())
            }
            Some(Ok(Frame::Text(t))) => got.push(t.to_string()),
            other => panic!("{other:?} after {} notifications", got.len()),
        }
        if got.len() == 101 && answer.is_some() {
            break;
        }
    }
    let expected: Vec<String> = (1..=101)
        .map(|i| notification("t", i, &format!("[{i}]")))
        .collect();
    assert_eq!(got, expected);
    assert_eq!(answer.unwrap()["result"]["recovered"], true);
    assert!(!server.is_closed());
}

#[tokio::test(start_paused = true)]
async fn a_history_made_for_every_topic_is_forgotten_once_idle_past_max_idle() {
    let idle = Duration::from_secs(120);
    let topics = Topics::new();
    topics.keep_history_for_all(HistoryConfig::default().max_idle(idle));
    topics.keep_history("named", HistoryConfig::default().max_idle(idle));
    let (_server, client, _rx) = memory_pair(&topics, &PeerConfig::default());
    let _: Value = within(client.call("subscribe", json!(["t"])))
        .await
        .unwrap();
    // One topic per user, published to once, with no subscriber.
    for i in 1..=100u64 {
        topics
            .publish(format!("user/{i}").as_str(), &[i])
            .await
            .unwrap();
    }
    topics.publish("t", &[1]).await.unwrap();
    topics.publish("named", &[1]).await.unwrap();
    let before = topics.position("user/1").unwrap();

    // Past max_idle and a sweep period, in steps the peers' pings keep up with.
    for _ in 0..40 {
        tokio::time::advance(Duration::from_secs(5)).await;
        tokio::task::yield_now().await;
    }
    assert_eq!(
        topics.subscriber_count("t"),
        1,
        "the subscriber is still there"
    );
    // A publication (or an unsubscribe) looks for the idle ones.
    topics.publish("user/101", &[101]).await.unwrap();
    for i in 1..=100u64 {
        assert_eq!(topics.position(&format!("user/{i}")), None, "user/{i}");
    }
    assert!(topics.position("t").is_some(), "it has a subscriber");
    assert!(topics.position("named").is_some(), "set up by name: kept");
    assert!(topics.position("user/101").is_some(), "just published");

    // A client resuming from a forgotten history is told so, as after a restart.
    let answer: Value = within(client.call("subscribe", json!(["user/1", before])))
        .await
        .unwrap();
    assert_eq!(answer["recovered"], false);
    assert_ne!(answer["epoch"], json!(before.epoch));
}

//! The `Reconnecting` client following topics across dropped connections: it
//! resubscribes from its last position, hands over each publication's data once and in
//! order, and says when something could not be recovered.

mod common;

use std::time::Duration;

use common::proxy::Proxy;
use common::within;
use jsonrpc_peer::{
    Backoff, Caller, HistoryConfig, PeerConfig, Position, Reconnecting, Router, ServerHandle,
    TopicEvent, TopicEvents, TopicMethods, Topics,
};
use serde_json::{json, Value};

async fn serve(topics: &Topics) -> (std::net::SocketAddr, ServerHandle) {
    let (url, handle) = common::serve_with(
        Router::new().topics(TopicMethods::new(topics)),
        PeerConfig::default(),
    )
    .await;
    (url.trim_start_matches("ws://").parse().unwrap(), handle)
}

/// A client of `proxy` following `topic`, reconnecting within a few milliseconds.
async fn follow<T: serde::de::DeserializeOwned + Send + 'static>(
    proxy: &Proxy,
    topic: &str,
) -> (Reconnecting, TopicEvents<T>) {
    let (builder, events) = Reconnecting::builder(proxy.url(), Router::new()).topic::<T>(topic);
    let client = builder
        .backoff(
            Backoff::default()
                .initial(Duration::from_millis(5))
                .max(Duration::from_millis(50)),
        )
        .start();
    within(client.connected(Duration::from_secs(10)))
        .await
        .unwrap();
    (client, events)
}

async fn next<T>(events: &mut TopicEvents<T>) -> TopicEvent<T> {
    within(events.recv()).await.expect("the client runs")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_gets_every_offset_once_in_order_across_random_tcp_drops() {
    let seed = std::env::var("HISTORY_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..));
    println!("HISTORY_SEED={seed}");
    let mut rng = fastrand::Rng::with_seed(seed);
    const N: u64 = 1500;
    let topics = Topics::new();
    topics.keep_history("feed", HistoryConfig::default().max_len(100_000));
    let (addr, _server) = serve(&topics).await;
    let proxy = Proxy::start(addr).await;
    let (client, mut events) = follow::<u64>(&proxy, "feed").await;

    let publisher = tokio::spawn({
        let topics = topics.clone();
        async move {
            let mut tick = tokio::time::interval(Duration::from_millis(1));
            for i in 1..=N {
                tick.tick().await;
                topics.publish("feed", &i).await.unwrap();
            }
        }
    });
    let mut last = 0u64;
    let mut cuts = 0;
    let mut until_cut = rng.u64(1..=200);
    while last < N {
        match next(&mut events).await {
            TopicEvent::Data(n) => {
                assert_eq!(n, last + 1, "after {last}, cut {cuts}");
                last = n;
            }
            other => panic!("{other:?} after {last}, cut {cuts}"),
        }
        until_cut -= 1;
        if until_cut == 0 {
            // Both TCP connections end at once, without a close frame.
            proxy.cut();
            cuts += 1;
            until_cut = rng.u64(1..=200);
        }
    }
    within(publisher).await.unwrap();
    assert!(cuts >= 3, "cut only {cuts} times");
    let epoch = topics.position("feed").unwrap().epoch;
    assert_eq!(events.position(), Some(Position { epoch, offset: N }));
    within(client.close()).await;
}

#[tokio::test]
async fn after_a_server_restart_the_client_says_missed_and_goes_on_in_the_new_epoch() {
    let first = Topics::new();
    first.keep_history("t", HistoryConfig::default());
    let (addr, handle) = serve(&first).await;
    let proxy = Proxy::start(addr).await;
    let (client, mut events) = follow::<String>(&proxy, "t").await;
    for word in ["a", "b", "c"] {
        first.publish("t", &word).await.unwrap();
        assert!(matches!(next(&mut events).await, TopicEvent::Data(w) if w == word));
    }
    let old_epoch = first.position("t").unwrap().epoch;

    // A new process: new Topics, another epoch, two publications the client missed.
    within(handle.shutdown()).await;
    let second = Topics::new();
    second.keep_history("t", HistoryConfig::default());
    second.publish("t", &"x").await.unwrap();
    second.publish("t", &"y").await.unwrap();
    let (addr, _handle) = serve(&second).await;
    proxy.retarget(addr);
    let new_epoch = second.position("t").unwrap().epoch;
    assert_ne!(new_epoch, old_epoch);
    match next(&mut events).await {
        TopicEvent::Missed { epoch, offset } => assert_eq!((epoch, offset), (new_epoch.clone(), 2)),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        events.position(),
        Some(Position {
            epoch: new_epoch.clone(),
            offset: 2
        })
    );
    second.publish("t", &"z").await.unwrap();
    assert!(matches!(next(&mut events).await, TopicEvent::Data(w) if w == "z"));
    assert_eq!(
        events.position(),
        Some(Position {
            epoch: new_epoch,
            offset: 3
        })
    );
    within(client.close()).await;
}

/// A topic followed without history that keeps history after a restart: what was
/// published meanwhile cannot be replayed (the client had no position), and the client
/// says so rather than going on as if nothing was missed.
#[tokio::test]
async fn a_topic_that_gains_history_across_a_restart_says_missed() {
    let first = Topics::new();
    let (addr, handle) = serve(&first).await;
    let proxy = Proxy::start(addr).await;
    let (client, mut events) = follow::<Value>(&proxy, "t").await;
    first.publish("t", &["a"]).await.unwrap();
    assert!(matches!(next(&mut events).await, TopicEvent::Data(_)));
    within(handle.shutdown()).await;
    let second = Topics::new();
    second.keep_history("t", HistoryConfig::default());
    second.publish("t", &["lost-1"]).await.unwrap();
    second.publish("t", &["lost-2"]).await.unwrap();
    let (addr, _handle) = serve(&second).await;
    proxy.retarget(addr);
    let epoch = second.position("t").unwrap().epoch;
    match next(&mut events).await {
        TopicEvent::Missed { epoch: e, offset } => assert_eq!((e, offset), (epoch, 2)),
        other => panic!("lost-1 and lost-2 went without a word: {other:?}"),
    }
    second.publish("t", &["z"]).await.unwrap();
    assert!(matches!(next(&mut events).await, TopicEvent::Data(v) if v == json!(["z"])));
    within(client.close()).await;
}

/// A link lost while a subscribe answer is awaited is the link's loss, not a refused
/// subscription: the next link resumes, and the application sees the data alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_lost_during_a_resubscribe_is_not_reported_as_failed() {
    use tokio::sync::watch;

    // Subscribes counted; the second is answered late (its link is cut meanwhile), the
    // third resumes.
    let (count, mut counted) = watch::channel(0usize);
    let router = Router::with_state(count).method(
        "subscribe",
        |cx: jsonrpc_peer::Context<watch::Sender<usize>>, _params: Value| async move {
            let mut n = 0;
            cx.state().send_modify(|c| {
                *c += 1;
                n = *c;
            });
            if n == 2 {
                tokio::time::sleep(Duration::from_secs(60)).await;
            }
            Ok::<_, jsonrpc_peer::RpcError>(match n {
                1 => json!({ "epoch": "e", "offset": 0 }),
                _ => json!({ "epoch": "e", "offset": 0, "recovered": true }),
            })
        },
    );
    let (url, handle) = common::serve(router).await;
    let proxy = Proxy::start(url.trim_start_matches("ws://").parse().unwrap()).await;
    let (client, mut events) = follow::<u64>(&proxy, "t").await;
    proxy.cut();
    within(counted.wait_for(|n| *n >= 2)).await.unwrap();
    proxy.cut(); // while the second subscribe waits for its answer
    within(counted.wait_for(|n| *n >= 3)).await.unwrap();
    within(client.connected(Duration::from_secs(10)))
        .await
        .unwrap();
    for peer in handle.peers() {
        let _ = peer.notify("t", json!({ "offset": 1, "data": 1 })).await;
    }
    match next(&mut events).await {
        TopicEvent::Data(1) => {}
        other => panic!("a cut during the resubscribe came out as: {other:?}"),
    }
    within(client.close()).await;
}

#[tokio::test]
async fn a_client_whose_position_fell_out_of_the_history_says_missed_and_replays_nothing() {
    let topics = Topics::new();
    topics.keep_history("t", HistoryConfig::default().max_len(5));
    let (addr, _handle) = serve(&topics).await;
    let proxy = Proxy::start(addr).await;
    let (client, mut events) = follow::<u64>(&proxy, "t").await;
    for i in 1..=2u64 {
        topics.publish("t", &i).await.unwrap();
        assert!(matches!(next(&mut events).await, TopicEvent::Data(n) if n == i));
    }
    // The client cannot come back while 18 more are published: 16..=20 are kept.
    proxy.refuse(true);
    proxy.cut();
    for i in 3..=20u64 {
        topics.publish("t", &i).await.unwrap();
    }
    proxy.refuse(false);
    let epoch = topics.position("t").unwrap().epoch;
    match next(&mut events).await {
        TopicEvent::Missed { epoch: e, offset } => assert_eq!((e, offset), (epoch, 20)),
        other => panic!("{other:?}"),
    }
    topics.publish("t", &21).await.unwrap();
    match next(&mut events).await {
        TopicEvent::Data(n) => assert_eq!(n, 21, "nothing from before the answer"),
        other => panic!("{other:?}"),
    }
    within(client.close()).await;
}

#[tokio::test]
async fn on_a_topic_without_history_the_client_says_missed_after_each_reconnect() {
    let topics = Topics::new();
    let (addr, _handle) = serve(&topics).await;
    let proxy = Proxy::start(addr).await;
    let (client, mut events) = follow::<Value>(&proxy, "plain").await;
    topics.publish("plain", &[1]).await.unwrap();
    assert!(matches!(next(&mut events).await, TopicEvent::Data(v) if v == json!([1])));
    proxy.cut();
    match next(&mut events).await {
        TopicEvent::Missed { epoch, offset } => assert_eq!((epoch.as_str(), offset), ("", 0)),
        other => panic!("{other:?}"),
    }
    // Subscribed again: the next publication arrives.
    topics.publish("plain", &[2]).await.unwrap();
    assert!(matches!(next(&mut events).await, TopicEvent::Data(v) if v == json!([2])));
    assert_eq!(events.position(), None, "no positions without history");
    within(client.close()).await;
}

#[tokio::test]
async fn a_client_given_a_position_resumes_from_it_on_its_first_connect() {
    let topics = Topics::new();
    topics.keep_history("t", HistoryConfig::default());
    for i in 1..=5u64 {
        topics.publish("t", &i).await.unwrap();
    }
    let (addr, _handle) = serve(&topics).await;
    let proxy = Proxy::start(addr).await;
    // As if kept by an earlier process of the application.
    let kept = Position {
        epoch: topics.position("t").unwrap().epoch,
        offset: 3,
    };
    let (builder, mut events) = Reconnecting::builder(proxy.url(), Router::new())
        .topic_with::<u64>("t", jsonrpc_peer::TopicOptions::default().from(kept));
    let client = builder.start();
    for i in 4..=5u64 {
        assert!(matches!(next(&mut events).await, TopicEvent::Data(n) if n == i));
    }
    within(client.close()).await;
}

#[tokio::test]
async fn a_server_that_sends_more_than_max_held_before_its_answer_costs_the_position_not_memory() {
    use jsonrpc_peer::{Context, RpcError, TopicOptions};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    // A server of our own making: its first `subscribe` sends 20 notifications before
    // answering; later ones answer at once.
    let calls = Arc::new(AtomicUsize::new(0));
    let router = Router::with_state(calls.clone()).method(
        "subscribe",
        |cx: Context<Arc<AtomicUsize>>, params: Value| async move {
            let first = cx.state().fetch_add(1, Ordering::SeqCst) == 0;
            if first {
                for i in 1..=20u64 {
                    let _ = cx.peer().notify("t", json!({"offset": i, "data": i})).await;
                }
            }
            assert_eq!(params, json!(["t"]), "no position: none was ever confirmed");
            Ok::<_, RpcError>(json!({"epoch": "e", "offset": 20}))
        },
    );
    let (url, handle) = common::serve(router).await;
    let (builder, mut events) = Reconnecting::builder(url, Router::new())
        .backoff(Backoff::default().initial(Duration::from_millis(5)))
        .topic_with::<u64>("t", TopicOptions::default().max_held(10));
    let client = builder.start();
    // The first link is given up (the 20 held were over the bound), the second
    // subscribes afresh: that is reported, since what came before is unknown.
    match next(&mut events).await {
        TopicEvent::Missed { epoch, offset } => assert_eq!((epoch.as_str(), offset), ("e", 20)),
        other => panic!("{other:?}"),
    }
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    let peer = within(client.connected(Duration::from_secs(10)))
        .await
        .unwrap();
    // Every link the server has (the first may still be closing: the client ignores
    // what comes on it) gets the next publication.
    for server_side in handle.peers() {
        let _ = server_side
            .notify("t", json!({"offset": 21, "data": 21}))
            .await;
    }
    assert!(matches!(next(&mut events).await, TopicEvent::Data(21)));
    drop(peer);
    within(client.close()).await;
}

#[tokio::test]
async fn a_gap_report_past_max_held_costs_the_position_and_is_not_lost() {
    use jsonrpc_peer::{Context, RpcError, TopicOptions};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    // A server of our own making: its first `subscribe` sends one publication and then
    // a gap report (its history lost, the new epoch "e2") before answering. With room
    // for one held, the gap report finds the client full: dropped, the client would
    // keep its "e1" position and take the new epoch's offsets for old ones.
    let calls = Arc::new(AtomicUsize::new(0));
    let router = Router::with_state(calls.clone()).method(
        "subscribe",
        |cx: Context<Arc<AtomicUsize>>, _params: Value| async move {
            if cx.state().fetch_add(1, Ordering::SeqCst) > 0 {
                return Ok::<_, RpcError>(json!({"epoch": "e2", "offset": 0}));
            }
            let _ = cx.peer().notify("t", json!({"offset": 1, "data": 1})).await;
            let gap = json!({"topic": "t", "epoch": "e2", "offset": 0});
            let _ = cx.peer().notify("$/gap", gap).await;
            Ok::<_, RpcError>(json!({"epoch": "e1", "offset": 0}))
        },
    );
    let (url, handle) = common::serve(router).await;
    let (builder, mut events) = Reconnecting::builder(url, Router::new())
        .backoff(Backoff::default().initial(Duration::from_millis(5)))
        .topic_with::<u64>("t", TopicOptions::default().max_held(1));
    let client = builder.start();
    match next(&mut events).await {
        TopicEvent::Missed { epoch, offset } => assert_eq!((epoch.as_str(), offset), ("e2", 0)),
        other => panic!("the first link's backlog was not given up: {other:?}"),
    }
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    let peer = within(client.connected(Duration::from_secs(10)))
        .await
        .unwrap();
    for server_side in handle.peers() {
        let _ = server_side
            .notify("t", json!({"offset": 1, "data": 100}))
            .await;
    }
    assert!(matches!(next(&mut events).await, TopicEvent::Data(100)));
    drop(peer);
    within(client.close()).await;
}

/// A server whose first `subscribe` sends `flood` before its answer (a boolean: no
/// history), which the client's `options` do not let it hold: the client drops them,
/// reconnects, and says so with `Missed`, as after any reconnect. Then it takes what
/// follows on the new link.
async fn given_up_past_the_bounds(flood: Vec<Value>, options: jsonrpc_peer::TopicOptions) {
    use jsonrpc_peer::{Context, RpcError};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    let calls = Arc::new(AtomicUsize::new(0));
    let flood = Arc::new(flood);
    let router = Router::with_state(calls.clone()).method("subscribe", {
        move |cx: Context<Arc<AtomicUsize>>, _params: Value| {
            let flood = flood.clone();
            async move {
                if cx.state().fetch_add(1, Ordering::SeqCst) == 0 {
                    for params in flood.iter() {
                        let _ = cx.peer().notify("t", params).await;
                    }
                }
                Ok::<_, RpcError>(json!(true))
            }
        }
    });
    let (url, handle) = common::serve(router).await;
    let (builder, mut events) = Reconnecting::builder(url, Router::new())
        .backoff(Backoff::default().initial(Duration::from_millis(5)))
        .topic_with::<Value>("t", options);
    let client = builder.start();
    match next(&mut events).await {
        TopicEvent::Missed { .. } => {}
        other => panic!("what was held was dropped without a word; first event: {other:?}"),
    }
    assert_eq!(
        calls.load(Ordering::SeqCst),
        2,
        "the first link was given up"
    );
    let peer = within(client.connected(Duration::from_secs(10)))
        .await
        .unwrap();
    for server_side in handle.peers() {
        let _ = server_side.notify("t", json!({ "n": "after" })).await;
    }
    assert!(matches!(next(&mut events).await, TopicEvent::Data(v) if v == json!({ "n": "after" })));
    drop(peer);
    within(client.close()).await;
}

#[tokio::test]
async fn a_topic_without_history_given_up_past_max_held_reports_missed() {
    // 20 notifications before the answer, with room for 10 held.
    let flood = (1..=20u64).map(|i| json!({ "n": i })).collect();
    given_up_past_the_bounds(flood, jsonrpc_peer::TopicOptions::default().max_held(10)).await;
}

#[tokio::test]
async fn a_server_that_sends_large_notifications_before_its_answer_is_bounded_by_bytes_too() {
    // Few notifications (well under max_held) of 64 KiB each: past max_held_bytes
    // (256 KiB) the client gives its position up rather than hold whatever comes.
    let big = "x".repeat(64 * 1024);
    let flood = (1..=8u64).map(|i| json!({ "n": i, "pad": big })).collect();
    let options = jsonrpc_peer::TopicOptions::default()
        .max_held(100)
        .max_held_bytes(256 * 1024);
    given_up_past_the_bounds(flood, options).await;
}

#[tokio::test]
async fn a_refused_subscription_is_reported_once_and_not_retried_in_a_loop() {
    let topics = Topics::new();
    let (url, _handle) = common::serve_with(
        Router::new().topics(TopicMethods::new(&topics).only(["allowed"])),
        PeerConfig::default(),
    )
    .await;
    let (builder, mut events) = Reconnecting::builder(url, Router::new()).topic::<Value>("refused");
    let client = builder.start();
    match next(&mut events).await {
        TopicEvent::Failed(error) => {
            assert_eq!(
                error.rpc().map(|e| e.code),
                Some(jsonrpc_peer::ErrorCode::INVALID_PARAMS),
                "{error}"
            )
        }
        other => panic!("{other:?}"),
    }
    // The link stays up: a refusal is the application's answer, not a broken link.
    within(client.connected(Duration::from_secs(10)))
        .await
        .unwrap();
    assert_eq!(client.state(), jsonrpc_peer::LinkState::Connected);
    within(client.close()).await;
}

#[tokio::test]
async fn a_refused_first_subscription_then_a_reconnect_reports_no_missed() {
    use jsonrpc_peer::{Context, RpcError};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    // The first `subscribe` is refused; the link is then dropped, and the second one
    // (a topic without history) sends one notification before its answer. The client
    // was never subscribed before, so nothing was missed: the data comes next.
    let calls = Arc::new(AtomicUsize::new(0));
    let router = Router::with_state(calls.clone()).method(
        "subscribe",
        |cx: Context<Arc<AtomicUsize>>, _params: Value| async move {
            if cx.state().fetch_add(1, Ordering::SeqCst) == 0 {
                return Err(RpcError::invalid_params("not yet"));
            }
            let _ = cx.peer().notify("t", json!({ "n": 1 })).await;
            Ok(json!(true))
        },
    );
    let (url, handle) = common::serve(router).await;
    let (builder, mut events) = Reconnecting::builder(url, Router::new())
        .backoff(Backoff::default().initial(Duration::from_millis(5)))
        .topic::<Value>("t");
    let client = builder.start();
    assert!(matches!(next(&mut events).await, TopicEvent::Failed(_)));
    for server_side in handle.peers() {
        server_side.close().await;
    }
    match next(&mut events).await {
        TopicEvent::Data(v) => assert_eq!(v, json!({ "n": 1 })),
        other => panic!("never subscribed before, yet: {other:?}"),
    }
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    within(client.close()).await;
}

#[tokio::test]
async fn a_gap_report_moves_the_client_to_the_new_epoch_and_it_takes_what_follows() {
    use jsonrpc_peer::{Context, RpcError};

    // A server of our own making, speaking the cluster's forms: offsets 1..=5 in "e1",
    // then its history is lost (`$/gap` with the new epoch "e2" at offset 1, as a
    // cluster node sends after Redis came back empty) and offset 2 of "e2" follows.
    // Offsets of the new epoch are lower than the client's position: only the gap
    // report tells it they are new.
    let router = Router::new().method("subscribe", |_cx: Context, _params: Value| async move {
        Ok::<_, RpcError>(json!({"epoch": "e1", "offset": 0}))
    });
    let (url, handle) = common::serve(router).await;
    let (builder, mut events) = Reconnecting::builder(url, Router::new()).topic::<u64>("t");
    let client = builder.start();
    within(client.connected(Duration::from_secs(10)))
        .await
        .unwrap();
    let server_side = within(async {
        loop {
            if let Some(peer) = handle.peers().into_iter().next() {
                return peer;
            }
            tokio::task::yield_now().await;
        }
    })
    .await;
    // The connect hook's subscribe is answered before `connected` resolves; what is
    // sent now follows the answer.
    for i in 1..=5u64 {
        server_side
            .notify("t", &json!({"offset": i, "data": i * 10}))
            .await
            .unwrap();
    }
    server_side
        .notify(
            "$/gap",
            &json!({"topic": "other", "epoch": "x", "offset": 9}),
        )
        .await
        .unwrap();
    server_side
        .notify("$/gap", &json!({"topic": "t", "epoch": "e2", "offset": 1}))
        .await
        .unwrap();
    server_side
        .notify("t", &json!({"offset": 2, "data": 20}))
        .await
        .unwrap();
    for i in 1..=5u64 {
        match next(&mut events).await {
            TopicEvent::Data(data) => assert_eq!(data, i * 10),
            other => panic!("{other:?}"),
        }
    }
    match next(&mut events).await {
        TopicEvent::Missed { epoch, offset } => assert_eq!((epoch.as_str(), offset), ("e2", 1)),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        events.position(),
        Some(Position {
            epoch: "e2".into(),
            offset: 1
        })
    );
    match next(&mut events).await {
        TopicEvent::Data(data) => assert_eq!(data, 20, "offset 2 of the new epoch is new"),
        other => panic!("{other:?}"),
    }
    within(client.close()).await;
}

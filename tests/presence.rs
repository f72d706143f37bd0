//! Presence on one node (no cluster): members with info, join and leave notifications to
//! the subscribers that watch, leaving on unsubscribe and disconnect, the server-side
//! stream, and the limits' errors. Real server and clients on 127.0.0.1:0.

mod common;

use common::{serve, within, RawClient};
use jsonrpc_peer::{
    connect, Caller, Context, HistoryConfig, Member, Peer, PresenceChange, PresenceEvent,
    PresenceJoin, PresenceLeave, PresenceLimits, Router, RpcError, TopicMethods, Topics,
};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::mpsc;

/// `[topic, info_or_null, watch]`
#[derive(Deserialize)]
struct Sub {
    topic: String,
    #[serde(default)]
    info: Option<Value>,
    #[serde(default)]
    watch: bool,
}

fn rpc(e: jsonrpc_peer::Error) -> RpcError {
    RpcError::new(-32000, e.to_string())
}

fn server(topics: Topics) -> Router<Topics> {
    Router::with_state(topics)
        .method("sub", |cx: Context<Topics>, p: Sub| async move {
            let topics = cx.state();
            topics.subscribe(cx.peer(), &p.topic);
            if let Some(info) = p.info {
                topics
                    .join_presence(cx.peer(), &p.topic, info)
                    .await
                    .map_err(rpc)?;
            }
            if p.watch {
                topics
                    .watch_presence(cx.peer(), &p.topic)
                    .await
                    .map_err(rpc)?;
            }
            Ok::<_, RpcError>(cx.peer().id())
        })
        .method(
            "join",
            |cx: Context<Topics>, (topic, info): (String, Value)| async move {
                cx.state()
                    .join_presence(cx.peer(), &topic, info)
                    .await
                    .map_err(rpc)
            },
        )
        .method(
            "unsub",
            |cx: Context<Topics>, (topic,): (String,)| async move {
                Ok::<_, RpcError>(cx.state().unsubscribe(cx.peer(), &topic))
            },
        )
        .method(
            "presence",
            |cx: Context<Topics>, (topic,): (String,)| async move {
                cx.state().presence(&topic).await.map_err(rpc)
            },
        )
        .method(
            "count",
            |cx: Context<Topics>, (topic,): (String,)| async move {
                cx.state().presence_count(&topic).await.map_err(rpc)
            },
        )
}

/// A client whose presence notifications, read with the typed contracts, go to a channel.
async fn client(url: &str) -> (Peer, mpsc::UnboundedReceiver<(bool, PresenceChange)>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let leaves = tx.clone();
    let router = Router::new()
        .on(PresenceJoin, move |_cx, change| {
            let _ = tx.send((true, change));
            async {}
        })
        .on(PresenceLeave, move |_cx, change| {
            let _ = leaves.send((false, change));
            async {}
        });
    (within(connect(url, router)).await.unwrap(), rx)
}

async fn ask(peer: &Peer, method: &str, params: Value) -> Value {
    within(peer.call::<Value>(method, params))
        .await
        .unwrap_or_else(|e| panic!("{method}: {e}"))
}

async fn refused(peer: &Peer, method: &str, params: Value) -> RpcError {
    let err = within(peer.call::<Value>(method, params))
        .await
        .unwrap_err();
    err.rpc()
        .cloned()
        .unwrap_or_else(|| panic!("{method}: {err}"))
}

fn addrs(members: &Value) -> Vec<String> {
    let mut out: Vec<String> = members
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["addr"].as_str().unwrap().to_owned())
        .collect();
    out.sort();
    out
}

#[tokio::test]
async fn members_join_and_leave_and_watchers_hear_it_once() {
    let topics = Topics::new();
    let mut events = topics.presence_events();
    let (url, _handle) = serve(server(topics.clone())).await;
    let (watcher, mut heard) = client(&url).await;
    let (ana, mut ana_heard) = client(&url).await;
    let (ben, _) = client(&url).await;

    let w = ask(&watcher, "sub", json!(["room", {"user": "w"}, true])).await;
    let a = ask(&ana, "sub", json!(["room", {"user": "ana"}, true])).await;
    // The watcher hears ana's join, typed; ana does not hear its own.
    let (join, change) = within(heard.recv()).await.unwrap();
    assert!(join);
    assert_eq!(change.topic, "room");
    assert_eq!(change.addr.to_string(), format!("local/{a}"));
    assert_eq!(change.info.get(), r#"{"user":"ana"}"#);

    // A subscriber that is not a member is not listed; one who is, is.
    ask(&ben, "sub", json!(["room"])).await;
    let members = ask(&watcher, "presence", json!(["room"])).await;
    assert_eq!(addrs(&members), {
        let mut v = vec![format!("local/{a}"), format!("local/{w}")];
        v.sort();
        v
    });
    assert_eq!(ask(&watcher, "count", json!(["room"])).await, json!(2));
    let listed: Vec<Member> = serde_json::from_value(members).unwrap();
    let ana_listed = listed
        .iter()
        .find(|m| m.addr.peer == a.as_u64().unwrap())
        .unwrap();
    assert_eq!(
        ana_listed.info_as::<Value>().unwrap(),
        json!({"user": "ana"})
    );

    // Joining again keeps the first info and tells no one.
    assert_eq!(
        ask(&ana, "join", json!(["room", {"user": "other"}])).await,
        json!(false)
    );

    // Ben joins late; both watchers hear it once.
    let b = ask(&ben, "join", json!(["room", {"user": "ben"}])).await;
    assert_eq!(b, json!(true));
    for rx in [&mut heard, &mut ana_heard] {
        let (join, change) = within(rx.recv()).await.unwrap();
        assert!(join && change.info.get() == r#"{"user":"ben"}"#);
    }

    // Ana unsubscribes: a leave with her info. Ben disconnects: a leave at once.
    assert_eq!(ask(&ana, "unsub", json!(["room"])).await, json!(true));
    let (join, change) = within(heard.recv()).await.unwrap();
    assert!(!join && change.info.get() == r#"{"user":"ana"}"#);
    ben.close().await;
    let (join, change) = within(heard.recv()).await.unwrap();
    assert!(!join && change.info.get() == r#"{"user":"ben"}"#);
    assert_eq!(ask(&watcher, "count", json!(["room"])).await, json!(1));

    // Nothing else came: a marker join from a new client is the next thing heard.
    let (marker, _) = client(&url).await;
    ask(&marker, "sub", json!(["room", "marker"])).await;
    let (join, change) = within(heard.recv()).await.unwrap();
    assert!(join && change.info.get() == r#""marker""#, "{change:?}");
    assert!(
        ana_heard.try_recv().is_err(),
        "ana unsubscribed: she hears nothing more"
    );

    // The server side saw the same, in order: w, ana, ben joined; ana, ben left; marker.
    let mut seen = Vec::new();
    for _ in 0..6 {
        match within(events.recv()).await.unwrap() {
            PresenceEvent::Join(c) => seen.push(format!("+{}", c.info.get())),
            PresenceEvent::Leave(c) => seen.push(format!("-{}", c.info.get())),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(
        seen,
        [
            r#"+{"user":"w"}"#,
            r#"+{"user":"ana"}"#,
            r#"+{"user":"ben"}"#,
            r#"-{"user":"ana"}"#,
            r#"-{"user":"ben"}"#,
            r#"+"marker""#
        ]
    );
}

#[tokio::test]
async fn limits_are_answered_with_a_clear_error() {
    let topics = Topics::new();
    topics.set_presence_limits(
        PresenceLimits::default()
            .max_members(2)
            .max_info_bytes(32)
            .max_topics_per_peer(2),
    );
    let (url, _handle) = serve(server(topics.clone())).await;
    let (one, _) = client(&url).await;
    let (two, _) = client(&url).await;
    let (three, _) = client(&url).await;

    let err = refused(&one, "join", json!(["room", {"user": "a"}])).await;
    assert!(
        err.message.contains("not subscribed to topic `room`"),
        "{err:?}"
    );

    let big = "x".repeat(40);
    let err = refused(&one, "sub", json!(["room", {"name": big}])).await;
    assert!(
        err.message
            .contains("member info of 51 bytes is over the limit of 32 bytes"),
        "{err:?}"
    );

    ask(&one, "sub", json!(["room", 1])).await;
    ask(&two, "sub", json!(["room", 2])).await;
    let err = refused(&three, "sub", json!(["room", 3])).await;
    assert!(
        err.message
            .contains("topic `room` has 2 members, the most it may have"),
        "{err:?}"
    );
    // Its subscription stands; it is simply not a member.
    assert_eq!(ask(&one, "count", json!(["room"])).await, json!(2));

    ask(&one, "sub", json!(["a", 1, true])).await;
    let err = refused(&one, "sub", json!(["b", 1])).await;
    assert!(
        err.message.contains("present in at most 2 topics"),
        "{err:?}"
    );
    // Leaving one makes room.
    ask(&one, "unsub", json!(["a"])).await;
    ask(&one, "sub", json!(["b", 1])).await;
    assert_eq!(ask(&one, "count", json!(["b"])).await, json!(1));
}

#[tokio::test]
async fn two_tabs_of_one_user_are_two_members_and_users_are_counted_by_info() {
    let topics = Topics::new();
    let (url, _handle) = serve(server(topics.clone())).await;
    let (tab1, _) = client(&url).await;
    let (tab2, _) = client(&url).await;
    let (other, _) = client(&url).await;
    ask(&tab1, "sub", json!(["doc", {"user": "ana"}])).await;
    ask(&tab2, "sub", json!(["doc", {"user": "ana"}])).await;
    ask(&other, "sub", json!(["doc", {"user": "ben"}])).await;
    let members = within(topics.presence("doc")).await.unwrap();
    assert_eq!(members.len(), 3);
    let users: std::collections::BTreeSet<String> = members
        .iter()
        .map(|m| {
            m.info_as::<Value>().unwrap()["user"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(users.into_iter().collect::<Vec<_>>(), ["ana", "ben"]);
}

/// `TopicMethods::presence`: the wire forms of `cluster_node` (and of the browser peer's
/// `link.topic(name, {info, presence: true})`), served by the ready-made methods.
#[tokio::test]
async fn topic_methods_serve_presence_in_the_cluster_node_wire_forms() {
    let topics = Topics::new();
    topics.set_presence_limits(PresenceLimits::default().max_info_bytes(64));
    let router = Router::new().topics(TopicMethods::new(&topics).only(["chat"]).presence());
    let (url, _handle) = serve(router).await;
    let (ana, mut ana_heard) = client(&url).await;
    let (ben, mut ben_heard) = client(&url).await;

    // `[topic, null, info]` joins; `"presence": true` also watches, and is taken out.
    assert_eq!(
        ask(
            &ana,
            "subscribe",
            json!(["chat", null, {"user": "ana", "presence": true}])
        )
        .await,
        json!(true)
    );
    assert_eq!(
        ask(
            &ben,
            "subscribe",
            json!({"topic": "chat", "info": {"user": "ben"}})
        )
        .await,
        json!(true)
    );
    let (joined, change) = within(ana_heard.recv()).await.unwrap();
    assert!(joined);
    assert_eq!(change.info.get(), r#"{"user":"ben"}"#);
    let members = ask(&ben, "presence", json!(["chat"])).await;
    assert_eq!(members.as_array().unwrap().len(), 2);
    let infos: Vec<&Value> = members
        .as_array()
        .unwrap()
        .iter()
        .map(|m| &m["info"])
        .collect();
    assert!(infos.contains(&&json!({"user": "ana"})), "{members}");
    assert_eq!(ask(&ana, "presence_count", json!(["chat"])).await, json!(2));

    // Bad input: a topic not allowed, a `presence` that is not a boolean, an info over the limit.
    let err = refused(&ben, "presence", json!(["other"])).await;
    assert_eq!(err.code, -32602, "{err:?}");
    assert!(
        format!("{:?}", err.data).contains("no topic `other`"),
        "{err:?}"
    );
    let err = refused(&ben, "subscribe", json!(["chat", null, {"presence": 1}])).await;
    assert_eq!(err.code, -32602, "{err:?}");
    let (cat, _) = client(&url).await;
    let big = "x".repeat(80);
    let err = refused(&cat, "subscribe", json!(["chat", null, {"user": big}])).await;
    assert_eq!(err.code, -32000, "{err:?}");
    assert!(
        err.message.contains("over the limit of 64 bytes"),
        "{err:?}"
    );
    // A refused join leaves no subscription: nothing published reaches it.
    assert_eq!(
        ask(&cat, "unsubscribe", json!(["chat"])).await,
        json!(false)
    );
    assert_eq!(ask(&ana, "presence_count", json!(["chat"])).await, json!(2));

    // Ben leaves: ana hears it; ben, who did not ask, heard nothing.
    assert_eq!(ask(&ben, "unsubscribe", json!(["chat"])).await, json!(true));
    let (joined, change) = within(ana_heard.recv()).await.unwrap();
    assert!(!joined);
    assert_eq!(change.info.get(), r#"{"user":"ben"}"#);
    assert!(ben_heard.try_recv().is_err());

    // Without `presence()`, an info is refused rather than ignored.
    let plain = Topics::new();
    let (url, _handle) = serve(Router::new().topics(TopicMethods::new(&plain))).await;
    let (dan, _) = client(&url).await;
    let err = refused(&dan, "subscribe", json!(["chat", null, {"user": "dan"}])).await;
    assert_eq!(err.code, -32602, "{err:?}");
    assert_eq!(
        ask(&dan, "subscribe", json!(["chat", null])).await,
        json!(true)
    );
}

/// Sends `request` (with id 1) and reads up to its answer: the notifications that came
/// before it, and the answer.
async fn notified_before_answer(client: &mut RawClient, request: Value) -> (Vec<Value>, Value) {
    client.send(&request.to_string()).await;
    let mut before = Vec::new();
    for _ in 0..1_000 {
        let frame = client.recv_json().await;
        if frame.get("id").is_some() {
            return (before, frame);
        }
        before.push(frame);
    }
    panic!("no answer to {request}");
}

/// A `subscribe` refused by a presence limit changes nothing: no notification of the
/// topic (not even a replay asked for), no subscription, no join, no leave later, and a
/// subscription there before stays as it was.
#[tokio::test]
async fn a_subscribe_refused_by_a_presence_limit_changes_nothing() {
    let topics = Topics::new();
    topics.keep_history("b", HistoryConfig::default());
    topics.set_presence_limits(PresenceLimits::default().max_topics_per_peer(1));
    let mut events = topics.presence_events();
    let router = Router::new().topics(TopicMethods::new(&topics).presence());
    let (url, _handle) = serve(router).await;
    for i in 1..=3 {
        topics.publish("b", &[i]).await.unwrap();
    }
    let epoch = topics.position("b").unwrap().epoch;
    let subscribe = |topic: &str, from: Value, info: Value| json!({"jsonrpc": "2.0", "method": "subscribe", "params": [topic, from, info], "id": 1});
    let mut ana = RawClient::connect(&url).await;

    // A member of "a" that watches it: one topic, counted once.
    let (before, answer) = notified_before_answer(
        &mut ana,
        subscribe("a", Value::Null, json!({"user": "ana", "presence": true})),
    )
    .await;
    assert_eq!(
        (before.len(), &answer["result"]),
        (0, &json!(true)),
        "{answer}"
    );

    // A member of "b" too is one topic too many: refused, and nothing of "b" is sent,
    // though the call asked for a replay from 0.
    let from = json!({"epoch": epoch, "offset": 0});
    let (before, answer) = notified_before_answer(
        &mut ana,
        subscribe("b", from.clone(), json!({"user": "ana"})),
    )
    .await;
    assert_eq!(answer["error"]["code"], -32000, "{answer}");
    assert_eq!(
        before,
        Vec::<Value>::new(),
        "a refused subscribe sent these"
    );
    assert_eq!(topics.subscriber_count("b"), 0);
    assert!(within(topics.presence("b")).await.unwrap().is_empty());

    // Subscribed to "b" (not a member): refused again, it stays live where it was, and
    // is sent no replay.
    let (_, answer) = notified_before_answer(
        &mut ana,
        json!({"jsonrpc": "2.0", "method": "subscribe", "params": ["b"], "id": 1}),
    )
    .await;
    assert_eq!(answer["result"]["offset"], 3, "{answer}");
    let (before, answer) =
        notified_before_answer(&mut ana, subscribe("b", from, json!({"user": "ana"}))).await;
    assert_eq!(answer["error"]["code"], -32000, "{answer}");
    assert_eq!(
        before,
        Vec::<Value>::new(),
        "a refused subscribe sent these"
    );
    topics.publish("b", &[4]).await.unwrap();
    let next = ana.recv_json().await;
    assert_eq!(next["params"]["offset"], 4, "{next}");
    assert!(within(topics.presence("b")).await.unwrap().is_empty());

    // The only presence change was ana's join of "a": a marker's join comes next.
    let (marker, _) = client(&url).await;
    ask(&marker, "subscribe", json!(["a", null, "marker"])).await;
    let mut seen = Vec::new();
    for _ in 0..2 {
        match within(events.recv()).await.unwrap() {
            PresenceEvent::Join(c) => seen.push(format!("+{} {}", c.topic, c.info.get())),
            PresenceEvent::Leave(c) => seen.push(format!("-{} {}", c.topic, c.info.get())),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(seen, [r#"+a {"user":"ana"}"#, r#"+a "marker""#]);
}

/// `subscribe [topic, null, info]` again with another info: the member has the new one,
/// as `TopicMethods`' table says ("the caller is a member with `info`"); watchers hear
/// the old info leave and the new one join. The same info again tells no one.
#[tokio::test]
async fn subscribing_again_with_another_info_makes_it_the_members_info() {
    let topics = Topics::new();
    let router = Router::new().topics(TopicMethods::new(&topics).presence());
    let (url, _handle) = serve(router).await;
    let (watcher, mut heard) = client(&url).await;
    let (ana, _) = client(&url).await;
    let watch = json!(["room", null, {"user": "w", "presence": true}]);
    ask(&watcher, "subscribe", watch).await;
    ask(&ana, "subscribe", json!(["room", null, {"user": "ana"}])).await;
    let (joined, change) = within(heard.recv()).await.unwrap();
    assert!(
        joined && change.info.get() == r#"{"user":"ana"}"#,
        "{change:?}"
    );

    let away = json!({"user": "ana", "status": "away"});
    // Subscribed already: `false`, as without an info.
    assert_eq!(
        ask(&ana, "subscribe", json!(["room", null, away])).await,
        json!(false)
    );
    let members = within(topics.presence("room")).await.unwrap();
    let infos: Vec<Value> = members.iter().map(|m| m.info_as().unwrap()).collect();
    assert!(infos.contains(&away), "the member's info is {infos:?}");
    let (joined, change) = within(heard.recv()).await.unwrap();
    assert!(
        !joined && change.info.get() == r#"{"user":"ana"}"#,
        "{change:?}"
    );
    let (joined, change) = within(heard.recv()).await.unwrap();
    assert!(joined, "{change:?}");
    assert_eq!(change.info_as::<Value>().unwrap(), away);

    // The same info again: no change, no one told (a marker's join is heard next).
    ask(&ana, "subscribe", json!(["room", null, away])).await;
    let (marker, _) = client(&url).await;
    ask(&marker, "subscribe", json!(["room", null, "marker"])).await;
    let (joined, change) = within(heard.recv()).await.unwrap();
    assert!(joined && change.info.get() == r#""marker""#, "{change:?}");
    assert_eq!(within(topics.presence_count("room")).await.unwrap(), 3);
}

/// `presence` and `presence_count` keep `max_topic_bytes` as `subscribe` does: a name no
/// one could subscribe to is answered `-32602`, not looked up (in a cluster, a key in
/// Redis as long as a message may be).
#[tokio::test]
async fn presence_methods_refuse_a_topic_name_longer_than_max_topic_bytes() {
    let topics = Topics::new();
    let methods = TopicMethods::new(&topics).presence().max_topic_bytes(8);
    let (url, _handle) = serve(Router::new().topics(methods)).await;
    let (ana, _heard) = client(&url).await;
    for method in ["subscribe", "presence", "presence_count"] {
        let error = refused(&ana, method, json!(["123456789"])).await;
        assert_eq!(error.code.get(), -32602, "{method}: {error:?}");
        assert!(
            error
                .data
                .as_ref()
                .is_some_and(|d| d.to_string().contains("at most 8 bytes, not 9")),
            "{method}: {error:?}"
        );
    }
    // Within the bound, the same calls are served.
    assert_eq!(
        ask(&ana, "presence_count", json!(["12345678"])).await,
        json!(0)
    );
    assert_eq!(ask(&ana, "presence", json!(["12345678"])).await, json!([]));
}

/// Subscribing again with `"presence": false` stops the joins and leaves; without a
/// `presence` member the caller goes on as it was.
#[tokio::test]
async fn subscribing_again_with_presence_false_stops_watching() {
    let topics = Topics::new();
    let router = Router::new().topics(TopicMethods::new(&topics).presence());
    let (url, _handle) = serve(router).await;
    let (watcher, mut heard) = client(&url).await;
    let (ana, _) = client(&url).await;
    let sub = |info: Value| json!(["room", null, info]);
    ask(
        &watcher,
        "subscribe",
        sub(json!({"user": "w", "presence": true})),
    )
    .await;
    // Again without `presence`: still watching.
    ask(&watcher, "subscribe", sub(json!({"user": "w"}))).await;
    ask(&ana, "subscribe", sub(json!("ana"))).await;
    let (joined, change) = within(heard.recv()).await.unwrap();
    assert!(joined && change.info.get() == r#""ana""#, "{change:?}");

    // `false`: no longer. Ana's change is not heard; once watching again, the next
    // thing heard is the marker's join.
    ask(
        &watcher,
        "subscribe",
        sub(json!({"user": "w", "presence": false})),
    )
    .await;
    ask(&ana, "subscribe", sub(json!("ana, away"))).await;
    ask(
        &watcher,
        "subscribe",
        sub(json!({"user": "w", "presence": true})),
    )
    .await;
    let (marker, _) = client(&url).await;
    ask(&marker, "subscribe", sub(json!("marker"))).await;
    let (joined, change) = within(heard.recv()).await.unwrap();
    assert!(joined && change.info.get() == r#""marker""#, "{change:?}");
    // The watcher stayed a member throughout, with its info.
    assert_eq!(within(topics.presence_count("room")).await.unwrap(), 3);
}

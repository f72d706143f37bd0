//! Typed contracts over real sockets: typed calls and notifications both ways, typed
//! notification streams with back-pressure, the start-up check of a router against its
//! description, and the `rpc.discover` document.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{connections, serve, serve_with, within};
use futures_util::StreamExt;
use jsonrpc_peer::cluster::{Cluster, MemoryHub};
use jsonrpc_peer::schemars::JsonSchema;
use jsonrpc_peer::{
    connect, Api, Caller, Context, Error, MethodOptions, Notification, PeerConfig, Reconnecting,
    Router, RpcError, Server, TopicMethods, Topics,
};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio::sync::mpsc;

#[derive(Serialize, Deserialize, JsonSchema, Debug, PartialEq)]
struct SubtractParams {
    minuend: i64,
    subtrahend: i64,
}

#[derive(Serialize, Deserialize, JsonSchema, Debug, PartialEq)]
struct Page {
    title: String,
    /// Absent when the page has no heading.
    heading: Option<String>,
}

#[derive(Serialize, Deserialize, JsonSchema, Debug, PartialEq)]
#[serde(rename_all = "snake_case")]
enum Shape {
    Circle { radius: f64 },
    Square(f64),
    Dot,
}

#[derive(Serialize, Deserialize, JsonSchema, Debug, PartialEq)]
struct TickParams {
    n: u64,
}

jsonrpc_peer::method!(Subtract = "subtract", SubtractParams => i64);
jsonrpc_peer::method!(Area = "area", (Shape,) => f64);
jsonrpc_peer::method!(Scale = "scale", (f64, Shape) => Shape);
jsonrpc_peer::method!(Sum = "sum", Vec<i64> => i64);
jsonrpc_peer::method!(UiDescribe = "ui.describe", () => Page);
jsonrpc_peer::notification!(Tick = "tick", TickParams);
jsonrpc_peer::notification!(Log = "log", (String,));

jsonrpc_peer::method!(Describe = "describe", () => String);
jsonrpc_peer::method!(Count = "count", () => u64);

fn area(shape: &Shape) -> f64 {
    match shape {
        Shape::Circle { radius } => std::f64::consts::PI * radius * radius,
        Shape::Square(side) => side * side,
        Shape::Dot => 0.0,
    }
}

/// The server's side of the contract: what it serves and what it calls.
fn server_api() -> Api {
    Api::new("shapes", "1.2.0")
        .description("Arithmetic and shapes, both ways")
        .serves(Subtract)
        .serves(Area)
        .serves(Scale)
        .serves(Sum)
        .expects(UiDescribe)
        .sends(Tick)
        .receives(Log)
}

fn server_router() -> Router {
    Router::new()
        .handle(
            Subtract,
            |_cx, p| async move { Ok(p.minuend - p.subtrahend) },
        )
        .handle(Area, |_cx, (shape,)| async move { Ok(area(&shape)) })
        .handle(Scale, |_cx, (k, shape)| async move {
            Ok(match shape {
                Shape::Circle { radius } => Shape::Circle { radius: radius * k },
                Shape::Square(side) => Shape::Square(side * k),
                Shape::Dot => Shape::Dot,
            })
        })
        .handle(Sum, |_cx, values| async move { Ok(values.iter().sum()) })
        .on(Log, |_cx, (_line,)| async move {})
}

#[tokio::test]
async fn typed_calls_go_both_ways() {
    // The server asks the client to describe its page while answering `subtract`.
    let router = Router::new().handle(Subtract, |cx, p| async move {
        let page = cx
            .peer()
            .request(UiDescribe, &())
            .await
            .map_err(RpcError::internal_error)?;
        assert_eq!(page.title, "demo");
        Ok(p.minuend - p.subtrahend)
    });
    let (url, server) = serve(router).await;
    let mut connected = connections(&server);

    let client = Router::new().handle(UiDescribe, |_cx, ()| async move {
        Ok(Page {
            title: "demo".into(),
            heading: None,
        })
    });
    let peer = within(connect(&url, client)).await.unwrap();
    let d = within(peer.request(
        Subtract,
        &SubtractParams {
            minuend: 42,
            subtrahend: 23,
        },
    ))
    .await
    .unwrap();
    assert_eq!(d, 19);

    // And the server calls the client directly.
    let on_server = within(connected.recv()).await.unwrap();
    let page = within(on_server.request(UiDescribe, &())).await.unwrap();
    assert_eq!(
        page,
        Page {
            title: "demo".into(),
            heading: None
        }
    );

    // The typed name is the wire name: the string API reaches the same handler.
    let d: i64 = within(peer.call("subtract", [10, 4])).await.unwrap();
    assert_eq!(d, 6);
    peer.close().await;
}

#[tokio::test]
async fn a_typed_call_of_a_method_the_other_side_lacks_is_method_not_found() {
    let (url, _server) = serve(Router::new()).await;
    let peer = within(connect(&url, Router::new())).await.unwrap();
    let err = within(peer.request(Sum, &vec![1, 2])).await.unwrap_err();
    assert_eq!(
        err.rpc().map(|e| e.code),
        Some(jsonrpc_peer::ErrorCode::METHOD_NOT_FOUND)
    );
}

#[tokio::test]
async fn reconnecting_clients_make_typed_calls_and_notifications() {
    let (tx, mut lines) = tokio::sync::mpsc::unbounded_channel();
    let router = server_router().on(Tick, move |_cx, p| {
        let tx = tx.clone();
        async move {
            let _ = tx.send(p.n);
        }
    });
    let (url, _server) = serve(router).await;
    let client = Reconnecting::builder(url, Router::new()).start();
    let total = within(client.request(Sum, &vec![1, 2, 4])).await.unwrap();
    assert_eq!(total, 7);
    within(client.send(Tick, &TickParams { n: 5 }))
        .await
        .unwrap();
    assert_eq!(within(lines.recv()).await, Some(5));
    client.close().await;
}

#[tokio::test]
async fn notifications_arrive_as_a_typed_stream_in_order_and_end_with_the_connection() {
    let (url, server) = serve(Router::new()).await;
    let mut connected = connections(&server);
    let (router, mut ticks) = Router::new().stream(Tick);
    let peer = within(connect(&url, router)).await.unwrap();
    let on_server = within(connected.recv()).await.unwrap();

    for n in 0..20 {
        within(on_server.send(Tick, &TickParams { n }))
            .await
            .unwrap();
    }
    let mut seen = Vec::new();
    while seen.len() < 20 {
        let tick = within(ticks.next()).await.expect("stream ended early");
        seen.push(tick.n);
    }
    assert_eq!(seen, (0..20).collect::<Vec<_>>());

    // `Stream` too, for combinators.
    within(on_server.send(Tick, &TickParams { n: 99 }))
        .await
        .unwrap();
    let next = within(StreamExt::next(&mut ticks)).await;
    assert_eq!(next, Some(TickParams { n: 99 }));

    // A client's router goes with its connection, and the stream ends.
    on_server.close().await;
    within(peer.closed()).await;
    assert_eq!(within(ticks.next()).await, None);
}

#[tokio::test]
async fn a_full_stream_holds_the_connection_back_and_loses_nothing() {
    const SENT: u64 = 200;
    // Small bounds on the receiving side: a stream of 2, a notification queue of 2.
    let (url, server) = serve(Router::new()).await;
    let mut connected = connections(&server);
    // `sum` says how many ticks the test had taken from the stream when it ran.
    let taken = Arc::new(AtomicU64::new(0));
    let (ran_tx, mut ran) = mpsc::unbounded_channel();
    let (router, mut ticks) = Router::new()
        .handle(Sum, {
            let taken = taken.clone();
            move |_cx, v| {
                let _ = ran_tx.send(taken.load(Ordering::SeqCst));
                async move { Ok(v.iter().sum()) }
            }
        })
        .stream_with_capacity(Tick, 2);
    let config = PeerConfig::default().notification_queue(2);
    let _peer = within(jsonrpc_peer::connect_with_config(&url, router, &config))
        .await
        .unwrap();
    let on_server = within(connected.recv()).await.unwrap();

    for n in 0..SENT {
        within(on_server.send(Tick, &TickParams { n }))
            .await
            .unwrap();
    }
    // Nobody reads the stream: the client has stopped reading its connection, so a
    // call sent after the ticks is not answered...
    let held = on_server
        .request(Sum, &vec![1, 2])
        .timeout(Duration::from_millis(300))
        .await;
    assert!(matches!(held, Err(Error::Timeout { .. })), "{held:?}");

    // ...until the stream is read: then every tick comes, in order, and calls go through.
    for n in 0..SENT {
        let tick = within(ticks.next()).await.expect("stream ended early");
        assert_eq!(tick.n, n);
        taken.fetch_add(1, Ordering::SeqCst);
    }
    let total = within(on_server.request(Sum, &vec![1, 2])).await.unwrap();
    assert_eq!(total, 3);
    // The timed-out call was read, and run, only once nearly every tick had been taken:
    // what waits between the socket and the test is the stream (2), the handler that
    // waits for room in it, the notification queue (2) and a backlog of one. Unlike
    // the timeout above, this holds however slow the machine, and fails however slowly
    // a peer that should have stopped reading reads on.
    let when = within(ran.recv()).await.expect("the held call ran");
    assert!(
        when >= SENT - 6,
        "the call sent after {SENT} ticks ran when the test had taken {when}"
    );
}

#[test]
fn the_start_up_check_finds_missing_and_undescribed_handlers() {
    assert_eq!(server_api().check_exact(&server_router()), Ok(()));

    // `scale` described but not served; `extra` served but not described; `log`
    // described as sent by the other side but not handled.
    let router = Router::new()
        .handle(
            Subtract,
            |_cx, p| async move { Ok(p.minuend - p.subtrahend) },
        )
        .handle(Area, |_cx, (shape,)| async move { Ok(area(&shape)) })
        .handle(Sum, |_cx, v| async move { Ok(v.iter().sum()) })
        .method("extra", |_cx, (): ()| async { Ok::<_, RpcError>(1) });
    let missing = [
        "method `scale` is described but has no handler",
        "notification `log` is described as sent by the other side but has no handler",
    ];
    let err = server_api().check(&router).unwrap_err();
    assert_eq!(err.problems(), missing);
    let err = server_api().check_exact(&router).unwrap_err();
    assert_eq!(
        err.problems(),
        [
            missing[0],
            missing[1],
            "method `extra` has a handler but is not described",
        ]
    );
    assert!(err
        .to_string()
        .starts_with("the router does not match the API `shapes`: "));

    // The served `rpc.discover` is not part of the description.
    let router = server_router().discover(&server_api());
    assert_eq!(server_api().check_exact(&router), Ok(()));
}

fn method<'a>(doc: &'a Value, name: &str) -> &'a Value {
    doc["methods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == name)
        .unwrap_or_else(|| panic!("no method {name} in {doc:#}"))
}

/// Follows a `$ref` into the document's components.
fn deref<'a>(doc: &'a Value, schema: &'a Value) -> &'a Value {
    match schema["$ref"].as_str() {
        Some(r) => {
            let name = r
                .strip_prefix("#/components/schemas/")
                .expect("a component $ref");
            &doc["components"]["schemas"][name]
        }
        None => schema,
    }
}

#[tokio::test]
async fn rpc_discover_serves_the_openrpc_document_of_both_sides() {
    let api = server_api();
    let (url, _server) = serve(server_router().discover(&api)).await;
    let peer = within(connect(&url, Router::new())).await.unwrap();
    let doc: Value = within(peer.call("rpc.discover", ())).await.unwrap();
    // What is served is the document the description makes.
    assert_eq!(doc, api.openrpc());
    let again: Value = within(peer.call("rpc.discover", json!([]))).await.unwrap();
    assert_eq!(again, doc);

    assert_eq!(doc["openrpc"], "1.3.2");
    assert_eq!(
        doc["info"],
        json!({"title": "shapes", "version": "1.2.0", "description": "Arithmetic and shapes, both ways"})
    );
    let names: Vec<&str> = doc["methods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "subtract",
            "area",
            "scale",
            "sum",
            "ui.describe",
            "tick",
            "log"
        ]
    );

    // A struct: one descriptor per field in declaration order, named or positional.
    let subtract = method(&doc, "subtract");
    assert_eq!(subtract["paramStructure"], "either");
    assert_eq!(subtract["params"][0]["name"], "minuend");
    assert_eq!(subtract["params"][1]["name"], "subtrahend");
    assert_eq!(subtract["params"][0]["required"], true);
    assert_eq!(subtract["params"][0]["schema"]["type"], "integer");
    assert_eq!(subtract["result"]["schema"]["type"], "integer");
    assert!(subtract.get("x-implemented-by").is_none());

    // A tuple of an enum: positional; the enum's variants are in the components.
    let area = method(&doc, "area");
    assert_eq!(area["paramStructure"], "by-position");
    assert_eq!(area["params"].as_array().unwrap().len(), 1);
    let shape = deref(&doc, &area["params"][0]["schema"]);
    let variants = shape["oneOf"]
        .as_array()
        .expect("an enum is oneOf its variants");
    assert_eq!(variants.len(), 3, "{shape:#}");
    let text = shape.to_string();
    for variant in ["circle", "square", "dot"] {
        assert!(text.contains(variant), "{variant} missing from {shape:#}");
    }
    let scale = method(&doc, "scale");
    assert_eq!(scale["params"][0]["schema"]["type"], "number");
    assert_eq!(scale["params"][1]["name"], "arg1");
    assert_eq!(deref(&doc, &scale["result"]["schema"]), shape);

    // A Vec is the params value itself.
    let sum = method(&doc, "sum");
    assert_eq!(sum["x-params"], "whole");
    assert_eq!(sum["params"][0]["schema"]["type"], "array");

    // The client's method: marked, with an optional field not required.
    let describe = method(&doc, "ui.describe");
    assert_eq!(describe["x-implemented-by"], json!(["client"]));
    assert_eq!(describe["params"], json!([]));
    let page = deref(&doc, &describe["result"]["schema"]);
    assert_eq!(page["required"], json!(["title"]));
    let heading = page["properties"]["heading"].to_string();
    assert!(heading.contains("null"), "an Option is nullable: {heading}");
    assert!(page["properties"]["heading"]["description"]
        .as_str()
        .unwrap()
        .contains("no heading"));

    // Notifications have no result; the one this side sends is the client's to handle.
    let tick = method(&doc, "tick");
    assert!(tick.get("result").is_none());
    assert_eq!(tick["x-implemented-by"], json!(["client"]));
    assert_eq!(tick["params"][0]["name"], "n");
    let log = method(&doc, "log");
    assert!(log.get("result").is_none());
    assert!(log.get("x-implemented-by").is_none());

    // Draft-07 only: no 2020-12 keywords anywhere.
    let all = doc.to_string();
    for keyword in ["prefixItems", "$defs", "unevaluatedProperties"] {
        assert!(!all.contains(keyword), "{keyword} in {doc:#}");
    }
    peer.close().await;
}

#[tokio::test]
async fn rpc_discover_cannot_be_registered_by_hand_and_answers_over_any_config() {
    let result = std::panic::catch_unwind(|| {
        Router::new().method("rpc.discover", |_cx, (): ()| async { Ok::<_, RpcError>(1) })
    });
    let panic = result.expect_err("rpc. names stay reserved for the string API");
    let message = panic
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| panic.downcast_ref::<&str>().copied())
        .unwrap_or("(not a string)");
    assert_eq!(
        message,
        "method names beginning with `rpc.` are reserved by JSON-RPC 2.0: `rpc.discover`"
    );

    // Settings that shape how a call is read, run and answered: the document is served
    // under each (even when it is larger than the outgoing byte bound).
    let api = Api::new("empty", "0.1.0");
    let configs = [
        ("default", PeerConfig::default()),
        ("one call at a time", PeerConfig::default().max_in_flight(1)),
        (
            "a queue of one frame and 16 bytes",
            PeerConfig::default()
                .outgoing_queue(1)
                .outgoing_queue_bytes(16),
        ),
        (
            "small messages and batches",
            PeerConfig::default().max_message_size(256).max_batch_len(1),
        ),
        (
            "no keepalive, no cancel on drop",
            PeerConfig::default()
                .ping_interval(None)
                .cancel_on_drop(false)
                .notification_queue(1),
        ),
    ];
    for (name, config) in configs {
        let (url, _server) = serve_with(Router::new().discover(&api), config).await;
        let peer = within(connect(&url, Router::new())).await.unwrap();
        let doc: Value = within(peer.call("rpc.discover", ()))
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(doc["methods"], json!([]), "{name}");
        assert!(doc.get("components").is_none(), "{name}");
        assert!(doc.to_string().len() > 16, "{name}: {doc}");
        within(peer.close()).await;
    }
}

#[tokio::test]
async fn spec_server_describes_exactly_what_it_serves() {
    use common::spec_methods::{spec_api, spec_router};
    let api = spec_api("spec");
    let router = spec_router();
    api.check_exact(&router).unwrap();
    let (url, _server) = serve(router.discover(&api)).await;
    let peer = within(connect(&url, Router::new())).await.unwrap();
    let doc: Value = within(peer.call("rpc.discover", ())).await.unwrap();
    let mut described: Vec<(&str, bool)> = doc["methods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["name"].as_str().unwrap(), m.get("result").is_some()))
        .collect();
    described.sort();
    assert_eq!(
        described,
        [
            ("get_data", true),
            ("notify_hello", false),
            ("notify_sum", false),
            ("subtract", true),
            ("sum", true),
            ("update", false),
        ]
    );
    // Every described method answers, by its wire name.
    let d: i64 = within(peer.call("subtract", [42, 23])).await.unwrap();
    assert_eq!(d, 19);
    let data: (String, u32) = within(peer.call("get_data", ())).await.unwrap();
    assert_eq!(data, ("hello".to_string(), 5));
}

/// What a user writes once for "anything I can call": the same function, with the same
/// per-call option, takes each of the three handles.
async fn describe(other: &impl Caller) -> jsonrpc_peer::Result<String> {
    other
        .request(Describe, &())
        .timeout(Duration::from_secs(5))
        .await
}

#[tokio::test]
async fn one_function_calls_a_peer_a_reconnecting_client_and_a_peer_on_another_node() {
    let hub = MemoryHub::new();
    let mut nodes = Vec::new();
    for name in ["a", "b"] {
        let server = Server::bind("127.0.0.1:0").await.unwrap();
        let url = format!("ws://{}", server.local_addr().unwrap());
        let cluster = within(
            Cluster::builder(hub.backplane(), server.handle())
                .node_id(name)
                .start(),
        )
        .await
        .unwrap();
        let router = Router::with_state(cluster.clone())
            .handle(Describe, |_cx, ()| async { Ok("a server".to_owned()) })
            .method("whoami", |cx: Context<Cluster>, (): ()| async move {
                Ok::<_, RpcError>(cx.state().addr(cx.peer()))
            });
        tokio::spawn(server.serve(router));
        nodes.push((cluster, url));
    }
    let mut live = nodes[0].0.watch_nodes();
    within(live.wait_for(|n| n.len() == 2)).await.unwrap();

    let peer = within(connect(&nodes[0].1, Router::new())).await.unwrap();
    assert_eq!(describe(&peer).await.unwrap(), "a server");
    let client = Reconnecting::builder(nodes[0].1.as_str(), Router::new()).start();
    assert_eq!(describe(&client).await.unwrap(), "a server");

    // A client of node b that serves `describe` too; node a calls it by its address.
    let on_b = Router::new().handle(Describe, |_cx, ()| async { Ok("a client of b".to_owned()) });
    let on_b = within(connect(&nodes[1].1, on_b)).await.unwrap();
    let addr: jsonrpc_peer::cluster::PeerAddr = within(on_b.call("whoami", ())).await.unwrap();
    assert_eq!(addr.node, "b");
    let remote = nodes[0].0.peer(&addr);
    assert_eq!(describe(&remote).await.unwrap(), "a client of b");

    client.close().await;
    peer.close().await;
    on_b.close().await;
    for (cluster, _) in &nodes {
        cluster.shutdown().await;
    }
}

#[tokio::test]
async fn a_contract_publishes_on_its_topic_or_on_one_of_another_name_and_broadcasts() {
    let topics = Topics::new();
    let (url, server) = serve(Router::new().topics(TopicMethods::new(&topics))).await;
    let (client, mut ticks) = Router::new().stream(Tick);
    let peer = within(connect(&url, client)).await.unwrap();
    assert!(within(peer.call::<bool>("subscribe", ("ticks/a",)))
        .await
        .unwrap());

    // The topic "ticks/a" carries `tick` notifications; the contract's own topic is
    // "tick", which no one follows.
    let on_a = Tick.on_topic("ticks/a");
    let published = within(topics.publish(&on_a, &TickParams { n: 1 }))
        .await
        .unwrap();
    assert_eq!(published.delivered, 1);
    let published = within(topics.publish(Tick, &TickParams { n: 2 }))
        .await
        .unwrap();
    assert_eq!(published.delivered, 0);
    assert_eq!(server.broadcast(Tick, &TickParams { n: 3 }).unwrap(), 1);

    assert_eq!(within(ticks.next()).await, Some(TickParams { n: 1 }));
    assert_eq!(within(ticks.next()).await, Some(TickParams { n: 3 }));
    peer.close().await;
}

#[tokio::test]
async fn a_typed_handler_with_options_is_told_of_the_cancel_and_its_partial_result_is_returned() {
    // What the handler had counted when it was told of the cancel: the answer must be
    // that, however many ticks a slow machine let it count before the timeout.
    let told = Arc::new(AtomicU64::new(u64::MAX));
    let seen = told.clone();
    let router =
        Router::new().handle_with(Count, MethodOptions::new().cooperative(), move |cx, ()| {
            let told = told.clone();
            async move {
                let mut ticks = 0;
                loop {
                    tokio::select! {
                        _ = cx.cancelled() => {
                            told.store(ticks, Ordering::SeqCst);
                            return Ok(ticks);
                        }
                        _ = tokio::time::sleep(Duration::from_millis(5)) => ticks += 1,
                    }
                }
            }
        });
    let (url, _server) = serve(router).await;
    let peer = within(connect(&url, Router::new())).await.unwrap();
    let partial = within(
        peer.request(Count, &())
            .timeout(Duration::from_millis(100))
            .cancel_grace(Duration::from_secs(5)),
    )
    .await
    .unwrap();
    assert_eq!(
        partial,
        seen.load(Ordering::SeqCst),
        "the answer is what the handler counted when it was told"
    );
    peer.close().await;
}

jsonrpc_peer::notification!(Temperature = "temperature", f64);

/// A contract whose params are one number, published with `Topics::publish` and followed
/// by a `Reconnecting` client with `builder.topic(...)`: the client hands over the
/// number, on a topic without history (where the params go as `[value]`, as the
/// contract's own handler reads them) and on one with history.
#[tokio::test]
async fn a_reconnecting_client_follows_a_contract_of_one_value_with_and_without_history() {
    use jsonrpc_peer::{HistoryConfig, TopicEvent};

    let topics = Topics::new();
    topics.keep_history("kept", HistoryConfig::default());
    let (url, _server) = serve(Router::new().topics(TopicMethods::new(&topics))).await;
    for topic in [Temperature.on_topic("plain"), Temperature.on_topic("kept")] {
        let (builder, mut events) =
            Reconnecting::builder(url.as_str(), Router::new()).topic(topic.clone());
        let client = builder.start();
        within(client.connected(Duration::from_secs(5)))
            .await
            .unwrap();
        // Connected means the hooks ran: the client is subscribed.
        let name = jsonrpc_peer::Topic::<f64>::name(&topic).to_owned();
        assert_eq!(topics.subscriber_count(&name), 1);
        within(topics.publish(&topic, &21.5)).await.unwrap();
        match within(events.recv()).await.unwrap() {
            TopicEvent::Data(celsius) => assert_eq!(celsius, 21.5, "{name}"),
            other => panic!("{name}: the client got {other:?} for a publication of 21.5"),
        }
        within(client.close()).await;
    }
}

#[derive(Serialize, Deserialize, JsonSchema, Debug, PartialEq)]
#[serde(rename_all = "snake_case")]
enum Pace {
    Fast,
    Slow,
}

jsonrpc_peer::method!(Double = "double", i64 => i64);
jsonrpc_peer::method!(Pick = "pick", Pace => String);
jsonrpc_peer::method!(Maybe = "maybe", Option<u32> => u32);

/// The params of `method` made as its `rpc.discover` entry describes them, from the
/// values of its descriptors in order: the value itself for `"x-params": "whole"`, an
/// array for `"by-position"`.
fn params_as_described(method: &Value, values: Vec<Value>) -> Value {
    if method["x-params"] == "whole" {
        values.into_iter().next().unwrap()
    } else {
        assert_eq!(method["paramStructure"], "by-position", "{method:#}");
        Value::Array(values)
    }
}

/// A client that knows only the `rpc.discover` document (a generated client, the web
/// demo's TypeScript types) makes its params as the document says: for a contract of
/// one number, one string of an enum or an `Option` of one, what it sends must be
/// what the server accepts.
#[tokio::test]
async fn params_of_one_value_are_described_as_the_server_reads_them() {
    let api = Api::new("one", "1.0.0")
        .serves(Double)
        .serves(Pick)
        .serves(Maybe)
        .serves(Sum);
    let router = Router::new()
        .handle(Double, |_cx, n| async move { Ok(n * 2) })
        .handle(Pick, |_cx, pace| async move { Ok(format!("{pace:?}")) })
        .handle(Maybe, |_cx, n| async move { Ok(n.unwrap_or(7)) })
        .handle(Sum, |_cx, values| async move { Ok(values.iter().sum()) })
        .discover(&api);
    let (url, _server) = serve(router).await;
    let mut raw = common::RawClient::connect(&url).await;
    let doc = raw
        .ask(r#"{"jsonrpc":"2.0","method":"rpc.discover","id":0}"#)
        .await["result"]
        .clone();
    for (id, name, values, expected) in [
        (1, "double", vec![json!(21)], json!(42)),
        (2, "pick", vec![json!("slow")], json!("Slow")),
        (3, "maybe", vec![json!(5)], json!(5)),
        (4, "sum", vec![json!([1, 2, 3])], json!(6)),
    ] {
        let described = method(&doc, name);
        let params = params_as_described(described, values);
        let frame = json!({"jsonrpc": "2.0", "method": name, "params": params, "id": id});
        let answer = raw.ask(&frame.to_string()).await;
        assert_eq!(
            answer["result"], expected,
            "`{name}` described as {described}; sent as described ({frame}), the server answered {answer}"
        );
    }
    // The `Option` may be left out, as the server reads absent params.
    let maybe = method(&doc, "maybe");
    assert_eq!(maybe["params"][0]["required"], false, "{maybe:#}");
    let answer = raw
        .ask(r#"{"jsonrpc":"2.0","method":"maybe","params":[],"id":5}"#)
        .await;
    assert_eq!(answer["result"], 7, "{answer}");
    assert_eq!(method(&doc, "double")["params"][0]["required"], true);
}

/// A key that is a number or a name: an untagged enum whose variants are one value.
#[derive(Serialize, Deserialize, JsonSchema, Debug, PartialEq)]
#[serde(untagged)]
enum Key {
    Id(u64),
    Name(String),
}

jsonrpc_peer::method!(Lookup = "lookup", Key => String);

/// A contract whose params are an untagged enum of a number or a string: the typed call
/// sends the value as `[7]` (params are never a bare value), and the contract's own
/// handler must read it back.
#[tokio::test]
async fn a_typed_call_of_an_untagged_enum_of_one_value_reaches_its_handler() {
    let router = Router::new().handle(Lookup, |_cx, key| async move {
        Ok(match key {
            Key::Id(id) => format!("id {id}"),
            Key::Name(name) => format!("name {name}"),
        })
    });
    let (url, _server) = serve(router).await;
    let peer = within(connect(&url, Router::new())).await.unwrap();
    for (key, expected) in [(Key::Id(7), "id 7"), (Key::Name("ana".into()), "name ana")] {
        let answer = within(peer.request(Lookup, &key)).await;
        match answer {
            Ok(text) => assert_eq!(text, expected),
            Err(e) => panic!("request(Lookup, &{key:?}) failed: {e}"),
        }
    }
    peer.close().await;
}

/// The untagged enum of a number or a string, as its `rpc.discover` entry describes it:
/// what a client made from the document sends is what the server reads.
#[tokio::test]
async fn an_untagged_enum_of_one_value_is_described_as_the_server_reads_it() {
    let api = Api::new("keys", "1.0.0").serves(Lookup);
    let router = Router::new()
        .handle(Lookup, |_cx, key| async move { Ok(format!("{key:?}")) })
        .discover(&api);
    let (url, _server) = serve(router).await;
    let mut raw = common::RawClient::connect(&url).await;
    let doc = raw
        .ask(r#"{"jsonrpc":"2.0","method":"rpc.discover","id":0}"#)
        .await["result"]
        .clone();
    let described = method(&doc, "lookup");
    let params = params_as_described(described, vec![json!(7)]);
    let frame = json!({"jsonrpc": "2.0", "method": "lookup", "params": params, "id": 1});
    let answer = raw.ask(&frame.to_string()).await;
    assert_eq!(
        answer["result"], "Id(7)",
        "`lookup` described as {described}; sent as described ({frame}), the server answered {answer}"
    );
}

//! Cancellation both ways: a call given up on one side stops its handler on the other.
//!
//! Every test runs two ends of a real unix socket pair, speaking WebSocket frames: a
//! `Peer` on one end, and on the other a `Peer` or a raw WebSocket that writes and reads
//! the exact JSON. Where timing is the point, time is paused: the clock only moves when
//! every task waits, so "within 50 ms" is exact and never flaky.

mod common;

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use jsonrpc_peer::{
    Caller, CancelStyle, Context, Error, MethodOptions, Peer, PeerConfig, Router, RpcError,
};
use serde_json::{json, Value};
use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;

use common::unix::{config, start, ws_pair, Raw};
use common::within;

/// What the server's handlers report, in order.
struct Probe {
    events: mpsc::UnboundedSender<String>,
    /// Holds the `hold` notification until the test releases it.
    hold: Arc<Notify>,
}

/// Sends `dropped NAME` when the handler that owns it goes, finished or stopped.
struct OnDrop(mpsc::UnboundedSender<String>, &'static str);

impl Drop for OnDrop {
    fn drop(&mut self) {
        let _ = self.0.send(format!("dropped {}", self.1));
    }
}

fn server_router() -> (Router<Probe>, mpsc::UnboundedReceiver<String>, Arc<Notify>) {
    let (events, rx) = mpsc::unbounded_channel();
    let hold = Arc::new(Notify::new());
    let router = Router::with_state(Probe {
        events,
        hold: hold.clone(),
    })
    .method("slow", |cx: Context<Probe>, (): ()| async move {
        let _guard = OnDrop(cx.state().events.clone(), "slow");
        let _ = cx.state().events.send("started slow".into());
        tokio::time::sleep(Duration::from_secs(60)).await;
        Ok::<_, RpcError>("finished")
    })
    .method("quick", |_cx: Context<Probe>, (): ()| async move {
        // Not done in its first poll: it runs on its own task, where a cancel can meet it.
        tokio::task::yield_now().await;
        Ok::<_, RpcError>("quick")
    })
    .method_with(
        "count",
        MethodOptions::new().cooperative(),
        |cx: Context<Probe>, (): ()| async move {
            let mut ticks = 0u32;
            loop {
                tokio::select! {
                    _ = cx.cancelled() => break,
                    _ = tokio::time::sleep(Duration::from_millis(10)) => {
                        ticks += 1;
                        let _ = cx.state().events.send(format!("tick {ticks}"));
                    }
                }
            }
            let _ = cx
                .state()
                .events
                .send(format!("cancelled seen: {}", cx.is_cancelled()));
            Ok::<_, RpcError>(json!({ "partial": ticks }))
        },
    )
    .notification("hold", |cx: Context<Probe>, (): ()| async move {
        let _ = cx.state().events.send("holding".into());
        cx.state().hold.notified().await;
        let _ = cx.state().events.send("released".into());
    });
    (router, rx, hold)
}

/// Waits for the next event of the server's handlers.
async fn next(events: &mut mpsc::UnboundedReceiver<String>) -> String {
    within(events.recv()).await.expect("the server is alive")
}

fn cancel_lsp(id: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","method":"$/cancelRequest","params":{{"id":{id}}}}}"#)
}

/// A cancel of the call `id` in `style`'s form: `"lsp"` or `"mcp"`.
fn cancel_in(style: &str, id: &str) -> String {
    match style {
        "lsp" => cancel_lsp(id),
        _ => format!(
            r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{{"requestId":{id}}}}}"#
        ),
    }
}

#[tokio::test(start_paused = true)]
async fn a_call_given_up_by_its_timeout_stops_the_handler_on_the_other_side_at_once() {
    let (router, mut events, _hold) = server_router();
    let (a, b) = ws_pair().await;
    let client = start(a, Router::new(), &config());
    let server = start(b, router, &config());

    let begun = Instant::now();
    let outcome = client
        .call::<String>("slow", ())
        .timeout(Duration::from_millis(10))
        .await;
    assert!(matches!(outcome, Err(Error::Timeout { .. })), "{outcome:?}");
    assert_eq!(next(&mut events).await, "started slow");
    let dropped = tokio::time::timeout(Duration::from_millis(50), events.recv()).await;
    assert_eq!(
        dropped.ok().flatten().as_deref(),
        Some("dropped slow"),
        "the handler was still running 50 ms after the call gave up"
    );
    assert!(begun.elapsed() <= Duration::from_millis(50));
    assert_eq!(client.pending_calls(), 0);
    assert_eq!(server.pending_calls(), 0);
    assert_eq!(server.calls_running(), 0);
}

#[tokio::test(start_paused = true)]
async fn with_cancels_off_the_handler_runs_on() {
    let (router, mut events, _hold) = server_router();
    let (a, b) = ws_pair().await;
    let client = start(a, Router::new(), &config().cancel_on_drop(false));
    let server = start(b, router, &config());

    let outcome = client
        .call::<String>("slow", ())
        .timeout(Duration::from_millis(10))
        .await;
    assert!(matches!(outcome, Err(Error::Timeout { .. })), "{outcome:?}");
    assert_eq!(next(&mut events).await, "started slow");
    let early = tokio::time::timeout(Duration::from_millis(50), events.recv()).await;
    assert!(
        early.is_err(),
        "the handler stopped without a cancel: {early:?}"
    );
    assert_eq!(server.calls_running(), 1);
    assert_eq!(client.pending_calls(), 0);
}

/// A call on a task the test aborts (its future dropped), with the raw frames it sent.
async fn dropped_call(config: PeerConfig) -> (Value, Value, Peer) {
    let (a, b) = ws_pair().await;
    let client = start(a, Router::new(), &config);
    let mut raw = Raw(b);
    let caller = client.clone();
    let call = tokio::spawn(async move { caller.call::<Value>("slow", [1]).await });
    let request = raw.recv().await;
    call.abort();
    assert!(within(call).await.is_err_and(|e| e.is_cancelled()));
    client
        .notify("after", ())
        .await
        .expect("the connection is open");
    let next = raw.recv().await;
    (request, next, client)
}

#[tokio::test]
async fn a_dropped_call_sends_the_lsp_cancel_with_its_id() {
    let (request, next, client) = dropped_call(config()).await;
    assert_eq!(
        next,
        json!({"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id": request["id"]}})
    );
    assert_eq!(client.pending_calls(), 0);
    assert_eq!(client.cancels_skipped(), 0);
}

#[tokio::test]
async fn the_mcp_form_is_a_setting() {
    let (request, next, _client) = dropped_call(config().cancel_style(CancelStyle::Mcp)).await;
    assert_eq!(
        next,
        json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId": request["id"]}})
    );
}

#[tokio::test]
async fn with_cancels_off_nothing_is_sent() {
    let (_request, next, _client) = dropped_call(config().cancel_on_drop(false)).await;
    assert_eq!(next["method"], "after", "{next}");
}

/// A server `Peer` on one end, a raw WebSocket client on the other.
async fn raw_client() -> (Raw, Peer, mpsc::UnboundedReceiver<String>) {
    let (raw, server, events, _hold) = raw_client_holding().await;
    (raw, server, events)
}

async fn raw_client_holding() -> (Raw, Peer, mpsc::UnboundedReceiver<String>, Arc<Notify>) {
    let (router, events, hold) = server_router();
    let (a, b) = ws_pair().await;
    let server = start(b, router, &config());
    (Raw(a), server, events, hold)
}

#[tokio::test]
async fn an_lsp_cancel_stops_the_handler_and_answers_32800_once() {
    let (mut raw, server, mut events) = raw_client().await;
    raw.send(r#"{"jsonrpc":"2.0","method":"slow","id":"a"}"#)
        .await;
    assert_eq!(next(&mut events).await, "started slow");
    raw.send(&cancel_lsp(r#""a""#)).await;
    assert_eq!(
        raw.recv().await,
        json!({"jsonrpc":"2.0","error":{"code":-32800,"message":"Request cancelled"},"id":"a"})
    );
    assert_eq!(next(&mut events).await, "dropped slow");
    assert_eq!(server.calls_running(), 0);
    // A cancel for a finished call, or for an id never seen, changes nothing.
    raw.send(&cancel_lsp(r#""a""#)).await;
    raw.send(&cancel_lsp("42")).await;
    raw.send(r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":[1]}"#)
        .await;
    raw.nothing_before_marker().await;
}

#[tokio::test]
async fn an_mcp_cancel_stops_the_handler_and_sends_no_answer() {
    let (mut raw, server, mut events) = raw_client().await;
    raw.send(r#"{"jsonrpc":"2.0","method":"slow","id":7}"#)
        .await;
    assert_eq!(next(&mut events).await, "started slow");
    raw.send(
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7,"reason":"user"}}"#,
    )
    .await;
    assert_eq!(next(&mut events).await, "dropped slow");
    raw.nothing_before_marker().await;
    assert_eq!(server.calls_running(), 0);
}

#[tokio::test]
async fn a_cancel_is_handled_at_once_while_an_ordered_notification_runs() {
    let (mut raw, _server, mut events, hold) = raw_client_holding().await;
    raw.send(r#"{"jsonrpc":"2.0","method":"hold"}"#).await;
    assert_eq!(next(&mut events).await, "holding");
    raw.send(r#"{"jsonrpc":"2.0","method":"slow","id":1}"#)
        .await;
    assert_eq!(next(&mut events).await, "started slow");
    raw.send(&cancel_lsp("1")).await;
    assert_eq!(raw.recv().await["error"]["code"], -32800);
    assert_eq!(next(&mut events).await, "dropped slow");
    // The notification was still holding all along.
    hold.notify_one();
    assert_eq!(next(&mut events).await, "released");
}

/// A server with `max_in_flight` 1, reached: the call `slow` with id 1 runs (it ends only
/// when cancelled). The server's peer, the client's raw end, the server's events.
async fn running_slow_call_1_at_max_in_flight_1(
) -> (Peer, Raw, mpsc::UnboundedReceiver<String>, Arc<Notify>) {
    let (router, mut events, hold) = server_router();
    let (a, b) = ws_pair().await;
    let server = start(b, router, &config().max_in_flight(1));
    let mut raw = Raw(a);
    raw.send(r#"{"jsonrpc":"2.0","method":"slow","id":1}"#)
        .await;
    assert_eq!(next(&mut events).await, "started slow");
    (server, raw, events, hold)
}

/// With `max_in_flight` reached, reading pauses; a cancel is read all the same, and
/// stopping the call it names is what lets reading go on.
#[tokio::test]
async fn a_cancel_reaches_its_call_while_max_in_flight_pauses_reading() {
    for style in ["lsp", "mcp"] {
        let (server, mut raw, mut events, _hold) = running_slow_call_1_at_max_in_flight_1().await;
        if style == "lsp" {
            raw.send(&cancel_lsp("1")).await;
            assert_eq!(
                raw.recv().await,
                json!({"jsonrpc":"2.0","error":{"code":-32800,"message":"Request cancelled"},"id":1})
            );
        } else {
            raw.send(
                r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}"#,
            )
            .await;
        }
        assert_eq!(next(&mut events).await, "dropped slow", "{style}");
        assert_eq!(server.calls_running(), 0);
        // Reading went on: the next call is served.
        raw.send(r#"{"jsonrpc":"2.0","method":"quick","id":2}"#)
            .await;
        assert_eq!(
            raw.recv().await,
            json!({"jsonrpc":"2.0","result":"quick","id":2}),
            "{style}"
        );
    }
}

/// With `max_in_flight` reached, calls read after it wait for their turn; cancels
/// behind them are still read. One for a call still waiting takes it (it never starts:
/// `-32800` at once in the LSP form, nothing in the MCP form); one for the running
/// call stops it, and the calls left run in order.
#[tokio::test]
async fn a_cancel_behind_calls_waiting_for_their_turn_is_read_and_acted_on() {
    for style in ["lsp", "mcp"] {
        let cancel = |id: &str| cancel_in(style, id);
        let (server, mut raw, mut events, _hold) = running_slow_call_1_at_max_in_flight_1().await;
        // Both wait: 1 runs and ends only when cancelled.
        raw.send(r#"{"jsonrpc":"2.0","method":"slow","id":2}"#)
            .await;
        raw.send(r#"{"jsonrpc":"2.0","method":"quick","id":3}"#)
            .await;
        raw.send(&cancel("2")).await;
        if style == "lsp" {
            assert_eq!(
                raw.recv().await,
                json!({"jsonrpc":"2.0","error":{"code":-32800,"message":"Request cancelled"},"id":2})
            );
        }
        raw.send(&cancel("1")).await;
        if style == "lsp" {
            assert_eq!(
                raw.recv().await,
                json!({"jsonrpc":"2.0","error":{"code":-32800,"message":"Request cancelled"},"id":1})
            );
        }
        assert_eq!(next(&mut events).await, "dropped slow", "{style}");
        assert_eq!(
            raw.recv().await,
            json!({"jsonrpc":"2.0","result":"quick","id":3}),
            "{style}"
        );
        // 2 never started.
        assert_eq!(server.calls_running(), 0);
        assert!(events.try_recv().is_err(), "{style}: 2 ran");
    }
}

/// A cancel for a call of a batch that waits for its turn is kept behind the batch
/// and acted on as the batch starts (a batch runs whole): the batch's array answers
/// that call as the cancel says (`-32800` in the LSP form, left out in the MCP form),
/// and the rest of the batch runs.
#[tokio::test]
async fn a_cancel_for_a_call_of_a_batch_waiting_its_turn_stops_it_as_the_batch_starts() {
    for style in ["lsp", "mcp"] {
        let cancel = |id: &str| cancel_in(style, id);
        let (server, mut raw, mut events, _hold) = running_slow_call_1_at_max_in_flight_1().await;
        raw.send(
            r#"[{"jsonrpc":"2.0","method":"slow","id":2},{"jsonrpc":"2.0","method":"quick","id":3}]"#,
        )
        .await;
        raw.send(&cancel("2")).await;
        raw.send(&cancel("1")).await;
        let cancelled = |id: u64| json!({"jsonrpc":"2.0","error":{"code":-32800,"message":"Request cancelled"},"id":id});
        if style == "lsp" {
            assert_eq!(raw.recv().await, cancelled(1));
        }
        assert_eq!(next(&mut events).await, "dropped slow", "{style}");
        let quick = json!({"jsonrpc":"2.0","result":"quick","id":3});
        let batch = match style {
            "lsp" => json!([cancelled(2), quick]),
            _ => json!([quick]),
        };
        // Before, 2 ran whole: this waited for its 60 seconds.
        assert_eq!(raw.recv().await, batch, "{style}");
        assert_eq!(server.calls_running(), 0);
    }
}

#[tokio::test]
async fn a_cancel_racing_the_answer_gives_exactly_one_answer() {
    let (mut raw, _server, _events) = raw_client().await;
    const N: usize = 200;
    for i in 0..N {
        raw.send(&format!(r#"{{"jsonrpc":"2.0","method":"quick","id":{i}}}"#))
            .await;
        raw.send(&cancel_lsp(&i.to_string())).await;
    }
    raw.send(r#"{"jsonrpc":"2.0","method":"no.such","id":"marker"}"#)
        .await;
    let mut answers = vec![0usize; N];
    let (mut results, mut cancelled) = (0, 0);
    for _ in 0..=N + 1 {
        let answer = raw.recv().await;
        if answer["id"] == "marker" {
            break;
        }
        let id = answer["id"].as_u64().expect("a numeric id") as usize;
        answers[id] += 1;
        if answer["result"] == "quick" {
            results += 1;
        } else {
            assert_eq!(answer["error"]["code"], -32800, "{answer}");
            cancelled += 1;
        }
    }
    assert!(
        answers.iter().all(|&n| n == 1),
        "answers per id: {answers:?}"
    );
    assert_eq!(results + cancelled, N);
    raw.nothing_before_marker().await;
}

#[tokio::test(start_paused = true)]
async fn a_cooperative_handler_returns_a_partial_result() {
    let (mut raw, server, mut events) = raw_client().await;
    raw.send(r#"{"jsonrpc":"2.0","method":"count","id":3}"#)
        .await;
    for tick in 1..=3 {
        assert_eq!(next(&mut events).await, format!("tick {tick}"));
    }
    raw.send(&cancel_lsp("3")).await;
    assert_eq!(next(&mut events).await, "cancelled seen: true");
    let answer = raw.recv().await;
    assert_eq!(
        answer,
        json!({"jsonrpc":"2.0","result":{"partial":3},"id":3})
    );
    assert_eq!(server.calls_running(), 0);
    raw.nothing_before_marker().await;
}

#[tokio::test(start_paused = true)]
async fn a_cooperative_handler_cancelled_in_the_mcp_form_is_not_answered() {
    let (mut raw, server, mut events) = raw_client().await;
    raw.send(r#"{"jsonrpc":"2.0","method":"count","id":3}"#)
        .await;
    assert_eq!(next(&mut events).await, "tick 1");
    raw.send(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3}}"#)
        .await;
    assert_eq!(next(&mut events).await, "cancelled seen: true");
    raw.nothing_before_marker().await;
    assert_eq!(server.calls_running(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_cancel_that_finds_the_outgoing_queue_full_is_skipped_and_counted() {
    use jsonrpc_peer::transport::{pair_with_capacity, Frame};
    // The link holds one frame and the other end does not read yet; the queue holds one.
    let (near, mut far) = pair_with_capacity(1);
    let client = Peer::start(near, Arc::new(Router::new()), &config().outgoing_queue(1));
    let caller = client.clone();
    let call = tokio::spawn(async move { caller.call::<Value>("slow", ()).await });
    // Idle time only passes once every task waits: the request is in the link by now.
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(client.pending_calls(), 1);
    client.notify("fills_the_queue", ()).await.expect("queued");
    call.abort();
    assert!(within(call).await.is_err_and(|e| e.is_cancelled()));
    assert_eq!(client.cancels_skipped(), 1);
    assert_eq!(client.pending_calls(), 0);
    // What the other end reads: the request, the notification, and no cancel.
    let mut read = Vec::new();
    for _ in 0..2 {
        match within(far.next()).await {
            Some(Ok(Frame::Text(t))) => read.push(serde_json::from_str::<Value>(&t).expect("JSON")),
            other => panic!("expected a text frame, got {other:?}"),
        }
    }
    client.notify("after", ()).await.expect("sent");
    match within(far.next()).await {
        Some(Ok(Frame::Text(t))) => read.push(serde_json::from_str::<Value>(&t).expect("JSON")),
        other => panic!("expected a text frame, got {other:?}"),
    }
    let methods: Vec<_> = read.iter().map(|m| m["method"].clone()).collect();
    assert_eq!(
        methods,
        [json!("slow"), json!("fills_the_queue"), json!("after")]
    );
}

#[tokio::test(start_paused = true)]
async fn a_call_with_a_grace_gets_the_partial_result_that_a_plain_timeout_drops() {
    let (router, mut events, _hold) = server_router();
    let (a, b) = ws_pair().await;
    let client = start(a, Router::new(), &config());
    let server = start(b, router, &config());

    // Without a grace the call ends at its timeout: the handler is told, and the
    // partial result it answers with then finds no one waiting.
    let plain = client
        .call::<Value>("count", ())
        .timeout(Duration::from_millis(35))
        .await;
    assert!(matches!(plain, Err(Error::Timeout { .. })), "{plain:?}");
    for tick in 1..=3 {
        assert_eq!(next(&mut events).await, format!("tick {tick}"));
    }
    assert_eq!(next(&mut events).await, "cancelled seen: true");
    assert_eq!(client.pending_calls(), 0);

    // With a grace, the cancel goes out at the timeout and the answer is waited for.
    let began = Instant::now();
    let partial: Value = client
        .call("count", ())
        .timeout(Duration::from_millis(35))
        .cancel_grace(Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(partial, json!({ "partial": 3 }));
    assert!(
        began.elapsed() < Duration::from_millis(100),
        "{:?}",
        began.elapsed()
    );
    assert_eq!(client.pending_calls(), 0);

    // A handler that is stopped instead answers -32800: the call is the timeout it is.
    let stopped = client
        .call::<String>("slow", ())
        .timeout(Duration::from_millis(10))
        .cancel_grace(Duration::from_secs(1))
        .await;
    assert!(matches!(stopped, Err(Error::Timeout { .. })), "{stopped:?}");
    assert_eq!(server.calls_running(), 0);
}

#[tokio::test]
async fn a_dropped_batch_cancels_each_of_its_calls_still_waiting() {
    let (a, b) = ws_pair().await;
    let client = start(a, Router::new(), &config());
    let mut raw = Raw(b);
    let caller = client.clone();
    let batch = tokio::spawn(async move {
        let mut batch = caller.batch();
        batch
            .call("slow", [1])?
            .notify("note", ())?
            .call("slow", [2])?;
        batch.send().await
    });
    let sent = raw.recv().await;
    let ids: Vec<Value> = sent
        .as_array()
        .expect("one array")
        .iter()
        .filter_map(|item| item.get("id").cloned())
        .collect();
    assert_eq!(ids.len(), 2, "{sent}");
    assert_eq!(client.pending_calls(), 2);
    batch.abort();
    assert!(within(batch).await.is_err_and(|e| e.is_cancelled()));
    assert_eq!(client.pending_calls(), 0);
    client
        .notify("after", ())
        .await
        .expect("the connection is open");
    let mut cancelled = Vec::new();
    for _ in 0..2 {
        let frame = raw.recv().await;
        assert_eq!(frame["method"], "$/cancelRequest", "{frame}");
        cancelled.push(frame["params"]["id"].clone());
    }
    cancelled.sort_by_key(|id| id.as_u64());
    let mut want = ids.clone();
    want.sort_by_key(|id| id.as_u64());
    assert_eq!(cancelled, want);
    assert_eq!(raw.recv().await["method"], "after");
}

/// The next text frame of a raw in-memory end, as JSON.
async fn next_json(end: &mut jsonrpc_peer::transport::Memory) -> Value {
    use jsonrpc_peer::transport::Frame;
    for _ in 0..1000 {
        match within(end.next()).await {
            Some(Ok(Frame::Text(text))) => return serde_json::from_str(&text).unwrap(),
            Some(Ok(_)) => continue,
            other => panic!("no frame: {other:?}"),
        }
    }
    panic!("no text frame");
}

async fn send_json(end: &mut jsonrpc_peer::transport::Memory, value: Value) {
    use futures_util::SinkExt;
    use jsonrpc_peer::transport::Frame;
    within(end.send(Frame::Text(value.to_string().into())))
        .await
        .unwrap();
}

/// A batch given up while it waits on its first call sends a cancel for that call
/// only: the second, already answered (its answer in its entry, not taken yet), has
/// nothing left to cancel.
#[tokio::test(start_paused = true)]
async fn a_dropped_batch_cancels_only_its_calls_still_waiting() {
    use jsonrpc_peer::transport::{pair, Frame};

    let (end, mut raw) = pair();
    let peer = Peer::start(end, Router::new(), &PeerConfig::default());
    let task = tokio::spawn({
        let peer = peer.clone();
        async move {
            let mut batch = peer.batch();
            batch.call("slow", ()).unwrap();
            batch.call("fast", ()).unwrap();
            let _ = tokio::time::timeout(Duration::from_secs(1), batch.send()).await;
        }
    });
    let request = next_json(&mut raw).await;
    let ids: Vec<u64> = request
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_u64().unwrap())
        .collect();
    send_json(
        &mut raw,
        json!({"jsonrpc": "2.0", "result": 2, "id": ids[1]}),
    )
    .await;
    within(task).await.unwrap();
    let closing = tokio::spawn(async move { peer.close().await });
    let mut cancelled = Vec::new();
    for _ in 0..1000 {
        let Some(Ok(Frame::Text(text))) = within(raw.next()).await else {
            break;
        };
        let frame: Value = serde_json::from_str(&text).unwrap();
        if frame["method"] == "$/cancelRequest" {
            cancelled.push(frame["params"]["id"].as_u64().unwrap());
        }
    }
    drop(raw);
    within(closing).await.unwrap();
    assert_eq!(cancelled, [ids[0]], "the answered call is {}", ids[1]);
}

/// A cancel inside a batch (a batch of notifications only) answers no batch: the
/// cancelled call's `-32800` goes out alone, as its own answer.
#[tokio::test(start_paused = true)]
async fn a_cancel_inside_a_batch_answers_the_call_alone() {
    use jsonrpc_peer::transport::pair;

    let (end, mut raw) = pair();
    let router = Router::new().method("slow", |_cx: Context, (): ()| async move {
        tokio::time::sleep(Duration::from_secs(60)).await;
        Ok::<_, RpcError>("finished")
    });
    let peer = Peer::start(end, router, &PeerConfig::default());
    send_json(
        &mut raw,
        json!({"jsonrpc": "2.0", "method": "slow", "id": 7}),
    )
    .await;
    for _ in 0..1000 {
        if peer.calls_running() == 1 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(peer.calls_running(), 1);
    let cancel = json!([{"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": 7}}]);
    send_json(&mut raw, cancel).await;
    let answer = next_json(&mut raw).await;
    assert!(answer.is_object(), "answered as a batch: {answer}");
    assert_eq!(
        (answer["id"].clone(), answer["error"]["code"].clone()),
        (json!(7), json!(-32800))
    );
}

/// A call inside a batch is stopped by a cancel as a call alone is: its handler is
/// dropped, and the batch's one array answers it `-32800` beside the others' answers.
/// Over TCP on 127.0.0.1, from a raw client that writes the exact JSON.
#[tokio::test]
async fn a_cancel_stops_a_call_inside_a_batch_and_the_batch_answers_it_32800() {
    let (router, mut events, _hold) = server_router();
    let (url, handle) = common::serve(router).await;
    let mut connected = common::connections(&handle);
    let mut raw = common::RawClient::connect(&url).await;
    let server = within(connected.recv()).await.expect("registered");
    raw.send(
        r#"[{"jsonrpc":"2.0","method":"slow","id":1},{"jsonrpc":"2.0","method":"quick","id":"q"}]"#,
    )
    .await;
    assert_eq!(next(&mut events).await, "started slow");
    raw.send(&cancel_lsp("1")).await;
    let stopped = tokio::time::timeout(Duration::from_secs(5), events.recv()).await;
    assert_eq!(
        stopped.ok().flatten().as_deref(),
        Some("dropped slow"),
        "the batch's call still runs after its cancel"
    );
    let answer = raw.recv_json().await;
    assert_eq!(
        common::as_set(&answer),
        common::as_set(&json!([
            {"jsonrpc":"2.0","error":{"code":-32800,"message":"Request cancelled"},"id":1},
            {"jsonrpc":"2.0","result":"quick","id":"q"}
        ])),
        "{answer}"
    );
    // Nothing else was answered for it: no second answer, alone.
    raw.assert_nothing_before_marker().await;
    assert_eq!(server.calls_running(), 0);
}

/// `Duration::MAX` is how a caller says "no limit": as a grace (wait for the partial
/// result however long the handler takes to wrap up) and as a batch's timeout, it
/// waits, and panics nowhere. Over TCP on 127.0.0.1.
#[tokio::test]
async fn a_grace_or_a_batch_timeout_of_duration_max_waits_without_panicking() {
    let (router, _events, _hold) = server_router();
    let (url, _handle) = common::serve(router).await;
    let client = within(jsonrpc_peer::connect(&url, Router::new()))
        .await
        .expect("connected");
    let caller = client.clone();
    let graced = tokio::spawn(async move {
        caller
            .call::<Value>("count", ())
            .timeout(Duration::from_millis(35))
            .cancel_grace(Duration::MAX)
            .await
    });
    let graced = within(graced).await;
    assert!(
        graced.is_ok(),
        "a call with a grace of Duration::MAX panicked: {graced:?}"
    );
    let partial = graced.unwrap().expect("the partial result");
    assert!(partial["partial"].is_u64(), "{partial}");
    let caller = client.clone();
    let batch = tokio::spawn(async move {
        let mut batch = caller.batch();
        batch.call("quick", ())?.timeout(Duration::MAX);
        batch.send().await
    });
    let batch = within(batch).await;
    assert!(
        batch.is_ok(),
        "a batch with a timeout of Duration::MAX panicked: {batch:?}"
    );
    let answers = batch.unwrap().expect("sent");
    assert_eq!(answers[0].as_ref().unwrap().get(), r#""quick""#);
    assert_eq!(client.pending_calls(), 0);
}

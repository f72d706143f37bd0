//! Progress of long calls: `$/progress` values reach a caller that asked, in order,
//! before the answer; a caller that did not ask gets none.
//!
//! Over a real unix socket pair speaking WebSocket frames: a `Peer` on each end, or a
//! `Peer` and a raw WebSocket that writes and reads the exact JSON.

mod common;

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use jsonrpc_peer::{Caller, Context, Peer, Router, RpcError};
use serde_json::{json, Value};
use tokio::net::UnixStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use common::unix::{config, ws_pair};
use common::within;

/// `work [n]` reports `{"done": i}` for i in 1..=n, then answers whether it was asked.
fn server_router() -> Router {
    Router::new().method("work", |cx: Context, (n,): (u32,)| async move {
        for done in 1..=n {
            cx.progress(json!({ "done": done, "of": n }))
                .await
                .map_err(|e| RpcError::new(1, e.to_string()))?;
            tokio::task::yield_now().await;
        }
        Ok::<_, RpcError>(json!({ "asked": cx.wants_progress() }))
    })
}

fn start(ws: WebSocketStream<UnixStream>, router: Router) -> Peer {
    common::unix::start(ws, router, &config())
}

async fn recv(ws: &mut WebSocketStream<UnixStream>) -> Value {
    loop {
        match within(ws.next()).await {
            Some(Ok(Message::Text(t))) => return serde_json::from_str(&t).expect("JSON"),
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
            other => panic!("expected a text frame, got {other:?}"),
        }
    }
}

async fn send(ws: &mut WebSocketStream<UnixStream>, text: &str) {
    within(ws.send(Message::text(text))).await.expect("send");
}

#[tokio::test]
async fn progress_values_arrive_in_order_before_the_answer() {
    let (a, b) = ws_pair().await;
    let client = start(a, Router::new());
    let _server = start(b, server_router());

    const N: u32 = 50;
    let (mut progress, call) = client
        .call::<Value>("work", [N])
        .timeout(Duration::from_secs(10))
        .with_progress();
    let answer = within(call).await.expect("the call succeeds");
    assert_eq!(answer, json!({"asked": true}));
    // Every value was routed before the answer, so all are here now; then the stream ends.
    let mut seen = Vec::new();
    for _ in 0..=N {
        match within(progress.next()).await {
            Some(value) => seen.push(value.decode::<Value>().expect("JSON")["done"].clone()),
            None => break,
        }
    }
    let expected: Vec<Value> = (1..=N).map(|i| json!(i)).collect();
    assert_eq!(seen, expected);
    assert_eq!(client.pending_calls(), 0);
}

#[tokio::test]
async fn progress_can_be_watched_while_the_call_runs() {
    let (a, b) = ws_pair().await;
    let client = start(a, Router::new());
    let _server = start(b, server_router());
    let (progress, call) = client
        .call::<Value>("work", [5])
        .timeout(Duration::from_secs(10))
        .with_progress();
    let watch = progress.map(|v| v.get().to_owned()).collect::<Vec<_>>();
    let (answer, seen) = within(async { tokio::join!(call, watch) }).await;
    assert_eq!(answer.expect("the call succeeds"), json!({"asked": true}));
    assert_eq!(seen.len(), 5);
    assert_eq!(seen[4], r#"{"done":5,"of":5}"#);
}

#[tokio::test]
async fn a_caller_that_did_not_ask_gets_no_progress() {
    let (a, b) = ws_pair().await;
    let _server = start(b, server_router());
    let mut raw = a;
    send(
        &mut raw,
        r#"{"jsonrpc":"2.0","method":"work","params":[3],"id":1}"#,
    )
    .await;
    // The very next frame is the answer: no `$/progress` before it.
    assert_eq!(
        recv(&mut raw).await,
        json!({"jsonrpc":"2.0","result":{"asked":false},"id":1})
    );
    send(
        &mut raw,
        r#"{"jsonrpc":"2.0","method":"no.such","id":"marker"}"#,
    )
    .await;
    assert_eq!(recv(&mut raw).await["id"], "marker");
}

#[tokio::test]
async fn the_wire_form_carries_the_callers_token() {
    let (a, b) = ws_pair().await;
    let _server = start(b, server_router());
    let mut raw = a;
    send(
        &mut raw,
        r#"{"jsonrpc":"2.0","method":"work","params":[2],"id":9,"progressToken":"t-1"}"#,
    )
    .await;
    for done in 1..=2 {
        assert_eq!(
            recv(&mut raw).await,
            json!({"jsonrpc":"2.0","method":"$/progress","params":{"token":"t-1","value":{"done":done,"of":2}}})
        );
    }
    assert_eq!(
        recv(&mut raw).await,
        json!({"jsonrpc":"2.0","result":{"asked":true},"id":9})
    );
}

#[tokio::test]
async fn asking_puts_the_token_beside_params_and_a_peer_that_ignores_it_still_answers() {
    let (a, b) = ws_pair().await;
    let client = start(a, Router::new());
    let mut raw = b;
    let caller = client.clone();
    let call = tokio::spawn(async move {
        let (progress, call) = caller
            .call::<String>("work", [1])
            .timeout(Duration::from_secs(10))
            .with_progress();
        let answer = call.await;
        (answer, progress.collect::<Vec<_>>().await.len())
    });
    let request = recv(&mut raw).await;
    assert_eq!(request["params"], json!([1]));
    assert_eq!(request["progressToken"], request["id"]);
    // A peer that knows nothing of progress: it just answers.
    let answer = json!({"jsonrpc":"2.0","result":"ok","id": request["id"]});
    send(&mut raw, &answer.to_string()).await;
    let (answer, values) = within(call).await.expect("the caller's task");
    assert_eq!(answer.expect("answered"), "ok");
    assert_eq!(values, 0);
}

#[tokio::test]
async fn progress_for_a_token_that_is_not_ours_is_an_ordinary_notification() {
    let (a, b) = ws_pair().await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let client = start(
        a,
        Router::new().notification("$/progress", move |_cx: Context, p: Value| {
            let tx = tx.clone();
            async move {
                let _ = tx.send(p);
            }
        }),
    );
    let mut raw = b;
    send(
        &mut raw,
        r#"{"jsonrpc":"2.0","method":"$/progress","params":{"token":"theirs","value":1}}"#,
    )
    .await;
    assert_eq!(
        within(rx.recv()).await,
        Some(json!({"token":"theirs","value":1}))
    );
    assert!(!client.is_closed());
}

/// A handler may hand a clone of its context to a task that outlives it. Progress is
/// for a call still running: once it has ended (answered, here, or cancelled), the
/// clone sends nothing more, and says so by sending nothing, as for a caller that did
/// not ask.
#[tokio::test]
async fn a_clone_of_the_context_sends_no_progress_after_the_answer() {
    let (later_tx, later_rx) = tokio::sync::mpsc::unbounded_channel::<Context>();
    let router = Router::new().method("leave", move |cx: Context, (): ()| {
        let later = later_tx.clone();
        async move {
            cx.progress("while running").await.expect("open");
            let _ = later.send(cx.clone());
            Ok::<_, RpcError>("answered")
        }
    });
    let (a, b) = ws_pair().await;
    let _server = start(b, router);
    let mut raw = a;
    send(
        &mut raw,
        r#"{"jsonrpc":"2.0","method":"leave","id":3,"progressToken":"t"}"#,
    )
    .await;
    assert_eq!(
        recv(&mut raw).await,
        json!({"jsonrpc":"2.0","method":"$/progress","params":{"token":"t","value":"while running"}})
    );
    assert_eq!(
        recv(&mut raw).await,
        json!({"jsonrpc":"2.0","result":"answered","id":3})
    );
    let mut later_rx = later_rx;
    let kept = within(later_rx.recv())
        .await
        .expect("the handler kept a clone");
    assert!(kept.wants_progress(), "the caller did ask");
    within(kept.progress("after the answer"))
        .await
        .expect("nothing to send is no error");
    // The next frame is the answer to a marker, not a late `$/progress`.
    send(&mut raw, r#"{"jsonrpc":"2.0","method":"no.such","id":"m"}"#).await;
    let next = recv(&mut raw).await;
    assert_eq!(next["id"], "m", "sent after the answer: {next}");
}

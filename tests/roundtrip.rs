//! Calls, notifications and batches in both directions, over real WebSockets.

mod common;

use std::future::IntoFuture;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{serve, within, RawClient};
use futures_util::{SinkExt, StreamExt};
use jsonrpc_peer::{connect, Caller, Context, ErrorCode, Peer, Router, RpcError, ServerHandle};
use serde_json::json;
use tokio::sync::mpsc;

/// The peer the server runs for the one client connected to it.
fn only_peer(server: &ServerHandle) -> Peer {
    let peers = server.peers();
    assert_eq!(peers.len(), 1, "expected exactly one connection");
    peers.into_iter().next().expect("one peer")
}

fn named(name: &'static str) -> Router {
    Router::new().method("whoami", move |_cx: Context, (): ()| async move {
        Ok::<_, RpcError>(name)
    })
}

#[tokio::test]
async fn calls_go_both_ways() {
    let (url, server) = serve(named("server")).await;
    let client = within(connect(&url, named("client"))).await.unwrap();

    let who: String = within(client.call("whoami", ())).await.unwrap();
    assert_eq!(who, "server");
    // The client has been answered, so the server has registered its peer.
    let who: String = within(only_peer(&server).call("whoami", ())).await.unwrap();
    assert_eq!(who, "client");
}

/// A handle of the application's own, forwarding every call to a peer through
/// `send_request`.
struct Forward(Peer);

impl Caller for Forward {
    fn send_request(
        &self,
        request: jsonrpc_peer::Request<'_>,
        options: jsonrpc_peer::CallOptions,
    ) -> impl std::future::Future<Output = jsonrpc_peer::Result<Option<jsonrpc_peer::Reply>>> + Send
    {
        self.0.send_request(request, options)
    }
}

/// A call awaited on a `Peer` is held in its future as it is, with no box; through
/// another handle it is that handle's `send_request` future, boxed. Both answer alike,
/// and a call whose params cannot be sent fails when awaited, on either.
#[tokio::test]
async fn a_call_on_a_peer_is_held_in_place_and_another_handle_s_is_boxed() {
    let (url, _server) = serve(named("server")).await;
    let peer = within(connect(&url, Router::new())).await.unwrap();
    let forward = Forward(peer.clone());

    let direct = peer.call::<String>("whoami", ()).into_future();
    assert!(format!("{direct:?}").contains("a peer"), "{direct:?}");
    assert_eq!(within(direct).await.unwrap(), "server");
    let boxed = forward.call::<String>("whoami", ()).into_future();
    assert!(format!("{boxed:?}").contains("another handle"), "{boxed:?}");
    assert_eq!(within(boxed).await.unwrap(), "server");

    let unsent = peer.call::<String>("whoami", 5).into_future();
    assert!(
        format!("{unsent:?}").contains("its request failed"),
        "{unsent:?}"
    );
    let failed = within(unsent).await.unwrap_err();
    assert!(
        matches!(failed, jsonrpc_peer::Error::InvalidParams(_)),
        "{failed:?}"
    );
    let failed = within(forward.call::<String>("whoami", 5))
        .await
        .unwrap_err();
    assert!(
        matches!(failed, jsonrpc_peer::Error::InvalidParams(_)),
        "{failed:?}"
    );
}

/// `bounce(n)` calls `bounce(n - 1)` on the side that called it, until 0.
fn bouncer() -> Router {
    Router::new().method("bounce", |cx: Context, (n,): (u32,)| async move {
        if n == 0 {
            return Ok(0);
        }
        let below: u32 = cx
            .peer()
            .call("bounce", (n - 1,))
            .await
            .map_err(RpcError::internal_error)?;
        Ok::<_, RpcError>(below + 1)
    })
}

#[tokio::test]
async fn handlers_call_back_eight_deep_without_deadlock() {
    let (url, _server) = serve(bouncer()).await;
    let client = within(connect(&url, bouncer())).await.unwrap();
    // client -> server(8) -> client(7) -> server(6) ... -> 0: eight nested calls back.
    let depth: u32 = within(client.call("bounce", (8,))).await.unwrap();
    assert_eq!(depth, 8);
    // Many such chains at once, sharing the connection.
    let chains = (0..20).map(|_| client.call::<u32>("bounce", (8,)).into_future());
    for depth in within(futures_util::future::join_all(chains)).await {
        assert_eq!(depth.unwrap(), 8);
    }
    assert_eq!(client.pending_calls(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_concurrent_calls_each_get_their_own_result() {
    let router = Router::new().method(
        "echo_later",
        |_cx: Context, (n, ms): (u64, u64)| async move {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Ok::<_, RpcError>(n)
        },
    );
    let (url, _server) = serve(router).await;
    let client = within(connect(&url, Router::new())).await.unwrap();
    // Random delays make the handlers finish in an order unrelated to the calls'.
    let calls = (0..1000u64).map(|n| {
        let client = client.clone();
        let ms = fastrand::u64(0..50);
        async move { (n, client.call::<u64>("echo_later", (n, ms)).await) }
    });
    let results = within(futures_util::future::join_all(calls)).await;
    assert_eq!(results.len(), 1000);
    for (n, result) in results {
        assert_eq!(result.unwrap(), n);
    }
    assert_eq!(client.pending_calls(), 0);
}

/// A router whose `note` notifications are forwarded, in handling order, to `tx`.
fn recorder(tx: mpsc::UnboundedSender<u64>) -> Router<mpsc::UnboundedSender<u64>> {
    Router::with_state(tx).notification("note", |cx: Context<_>, (n,): (u64,)| async move {
        // An await inside the handler: order must hold even when handlers yield.
        tokio::task::yield_now().await;
        let _ = cx.state().send(n);
    })
}

async fn expect_in_order(rx: &mut mpsc::UnboundedReceiver<u64>, count: u64) {
    for expected in 0..count {
        let got = within(rx.recv()).await.expect("a notification");
        assert_eq!(got, expected, "notifications handled out of order");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifications_arrive_in_order_both_ways() {
    let (server_tx, mut server_rx) = mpsc::unbounded_channel();
    let (client_tx, mut client_rx) = mpsc::unbounded_channel();
    let (url, server) = serve(recorder(server_tx)).await;
    let client = within(connect(&url, recorder(client_tx))).await.unwrap();

    for n in 0..500u64 {
        within(client.notify("note", (n,))).await.unwrap();
    }
    expect_in_order(&mut server_rx, 500).await;

    let server_peer = only_peer(&server);
    for n in 0..500u64 {
        within(server_peer.notify("note", (n,))).await.unwrap();
    }
    expect_in_order(&mut client_rx, 500).await;
}

#[tokio::test]
async fn notifications_are_never_answered() {
    let (tx, mut handled) = mpsc::unbounded_channel();
    let (url, _server) = serve(recorder(tx)).await;
    let mut raw = RawClient::connect(&url).await;
    // Unknown method, params of the wrong type, a handler that exists.
    raw.send(r#"{"jsonrpc":"2.0","method":"no.such.notification","params":[1]}"#)
        .await;
    raw.send(r#"{"jsonrpc":"2.0","method":"note","params":["not a number"]}"#)
        .await;
    raw.send(r#"{"jsonrpc":"2.0","method":"note","params":[1]}"#)
        .await;
    // `note` yields, so it ends after its first poll, on a task of its own: its end
    // is an event, and only then does the marker prove that no answer went out (a
    // call does not wait for notifications, so a marker sent earlier could overtake
    // an answer made when the handler ends).
    assert_eq!(within(handled.recv()).await, Some(1), "the handler ran");
    raw.assert_nothing_before_marker().await;
}

fn calculator() -> Router {
    common::spec_methods::spec_router()
}

#[tokio::test]
async fn batches_go_both_ways() {
    let (url, server) = serve(calculator()).await;
    let client = within(connect(&url, calculator())).await.unwrap();

    for peer in [client.clone(), only_peer(&server)] {
        let mut batch = peer.batch();
        batch
            .call("subtract", [42, 23])
            .unwrap()
            .notify("update", [1, 2, 3])
            .unwrap()
            .call("sum", [1, 2, 4])
            .unwrap()
            .call("foo.get", json!({"name": "myself"}))
            .unwrap()
            .call("get_data", ())
            .unwrap();
        let outcomes = within(batch.send()).await.unwrap();
        assert_eq!(
            outcomes.len(),
            4,
            "one outcome per call, none for the notification"
        );
        assert_eq!(outcomes[0].as_ref().unwrap().decode::<i64>().unwrap(), 19);
        assert_eq!(outcomes[1].as_ref().unwrap().decode::<i64>().unwrap(), 7);
        let err = outcomes[2].as_ref().unwrap_err();
        assert_eq!(err.rpc().unwrap().code, ErrorCode::METHOD_NOT_FOUND);
        assert_eq!(outcomes[3].as_ref().unwrap().get(), r#"["hello",5]"#);
        assert_eq!(peer.pending_calls(), 0);
    }

    // Only notifications: sent, nothing awaited. Empty: nothing sent.
    let mut batch = client.batch();
    batch.notify("update", [1]).unwrap();
    assert!(within(batch.send()).await.unwrap().is_empty());
    assert!(within(client.batch().send()).await.unwrap().is_empty());
}

/// A hand-written server that answers one batch with the given function of its ids.
async fn answer_batch_with(answer: fn(&[serde_json::Value]) -> String) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let mut ws = tokio_tungstenite::accept_async(tcp).await.unwrap();
        while let Some(Ok(msg)) = ws.next().await {
            if let Ok(text) = msg.to_text() {
                let batch: Vec<serde_json::Value> = serde_json::from_str(text).unwrap();
                let ids: Vec<_> = batch.iter().filter_map(|r| r.get("id").cloned()).collect();
                ws.send(answer(&ids).into()).await.unwrap();
            }
        }
    });
    url
}

#[tokio::test]
async fn an_array_of_responses_reaches_the_waiting_calls() {
    // Answers in reverse order, one with an error: each still reaches its own call.
    let url = answer_batch_with(|ids| {
        let mut answers: Vec<String> = ids
            .iter()
            .map(|id| match id.as_u64() {
                Some(n) if n % 2 == 0 => {
                    format!(r#"{{"jsonrpc":"2.0","error":{{"code":7,"message":"even","data":{n}}},"id":{n}}}"#)
                }
                _ => format!(r#"{{"jsonrpc":"2.0","result":{id},"id":{id}}}"#),
            })
            .collect();
        answers.reverse();
        format!("[{}]", answers.join(","))
    })
    .await;
    let peer = within(connect(&url, Router::new())).await.unwrap();
    let mut batch = peer.batch();
    for _ in 0..4 {
        batch.call("id", ()).unwrap();
    }
    let outcomes = within(batch.send()).await.unwrap();
    // Ids are 1, 2, 3, 4 in the order the calls were added.
    assert_eq!(outcomes[0].as_ref().unwrap().decode::<u64>().unwrap(), 1);
    assert_eq!(
        outcomes[1].as_ref().unwrap_err().rpc().unwrap().data,
        Some(json!(2))
    );
    assert_eq!(outcomes[2].as_ref().unwrap().decode::<u64>().unwrap(), 3);
    assert_eq!(
        outcomes[3].as_ref().unwrap_err().rpc().unwrap().message,
        "even"
    );
    assert_eq!(peer.pending_calls(), 0);
}

#[tokio::test]
async fn a_lone_response_to_a_batch_of_one_is_accepted() {
    // Some peers (npm json-rpc-2.0) answer a one-element batch with a bare object.
    let url =
        answer_batch_with(|ids| format!(r#"{{"jsonrpc":"2.0","result":"lone","id":{}}}"#, ids[0]))
            .await;
    let peer = within(connect(&url, Router::new())).await.unwrap();
    let mut batch = peer.batch();
    batch.call("x", ()).unwrap();
    let outcomes = within(batch.send()).await.unwrap();
    assert_eq!(
        outcomes[0].as_ref().unwrap().decode::<String>().unwrap(),
        "lone"
    );
}

/// A batch longer than the other side takes is refused whole, with one `-32600`
/// without an id. That answer names no batch, but with one batch waiting it can only
/// be that one's: its calls end with the error at once, not at their timeout.
#[tokio::test]
async fn a_batch_refused_whole_ends_its_calls_with_the_refusal() {
    let (url, _server) = common::serve_with(
        calculator(),
        jsonrpc_peer::PeerConfig::default().max_batch_len(2),
    )
    .await;
    let peer = within(connect(&url, Router::new())).await.unwrap();
    let mut batch = peer.batch();
    batch.timeout(Duration::from_secs(3600));
    for _ in 0..3 {
        batch.call("sum", [1, 2]).unwrap();
    }
    let outcomes = within(batch.send()).await.unwrap();
    assert_eq!(outcomes.len(), 3);
    for outcome in &outcomes {
        let error = outcome.as_ref().unwrap_err().rpc().cloned();
        assert_eq!(
            error.map(|e| e.code),
            Some(ErrorCode::INVALID_REQUEST),
            "{outcome:?}"
        );
    }
    assert_eq!(peer.pending_calls(), 0);
    // A batch the other side takes is answered as ever.
    let mut batch = peer.batch();
    batch.call("sum", [1, 2]).unwrap().call("sum", [3]).unwrap();
    let outcomes = within(batch.send()).await.unwrap();
    assert_eq!(outcomes[0].as_ref().unwrap().decode::<i64>().unwrap(), 3);
    assert_eq!(outcomes[1].as_ref().unwrap().decode::<i64>().unwrap(), 3);
}

/// An error without an id while no batch of ours waits answers nothing: the call in
/// flight waits on for its own answer.
#[tokio::test]
async fn an_error_without_an_id_does_not_end_a_single_call() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let mut ws = tokio_tungstenite::accept_async(tcp).await.unwrap();
        if let Some(Ok(msg)) = ws.next().await {
            let call: serde_json::Value = serde_json::from_str(msg.to_text().unwrap()).unwrap();
            let refusal = r#"{"jsonrpc":"2.0","error":{"code":-32600,"message":"Invalid Request"},"id":null}"#;
            ws.send(refusal.into()).await.unwrap();
            let answer = json!({"jsonrpc":"2.0","result":"mine","id":call["id"]});
            ws.send(answer.to_string().into()).await.unwrap();
            let _ = ws.next().await;
        }
    });
    let peer = within(connect(&url, Router::new())).await.unwrap();
    let answer: String = within(peer.call("x", ())).await.unwrap();
    assert_eq!(answer, "mine");
}

#[tokio::test]
async fn handlers_share_state_and_see_their_peer() {
    let hits = Arc::new(AtomicUsize::new(0));
    let router = Router::with_state(hits.clone()).method(
        "hit",
        |cx: Context<Arc<AtomicUsize>>, (): ()| async move {
            let n = cx.state().fetch_add(1, Ordering::SeqCst) + 1;
            let addr = cx.peer().remote_addr().map(|a| a.ip().to_string());
            Ok::<_, RpcError>((n, addr))
        },
    );
    let (url, _server) = serve(router).await;
    let a = within(connect(&url, Router::new())).await.unwrap();
    let b = within(connect(&url, Router::new())).await.unwrap();
    let (n1, ip): (usize, Option<String>) = within(a.call("hit", ())).await.unwrap();
    let (n2, _): (usize, Option<String>) = within(b.call("hit", ())).await.unwrap();
    assert_eq!(
        (n1, n2),
        (1, 2),
        "both connections share the router's state"
    );
    assert_eq!(ip.as_deref(), Some("127.0.0.1"));
    assert_eq!(hits.load(Ordering::SeqCst), 2);
}

//! `Router::fallback` serves only the names the router does not know, calls and
//! notifications, with the name and the raw params; notifications reach it in order.

mod common;

use common::{serve, within, RawClient};
use jsonrpc_peer::{Context, Router, RpcError, Unrouted};
use serde_json::json;
use tokio::sync::mpsc;

/// What the fallback got: (method, raw params, notification).
type Got = mpsc::UnboundedReceiver<(String, Option<String>, bool)>;

fn router() -> (Router, Got) {
    let (tx, rx) = mpsc::unbounded_channel();
    let router = Router::new()
        .method("known", |_cx: Context, (): ()| async {
            Ok::<_, RpcError>("the method")
        })
        .notification("seen", |_cx: Context, (): ()| async {})
        .fallback(move |_cx: Context, call: Unrouted| {
            let got = (
                call.method().to_owned(),
                call.params().map(|p| p.get().to_owned()),
                call.is_notification(),
            );
            let _ = tx.send(got);
            async move {
                match call.method() {
                    "fails" => Err(RpcError::new(-32050, "upstream says no")),
                    method => Ok(json!({ "forwarded": method, "params": call.params() })),
                }
            }
        });
    (router, rx)
}

#[tokio::test]
async fn the_fallback_gets_only_what_the_router_does_not_name() {
    let (router, mut got) = router();
    let (url, _handle) = serve(router).await;
    let mut client = RawClient::connect(&url).await;

    // Named: the method, not the fallback.
    let answer = client
        .ask(r#"{"jsonrpc":"2.0","method":"known","id":1}"#)
        .await;
    assert_eq!(answer["result"], "the method");

    // Not named: the fallback, with the name and the params exactly as sent.
    let answer = client
        .ask(r#"{"jsonrpc":"2.0","method":"proxy.this","params":[1, {"a": "b"}],"id":2}"#)
        .await;
    assert_eq!(
        answer,
        json!({"jsonrpc": "2.0", "id": 2, "result": {"forwarded": "proxy.this", "params": [1, {"a": "b"}]}})
    );
    assert_eq!(
        within(got.recv()).await.unwrap(),
        (
            "proxy.this".into(),
            Some(r#"[1, {"a": "b"}]"#.into()),
            false
        )
    );
    let answer = client
        .ask(r#"{"jsonrpc":"2.0","method":"fails","id":3}"#)
        .await;
    assert_eq!(answer["error"]["code"], -32050);
    assert_eq!(
        within(got.recv()).await.unwrap(),
        ("fails".into(), None, false)
    );

    // Notifications: a named handler, a method run by a notification, and three the
    // router does not name, which reach the fallback in order, unanswered.
    client.send(r#"{"jsonrpc":"2.0","method":"seen"}"#).await;
    client.send(r#"{"jsonrpc":"2.0","method":"known"}"#).await;
    for n in 1..=3 {
        client
            .send(&format!(
                r#"{{"jsonrpc":"2.0","method":"n{n}","params":{{"n":{n}}}}}"#
            ))
            .await;
    }
    for n in 1..=3 {
        assert_eq!(
            within(got.recv()).await.unwrap(),
            (format!("n{n}"), Some(format!(r#"{{"n":{n}}}"#)), true)
        );
    }
    // Nothing was answered to them (the marker is the next answer; the fallback
    // answers it too, which is the one call more it gets).
    client.assert_nothing_before_marker().await;
    assert_eq!(within(got.recv()).await.unwrap().0, "no.such.method");
    assert!(got.try_recv().is_err(), "the fallback got nothing else");

    // In a batch, each item goes where its name says.
    client
        .send(r#"[{"jsonrpc":"2.0","method":"known","id":"a"},{"jsonrpc":"2.0","method":"b.c","id":"b"}]"#)
        .await;
    let batch = client.recv_json().await;
    let mut results: Vec<String> = batch
        .as_array()
        .unwrap()
        .iter()
        .map(|answer| answer["result"].to_string())
        .collect();
    results.sort();
    assert_eq!(
        results,
        [r#""the method""#, r#"{"forwarded":"b.c","params":null}"#]
    );
    assert_eq!(
        within(got.recv()).await.unwrap(),
        ("b.c".into(), None, false)
    );
}

/// Without a fallback, an unknown name is still -32601.
#[tokio::test]
async fn without_a_fallback_an_unknown_method_is_not_found() {
    let (url, _handle) = serve(Router::new()).await;
    let mut client = RawClient::connect(&url).await;
    let answer = client
        .ask(r#"{"jsonrpc":"2.0","method":"proxy.this","id":1}"#)
        .await;
    assert_eq!(answer["error"]["code"], -32601);
}

//! What a handler author meets: `?` on a call back, params of one scalar, a
//! notification for a method, and errors that name the method that failed.

mod common;

use std::time::Duration;

use common::{serve, within, RawClient};
use jsonrpc_peer::{connect, Caller, CloseReason, Context, Error, ErrorCode, Router, RpcError};
use serde_json::{json, Value};
use tokio::sync::mpsc;

/// A server whose `ask` calls `describe` back on the caller with `?`, within 200 ms.
fn asker() -> Router {
    Router::new().method("ask", |cx: Context, (): ()| async move {
        let answer: Value = cx
            .peer()
            .call("describe", ())
            .timeout(Duration::from_millis(200))
            .await?;
        Ok::<_, RpcError>(json!({ "answer": answer }))
    })
}

#[tokio::test]
async fn a_call_back_with_question_mark_answers_or_maps_its_failure() {
    let (url, _server) = serve(asker()).await;

    // The call back succeeds: its result is used.
    let fine = Router::new().method("describe", |_cx: Context, (): ()| async {
        Ok::<_, RpcError>("a client")
    });
    let client = within(connect(&url, fine)).await.unwrap();
    let got: Value = within(client.call("ask", ())).await.unwrap();
    assert_eq!(got, json!({"answer": "a client"}));

    // An application error of the other side passes through unchanged.
    let refuses = Router::new().method("describe", |_cx: Context, (): ()| async {
        Err::<(), _>(RpcError::new(42, "not telling").with_data(json!({"why": "private"})))
    });
    let client = within(connect(&url, refuses)).await.unwrap();
    let e = within(client.call::<Value>("ask", ())).await.unwrap_err();
    assert_eq!(
        e.rpc(),
        Some(&RpcError::new(42, "not telling").with_data(json!({"why": "private"})))
    );

    // A reserved code describes the call back, not `ask`: it becomes -32603 with the
    // call back's method and error in `data`.
    let client = within(connect(&url, Router::new())).await.unwrap();
    let e = within(client.call::<Value>("ask", ())).await.unwrap_err();
    let rpc = e.rpc().expect("an error object");
    assert_eq!(rpc.code, ErrorCode::INTERNAL_ERROR);
    assert_eq!(
        rpc.data,
        Some(
            json!({"method": "describe", "error": {"code": -32601, "message": "Method not found"}})
        )
    );

    // A timeout of the call back: -32603 with the local error's text, naming the method.
    let hangs = Router::new().method("describe", |_cx: Context, (): ()| async {
        std::future::pending::<Result<(), RpcError>>().await
    });
    let client = within(connect(&url, hangs)).await.unwrap();
    let e = within(client.call::<Value>("ask", ())).await.unwrap_err();
    let rpc = e.rpc().expect("an error object");
    assert_eq!(rpc.code, -32603);
    assert_eq!(rpc.message, "Internal error");
    assert_eq!(rpc.data, Some(json!("`describe`: no answer within 200ms")));
}

#[test]
fn local_errors_become_internal_errors_on_the_wire() {
    let closed = RpcError::from(Error::Closed(CloseReason::Eof));
    assert_eq!(closed.code, ErrorCode::INTERNAL_ERROR);
    assert_eq!(
        closed.data,
        Some(json!(
            "connection closed: the other side went away without a close frame"
        ))
    );
    let closed = RpcError::from(Error::Closed(CloseReason::Local {
        code: 1000,
        reason: String::new(),
    }));
    // No stray space when the close has no reason.
    assert_eq!(
        closed.data,
        Some(json!("connection closed: closed by this side (1000)"))
    );
    let passthrough = RpcError::from(Error::Rpc {
        method: "m".into(),
        error: RpcError::new(-31999, "just outside the reserved range"),
    });
    assert_eq!(
        passthrough,
        RpcError::new(-31999, "just outside the reserved range")
    );
    let reserved = RpcError::from(Error::Rpc {
        method: "m".into(),
        error: RpcError::new(ErrorCode::CLOSING, "Closing"),
    });
    assert_eq!(reserved.code, ErrorCode::INTERNAL_ERROR);
}

#[tokio::test]
async fn errors_name_the_method_that_failed_and_the_wire_is_unchanged() {
    let slow = Router::new().method("slow", |_cx: Context, (): ()| async {
        tokio::time::sleep(Duration::from_secs(5)).await;
        Ok::<_, RpcError>(())
    });
    let (url, _server) = serve(slow).await;
    let client = within(connect(&url, Router::new())).await.unwrap();

    let e = within(client.call::<i64>("divide", [1, 0]))
        .await
        .unwrap_err();
    assert_eq!(e.method(), Some("divide"));
    assert_eq!(
        e.to_string(),
        "`divide` was answered with an error: Method not found (-32601)"
    );
    assert!(matches!(&e, Error::Rpc { method, .. } if &**method == "divide"));

    let e = within(
        client
            .call::<()>("slow", ())
            .timeout(Duration::from_millis(50)),
    )
    .await
    .unwrap_err();
    assert!(e.is_timeout());
    assert_eq!(e.method(), Some("slow"));
    assert_eq!(e.to_string(), "`slow`: no answer within 50ms");

    // In a batch, each call's error names its own method.
    let mut batch = client.batch();
    batch
        .call("nope", [1])
        .unwrap()
        .call("also_nope", [2])
        .unwrap();
    let outcomes = within(batch.send()).await.unwrap();
    let methods: Vec<_> = outcomes
        .iter()
        .map(|o| o.as_ref().unwrap_err().method().map(str::to_owned))
        .collect();
    assert_eq!(
        methods,
        [Some("nope".to_owned()), Some("also_nope".to_owned())]
    );

    // What travels is exactly the specification's error object, with no method in it.
    let mut raw = RawClient::connect(&url).await;
    let answer = raw
        .ask(r#"{"jsonrpc": "2.0", "method": "divide", "params": [1, 0], "id": "1"}"#)
        .await;
    assert_eq!(
        answer,
        json!({"jsonrpc": "2.0", "error": {"code": -32601, "message": "Method not found"}, "id": "1"})
    );
}

#[tokio::test]
async fn a_handler_of_one_scalar_reads_a_one_element_array() {
    let router = Router::new()
        .method("double", |_cx: Context, n: i64| async move {
            Ok::<_, RpcError>(n * 2)
        })
        .method("greet", |_cx: Context, name: String| async move {
            Ok::<_, RpcError>(format!("hello, {name}"))
        })
        .method("maybe", |_cx: Context, n: Option<i64>| async move {
            Ok::<_, RpcError>(n.unwrap_or(-1))
        })
        .method("len", |_cx: Context, v: Vec<i64>| async move {
            Ok::<_, RpcError>(v.len())
        });
    let (url, _server) = serve(router).await;
    let client = within(connect(&url, Router::new())).await.unwrap();

    assert_eq!(
        within(client.call::<i64>("double", [21])).await.unwrap(),
        42
    );
    assert_eq!(
        within(client.call::<String>("greet", ["ada"]))
            .await
            .unwrap(),
        "hello, ada"
    );
    assert_eq!(within(client.call::<i64>("maybe", [7])).await.unwrap(), 7);
    assert_eq!(within(client.call::<i64>("maybe", ())).await.unwrap(), -1);
    // A sequence type reads the array itself, one element or many.
    assert_eq!(within(client.call::<usize>("len", [9])).await.unwrap(), 1);
    assert_eq!(
        within(client.call::<usize>("len", [9, 9, 9]))
            .await
            .unwrap(),
        3
    );

    let mut raw = RawClient::connect(&url).await;
    // Two elements for one scalar, and an element of the wrong type: -32602, with the
    // reason that helps.
    let two = raw
        .ask(r#"{"jsonrpc": "2.0", "method": "double", "params": [1, 2], "id": 1}"#)
        .await;
    assert_eq!(two["error"]["code"], -32602, "{two}");
    let wrong = raw
        .ask(r#"{"jsonrpc": "2.0", "method": "double", "params": ["x"], "id": 2}"#)
        .await;
    assert_eq!(wrong["error"]["code"], -32602, "{wrong}");
    let reason = wrong["error"]["data"].as_str().unwrap_or_default();
    assert!(
        reason.contains("expected i64") && reason.contains("string"),
        "{wrong}"
    );
    // Named params are not a scalar either.
    let named = raw
        .ask(r#"{"jsonrpc": "2.0", "method": "double", "params": {"n": 1}, "id": 3}"#)
        .await;
    assert_eq!(named["error"]["code"], -32602, "{named}");
}

#[tokio::test]
async fn a_notification_runs_a_method_of_that_name_and_drops_its_answer() {
    let (saved_tx, mut saved) = mpsc::unbounded_channel();
    let (noted_tx, mut noted) = mpsc::unbounded_channel();
    let (waited_tx, mut waited) = mpsc::unbounded_channel();
    let router = Router::new()
        .method("save", move |_cx: Context, (doc,): (String,)| {
            let saved = saved_tx.clone();
            async move {
                let _ = saved.send(doc);
                Ok::<_, RpcError>("saved")
            }
        })
        .method("log", |_cx: Context, (): ()| async {
            Ok::<_, RpcError>("the method ran")
        })
        .notification("log", move |_cx: Context, (line,): (String,)| {
            let noted = noted_tx.clone();
            async move {
                let _ = noted.send(line);
            }
        })
        .method("fails", |_cx: Context, (): ()| async {
            Err::<(), _>(RpcError::new(1, "no"))
        })
        .method("panics", |_cx: Context, (): ()| async {
            if true {
                panic!("on purpose");
            }
            Ok::<_, RpcError>(())
        })
        .method("waits", move |_cx: Context, (): ()| {
            let waited = waited_tx.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(20)).await;
                let _ = waited.send(());
                Err::<(), _>(RpcError::new(2, "later no"))
            }
        });
    let (url, _server) = serve(router).await;
    let mut raw = RawClient::connect(&url).await;

    raw.send(r#"{"jsonrpc": "2.0", "method": "save", "params": ["draft"]}"#)
        .await;
    assert_eq!(within(saved.recv()).await.as_deref(), Some("draft"));
    // A notification handler of the same name takes precedence over the method.
    raw.send(r#"{"jsonrpc": "2.0", "method": "log", "params": ["a line"]}"#)
        .await;
    assert_eq!(within(noted.recv()).await.as_deref(), Some("a line"));
    // Failing, panicking, waiting, or params that do not fit: still never answered.
    for text in [
        r#"{"jsonrpc": "2.0", "method": "fails"}"#,
        r#"{"jsonrpc": "2.0", "method": "panics"}"#,
        r#"{"jsonrpc": "2.0", "method": "waits"}"#,
        r#"{"jsonrpc": "2.0", "method": "save", "params": [1, 2, 3]}"#,
    ] {
        raw.send(text).await;
    }
    // "waits" moved to a task of its own (it was not done at the first poll); its end
    // is an event, then the marker proves no answer went out.
    within(waited.recv()).await;
    raw.assert_nothing_before_marker().await;
    // And the connection serves calls as before.
    let answer = raw
        .ask(r#"{"jsonrpc": "2.0", "method": "save", "params": ["final"], "id": 9}"#)
        .await;
    assert_eq!(
        answer,
        json!({"jsonrpc": "2.0", "result": "saved", "id": 9})
    );
}

//! Every example of the JSON-RPC 2.0 specification, sent as raw text frames over a real
//! WebSocket, gets exactly the answer the specification shows.

mod common;

use common::{as_set, json, serve, RawClient};

async fn client() -> RawClient {
    let (url, _server) = serve(common::spec_methods::spec_router()).await;
    RawClient::connect(&url).await
}

#[tokio::test]
async fn positional_parameters() {
    let mut c = client().await;
    let a = c
        .ask(r#"{"jsonrpc": "2.0", "method": "subtract", "params": [42, 23], "id": 1}"#)
        .await;
    assert_eq!(a, json(r#"{"jsonrpc": "2.0", "result": 19, "id": 1}"#));
    let a = c
        .ask(r#"{"jsonrpc": "2.0", "method": "subtract", "params": [23, 42], "id": 2}"#)
        .await;
    assert_eq!(a, json(r#"{"jsonrpc": "2.0", "result": -19, "id": 2}"#));
}

#[tokio::test]
async fn named_parameters() {
    let mut c = client().await;
    let a = c
        .ask(r#"{"jsonrpc": "2.0", "method": "subtract", "params": {"subtrahend": 23, "minuend": 42}, "id": 3}"#)
        .await;
    assert_eq!(a, json(r#"{"jsonrpc": "2.0", "result": 19, "id": 3}"#));
    let a = c
        .ask(r#"{"jsonrpc": "2.0", "method": "subtract", "params": {"minuend": 42, "subtrahend": 23}, "id": 4}"#)
        .await;
    assert_eq!(a, json(r#"{"jsonrpc": "2.0", "result": 19, "id": 4}"#));
}

#[tokio::test]
async fn notifications_get_no_answer() {
    let mut c = client().await;
    c.send(r#"{"jsonrpc": "2.0", "method": "update", "params": [1,2,3,4,5]}"#)
        .await;
    c.send(r#"{"jsonrpc": "2.0", "method": "foobar"}"#).await;
    c.assert_nothing_before_marker().await;
}

#[tokio::test]
async fn non_existent_method() {
    let mut c = client().await;
    let a = c
        .ask(r#"{"jsonrpc": "2.0", "method": "foobar", "id": "1"}"#)
        .await;
    assert_eq!(
        a,
        json(
            r#"{"jsonrpc": "2.0", "error": {"code": -32601, "message": "Method not found"}, "id": "1"}"#
        )
    );
}

#[tokio::test]
async fn invalid_json() {
    let mut c = client().await;
    let a = c
        .ask(r#"{"jsonrpc": "2.0", "method": "foobar, "params": "bar", "baz]"#)
        .await;
    assert_eq!(
        a,
        json(
            r#"{"jsonrpc": "2.0", "error": {"code": -32700, "message": "Parse error"}, "id": null}"#
        )
    );
}

#[tokio::test]
async fn invalid_request_object() {
    let mut c = client().await;
    let a = c
        .ask(r#"{"jsonrpc": "2.0", "method": 1, "params": "bar"}"#)
        .await;
    assert_eq!(
        a,
        json(
            r#"{"jsonrpc": "2.0", "error": {"code": -32600, "message": "Invalid Request"}, "id": null}"#
        )
    );
}

#[tokio::test]
async fn batch_invalid_json() {
    let mut c = client().await;
    let a = c
        .ask(
            r#"[
  {"jsonrpc": "2.0", "method": "sum", "params": [1,2,4], "id": "1"},
  {"jsonrpc": "2.0", "method"
]"#,
        )
        .await;
    assert_eq!(
        a,
        json(
            r#"{"jsonrpc": "2.0", "error": {"code": -32700, "message": "Parse error"}, "id": null}"#
        )
    );
}

#[tokio::test]
async fn empty_batch() {
    let mut c = client().await;
    let a = c.ask("[]").await;
    assert_eq!(
        a,
        json(
            r#"{"jsonrpc": "2.0", "error": {"code": -32600, "message": "Invalid Request"}, "id": null}"#
        )
    );
}

#[tokio::test]
async fn invalid_batch_of_one() {
    let mut c = client().await;
    let a = c.ask("[1]").await;
    assert_eq!(
        a,
        json(
            r#"[{"jsonrpc": "2.0", "error": {"code": -32600, "message": "Invalid Request"}, "id": null}]"#
        )
    );
}

#[tokio::test]
async fn invalid_batch_of_three() {
    let mut c = client().await;
    let a = c.ask("[1,2,3]").await;
    let one = r#"{"jsonrpc": "2.0", "error": {"code": -32600, "message": "Invalid Request"}, "id": null}"#;
    assert_eq!(a, json(&format!("[{one},{one},{one}]")));
}

#[tokio::test]
async fn batch_of_calls_valid_and_invalid() {
    let mut c = client().await;
    let a = c
        .ask(
            r#"[
        {"jsonrpc": "2.0", "method": "sum", "params": [1,2,4], "id": "1"},
        {"jsonrpc": "2.0", "method": "notify_hello", "params": [7]},
        {"jsonrpc": "2.0", "method": "subtract", "params": [42,23], "id": "2"},
        {"foo": "boo"},
        {"jsonrpc": "2.0", "method": "foo.get", "params": {"name": "myself"}, "id": "5"},
        {"jsonrpc": "2.0", "method": "get_data", "id": "9"}
    ]"#,
        )
        .await;
    let expected = json(
        r#"[
        {"jsonrpc": "2.0", "result": 7, "id": "1"},
        {"jsonrpc": "2.0", "result": 19, "id": "2"},
        {"jsonrpc": "2.0", "error": {"code": -32600, "message": "Invalid Request"}, "id": null},
        {"jsonrpc": "2.0", "error": {"code": -32601, "message": "Method not found"}, "id": "5"},
        {"jsonrpc": "2.0", "result": ["hello", 5], "id": "9"}
    ]"#,
    );
    assert_eq!(as_set(&a), as_set(&expected));
}

#[tokio::test]
async fn batch_of_notifications_gets_nothing() {
    let mut c = client().await;
    c.send(
        r#"[
        {"jsonrpc": "2.0", "method": "notify_sum", "params": [1,2,4]},
        {"jsonrpc": "2.0", "method": "notify_hello", "params": [7]}
    ]"#,
    )
    .await;
    c.assert_nothing_before_marker().await;
}

//! Edges of the protocol surface a review found: messages with a member given twice,
//! params at the edges of what a handler's type reads, the `rpc.discover` document
//! against OpenRPC 1.3, and error data passed on. Each test states what the
//! specification or this crate's documentation promises, over a real WebSocket on
//! 127.0.0.1.

mod common;

use std::time::Duration;

use common::{connections, serve, within, RawClient};
use jsonrpc_peer::schemars::JsonSchema;
use jsonrpc_peer::{connect, Api, Caller, Context, Error, Router, RpcError};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

async fn spec_client() -> RawClient {
    let (url, _server) = serve(common::spec_methods::spec_router()).await;
    RawClient::connect(&url).await
}

// ---------------------------------------------------------------------------------
// Responses with a duplicated member.

/// A response whose `result` member appears twice is still a response: it must not be
/// answered (DESIGN.md: "never answer a response"; `Item::BadResponse`: "Never
/// answered: answering responses could make two peers loop"), and the call it answers
/// must end as an invalid response, as one with both `result` and `error` does, not
/// wait for its timeout.
#[tokio::test]
async fn a_response_with_a_duplicated_member_is_not_answered_and_ends_its_call() {
    let (url, server) = serve(Router::new()).await;
    let mut peers = connections(&server);
    let mut client = RawClient::connect(&url).await;
    let peer = within(peers.recv()).await.expect("the server's peer");

    let call = tokio::spawn(async move {
        peer.call::<i64>("ask", ())
            .timeout(Duration::from_secs(3))
            .await
    });
    let request = client.recv_json().await;
    assert_eq!(request["method"], "ask", "{request}");
    let id = request["id"].to_string();

    client
        .send(&format!(
            r#"{{"jsonrpc":"2.0","result":1,"result":2,"id":{id}}}"#
        ))
        .await;
    // The next thing the server says must be the answer to this marker, not an answer
    // to the response above.
    let marker = client
        .ask(r#"{"jsonrpc":"2.0","method":"no.such.method","id":"marker"}"#)
        .await;
    let call = within(call).await.expect("the call's task");
    let answered = marker["id"] != "marker";
    let ended = matches!(call, Err(Error::InvalidResponse(_)));
    assert!(
        !answered && ended,
        "answered a response: {answered} (next frame {marker}); the call ended: {call:?}"
    );
}

// ---------------------------------------------------------------------------------
// Handler params.

/// `sum` takes `Vec<i64>`: its positional params are the numbers. `[[1, 2, 3]]` is one
/// positional param that is an array, which is not an i64: -32602. The router's rule
/// (router.rs, `decode_params`): "a type that reads arrays itself is never
/// second-guessed"; DESIGN.md: "A params value that does not fit the type is -32602".
#[tokio::test]
async fn a_sequence_type_is_not_given_the_inside_of_a_nested_array() {
    let mut c = spec_client().await;
    let a = c
        .ask(r#"{"jsonrpc":"2.0","method":"sum","params":[[1,2,3]],"id":1}"#)
        .await;
    assert_eq!(
        a["error"]["code"], -32602,
        "sum read [[1,2,3]] as [1,2,3]: {a}"
    );
    // A derived struct reads arrays too (positional params): the same rule.
    let a = c
        .ask(r#"{"jsonrpc":"2.0","method":"subtract","params":[[42,23]],"id":2}"#)
        .await;
    assert_eq!(
        a["error"]["code"], -32602,
        "subtract read [[42,23]] as [42,23]: {a}"
    );
}

#[derive(Serialize, Deserialize, JsonSchema, Debug)]
struct AllOptional {
    limit: Option<u32>,
}

/// A struct whose fields are all optional reads absent params and `{}`; `[]`, which
/// the router reads "as it reads absent params" ("Many clients send `[]` or `{}` to
/// mean 'no params'"), must be read too.
#[tokio::test]
async fn a_struct_of_optional_fields_reads_an_empty_array_as_it_reads_absent_params() {
    let router = Router::new().method("page", |_cx: Context, p: AllOptional| async move {
        Ok::<_, RpcError>(p.limit.unwrap_or(10))
    });
    let (url, _server) = serve(router).await;
    let mut c = RawClient::connect(&url).await;
    let absent = c.ask(r#"{"jsonrpc":"2.0","method":"page","id":1}"#).await;
    assert_eq!(absent["result"], 10, "{absent}");
    let object = c
        .ask(r#"{"jsonrpc":"2.0","method":"page","params":{},"id":2}"#)
        .await;
    assert_eq!(object["result"], 10, "{object}");
    let array = c
        .ask(r#"{"jsonrpc":"2.0","method":"page","params":[],"id":3}"#)
        .await;
    assert_eq!(array["result"], 10, "[] is not read as no params: {array}");
}

/// A tuple's trailing `Option`s may be left out by position too; a missing value
/// that is not optional is still -32602.
#[tokio::test]
async fn a_tuple_s_trailing_options_may_be_left_out() {
    let router = Router::new().method(
        "greet",
        |_cx: Context, (name, times): (String, Option<u32>)| async move {
            Ok::<_, RpcError>(name.repeat(times.unwrap_or(1) as usize))
        },
    );
    let (url, _server) = serve(router).await;
    let mut c = RawClient::connect(&url).await;
    let both = c
        .ask(r#"{"jsonrpc":"2.0","method":"greet","params":["ab",2],"id":1}"#)
        .await;
    assert_eq!(both["result"], "abab", "{both}");
    let one = c
        .ask(r#"{"jsonrpc":"2.0","method":"greet","params":["ab"],"id":2}"#)
        .await;
    assert_eq!(one["result"], "ab", "{one}");
    let none = c
        .ask(r#"{"jsonrpc":"2.0","method":"greet","params":[],"id":3}"#)
        .await;
    assert_eq!(none["error"]["code"], -32602, "{none}");
}

// ---------------------------------------------------------------------------------
// The rpc.discover document.

#[derive(Serialize, Deserialize, JsonSchema, Debug)]
struct Search {
    query: String,
    /// At most this many; all when absent.
    limit: Option<u32>,
}

jsonrpc_peer::method!(SearchMethod = "search", Search => String);

fn method<'a>(doc: &'a Value, name: &str) -> &'a Value {
    doc["methods"]
        .as_array()
        .expect("methods")
        .iter()
        .find(|m| m["name"] == name)
        .unwrap_or_else(|| panic!("no method {name} in {doc:#}"))
}

/// The document says `search` takes params by name or by position and that `limit`
/// is not required (OpenRPC 1.3, Content Descriptor `required`: "Determines if the
/// content is a required field"). A by-position call that leaves the optional param
/// out, `["rust"]`, fits the document; the handler must accept it.
#[tokio::test]
async fn a_param_the_document_calls_optional_may_be_left_out_by_position() {
    let api = Api::new("search", "1.0.0").serves(SearchMethod);
    let router = Router::new()
        .handle(SearchMethod, |_cx, p| async move {
            Ok(format!("{}:{:?}", p.query, p.limit))
        })
        .discover(&api);
    let (url, _server) = serve(router).await;
    let peer = within(connect(&url, Router::new())).await.unwrap();
    let doc: Value = within(peer.call("rpc.discover", ())).await.unwrap();
    let search = method(&doc, "search");
    assert_eq!(search["paramStructure"], "either", "{search:#}");
    assert_eq!(search["params"][1]["name"], "limit", "{search:#}");
    assert_eq!(search["params"][1]["required"], false, "{search:#}");

    let by_name: jsonrpc_peer::Result<String> =
        within(peer.call("search", json!({"query": "rust"}))).await;
    assert_eq!(by_name.unwrap(), "rust:None");
    let by_position: jsonrpc_peer::Result<String> =
        within(peer.call("search", json!(["rust"]))).await;
    assert!(
        matches!(&by_position, Ok(s) if s == "rust:None"),
        "a by-position call that fits the document was refused: {by_position:?}"
    );
    peer.close().await;
}

#[derive(Serialize, Deserialize, JsonSchema, Debug)]
struct ListPage {
    /// Where the previous page ended; the first page when absent.
    cursor: Option<String>,
    limit: u32,
}

jsonrpc_peer::method!(List = "list", ListPage => Vec<String>);

/// OpenRPC 1.3, Method Object `params`: "All optional params (content descriptor
/// objects with "required": false) MUST be positioned after all required params in the
/// list."
#[tokio::test]
async fn rpc_discover_lists_no_required_param_after_an_optional_one() {
    let api = Api::new("list", "1.0.0").serves(List);
    let router = Router::new()
        .handle(List, |_cx, _p| async move { Ok(Vec::new()) })
        .discover(&api);
    let (url, _server) = serve(router).await;
    let peer = within(connect(&url, Router::new())).await.unwrap();
    let doc: Value = within(peer.call("rpc.discover", ())).await.unwrap();
    let list = method(&doc, "list");
    let required: Vec<bool> = list["params"]
        .as_array()
        .expect("params")
        .iter()
        .map(|p| p["required"].as_bool().unwrap_or(false))
        .collect();
    let first_optional = required.iter().position(|r| !r).unwrap_or(required.len());
    assert!(
        required[first_optional..].iter().all(|r| !r),
        "a required param follows an optional one: {:#}",
        list["params"]
    );
    peer.close().await;
}

jsonrpc_peer::method!(Ping = "ping", () => String);
jsonrpc_peer::notification!(Log = "log", (String,));

/// A symmetric API where both sides serve `ping` and both send `log` is describable
/// (`Api::serves` + `Api::expects`, `sends` + `receives`), but OpenRPC 1.3's Method
/// Object `name`: "The name MUST be unique within the methods array."
#[tokio::test]
async fn rpc_discover_names_each_method_once() {
    let api = Api::new("sym", "1.0.0")
        .serves(Ping)
        .expects(Ping)
        .sends(Log)
        .receives(Log);
    let router = Router::new()
        .handle(Ping, |_cx, ()| async move { Ok("pong".to_string()) })
        .on(Log, |_cx, (_line,)| async move {})
        .discover(&api);
    api.check(&router)
        .expect("the router serves what the API says");
    let (url, _server) = serve(router).await;
    let peer = within(connect(&url, Router::new())).await.unwrap();
    let doc: Value = within(peer.call("rpc.discover", ())).await.unwrap();
    let mut names: Vec<&str> = doc["methods"]
        .as_array()
        .expect("methods")
        .iter()
        .map(|m| m["name"].as_str().unwrap_or_default())
        .collect();
    let all = names.len();
    names.sort_unstable();
    names.dedup();
    assert_eq!(
        names.len(),
        all,
        "method names repeat in the document: {:#}",
        doc["methods"]
    );
    peer.close().await;
}

// ---------------------------------------------------------------------------------
// Invalid requests whose id could be read.

/// DESIGN.md: "`params`, if present, must be an array or an object; `"jsonrpc"` must be
/// exactly "2.0"; `method` must be a string. Otherwise -32600 with the id if it could
/// be read, else null." A request that repeats `params` (or `jsonrpc`) once has one
/// readable id: the -32600 must carry it, as it does for `"params": 3`.
#[tokio::test]
async fn an_invalid_request_with_a_repeated_member_keeps_its_readable_id() {
    let mut c = spec_client().await;
    let bad_params = c
        .ask(r#"{"jsonrpc":"2.0","method":"subtract","params":3,"id":7}"#)
        .await;
    assert_eq!(bad_params["error"]["code"], -32600, "{bad_params}");
    assert_eq!(bad_params["id"], 7, "{bad_params}");

    let twice = c
        .ask(r#"{"jsonrpc":"2.0","method":"subtract","params":[42,23],"params":[1,1],"id":8}"#)
        .await;
    assert_eq!(twice["error"]["code"], -32600, "{twice}");
    assert_eq!(
        twice["id"], 8,
        "the readable id was replaced by null: {twice}"
    );
}

// ---------------------------------------------------------------------------------
// Error objects passed on.

/// `impl From<Error> for RpcError` (error.rs): "the other side's error object with an
/// application code ... passes through unchanged: code, message and data, so a
/// handler that forwards a call answers as the far side did". A `data` of `null`
/// included.
#[tokio::test]
async fn a_forwarded_error_keeps_its_data_exactly() {
    let router = Router::new().method("relay", |cx: Context, (): ()| async move {
        let answer: Value = cx.peer().call("inner", ()).await?;
        Ok::<_, RpcError>(answer)
    });
    let (url, _server) = serve(router).await;
    let mut c = RawClient::connect(&url).await;
    let mut changed = Vec::new();
    // (An integer beyond 64 bits comes out as the nearest f64, as `serde_json::Value`
    // holds it: documented on `From<Error> for RpcError`.)
    for (n, data) in [
        "null",
        r#"{"balance":18446744073709551615,"seen":[null,-1,"é"]}"#,
    ]
    .into_iter()
    .enumerate()
    {
        c.send(&format!(
            r#"{{"jsonrpc":"2.0","method":"relay","id":"r{n}"}}"#
        ))
        .await;
        let inner = c.recv_json().await;
        assert_eq!(inner["method"], "inner", "{inner}");
        c.send(&format!(
            r#"{{"jsonrpc":"2.0","error":{{"code":42,"message":"no","data":{data}}},"id":{}}}"#,
            inner["id"]
        ))
        .await;
        let answer = c.recv_text().await.expect("the relay's answer");
        let expected = format!(r#""error":{{"code":42,"message":"no","data":{data}}}"#);
        if !answer.contains(&expected) {
            changed.push(format!("sent {data}, answered {answer}"));
        }
    }
    assert!(
        changed.is_empty(),
        "the error's data was changed on its way:\n{}",
        changed.join("\n")
    );
}

// ---------------------------------------------------------------------------------
// Typed contracts whose params are one value.

#[derive(Serialize, Deserialize, JsonSchema, Debug, Clone, Copy, PartialEq)]
#[serde(rename_all = "snake_case")]
enum Mode {
    Fast,
    Exact { digits: u32 },
}

jsonrpc_peer::method!(Double = "double", i64 => i64);
jsonrpc_peer::method!(SetMode = "set_mode", Mode => Mode);

/// A contract is "used by both sides of a connection" (contract.rs); `Router::handle`
/// serves a one-value params type from a one-element array ("a single value that is
/// not a sequence (i64, String, an enum, Option<T>) | a one-element array [5]",
/// router.rs), and `rpc.discover` describes it by position. The typed call of the
/// same contract reaches that handler: `request(Double, &21)` is 42, and a call's
/// outcome does not depend on which enum variant is sent; a typed notification and a
/// typed broadcast go the same way.
#[tokio::test]
async fn a_typed_call_of_a_one_value_contract_reaches_its_typed_handler() {
    let router = Router::new()
        .handle(Double, |_cx, n| async move { Ok(n * 2) })
        .handle(SetMode, |_cx, mode| async move { Ok(mode) });
    let (url, _server) = serve(router).await;
    let peer = within(connect(&url, Router::new())).await.unwrap();
    let exact = within(peer.request(SetMode, &Mode::Exact { digits: 3 })).await;
    let fast = within(peer.request(SetMode, &Mode::Fast)).await;
    let double = within(peer.request(Double, &21)).await;
    assert!(
        matches!(exact, Ok(Mode::Exact { digits: 3 }))
            && matches!(fast, Ok(Mode::Fast))
            && matches!(double, Ok(42)),
        "exact: {exact:?}; fast: {fast:?}; double: {double:?}"
    );
    peer.close().await;
}

jsonrpc_peer::notification!(Level = "level", i64);

/// A typed notification of one value, sent by `send` and by a typed broadcast, reaches
/// the typed handler of the same contract.
#[tokio::test]
async fn a_typed_notification_of_one_value_reaches_its_typed_handler() {
    let (to_server, mut at_server) = tokio::sync::mpsc::unbounded_channel();
    let server_router = Router::new().on(Level, move |_cx, level| {
        let _ = to_server.send(level);
        async {}
    });
    let (url, server) = serve(server_router).await;
    let mut peers = connections(&server);
    let (to_client, mut at_client) = tokio::sync::mpsc::unbounded_channel();
    let client = Router::new().on(Level, move |_cx, level| {
        let _ = to_client.send(level);
        async {}
    });
    let peer = within(connect(&url, client)).await.unwrap();
    within(peers.recv()).await.expect("the server's peer");
    server.broadcast(Level, &7).unwrap();
    assert_eq!(within(at_client.recv()).await, Some(7));
    within(peer.send(Level, &8)).await.unwrap();
    assert_eq!(within(at_server.recv()).await, Some(8));
    peer.close().await;
}

jsonrpc_peer::method!(Find = "find", (String, Option<u32>) => String);

/// The router reads a tuple's trailing `Option` left out by position (`["rust"]` for
/// `(String, Option<u32>)`, router.rs: "a tuple's trailing `Option`s may be left out"),
/// as it does a struct's: the document says so too, as it does for a struct's field.
#[tokio::test]
async fn rpc_discover_calls_a_tuple_s_trailing_option_not_required() {
    let api = Api::new("find", "1.0.0").serves(Find);
    let router = Router::new()
        .handle(Find, |_cx, (query, limit)| async move {
            Ok(format!("{query}:{limit:?}"))
        })
        .discover(&api);
    let (url, _server) = serve(router).await;
    let peer = within(connect(&url, Router::new())).await.unwrap();
    let short: jsonrpc_peer::Result<String> = within(peer.call("find", json!(["rust"]))).await;
    assert_eq!(
        short.unwrap(),
        "rust:None",
        "the server takes the short form"
    );
    let doc: Value = within(peer.call("rpc.discover", ())).await.unwrap();
    let find = method(&doc, "find");
    assert_eq!(find["paramStructure"], "by-position", "{find:#}");
    assert_eq!(find["params"][0]["required"], true, "{find:#}");
    assert_eq!(
        find["params"][1]["required"], false,
        "the server takes [\"rust\"], yet the document requires the second param: {find:#}"
    );
    peer.close().await;
}

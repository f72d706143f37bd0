//! Rate limits against a flood from outside: each item of a batch counts against the
//! calls per second of its connection (`-32005` with a retry-after past it, then
//! close code 4029), and one address cannot open more connections than its bound.

mod common;

use common::{serve_with, within, RawClient};
use jsonrpc_peer::{
    connect, Caller, Context, Error, HandshakePolicy, PeerConfig, RateLimit, Router, RpcError,
    Server, RATE_LIMIT_CLOSE,
};
use serde_json::Value;
use tokio_tungstenite::tungstenite::Message;

fn router() -> Router {
    Router::new().method("add", |_cx: Context, [a, b]: [i64; 2]| async move {
        Ok::<_, RpcError>(a + b)
    })
}

/// A batch of `n` calls of `add`, ids `first..first + n`.
fn batch(first: usize, n: usize) -> String {
    let items: Vec<String> = (first..first + n)
        .map(|id| format!(r#"{{"jsonrpc":"2.0","method":"add","params":[1,2],"id":{id}}}"#))
        .collect();
    format!("[{}]", items.join(","))
}

/// How many answers of a batch are results, and the -32005 errors.
fn split(answers: &Value) -> (usize, Vec<&Value>) {
    let answers = answers.as_array().expect("a batch answer");
    let ok = answers.iter().filter(|a| a["result"] == 3).count();
    let limited = answers
        .iter()
        .filter(|a| a["error"]["code"] == -32005)
        .collect();
    (ok, limited)
}

/// Reads past the answers, at most `frames` frames, to the close frame; its code.
async fn close_code(client: &mut RawClient, frames: usize) -> Option<u16> {
    for _ in 0..frames {
        match within(futures_util::StreamExt::next(&mut client.ws)).await {
            Some(Ok(Message::Close(frame))) => return frame.map(|f| u16::from(f.code)),
            Some(Ok(_)) => continue,
            other => panic!("the connection ended without a close frame: {other:?}"),
        }
    }
    None
}

/// A burst of 10 and one call a second: a batch of 50 gets 10 answers and 40
/// refusals, each with a retry-after; going on past the limit closes with 4029.
#[tokio::test]
async fn each_batch_item_counts_and_abuse_closes_with_4029() {
    let limit = RateLimit::per_second(1).burst(10).close_after(Some(60));
    let config = PeerConfig::default().rate_limit(Some(limit));
    let (url, _handle) = serve_with(router(), config).await;
    let mut client = RawClient::connect(&url).await;

    client.send(&batch(1, 50)).await;
    let answers = client.recv_json().await;
    let (ok, limited) = split(&answers);
    // The bucket refills at one call a second: a slow machine may earn one more.
    assert!((10..=11).contains(&ok), "{ok} answered: {answers}");
    assert_eq!(ok + limited.len(), 50, "{answers}");
    for refusal in &limited {
        assert_eq!(refusal["error"]["message"], "Rate limited");
        let wait = refusal["error"]["data"]["retry_after_ms"].as_u64().unwrap();
        assert!((1..=1000).contains(&wait), "retry after {wait} ms");
    }
    // A single call is refused too, notifications are counted (and dropped).
    client
        .send(r#"{"jsonrpc":"2.0","method":"add","params":[1,2]}"#)
        .await;
    let answer = client
        .ask(r#"{"jsonrpc":"2.0","method":"add","params":[1,2],"id":"single"}"#)
        .await;
    assert_eq!(answer["error"]["code"], -32005, "{answer}");

    // Past 60 refusals within ten seconds: the answers already made still come, then
    // the close.
    client.send(&batch(100, 50)).await;
    assert_eq!(close_code(&mut client, 10).await, Some(RATE_LIMIT_CLOSE));
}

/// Within the limit nothing is refused, and without one nothing ever is.
#[tokio::test]
async fn calls_within_the_limit_and_without_one_are_answered() {
    let config = PeerConfig::default().rate_limit(Some(RateLimit::per_second(1000)));
    let (url, _handle) = serve_with(router(), config).await;
    let mut client = RawClient::connect(&url).await;
    client.send(&batch(1, 500)).await;
    assert_eq!(split(&client.recv_json().await).0, 500);

    let (url, _handle) = serve_with(router(), PeerConfig::default()).await;
    let mut client = RawClient::connect(&url).await;
    for round in 0..3 {
        client.send(&batch(round * 1000, 1000)).await;
        assert_eq!(split(&client.recv_json().await).0, 1000);
    }
}

/// Three connections from 127.0.0.1 at most: the fourth is refused with 429, and one
/// that closes makes room again.
#[tokio::test]
async fn a_flood_of_connections_from_one_address_is_refused_past_its_bound() {
    let server = Server::bind("127.0.0.1:0")
        .await
        .unwrap()
        .handshake_policy(HandshakePolicy::default().max_connections_per_address(Some(3)));
    let url = format!("ws://{}", server.local_addr().unwrap());
    let handle = server.handle();
    let mut gone = common::disconnections(&handle);
    tokio::spawn(server.serve(router()));

    let mut open = Vec::new();
    for _ in 0..3 {
        open.push(within(connect(&url, Router::new())).await.unwrap());
    }
    for _ in 0..5 {
        match within(connect(&url, Router::new())).await {
            Err(Error::Refused { status, body }) => {
                assert_eq!(status.as_u16(), 429);
                assert_eq!(
                    body.as_deref(),
                    Some("too many connections from this address")
                );
            }
            other => panic!("a fourth connection: {other:?}"),
        }
    }
    assert_eq!(handle.connection_count(), 3);
    // Its slot is free once the server has let it go.
    open.pop().unwrap().close().await;
    within(gone.recv()).await.unwrap();
    let again = within(connect(&url, Router::new())).await.unwrap();
    let sum: i64 = within(again.call("add", [1, 2])).await.unwrap();
    assert_eq!(sum, 3);
}

/// Requests that are not valid (a method that is not a string) and frames that are
/// not JSON count as calls do: past the limit they are answered `-32005`, and a flood
/// of them is closed with 4029 like a flood of calls.
#[tokio::test]
async fn invalid_requests_and_unreadable_frames_count_against_the_limit() {
    let limit = RateLimit::per_second(1).burst(10).close_after(Some(60));
    let config = PeerConfig::default().rate_limit(Some(limit));
    let (url, _handle) = serve_with(router(), config).await;
    let mut client = RawClient::connect(&url).await;

    let items: Vec<String> = (1..=50)
        .map(|id| format!(r#"{{"jsonrpc":"2.0","method":5,"id":{id}}}"#))
        .collect();
    client.send(&format!("[{}]", items.join(","))).await;
    let answers = client.recv_json().await;
    let answers = answers.as_array().expect("a batch answer");
    let invalid = answers
        .iter()
        .filter(|a| a["error"]["code"] == -32600)
        .count();
    let limited = answers
        .iter()
        .filter(|a| a["error"]["code"] == -32005)
        .count();
    // The bucket refills at one a second: a slow machine may earn one more.
    assert!((10..=11).contains(&invalid), "{invalid} answered -32600");
    assert_eq!(invalid + limited, 50);

    // Frames that are not JSON, past the limit: refused, then the close.
    for _ in 0..30 {
        client.send("not json").await;
    }
    assert_eq!(close_code(&mut client, 40).await, Some(RATE_LIMIT_CLOSE));
}

//! A client that asks for large answers and never reads them costs the server a bounded
//! number of bytes (the outgoing queue is bounded in bytes, not only in frames), and
//! gets every answer, in order, once it reads again. Alone in its binary: it measures
//! the resident memory of the process.

mod common;

use std::time::Duration;

use common::{rss, within};
use futures_util::{SinkExt, StreamExt};
use jsonrpc_peer::{Context, Router, RpcError};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

/// Each answer: a fresh 128 KiB string, as a handler that reads a file would make.
const ANSWER: usize = 128 * 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_large_answers_costs_bounded_memory() {
    let router =
        Router::new().method(
            "blob",
            |_cx: Context, (n, _padding): (usize, String)| async move {
                Ok::<_, RpcError>("x".repeat(n))
            },
        );
    let (url, _) = common::serve(router).await;
    let (ws, _) = within(tokio_tungstenite::connect_async(&url))
        .await
        .unwrap();
    let (mut to_server, mut from_server) = ws.split();

    // Calls padded to 32 KiB, so the sockets' buffers fill after a few hundred of them
    // and the client's writes stop once the server stops reading. Bounded in frames
    // only (1,024 queued, 256 waiting), the server would hold every answer it made:
    // 40 MiB and more. Bounded in bytes: about 1 MiB queued and 1 MiB waiting.
    let padding = "p".repeat(32 * 1024);
    let before = rss();
    let mut sent = 0u64;
    while sent < 5_000 {
        let call =
            json!({"jsonrpc": "2.0", "method": "blob", "params": [ANSWER, padding], "id": sent});
        let send = to_server.send(Message::text(call.to_string()));
        // A write that does not finish in 3 s: the server has stopped reading.
        match tokio::time::timeout(Duration::from_secs(3), send).await {
            Ok(result) => result.expect("the server keeps the connection"),
            Err(_) => break,
        }
        sent += 1;
    }
    let grown = rss().saturating_sub(before);
    println!(
        "{sent} calls sent before the server stopped reading; it grew by {} KiB",
        grown >> 10
    );
    assert!(
        sent < 5_000,
        "the server read everything: nothing held it back"
    );
    assert!(
        grown < 24 << 20,
        "the server grew by {} MiB for a client that does not read",
        grown >> 20
    );

    // The client reads again: every call it got through is answered, in order.
    let reading = async {
        let mut next = 0u64;
        // The one call whose write timed out may have gone through in part: the server
        // reads it whole once the buffers drain, or never; either way it comes last.
        while next < sent {
            let Some(Ok(Message::Text(text))) = from_server.next().await else {
                panic!("the connection ended after {next} answers");
            };
            let answer: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(answer["id"], next, "answers keep the order of the calls");
            assert_eq!(answer["result"].as_str().map(str::len), Some(ANSWER));
            next += 1;
        }
    };
    tokio::time::timeout(Duration::from_secs(60), reading)
        .await
        .expect("the answers arrive once the client reads");
}

//! Input a peer can send on purpose or by accident: none of it makes the process panic,
//! hang, or hold memory beyond its limits.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{json, serve, serve_with, within, RawClient};
use futures_util::{SinkExt, StreamExt};
use jsonrpc_peer::{Context, PeerConfig, Router, RpcError};
use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data, OpCode};
use tokio_tungstenite::tungstenite::protocol::frame::Frame;
use tokio_tungstenite::tungstenite::Message;

async fn spec_client() -> RawClient {
    let (url, _server) = serve(common::spec_methods::spec_router()).await;
    RawClient::connect(&url).await
}

#[tokio::test]
async fn deep_nesting_is_answered_not_overflowed() {
    let mut c = spec_client().await;
    let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));

    // As params: the envelope is read without recursing; the handler's type stops at
    // serde_json's depth limit.
    let a = c
        .ask(&format!(
            r#"{{"jsonrpc":"2.0","method":"sum","params":{},"id":1}}"#,
            deep(100_000)
        ))
        .await;
    assert_eq!(a["error"]["code"], -32602, "{a}");

    // As a batch element: valid JSON, not a request.
    let a = c.ask(&deep(100_000)).await;
    assert_eq!(
        a,
        json(
            r#"[{"jsonrpc":"2.0","error":{"code":-32600,"message":"Invalid Request"},"id":null}]"#
        )
    );

    // As an id (an array is not an id).
    let a = c
        .ask(&format!(
            r#"{{"jsonrpc":"2.0","method":"sum","params":[],"id":{}}}"#,
            deep(10_000)
        ))
        .await;
    assert_eq!(a["error"]["code"], -32600);
    assert_eq!(a["id"], serde_json::Value::Null);
}

#[tokio::test]
async fn ids_of_any_form_are_echoed_exactly() {
    let mut c = spec_client().await;
    let long = "x".repeat(200_000);
    for id in [
        format!("\"{long}\""),
        "123456789012345678901234567890".to_owned(),
        "-0".to_owned(),
        "1.5e300".to_owned(),
        r#""\u00e9\ud83d\ude00""#.to_owned(),
        "null".to_owned(),
    ] {
        c.send(&format!(
            r#"{{"jsonrpc":"2.0","method":"sum","params":[1,2],"id":{id}}}"#
        ))
        .await;
        let text = c.recv_text().await.expect("an answer");
        assert!(
            text.ends_with(&format!(r#","id":{id}}}"#)),
            "id {id:.40} not echoed byte for byte: {text:.200}"
        );
    }
}

#[tokio::test]
async fn odd_values_in_place_of_a_request() {
    let mut c = spec_client().await;
    let invalid =
        json(r#"{"jsonrpc":"2.0","error":{"code":-32600,"message":"Invalid Request"},"id":null}"#);
    for frame in [
        "null",
        "1",
        "\"x\"",
        "true",
        "{}",
        r#"{"jsonrpc":"2.0"}"#,
        r#"{"id":1,"id":2,"jsonrpc":"2.0","method":"sum"}"#,
    ] {
        assert_eq!(c.ask(frame).await, invalid, "for {frame}");
    }
    for frame in ["", " ", "{", "[1,", "nul", "{\"a\":1}}", "\u{feff}{}"] {
        let a = c.ask(frame).await;
        assert_eq!(a["error"]["code"], -32700, "for {frame:?}: {a}");
    }
    // A readable id is kept even when the rest is invalid.
    let a = c
        .ask(r#"{"jsonrpc":"2.0","method":"sum","params":"bar","id":"keep"}"#)
        .await;
    assert_eq!(a["id"], "keep");
    assert_eq!(a["error"]["code"], -32600);
    let a = c
        .ask(r#"{"jsonrpc":"1.0","method":"sum","params":[],"id":9}"#)
        .await;
    assert_eq!(
        (a["id"].clone(), a["error"]["code"].clone()),
        (json("9"), json("-32600"))
    );
    // Responses are never answered, valid or not: two peers could loop otherwise.
    c.send(r#"{"jsonrpc":"2.0","result":1,"id":12345}"#).await;
    c.send(r#"{"jsonrpc":"2.0","error":{"code":1,"message":"m"},"id":null}"#)
        .await;
    c.send(r#"{"jsonrpc":"2.0","result":1,"error":{"code":1,"message":"m"},"id":3}"#)
        .await;
    c.send(r#"[{"jsonrpc":"2.0","result":1,"id":777}]"#).await;
    c.assert_nothing_before_marker().await;
}

#[tokio::test]
async fn binary_frames_are_ignored() {
    let mut c = spec_client().await;
    within(c.ws.send(Message::binary(
        b"{\"jsonrpc\":\"2.0\",\"method\":\"sum\",\"id\":1}".to_vec(),
    )))
    .await
    .unwrap();
    c.assert_nothing_before_marker().await;
}

#[tokio::test]
async fn invalid_utf8_ends_that_connection_only() {
    let (url, _server) = serve(common::spec_methods::spec_router()).await;
    let mut bad = RawClient::connect(&url).await;
    let frame = Frame::message(vec![b'{', 0xff, 0xfe, b'}'], OpCode::Data(Data::Text), true);
    within(bad.ws.send(Message::Frame(frame))).await.unwrap();
    assert_eq!(bad.recv_text().await, None, "the connection ends");

    let mut good = RawClient::connect(&url).await;
    let a = good
        .ask(r#"{"jsonrpc":"2.0","method":"sum","params":[1,2],"id":1}"#)
        .await;
    assert_eq!(a["result"], 3);
}

#[tokio::test]
async fn a_message_over_the_limit_closes_with_1009() {
    let config = PeerConfig::default().max_message_size(64 * 1024);
    let (url, _server) = serve_with(common::spec_methods::spec_router(), config).await;
    let mut c = RawClient::connect(&url).await;
    // Just under the limit is served.
    let fits = format!(
        r#"{{"jsonrpc":"2.0","method":"sum","params":[1],"id":"{}"}}"#,
        "y".repeat(60_000)
    );
    let a = c.ask(&fits).await;
    assert_eq!(a["result"], 1);

    let sent = Instant::now();
    let big = format!(
        r#"{{"jsonrpc":"2.0","method":"sum","params":[1],"id":"{}"}}"#,
        "y".repeat(100_000)
    );
    // The server may close while the frame is still being written.
    let _ = within(c.ws.send(Message::text(big))).await;
    let code = loop {
        match within(c.ws.next()).await {
            Some(Ok(Message::Close(Some(frame)))) => break u16::from(frame.code),
            Some(Ok(_)) => continue,
            other => panic!("expected a close frame, got {other:?}"),
        }
    };
    assert_eq!(code, 1009);
    // As the frame arrives; the bound leaves room for a busy machine.
    assert!(
        sent.elapsed() < Duration::from_secs(1),
        "closed after {:?}",
        sent.elapsed()
    );
}

#[tokio::test]
async fn a_batch_over_the_limit_is_one_error_and_runs_nothing() {
    // `count` says how many times it ran, this run included: running is observable.
    let runs = Arc::new(AtomicU64::new(0));
    let router = Router::with_state(runs.clone()).method(
        "count",
        |cx: Context<Arc<AtomicU64>>, (): ()| async move {
            Ok::<_, RpcError>(cx.state().fetch_add(1, Ordering::SeqCst) + 1)
        },
    );
    let config = PeerConfig::default().max_batch_len(10);
    let (url, _server) = serve_with(router, config).await;
    let mut c = RawClient::connect(&url).await;
    let one = r#"{"jsonrpc":"2.0","method":"count","id":1}"#;
    let a = c.ask(&format!("[{}]", [one; 11].join(","))).await;
    assert_eq!(a["error"]["code"], -32600);
    assert_eq!(a["id"], serde_json::Value::Null);
    assert!(
        a["error"]["data"].as_str().unwrap().contains("limit of 10"),
        "{a}"
    );
    // A batch at the limit runs every element; `count` answers at once, so these are
    // the first runs if the refused batch ran nothing.
    let a = c.ask(&format!("[{}]", [one; 10].join(","))).await;
    let mut counts: Vec<u64> = a
        .as_array()
        .unwrap_or_else(|| panic!("a batch answer: {a}"))
        .iter()
        .map(|e| e["result"].as_u64().unwrap_or_else(|| panic!("{e}")))
        .collect();
    counts.sort_unstable();
    assert_eq!(
        counts,
        (1..=10).collect::<Vec<_>>(),
        "the refused batch ran {} handlers",
        runs.load(Ordering::SeqCst).saturating_sub(10)
    );
}

/// The WARN lines a subscriber saw whose message starts with `what`: each line's
/// `skipped` field.
#[derive(Clone)]
struct WarnLines {
    what: &'static str,
    lines: Arc<std::sync::Mutex<Vec<u64>>>,
}

impl tracing::Subscriber for WarnLines {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        struct Fields {
            message: String,
            skipped: Option<u64>,
        }
        impl tracing::field::Visit for Fields {
            fn record_u64(&mut self, field: &tracing::field::Field, value: u64) {
                if field.name() == "skipped" {
                    self.skipped = Some(value);
                }
            }
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                if field.name() == "message" {
                    self.message = format!("{value:?}");
                }
            }
        }
        if *event.metadata().level() != tracing::Level::WARN {
            return;
        }
        let mut fields = Fields {
            message: String::new(),
            skipped: None,
        };
        event.record(&mut fields);
        if fields.message.starts_with(self.what) {
            let skipped = fields
                .skipped
                .expect("a throttled line says what it skipped");
            self.lines.lock().unwrap().push(skipped);
        }
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

// The runtime is the test's thread alone, so the subscriber set for it sees the
// server's lines (and no other test's).
#[tokio::test(flavor = "current_thread")]
async fn a_flood_of_notifications_nothing_serves_writes_a_line_a_second_not_one_each() {
    let seen = WarnLines {
        what: "notification without a handler",
        lines: Arc::default(),
    };
    let _guard = tracing::subscriber::set_default(seen.clone());
    let mut c = spec_client().await;
    let started = Instant::now();
    let flood: String = (0..20)
        .map(|i| format!(r#"{{"jsonrpc":"2.0","method":"no.such.notification","params":[{i}]}}"#))
        .collect::<Vec<_>>()
        .join(",");
    for _ in 0..250 {
        c.send(&format!("[{flood}]")).await;
    }
    // Every notification was read before the marker's answer.
    c.assert_nothing_before_marker().await;
    let took = started.elapsed();
    let lines = seen.lines.lock().unwrap().clone();
    // 5,000 dropped: one line, and one more for each second the flood lasted.
    assert!(!lines.is_empty(), "the first one is written");
    assert!(
        lines.len() as u64 <= took.as_secs() + 1,
        "{} lines in {took:?}",
        lines.len()
    );
    assert_eq!(lines[0], 0);
    let told: u64 = lines.iter().map(|skipped| skipped + 1).sum();
    assert!(told <= 5_000, "{lines:?}");
}

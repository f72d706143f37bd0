//! Lanes per method: concurrent (default), ordered (the FIFO notifications run in) and
//! keyed (a FIFO per key, keys at once).
//!
//! A server `Peer` on one end of a real unix socket pair speaking WebSocket frames, a
//! raw WebSocket (or a `Peer`) on the other. Time is paused: handlers "work" by
//! sleeping, the clock only moves when every task waits, so overlaps and orders are
//! exact.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use jsonrpc_peer::transport::WebSocket;
use jsonrpc_peer::{Caller, Context, MethodOptions, Peer, Router, RpcError};
use serde::Deserialize;
use serde_json::json;
use tokio::sync::Notify;
use tokio::time::Instant;

use common::unix::{config, start, ws_pair, Raw};
use common::within;

/// What the handlers did, with the (paused) time they did it at.
#[derive(Default)]
struct Log {
    events: Mutex<Vec<(String, Duration)>>,
    start: Mutex<Option<Instant>>,
    hold: Notify,
}

impl Log {
    fn push(&self, what: String) {
        let start = *self.start.lock().unwrap().get_or_insert_with(Instant::now);
        self.events.lock().unwrap().push((what, start.elapsed()));
    }

    fn names(&self) -> Vec<String> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .map(|e| e.0.clone())
            .collect()
    }

    fn at(&self, what: &str) -> Duration {
        self.events
            .lock()
            .unwrap()
            .iter()
            .find(|e| e.0 == what)
            .unwrap_or_else(|| panic!("no event {what}"))
            .1
    }
}

#[derive(Deserialize)]
struct Edit {
    doc: String,
    seq: u32,
    ms: u64,
}

fn router(log: Arc<Log>) -> Router<Arc<Log>> {
    Router::with_state(log)
        .method_with(
            "edit",
            MethodOptions::new().keyed(|e: &Edit| e.doc.clone()),
            |cx: Context<Arc<Log>>, e: Edit| async move {
                cx.state().push(format!("start {}{}", e.doc, e.seq));
                tokio::time::sleep(Duration::from_millis(e.ms)).await;
                cx.state().push(format!("end {}{}", e.doc, e.seq));
                Ok::<_, RpcError>(format!("{}{}", e.doc, e.seq))
            },
        )
        .notification("note", |cx: Context<Arc<Log>>, (n,): (u32,)| async move {
            tokio::time::sleep(Duration::from_millis(10)).await;
            cx.state().push(format!("note {n}"));
        })
        .notification("hold", |cx: Context<Arc<Log>>, (): ()| async move {
            cx.state().hold.notified().await;
            cx.state().push("released".into());
        })
        .method_with(
            "query",
            MethodOptions::new().ordered(),
            |cx: Context<Arc<Log>>, (): ()| async move {
                cx.state().push("query".into());
                Ok::<_, RpcError>(cx.state().names().len())
            },
        )
        .method("query_now", |cx: Context<Arc<Log>>, (): ()| async move {
            cx.state().push("query_now".into());
            Ok::<_, RpcError>(cx.state().names().len())
        })
        .method_with(
            "ask_back",
            MethodOptions::new().ordered(),
            |cx: Context<Arc<Log>>, (): ()| async move {
                let name: String = cx
                    .peer()
                    .call("whoami", ())
                    .await
                    .map_err(|e| RpcError::new(1, e.to_string()))?;
                cx.state().push(format!("asked {name}"));
                Ok::<_, RpcError>(name)
            },
        )
}

fn edit(doc: &str, seq: u32, ms: u64) -> String {
    json!({"jsonrpc":"2.0","method":"edit","params":{"doc":doc,"seq":seq,"ms":ms},"id":format!("{doc}{seq}")})
        .to_string()
}

async fn server() -> (Raw, Peer, Arc<Log>) {
    let log = Arc::new(Log::default());
    let (a, b) = ws_pair().await;
    let server = start(b, router(log.clone()), &config());
    (Raw(a), server, log)
}

#[tokio::test(start_paused = true)]
async fn two_keys_interleaved_keep_their_order_and_overlap_in_time() {
    let (mut raw, _server, log) = server().await;
    for seq in 1..=3 {
        raw.send(&edit("a", seq, 20)).await;
        raw.send(&edit("b", seq, 20)).await;
    }
    let mut answered = Vec::new();
    for _ in 0..6 {
        answered.push(raw.recv().await["result"].as_str().unwrap().to_owned());
    }
    for doc in ["a", "b"] {
        let mine: Vec<_> = answered.iter().filter(|a| a.starts_with(doc)).collect();
        assert_eq!(
            mine,
            [&format!("{doc}1"), &format!("{doc}2"), &format!("{doc}3")]
        );
        for seq in 2..=3 {
            // Each call of a key starts only once the one before it has ended.
            assert!(
                log.at(&format!("start {doc}{seq}")) >= log.at(&format!("end {doc}{}", seq - 1)),
                "{:?}",
                log.names()
            );
        }
    }
    // The keys ran at once: b1 started before a1 ended, and all six took three turns.
    assert!(log.at("start b1") < log.at("end a1"), "{:?}", log.names());
    assert_eq!(log.at("end a3"), Duration::from_millis(60));
    assert_eq!(log.at("end b3"), Duration::from_millis(60));
}

#[tokio::test(start_paused = true)]
async fn a_slow_key_does_not_delay_another() {
    let (mut raw, _server, _log) = server().await;
    raw.send(&edit("slow", 1, 1000)).await;
    raw.send(&edit("slow", 2, 1000)).await;
    raw.send(&edit("fast", 1, 10)).await;
    let begun = Instant::now();
    assert_eq!(raw.recv().await["result"], "fast1");
    assert_eq!(begun.elapsed(), Duration::from_millis(10));
    assert_eq!(raw.recv().await["result"], "slow1");
    assert_eq!(raw.recv().await["result"], "slow2");
}

fn note(n: u32) -> String {
    format!(r#"{{"jsonrpc":"2.0","method":"note","params":[{n}]}}"#)
}

#[tokio::test(start_paused = true)]
async fn an_ordered_method_stays_between_the_notifications_around_it() {
    let (mut raw, _server, log) = server().await;
    raw.send(&note(1)).await;
    raw.send(&note(2)).await;
    raw.send(r#"{"jsonrpc":"2.0","method":"query","id":1}"#)
        .await;
    raw.send(&note(3)).await;
    raw.send(&note(4)).await;
    // It saw exactly the two notifications before it.
    assert_eq!(raw.recv().await["result"], 3);
    raw.send(r#"{"jsonrpc":"2.0","method":"query","id":2}"#)
        .await;
    assert_eq!(raw.recv().await["result"], 6);
    assert_eq!(
        log.names(),
        ["note 1", "note 2", "query", "note 3", "note 4", "query"]
    );
}

#[tokio::test(start_paused = true)]
async fn a_concurrent_method_does_not_wait_for_notifications() {
    let (mut raw, _server, log) = server().await;
    raw.send(&note(1)).await;
    raw.send(r#"{"jsonrpc":"2.0","method":"query_now","id":1}"#)
        .await;
    assert_eq!(raw.recv().await["result"], 1);
    assert_eq!(log.names()[0], "query_now");
}

#[tokio::test(start_paused = true)]
async fn a_cancel_reaches_an_ordered_call_still_waiting_in_the_lane() {
    let (mut raw, server, log) = server().await;
    raw.send(r#"{"jsonrpc":"2.0","method":"hold"}"#).await;
    raw.send(r#"{"jsonrpc":"2.0","method":"query","id":5}"#)
        .await;
    raw.send(r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":5}}"#)
        .await;
    assert_eq!(
        raw.recv().await,
        json!({"jsonrpc":"2.0","error":{"code":-32800,"message":"Request cancelled"},"id":5})
    );
    assert_eq!(server.calls_running(), 0);
    log.hold.notify_one();
    raw.send(r#"{"jsonrpc":"2.0","method":"query","id":6}"#)
        .await;
    assert_eq!(raw.recv().await["id"], 6);
    // The cancelled call never ran.
    assert_eq!(log.names(), ["released", "query"]);
}

#[tokio::test(start_paused = true)]
async fn a_cancel_reaches_a_keyed_call_waiting_for_its_key_and_order_holds() {
    let (mut raw, _server, log) = server().await;
    raw.send(&edit("a", 1, 50)).await;
    raw.send(&edit("a", 2, 50)).await;
    raw.send(&edit("a", 3, 50)).await;
    raw.send(r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":"a2"}}"#)
        .await;
    let first = raw.recv().await;
    assert_eq!(first["id"], "a2");
    assert_eq!(first["error"]["code"], -32800);
    assert_eq!(raw.recv().await["result"], "a1");
    assert_eq!(raw.recv().await["result"], "a3");
    assert_eq!(log.names(), ["start a1", "end a1", "start a3", "end a3"]);
}

#[tokio::test(start_paused = true)]
async fn an_ordered_handler_may_call_the_other_side() {
    let log = Arc::new(Log::default());
    let (a, b) = ws_pair().await;
    let _server = Peer::start(WebSocket::new(b), Arc::new(router(log.clone())), &config());
    let client = Peer::start(
        WebSocket::new(a),
        Arc::new(
            Router::new().method("whoami", |_cx: Context, (): ()| async {
                tokio::time::sleep(Duration::from_millis(5)).await;
                Ok::<_, RpcError>("client")
            }),
        ),
        &config(),
    );
    let asked = client.call::<String>("ask_back", ());
    let noted = client.notify("note", [1]);
    let (asked, noted) = within(async { tokio::join!(asked, noted) }).await;
    assert_eq!(asked.expect("no deadlock"), "client");
    noted.expect("sent");
    let answer: usize = within(client.call("query", ())).await.expect("answered");
    assert_eq!(answer, 3);
    assert_eq!(log.names(), ["asked client", "note 1", "query"]);
}

#[tokio::test(start_paused = true)]
async fn calls_waiting_for_their_key_count_toward_max_in_flight() {
    let log = Arc::new(Log::default());
    let (a, b) = ws_pair().await;
    let config = config().max_in_flight(2);
    let _server = Peer::start(WebSocket::new(b), Arc::new(router(log.clone())), &config);
    let mut raw = Raw(a);
    // One runs, one waits for its key: two in flight, so reading pauses.
    raw.send(&edit("a", 1, 100)).await;
    raw.send(&edit("a", 2, 100)).await;
    raw.send(r#"{"jsonrpc":"2.0","method":"query_now","id":"q"}"#)
        .await;
    let begun = Instant::now();
    let first = raw.recv().await;
    assert_eq!(first["result"], "a1");
    let second = raw.recv().await;
    assert_eq!(second["id"], "q", "{second}");
    assert_eq!(begun.elapsed(), Duration::from_millis(100));
    assert_eq!(raw.recv().await["result"], "a2");
}

/// A notification of a method with a lane (a request without an id) runs in that
/// lane, as a call of it does: edits of one document sent as notifications keep their
/// order, and a notification of an ordered method waits for the notifications before it.
#[tokio::test(start_paused = true)]
async fn notifications_of_a_method_run_in_its_lane() {
    let (mut raw, _server, log) = server().await;
    let edit_note = |doc: &str, seq: u32, ms: u64| {
        json!({"jsonrpc":"2.0","method":"edit","params":{"doc":doc,"seq":seq,"ms":ms}}).to_string()
    };
    raw.send(&edit_note("a", 1, 20)).await;
    raw.send(&edit_note("a", 2, 10)).await;
    raw.send(&edit("a", 3, 0)).await;
    assert_eq!(raw.recv().await["result"], "a3");
    assert_eq!(
        log.names(),
        ["start a1", "end a1", "start a2", "end a2", "start a3", "end a3"],
        "the edits of one key ran out of order"
    );

    let (mut raw, _server, log) = server().await;
    raw.send(&note(1)).await;
    raw.send(r#"{"jsonrpc":"2.0","method":"query"}"#).await;
    raw.send(r#"{"jsonrpc":"2.0","method":"query","id":1}"#)
        .await;
    assert_eq!(raw.recv().await["result"], 3);
    assert_eq!(
        log.names(),
        ["note 1", "query", "query"],
        "the ordered method's notification did not wait for the one before it"
    );
}

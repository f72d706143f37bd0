//! The `push_ticker` example as other tools see it, with and without `--history N`:
//! its methods, answers and notifications, frame by frame. `cargo test` builds the
//! example; alone, build it first: `cargo build --example push_ticker`.

mod common;

use std::process::Stdio;

use common::{within, RawClient};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// A running `push_ticker` (killed when dropped) and its URL.
async fn ticker(args: &[&str]) -> (Child, String) {
    let mut child = Command::new(common::example_binary("push_ticker", ""))
        .args(["--listen", "127.0.0.1:0", "--interval-ms", "2"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start push_ticker");
    let stdout = child.stdout.take().expect("piped");
    let mut lines = BufReader::new(stdout).lines();
    let first = within(lines.next_line())
        .await
        .unwrap()
        .expect("a first line");
    let url = first
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("first line: {first}"))
        .to_owned();
    assert!(url.starts_with("ws://127.0.0.1:"), "{url}");
    (child, url)
}

fn call(id: u64, method: &str, params: Value) -> String {
    json!({"jsonrpc": "2.0", "method": method, "params": params, "id": id}).to_string()
}

/// Reads until the answer to `id`; returns the `prices` notifications' params before it
/// and the answer.
async fn answer(client: &mut RawClient, id: u64) -> (Vec<Value>, Value) {
    let mut prices = Vec::new();
    for _ in 0..100_000 {
        let frame = client.recv_json().await;
        if frame["id"] == id {
            return (prices, frame);
        }
        if frame["method"] == "prices" {
            prices.push(frame["params"].clone());
        }
    }
    panic!("no answer to {id}");
}

/// The next `n` `prices` notifications' params (ticks and heartbeats skipped).
async fn prices(client: &mut RawClient, n: usize) -> Vec<Value> {
    let mut got = Vec::new();
    for _ in 0..100_000 {
        if got.len() == n {
            break;
        }
        let frame = client.recv_json().await;
        if frame["method"] == "prices" {
            got.push(frame["params"].clone());
        }
    }
    got
}

#[tokio::test]
async fn without_history_push_ticker_is_as_before() {
    let (_child, url) = ticker(&[]).await;
    let mut client = RawClient::connect(&url).await;
    client.send(&call(1, "subscribe", json!(["prices"]))).await;
    let (_, reply) = answer(&mut client, 1).await;
    assert_eq!(reply, json!({"jsonrpc": "2.0", "result": true, "id": 1}));
    for params in prices(&mut client, 3).await {
        let keys: Vec<&String> = params.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["BTC", "seq"], "the payload itself: {params}");
    }
    client.send(&call(2, "subscribe", json!(["nope"]))).await;
    let (_, reply) = answer(&mut client, 2).await;
    assert_eq!(reply["error"]["code"], -32602);
    assert_eq!(
        reply["error"]["data"],
        r#"no topic `nope`; topics: ["prices", "heartbeat"]"#
    );
    client.send(&call(3, "topics", json!([]))).await;
    let (_, reply) = answer(&mut client, 3).await;
    assert_eq!(reply["result"], json!(["prices", "heartbeat"]));
    client
        .send(&call(4, "unsubscribe", json!(["prices"])))
        .await;
    let (_, reply) = answer(&mut client, 4).await;
    assert_eq!(reply["result"], true);
}

#[tokio::test]
async fn with_history_push_ticker_answers_with_positions_and_replays_what_was_missed() {
    let (_child, url) = ticker(&["--history", "50"]).await;
    let mut client = RawClient::connect(&url).await;
    client.send(&call(1, "subscribe", json!(["prices"]))).await;
    let (early, reply) = answer(&mut client, 1).await;
    let result = &reply["result"];
    let epoch = result["epoch"].as_str().expect("an epoch").to_owned();
    let k = result["offset"].as_u64().expect("an offset");
    assert_eq!(result, &json!({"epoch": epoch, "offset": k}));
    // Live from K + 1, each `{"offset":N,"data":{"seq":..,"BTC":..}}`. A publication
    // made once the subscription is in, while its answer is on its way, may come
    // before the answer: it is live all the same.
    let mut got = early;
    got.truncate(5);
    let more = 5 - got.len();
    got.extend(prices(&mut client, more).await);
    for (i, params) in got.iter().enumerate() {
        assert_eq!(params["offset"], k + 1 + i as u64, "{params}");
        let keys: Vec<&String> = params["data"].as_object().unwrap().keys().collect();
        assert_eq!(keys, ["BTC", "seq"]);
    }
    let last = k + 5;

    // Gone for a while (the TCP connection dropped, no close frame), then back.
    drop(client);
    let mut client = RawClient::connect(&url).await;
    client
        .send(&call(
            2,
            "subscribe",
            json!(["prices", {"epoch": epoch, "offset": last}]),
        ))
        .await;
    let (replayed, reply) = answer(&mut client, 2).await;
    let result = &reply["result"];
    assert_eq!(result["epoch"], epoch.as_str());
    assert_eq!(result["recovered"], true);
    let newest = result["offset"].as_u64().unwrap();
    let offsets: Vec<u64> = replayed
        .iter()
        .map(|p| p["offset"].as_u64().unwrap())
        .collect();
    // What was missed, then any live ones published while the answer was on its way
    // (as above), all in order.
    let missed: Vec<u64> = offsets.iter().copied().filter(|&o| o <= newest).collect();
    assert_eq!(missed, (last + 1..=newest).collect::<Vec<_>>());
    assert_eq!(
        offsets,
        (last + 1..last + 1 + offsets.len() as u64).collect::<Vec<_>>()
    );

    // More than 50 publications ago: outside the history.
    let mut far = RawClient::connect(&url).await;
    let mut outside = false;
    for _ in 0..100 {
        far.send(&call(
            3,
            "subscribe",
            json!(["prices", {"epoch": epoch, "offset": 0}]),
        ))
        .await;
        let (before, reply) = answer(&mut far, 3).await;
        if reply["result"]["offset"].as_u64().unwrap() <= 50 {
            // Still within the first 50: unsubscribe and wait for more publications.
            assert_eq!(reply["result"]["recovered"], true);
            far.send(&call(4, "unsubscribe", json!(["prices"]))).await;
            answer(&mut far, 4).await;
            prices(&mut client, 50).await;
            continue;
        }
        assert!(before.is_empty(), "nothing replayed: {before:?}");
        assert_eq!(reply["result"]["recovered"], false);
        outside = true;
        break;
    }
    assert!(outside, "the ticker never published 50");
    // Another epoch is not this process's.
    far.send(&call(
        5,
        "subscribe",
        json!(["prices", {"epoch": "x", "offset": 1}]),
    ))
    .await;
    let (_, reply) = answer(&mut far, 5).await;
    assert_eq!(reply["result"]["recovered"], false);
    assert_eq!(reply["result"]["epoch"], epoch.as_str());
}

/// The resident memory of process `pid`, in bytes (Linux).
fn rss_of(pid: u32) -> usize {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<usize>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// examples/push_client.rs hands every `tick` to its printing loop through an unbounded
/// channel: while its output is slow (a pipe nobody reads yet, a terminal paused with
/// Ctrl-S) every tick the server pushes is kept, without bound. The library it shows
/// off bounds every queue and pushes back on a reader that lags (notifications wait,
/// then reading pauses); the example threw that away.
#[tokio::test]
async fn the_push_client_example_keeps_its_memory_bounded_while_its_output_is_slow() {
    use jsonrpc_peer::{Caller, PeerConfig, Router, Server};
    use std::process::Stdio;
    use tokio::process::Command;

    const TICKS: usize = 20_000;
    let bin = common::example_binary("push_client", "");
    // The server queues everything at once: the client alone decides what it holds.
    let config = PeerConfig::default()
        .outgoing_queue(TICKS + 10)
        .outgoing_queue_bytes(1 << 30);
    let server = Server::bind("127.0.0.1:0")
        .await
        .unwrap()
        .peer_config(config);
    let url = format!("ws://{}", server.local_addr().unwrap());
    let mut connected = common::connections(&server.handle());
    tokio::spawn(server.serve(Router::new()));

    let mut child = Command::new(bin)
        .args(["--url", &url, "--topic", "none"])
        .stdout(Stdio::piped()) // never read: the client's output is slow
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("push_client starts");
    let pid = child.id().unwrap();
    let peer = within(connected.recv()).await.unwrap();
    let pad = "x".repeat(4096);
    for seq in 0..TICKS {
        within(peer.notify("tick", serde_json::json!({ "seq": seq, "pad": pad })))
            .await
            .unwrap();
    }
    // Answered (-32601) once the client has read every tick before it; a client that
    // pushes back is not there yet: then its memory is looked at after a while.
    let marker = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        peer.call::<serde_json::Value>("marker", ()),
    );
    let _ = marker.await;
    let rss = rss_of(pid);
    let _ = child.start_kill();
    assert!(
        rss < 48 << 20,
        "push_client holds {} MiB after {TICKS} ticks of 4 KiB it could not print yet",
        rss >> 20
    );
}

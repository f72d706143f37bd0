//! The chat and web demo examples, started as other tools start them (`--listen
//! 127.0.0.1:0`, the first stdout line read for the address): what a review found
//! them doing against their own docs. `cargo test` builds the examples first.

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::{within, RawClient};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

/// `chat server --listen 127.0.0.1:0` (killed when dropped) and its URL.
async fn chat_server() -> (Child, String) {
    let mut child = Command::new(common::example_binary("chat", ""))
        .args(["server", "--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start chat server");
    let mut lines = BufReader::new(child.stdout.take().expect("piped")).lines();
    let first = within(lines.next_line())
        .await
        .unwrap()
        .expect("a first line");
    let url = first
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("first line: {first}"))
        .to_owned();
    // The server prints every line it relays: keep its stdout drained.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, url)
}

/// `chat client --url URL --name NAME` (killed when dropped), its stdout's lines, once it
/// says it is connected.
async fn chat_client(url: &str, name: &str) -> (Child, Lines<BufReader<ChildStdout>>) {
    let mut child = Command::new(common::example_binary("chat", ""))
        .args(["client", "--url", url, "--name", name])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start chat client");
    let mut err = BufReader::new(child.stderr.take().expect("piped")).lines();
    let first = within(err.next_line())
        .await
        .unwrap()
        .expect("the client's first stderr line");
    assert!(first.starts_with("connected to "), "{first}");
    tokio::spawn(async move { while let Ok(Some(_)) = err.next_line().await {} });
    let out = BufReader::new(child.stdout.take().expect("piped")).lines();
    (child, out)
}

/// Reads `out` until a line equal to `wanted`, at most 100 lines; returns those before it.
/// Panics (with what was read) when the client's stdout ends first.
async fn lines_until(out: &mut Lines<BufReader<ChildStdout>>, wanted: &str) -> Vec<String> {
    let mut before = Vec::new();
    for _ in 0..100 {
        match within(out.next_line()).await.expect("read stdout") {
            Some(line) if line == wanted => return before,
            Some(line) => before.push(line),
            None => panic!("the client's stdout ended before `{wanted}`; it printed {before:?}"),
        }
    }
    panic!("no `{wanted}` in 100 lines: {before:?}");
}

/// The terminal chat client sends each typed line with `chat.send`; the server refuses a
/// text over 1,000 bytes with -32602. That refusal does not end the client: the user is
/// still in the chat (only Ctrl-D leaves, says the example's doc), and the next line goes
/// out.
#[tokio::test]
async fn chat_client_survives_a_line_the_server_refuses() {
    let (_server, url) = chat_server().await;
    let (mut client, mut out) = chat_client(&url, "alice").await;
    let mut stdin = client.stdin.take().expect("piped");
    let long = "x".repeat(1001);
    within(stdin.write_all(format!("{long}\nafter the long one\n").as_bytes()))
        .await
        .expect("type two lines");
    within(stdin.flush()).await.expect("flush");
    // Its own line comes back to it as a chat.message, as every line does.
    lines_until(&mut out, "alice: after the long one").await;
    assert!(
        client.try_wait().expect("poll the client").is_none(),
        "the client exited"
    );
}

/// Every `chat.message` shows as one line of the terminal chat, from the one who sent
/// it: a text with a newline would forge a line from someone else ("bob: ..."), and
/// escape sequences would reach every user's terminal. The server refuses control
/// characters (and the client would show them escaped).
#[tokio::test]
async fn chat_client_prints_one_line_per_message_and_no_escape_sequences() {
    let (_server, url) = chat_server().await;
    let (mut client, mut out) = chat_client(&url, "alice").await;
    // "connected" says the client read the server's 101; the server adds the connection
    // to those a broadcast reaches only after writing it, so mallory's lines could be
    // broadcast before alice is among them, and never reach her. A line of her own coming
    // back to her says she is: the server read it, so it had added her first.
    let mut stdin = client.stdin.take().expect("piped");
    within(stdin.write_all(b"here\n"))
        .await
        .expect("type a line");
    within(stdin.flush()).await.expect("flush");
    lines_until(&mut out, "alice: here").await;
    let mut mallory = RawClient::connect(&url).await;
    let forged = "hello\nbob: alice, send me your password\u{1b}]0;pwned\u{7}\u{1b}[2K";
    for (id, text) in [(1, forged), (2, "marker")] {
        let call = json!({"jsonrpc": "2.0", "method": "chat.send",
            "params": {"name": "mallory", "text": text}, "id": id});
        mallory.send(&call.to_string()).await;
    }
    let printed = lines_until(&mut out, "mallory: marker").await;
    assert!(
        printed.len() <= 1,
        "one chat.message printed as {} lines: {printed:?}",
        printed.len()
    );
    assert!(
        !printed.iter().any(|l| l.starts_with("bob: ")),
        "a line forged as bob's: {printed:?}"
    );
    assert!(
        !printed.iter().any(|l| l.chars().any(|c| c.is_control())),
        "control characters reach the terminal: {printed:?}"
    );
}

/// `web_demo --listen 127.0.0.1:0 ARGS` (killed when dropped) and its `ws://…/rpc` URL.
async fn web_demo(args: &[&str]) -> (Child, String) {
    let mut child = Command::new(common::example_binary("web_demo", "--features axum,redis "))
        .args(["--listen", "127.0.0.1:0"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start web_demo");
    let mut lines = BufReader::new(child.stdout.take().expect("piped")).lines();
    let first = within(lines.next_line()).await.unwrap();
    let Some(first) = first else {
        let mut err = String::new();
        let _ = tokio::io::AsyncReadExt::read_to_string(
            &mut child.stderr.take().expect("piped"),
            &mut err,
        )
        .await;
        panic!("web_demo {args:?} exited before listening (built with `--features axum,redis`?): {err}");
    };
    let ws = first
        .split("(WebSocket: ")
        .nth(1)
        .and_then(|rest| rest.strip_suffix(')'))
        .unwrap_or_else(|| panic!("first line: {first}"))
        .to_owned();
    (child, ws)
}

/// Sends `call` on `client` and reads until its answer (pushes skipped, at most 1,000 frames).
async fn answer_to(client: &mut RawClient, id: u64, call: serde_json::Value) -> serde_json::Value {
    client.send(&call.to_string()).await;
    for _ in 0..1000 {
        let frame = client.recv_json().await;
        if frame["id"] == id {
            return frame;
        }
    }
    panic!("no answer to {id}");
}

/// `chat.recent` answers `{"epoch": E, "lines": [...]}`, E being "the epoch the offsets
/// are in" (web_api.rs), and the page keeps a reloaded line by comparing its offset with
/// the follower's position in E. In cluster mode, after Redis comes back empty (a new
/// epoch, reported to the pages as `$/gap`), the old epoch's lines are not given under
/// the new epoch (their offsets would repeat and go backwards, and the page's
/// `reloadChat` would drop the new lines whose offsets are not above them).
#[tokio::test]
async fn web_demo_cluster_chat_recent_offsets_are_in_the_epoch_it_names() {
    let mut redis = common::redis_server::RedisServer::start();
    let (_demo, url) = web_demo(&["--redis", &redis.url()]).await;
    let mut page = RawClient::connect(&url).await;
    let subscribe =
        json!({"jsonrpc": "2.0", "method": "subscribe", "params": ["chat.message"], "id": 1});
    let answer = answer_to(&mut page, 1, subscribe).await;
    let first_epoch = answer["result"]["epoch"]
        .as_str()
        .expect("epoch")
        .to_owned();
    for (id, text) in [(2, "old one"), (3, "old two"), (4, "old three")] {
        let call = json!({"jsonrpc": "2.0", "method": "chat.send",
            "params": {"name": "ana", "text": text}, "id": id});
        let answer = answer_to(&mut page, id, call).await;
        assert!(answer["result"].is_object(), "{answer}");
    }
    // Redis comes back empty: the chat's history starts a new epoch.
    redis.kill();
    redis.restart();
    let mut gap = None;
    for _ in 0..10_000 {
        let frame = page.recv_json().await;
        if frame["method"] == "$/gap" {
            gap = Some(frame["params"].clone());
            break;
        }
    }
    let gap = gap.expect("a $/gap after Redis came back empty");
    assert_ne!(gap["epoch"], first_epoch, "{gap}");
    // A line of the new epoch (its first offsets), and the server's last lines.
    let mut sent = false;
    for attempt in 0..100 {
        let id = 100 + attempt;
        let call = json!({"jsonrpc": "2.0", "method": "chat.send",
            "params": {"name": "ana", "text": "new one"}, "id": id});
        if answer_to(&mut page, id, call).await["result"].is_object() {
            sent = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await; // bounded: Redis reconnecting
    }
    assert!(sent, "chat.send after Redis came back");
    let call = json!({"jsonrpc": "2.0", "method": "chat.recent", "id": 500});
    let recent = answer_to(&mut page, 500, call).await;
    let lines: Vec<(u64, String)> = recent["result"]["lines"]
        .as_array()
        .expect("lines")
        .iter()
        .map(|l| {
            (
                l["offset"].as_u64().unwrap_or(0),
                l["text"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    let increasing = lines.windows(2).all(|w| w[0].0 < w[1].0);
    assert!(
        increasing,
        "chat.recent names epoch {} (the old one was {first_epoch}) and gives offsets that \
         repeat or go back: {lines:?}",
        recent["result"]["epoch"]
    );
}

//! What an attacker tries from outside, over raw sockets: malformed handshakes get an
//! HTTP answer, connections that never finish a handshake cannot lock real clients
//! out, one deadline covers TLS and the WebSocket handshake, and a peer that floods
//! pings without reading the pongs costs bounded memory.

mod common;

use std::time::{Duration, Instant};

use common::{within, STEP};
use jsonrpc_peer::axum::Endpoint;
use jsonrpc_peer::{
    connect, Caller, Context, HandshakePolicy, Router, RpcError, Server, ServerHandle,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";

async fn server_with(policy: HandshakePolicy) -> (String, ServerHandle) {
    let server = Server::bind("127.0.0.1:0")
        .await
        .unwrap()
        .handshake_policy(policy);
    let addr = server.local_addr().unwrap().to_string();
    let handle = server.handle();
    tokio::spawn(server.serve(common::spec_methods::spec_router()));
    (addr, handle)
}

async fn axum_server() -> String {
    let app = axum::Router::new().route(
        "/",
        Endpoint::new(common::spec_methods::spec_router()).into_route(),
    );
    common::serve_axum(app).await.to_string()
}

/// An HTTP answer as a client sees it: the status and the headers (names lower case).
#[derive(Debug)]
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Reads one HTTP answer: its head, then the body its `Content-Length` announces.
async fn read_answer<IO: AsyncRead + Unpin>(io: &mut IO) -> Answer {
    let mut raw = Vec::new();
    let mut chunk = [0u8; 4096];
    let reading = async {
        loop {
            let text = String::from_utf8_lossy(&raw).into_owned();
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let length = head
                    .lines()
                    .filter_map(|l| l.split_once(':'))
                    .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
                    .and_then(|(_, v)| v.trim().parse::<usize>().ok())
                    .unwrap_or(0);
                if body.len() >= length {
                    return text;
                }
            }
            match io.read(&mut chunk).await {
                Ok(0) | Err(_) => return text,
                Ok(n) => raw.extend_from_slice(&chunk[..n]),
            }
        }
    };
    let text = within(reading).await;
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .strip_prefix("HTTP/1.1 ")
        .and_then(|s| s.get(..3))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP status line in {text:?}"));
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Answer {
        status,
        headers,
        body: body.to_owned(),
    }
}

/// Sends `request` on a fresh connection and reads the answer.
async fn ask_raw(addr: &str, request: &[u8]) -> Answer {
    let mut tcp = within(TcpStream::connect(addr)).await.unwrap();
    // The server may answer and close before a large request is all written.
    let _ = within(tcp.write_all(request)).await;
    read_answer(&mut tcp).await
}

fn upgrade(method: &str, version: &str, extra: &str) -> String {
    format!(
        "{method} / {version}\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n{extra}\r\n"
    )
}

/// A valid WebSocket upgrade request.
fn valid_upgrade() -> String {
    upgrade(
        "GET",
        "HTTP/1.1",
        &format!("Sec-WebSocket-Key: {KEY}\r\nSec-WebSocket-Version: 13\r\n"),
    )
}

/// Sends each of `herd` a valid upgrade request, then checks each is answered `101`.
async fn all_switched(herd: &mut [TcpStream]) {
    let request = valid_upgrade();
    for tcp in herd.iter_mut() {
        within(tcp.write_all(request.as_bytes())).await.unwrap();
    }
    for tcp in herd.iter_mut() {
        assert_eq!(read_answer(tcp).await.status, 101);
    }
}

/// A new client of `url` gets in and its call is answered.
async fn serves(url: &str) {
    let peer = within(connect(url, Router::new())).await.unwrap();
    let diff: i64 = within(peer.call("subtract", [42, 23])).await.unwrap();
    assert_eq!(diff, 19);
}

#[tokio::test]
async fn malformed_handshakes_get_an_http_answer() {
    let (server, _) = server_with(HandshakePolicy::default()).await;
    let axum = axum_server().await;
    let version_13 = format!("Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: {KEY}\r\n");
    let cases: Vec<(&str, String, u16)> = vec![
        (
            "plain GET",
            "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".into(),
            426,
        ),
        (
            "version 8",
            upgrade(
                "GET",
                "HTTP/1.1",
                &format!("Sec-WebSocket-Version: 8\r\nSec-WebSocket-Key: {KEY}\r\n"),
            ),
            426,
        ),
        (
            "no key",
            upgrade("GET", "HTTP/1.1", "Sec-WebSocket-Version: 13\r\n"),
            400,
        ),
        (
            "malformed key",
            upgrade(
                "GET",
                "HTTP/1.1",
                "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: not-a-key\r\n",
            ),
            400,
        ),
        (
            "no version",
            upgrade("GET", "HTTP/1.1", &format!("Sec-WebSocket-Key: {KEY}\r\n")),
            400,
        ),
        (
            "POST upgrade",
            upgrade("POST", "HTTP/1.1", &version_13),
            405,
        ),
    ];
    for (name, request, status) in &cases {
        for (side, addr) in [("Server", &server), ("axum", &axum)] {
            let answer = ask_raw(addr, request.as_bytes()).await;
            assert_eq!(answer.status, *status, "{side}: {name}: {answer:?}");
            match (*name, *status) {
                ("version 8", _) => {
                    assert_eq!(answer.header("sec-websocket-version"), Some("13"), "{side}")
                }
                (_, 426) => assert_eq!(answer.header("upgrade"), Some("websocket"), "{side}"),
                _ => {}
            }
        }
    }
    // Only `Server` reads the request itself; hyper answers these for the axum endpoint.
    let server_only: Vec<(&str, Vec<u8>, u16)> = vec![
        (
            "HTTP/1.0",
            upgrade("GET", "HTTP/1.0", &version_13).into(),
            400,
        ),
        (
            "not HTTP (a TLS ClientHello)",
            b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n".to_vec(),
            400,
        ),
        (
            "a 20 KiB header",
            upgrade(
                "GET",
                "HTTP/1.1",
                &format!("{version_13}X-Big: {}\r\n", "a".repeat(20 * 1024)),
            )
            .into(),
            431,
        ),
        (
            "100 headers",
            upgrade(
                "GET",
                "HTTP/1.1",
                &format!(
                    "{version_13}{}",
                    (0..100)
                        .map(|i| format!("X-{i}: 1\r\n"))
                        .collect::<String>()
                ),
            )
            .into(),
            431,
        ),
    ];
    for (name, request, status) in &server_only {
        let mut tcp = within(TcpStream::connect(&server)).await.unwrap();
        let _ = within(tcp.write_all(request)).await;
        let answer = read_answer(&mut tcp).await;
        assert!(
            closed_by_server(&mut tcp, STEP).await,
            "{name}: closed after the answer"
        );
        assert_eq!(answer.status, *status, "{name}: {answer:?}");
        assert_eq!(
            answer.header("content-length"),
            Some(answer.body.len().to_string().as_str()),
            "{name}: the body is whole"
        );
    }
    // The server still serves.
    serves(&format!("ws://{server}")).await;
}

#[tokio::test]
async fn a_handshake_sent_one_byte_at_a_time_still_succeeds() {
    let (server, _) = server_with(HandshakePolicy::default()).await;
    let mut tcp = within(TcpStream::connect(&server)).await.unwrap();
    let request = upgrade(
        "GET",
        "HTTP/1.1",
        &format!("Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: {KEY}\r\n"),
    );
    tcp.set_nodelay(true).unwrap();
    for byte in request.as_bytes() {
        within(tcp.write_all(&[*byte])).await.unwrap();
    }
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") && head.len() < 4096 {
        let mut byte = [0u8];
        within(tcp.read_exact(&mut byte)).await.unwrap();
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head);
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    assert!(
        head.contains("Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo="),
        "{head}"
    );
}

#[tokio::test]
async fn an_extension_request_is_not_granted() {
    // permessage-deflate is not spoken: the answer names no extension, so the client
    // may not compress (and a compressed frame is a protocol error).
    let (server, _) = server_with(HandshakePolicy::default()).await;
    let mut tcp = within(TcpStream::connect(&server)).await.unwrap();
    let request = upgrade(
        "GET",
        "HTTP/1.1",
        &format!(
            "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: {KEY}\r\n\
             Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n"
        ),
    );
    within(tcp.write_all(request.as_bytes())).await.unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") && head.len() < 4096 {
        let mut byte = [0u8];
        within(tcp.read_exact(&mut byte)).await.unwrap();
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 101"), "{head}");
    assert!(!head.contains("sec-websocket-extensions"), "{head}");
}

/// Opens `count` TCP connections that send nothing at all.
async fn idle_connections(addr: &str, count: usize) -> Vec<TcpStream> {
    let mut idle = Vec::with_capacity(count);
    for _ in 0..count {
        idle.push(within(TcpStream::connect(addr)).await.unwrap());
    }
    idle
}

/// Whether the server has closed `tcp` (end of stream or reset), waiting at most `wait`.
async fn closed_by_server(tcp: &mut TcpStream, wait: Duration) -> bool {
    let mut byte = [0u8; 1];
    matches!(
        tokio::time::timeout(wait, tcp.read(&mut byte)).await,
        Ok(Ok(0)) | Ok(Err(_))
    )
}

#[tokio::test]
async fn connections_that_never_handshake_do_not_lock_real_clients_out() {
    // Two connection slots, ten handshake places, and a long handshake timeout: 200
    // silent connections are far more than both. Each handshake place turns over
    // once its silent holder is 50 ms old.
    let policy = HandshakePolicy::default()
        .max_connections(2)
        .max_handshakes(10)
        .handshake_grace(Duration::from_millis(50))
        .handshake_timeout(Duration::from_secs(60));
    let (addr, handle) = server_with(policy).await;
    let mut idle = idle_connections(&addr, 200).await;

    // Real clients still get in, up to the connection limit, which the silent
    // connections do not count against.
    let url = format!("ws://{addr}");
    let first = within(connect(&url, Router::new())).await.unwrap();
    let second = within(connect(&url, Router::new())).await.unwrap();
    let diff: i64 = within(second.call("subtract", [42, 23])).await.unwrap();
    assert_eq!(diff, 19);
    assert_eq!(handle.connection_count(), 2);
    drop(first);

    // The oldest silent ones were dropped to make room: the first 190 at least.
    let mut dropped = 0;
    for tcp in idle.iter_mut().take(190) {
        if closed_by_server(tcp, STEP).await {
            dropped += 1;
        }
    }
    assert_eq!(dropped, 190, "the oldest silent connections are closed");
}

/// A herd of clients dialing a server that is not accepting yet (busy, or just
/// restarted) waits in the listen queue: with tokio's backlog of 128 the 130th SYN
/// would be dropped and its connect would hang. Once the server serves, every one of
/// them gets its `101`.
#[tokio::test]
async fn a_herd_of_dials_waits_in_the_listen_queue() {
    const HERD: usize = 400;
    let server = Server::bind("127.0.0.1:0").await.unwrap();
    let addr = server.local_addr().unwrap().to_string();
    let mut herd = Vec::with_capacity(HERD);
    for _ in 0..HERD {
        herd.push(within(TcpStream::connect(&addr)).await.unwrap());
    }
    tokio::spawn(server.serve(common::spec_methods::spec_router()));
    all_switched(&mut herd).await;
}

/// A herd far larger than `max_handshakes` waits in the server's line and is served
/// in turn, each place passed from a handshake that ends to the next in line: every
/// client gets its `101`, and its calls are answered.
#[tokio::test]
async fn a_herd_larger_than_the_handshake_bound_is_served_in_turn() {
    const HERD: usize = 200;
    let (addr, _) = server_with(HandshakePolicy::default().max_handshakes(4)).await;
    let mut herd = Vec::with_capacity(HERD);
    for _ in 0..HERD {
        herd.push(within(TcpStream::connect(&addr)).await.unwrap());
    }
    all_switched(&mut herd).await;
    // And a client that comes after the herd still gets in and is answered.
    serves(&format!("ws://{addr}")).await;
}

/// A server whose `serve` future is dropped closes the connections still waiting in
/// line for a handshake place; the handshake under way is not held up by it.
#[tokio::test]
async fn dropping_serve_closes_the_connections_waiting_in_line() {
    let server = Server::bind("127.0.0.1:0").await.unwrap().handshake_policy(
        HandshakePolicy::default()
            .max_handshakes(1)
            .handshake_grace(Duration::from_secs(60))
            .handshake_timeout(Duration::from_secs(60)),
    );
    let addr = server.local_addr().unwrap().to_string();
    let serving = tokio::spawn(server.serve(common::spec_methods::spec_router()));
    // The one place: a connection that sends nothing (yet).
    let mut first = within(TcpStream::connect(&addr)).await.unwrap();
    let request = valid_upgrade();
    // In line behind it, with its request sent.
    let mut waiting = within(TcpStream::connect(&addr)).await.unwrap();
    within(waiting.write_all(request.as_bytes())).await.unwrap();
    assert!(
        !closed_by_server(&mut waiting, Duration::from_millis(200)).await,
        "it waits for the place, open"
    );
    serving.abort();
    let _ = serving.await;
    assert!(
        closed_by_server(&mut waiting, Duration::from_secs(5)).await,
        "the connection in line is closed with the accept loop"
    );
    // The handshake under way goes on, and is answered.
    within(first.write_all(request.as_bytes())).await.unwrap();
    assert_eq!(read_answer(&mut first).await.status, 101);
}

/// The backlog is a setting: a server bound with a small one still serves.
#[tokio::test]
async fn a_server_bound_with_its_own_backlog_serves() {
    let server = Server::bind_with_backlog("127.0.0.1:0", 8).await.unwrap();
    let url = format!("ws://{}", server.local_addr().unwrap());
    tokio::spawn(server.serve(common::spec_methods::spec_router()));
    serves(&url).await;
}

#[tokio::test]
async fn a_stalled_handshake_is_closed_at_the_timeout() {
    let policy = HandshakePolicy::default().handshake_timeout(Duration::from_millis(500));
    let (addr, _) = server_with(policy).await;
    let mut tcp = within(TcpStream::connect(&addr)).await.unwrap();
    // Half a request, then nothing.
    within(tcp.write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n"))
        .await
        .unwrap();
    let started = Instant::now();
    assert!(closed_by_server(&mut tcp, STEP).await);
    let waited = started.elapsed();
    assert!(
        waited < Duration::from_secs(5),
        "closed after {waited:?}, the timeout is 500 ms"
    );
}

/// `Duration::MAX` as the handshake timeout and as the handshake grace means "as long
/// as it takes": the server waits, it does not panic. One place, held by a connection
/// that sends nothing and is never evicted; the next one waits in line with its request
/// sent, and gets its `101` once the silent one goes.
#[tokio::test]
async fn a_handshake_timeout_and_grace_of_duration_max_wait_instead_of_panicking() {
    let policy = HandshakePolicy::default()
        .max_handshakes(1)
        .handshake_grace(Duration::MAX)
        .handshake_timeout(Duration::MAX);
    let (addr, _) = server_with(policy).await;
    let silent = within(TcpStream::connect(&addr)).await.unwrap();
    let mut waiting = within(TcpStream::connect(&addr)).await.unwrap();
    within(waiting.write_all(valid_upgrade().as_bytes()))
        .await
        .unwrap();
    assert!(
        !closed_by_server(&mut waiting, Duration::from_millis(200)).await,
        "it waits for the place, open"
    );
    drop(silent);
    assert_eq!(read_answer(&mut waiting).await.status, 101);
    serves(&format!("ws://{addr}")).await;
}

#[tokio::test]
async fn a_half_closed_handshake_ends_quietly() {
    let (addr, handle) = server_with(HandshakePolicy::default()).await;
    let mut tcp = within(TcpStream::connect(&addr)).await.unwrap();
    within(tcp.write_all(b"GET / HTTP/1.1\r\nHost: 1"))
        .await
        .unwrap();
    within(tcp.shutdown()).await.unwrap();
    // Nobody to answer: the server closes without a word.
    let mut rest = Vec::new();
    within(tcp.read_to_end(&mut rest)).await.unwrap();
    assert!(rest.is_empty(), "{}", String::from_utf8_lossy(&rest));
    assert_eq!(handle.connection_count(), 0);
}

/// A router whose `big` method answers with `n` bytes of text.
fn big_router() -> Router {
    Router::new().method("big", |_cx: Context, (n,): (usize,)| async move {
        Ok::<_, RpcError>("x".repeat(n))
    })
}

#[tokio::test]
async fn answers_larger_than_the_write_buffer_arrive_whole() {
    let (url, _) = common::serve(big_router()).await;
    let peer = within(connect(&url, Router::new())).await.unwrap();
    for n in [10, 200 * 1024, 900 * 1024] {
        let text: String = within(peer.call("big", (n,))).await.unwrap();
        assert_eq!(text.len(), n);
    }
}

// `one_deadline_covers_tls_and_the_websocket_handshake` is in harness/tests/tls.rs,
// where the certificate generator (rcgen) is a dependency.

#[tokio::test]
async fn frames_sent_right_behind_the_handshake_are_read() {
    // A client that does not wait for the 101 before its first frame: the bytes past
    // the request head are the start of the WebSocket stream.
    let (addr, _) = server_with(HandshakePolicy::default()).await;
    let mut tcp = within(TcpStream::connect(&addr)).await.unwrap();
    let call = br#"{"jsonrpc":"2.0","method":"subtract","params":[42,23],"id":1}"#;
    let mut bytes = upgrade(
        "GET",
        "HTTP/1.1",
        &format!("Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: {KEY}\r\n"),
    )
    .into_bytes();
    bytes.extend_from_slice(&[0x81, 0x80 | call.len() as u8, 0, 0, 0, 0]);
    bytes.extend_from_slice(call);
    within(tcp.write_all(&bytes)).await.unwrap();
    let mut seen = Vec::new();
    let mut chunk = [0u8; 1024];
    let answer = br#""result":19"#;
    while !seen.windows(answer.len()).any(|w| w == answer) {
        let n = within(tcp.read(&mut chunk)).await.unwrap();
        assert!(n > 0, "closed: {}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&chunk[..n]);
    }
    assert!(seen.starts_with(b"HTTP/1.1 101"));
}

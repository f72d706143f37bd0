//! Frames that break RFC 6455, written byte by byte over a real socket (no WebSocket
//! library sends them): each must close the connection with the code RFC 6455 7.4.1
//! names, 1002 for a protocol error and 1007 for text that is not UTF-8, not with a
//! close frame without a code (which a client reports as 1005).

mod common;

use common::{serve, within};
use jsonrpc_peer::{Context, Router, RpcError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A client frame: `first` is the FIN/RSV/opcode byte; the payload is masked with a
/// zero key (a valid mask that leaves the bytes as they are).
fn masked(first: u8, payload: &[u8]) -> Vec<u8> {
    let mut frame = vec![first];
    match payload.len() {
        n @ 0..=125 => frame.push(0x80 | n as u8),
        n => {
            frame.push(0x80 | 126);
            frame.extend_from_slice(&(n as u16).to_be_bytes());
        }
    }
    frame.extend_from_slice(&[0, 0, 0, 0]);
    frame.extend_from_slice(payload);
    frame
}

/// Opens a WebSocket by hand and returns the socket after the 101 answer.
async fn handshake(url: &str) -> TcpStream {
    let addr = url.trim_start_matches("ws://");
    let mut socket = within(TcpStream::connect(addr)).await.unwrap();
    let request = format!(
        "GET / HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    within(socket.write_all(request.as_bytes())).await.unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert!(head.len() < 4096, "no end to the handshake answer");
        within(socket.read_exact(&mut byte)).await.unwrap();
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head);
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    socket
}

/// Reads server frames until a close frame; returns its code (`None` when it has no
/// payload), or fails if the connection ends without one.
async fn close_code(socket: &mut TcpStream) -> Option<u16> {
    for _ in 0..16 {
        let mut header = [0u8; 2];
        within(socket.read_exact(&mut header))
            .await
            .expect("a close frame before the end of the connection");
        let opcode = header[0] & 0x0f;
        let len = match header[1] & 0x7f {
            126 => {
                let mut n = [0u8; 2];
                within(socket.read_exact(&mut n)).await.unwrap();
                u16::from_be_bytes(n) as usize
            }
            127 => panic!("no server frame here is that long"),
            n => n as usize,
        };
        let mut payload = vec![0u8; len];
        within(socket.read_exact(&mut payload)).await.unwrap();
        if opcode == 0x8 {
            return (len >= 2).then(|| u16::from_be_bytes([payload[0], payload[1]]));
        }
    }
    panic!("16 frames and no close");
}

async fn server() -> String {
    let router = Router::new().method("echo", |_cx: Context, (n,): (u64,)| async move {
        Ok::<_, RpcError>(n)
    });
    serve(router).await.0
}

#[tokio::test]
async fn each_protocol_violation_closes_with_1002_and_bad_utf8_with_1007() {
    let url = server().await;
    let ping_126 = masked(0x89, &[b'p'; 126]);
    let cases: Vec<(&str, Vec<u8>, u16)> = vec![
        (
            "an unmasked client frame",
            vec![0x81, 0x02, b'h', b'i'],
            1002,
        ),
        ("a reserved data opcode", masked(0x83, b""), 1002),
        ("a reserved control opcode", masked(0x8b, b""), 1002),
        ("RSV1 without an extension", masked(0xc1, b"hi"), 1002),
        ("RSV2 without an extension", masked(0xa1, b"hi"), 1002),
        ("RSV3 without an extension", masked(0x91, b"hi"), 1002),
        ("a control frame over 125 bytes", ping_126, 1002),
        ("a fragmented ping", masked(0x09, b"p"), 1002),
        ("a continuation without a start", masked(0x80, b"x"), 1002),
        (
            "new data inside a fragmented message",
            [masked(0x01, b"{"), masked(0x81, b"}")].concat(),
            1002,
        ),
        ("a one-byte close payload", masked(0x88, &[0x03]), 1002),
        (
            "text that is not UTF-8",
            masked(0x81, &[0xff, 0xfe, 0xfd]),
            1007,
        ),
        (
            "a fragmented text that is not UTF-8",
            [masked(0x01, &[0xc3]), masked(0x80, &[0x28])].concat(),
            1007,
        ),
    ];
    for (what, bytes, expected) in cases {
        let mut socket = handshake(&url).await;
        within(socket.write_all(&bytes)).await.unwrap();
        assert_eq!(close_code(&mut socket).await, Some(expected), "{what}");
    }
    // The server still serves well-formed clients.
    let mut socket = handshake(&url).await;
    let call = br#"{"jsonrpc":"2.0","method":"echo","params":[5],"id":1}"#;
    within(socket.write_all(&masked(0x81, call))).await.unwrap();
    let mut header = [0u8; 2];
    within(socket.read_exact(&mut header)).await.unwrap();
    assert_eq!(header[0], 0x81, "a text frame answers the call");
}

//! The message size limit holds against one huge frame, many fragments adding up past
//! it, and a header announcing 2^63 bytes: the connection closes with 1009 and the
//! server's memory does not grow by the message's size.

mod common;

use std::time::{Duration, Instant};

use common::{rss, serve_with, within};
use jsonrpc_peer::PeerConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A WebSocket client at the frame level: it writes headers and payload itself, so it
/// never holds a big message in memory either.
async fn raw_socket(url: &str) -> TcpStream {
    common::raw_upgrade(url).await
}

/// A masked frame header (mask key 0, so the payload goes as is).
fn header(fin: bool, opcode: u8, len: u64) -> Vec<u8> {
    let mut h = vec![(u8::from(fin) << 7) | opcode];
    match len {
        0..=125 => h.push(0x80 | len as u8),
        126..=0xffff => {
            h.push(0x80 | 126);
            h.extend_from_slice(&(len as u16).to_be_bytes());
        }
        _ => {
            h.push(0x80 | 127);
            h.extend_from_slice(&len.to_be_bytes());
        }
    }
    h.extend_from_slice(&[0, 0, 0, 0]);
    h
}

/// Writes `total` payload bytes in chunks until the server stops taking them, then
/// reads what it answered: the close code, if a close frame came.
async fn stream_payload_then_close_code(tcp: &mut TcpStream, total: usize) -> Option<u16> {
    let chunk = vec![b' '; 64 * 1024];
    let mut sent = 0;
    while sent < total {
        let n = chunk.len().min(total - sent);
        // The server may close while we write: that is the point.
        if tcp.write_all(&chunk[..n]).await.is_err() {
            break;
        }
        sent += n;
    }
    let mut answer = Vec::new();
    let _ = within(tcp.read_to_end(&mut answer)).await;
    // A close frame from the server: 0x88, length, code (2 bytes), reason.
    let at = answer.windows(1).position(|w| w[0] == 0x88)?;
    let code = answer.get(at + 2..at + 4)?;
    Some(u16::from_be_bytes([code[0], code[1]]))
}

async fn server() -> String {
    // The default limit: 1 MiB.
    serve_with(common::spec_methods::spec_router(), PeerConfig::default())
        .await
        .0
}

#[tokio::test]
async fn one_ten_mib_frame_closes_with_1009_without_the_memory() {
    let url = server().await;
    let before = rss();
    let mut tcp = raw_socket(&url).await;
    let sent = Instant::now();
    tcp.write_all(&header(true, 0x1, 10 << 20)).await.unwrap();
    let code = stream_payload_then_close_code(&mut tcp, 10 << 20).await;
    assert_eq!(code, Some(1009));
    assert!(sent.elapsed() < Duration::from_secs(2));
    let grew = rss().saturating_sub(before);
    assert!(
        grew < 4 << 20,
        "the server grew by {} KiB for a refused 10 MiB frame",
        grew >> 10
    );
}

#[tokio::test]
async fn fragments_adding_up_past_the_limit_close_with_1009() {
    let url = server().await;
    let before = rss();
    let mut tcp = raw_socket(&url).await;
    // A text message in 64 KiB fragments, 40 of them (2.5 MiB): each alone is small.
    let fragment = 64 * 1024;
    let mut code = None;
    for i in 0..40 {
        let opcode = if i == 0 { 0x1 } else { 0x0 };
        let mut frame = header(false, opcode, fragment as u64);
        frame.extend(std::iter::repeat_n(b' ', fragment));
        if tcp.write_all(&frame).await.is_err() {
            break;
        }
        // Past the limit, the server answers with a close frame and hangs up.
        if i == 39 {
            code = stream_payload_then_close_code(&mut tcp, 0).await;
        }
    }
    if code.is_none() {
        code = stream_payload_then_close_code(&mut tcp, 0).await;
    }
    assert_eq!(code, Some(1009));
    let grew = rss().saturating_sub(before);
    assert!(grew < 4 << 20, "the server grew by {} KiB", grew >> 10);
}

#[tokio::test]
async fn a_header_announcing_2_pow_63_bytes_closes_at_once() {
    let url = server().await;
    let mut tcp = raw_socket(&url).await;
    let sent = Instant::now();
    tcp.write_all(&header(true, 0x1, (1u64 << 63) - 1))
        .await
        .unwrap();
    let code = stream_payload_then_close_code(&mut tcp, 0).await;
    assert_eq!(code, Some(1009));
    // At once, not once a payload that never comes has arrived; the bound leaves room
    // for a busy machine.
    assert!(
        sent.elapsed() < Duration::from_secs(1),
        "closed after {:?}",
        sent.elapsed()
    );
}

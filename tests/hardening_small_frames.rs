//! A peer that sends many small frames that each need an answer (here: text that is
//! not JSON, answered with -32700) and never reads: the server stops reading once its
//! outgoing bound is reached, so its memory stays bounded. Alone in its file: it
//! measures the resident memory of the process.

mod common;

use std::time::Duration;

use common::within;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";

#[tokio::test]
async fn many_small_frames_from_a_peer_that_never_reads_cost_bounded_memory() {
    let (url, _) = common::serve(common::spec_methods::spec_router()).await;
    let addr = url.trim_start_matches("ws://").to_owned();
    let mut tcp = within(TcpStream::connect(&addr)).await.unwrap();
    let request = format!(
        "GET / HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: {KEY}\r\n\r\n"
    );
    within(tcp.write_all(request.as_bytes())).await.unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") && head.len() < 4096 {
        let mut byte = [0u8];
        within(tcp.read_exact(&mut byte)).await.unwrap();
        head.push(byte[0]);
    }
    assert!(head.starts_with(b"HTTP/1.1 101"));

    // One-byte text frames ("x", not JSON): 7 bytes each on the wire, each answered
    // with a 70-byte error. 1,000,000 of them would be 70 MB of answers.
    let frame = [0x81u8, 0x81, 0, 0, 0, 0, b'x'];
    let batch: Vec<u8> = frame
        .iter()
        .copied()
        .cycle()
        .take(frame.len() * 10_000)
        .collect();
    let before = common::rss();
    let flood = async {
        for _ in 0..100 {
            if tcp.write_all(&batch).await.is_err() {
                return;
            }
        }
    };
    // Once the server stops reading, the writes block: that is the bound working.
    let stopped_reading = tokio::time::timeout(Duration::from_secs(10), flood)
        .await
        .is_err();
    let grown = common::rss().saturating_sub(before);
    assert!(
        grown < 32 << 20,
        "the server grew by {} MiB (stopped reading: {stopped_reading})",
        grown >> 20
    );
}

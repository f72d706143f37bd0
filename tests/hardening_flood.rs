//! A peer that floods pings and never reads the pongs costs the server bounded
//! memory (tungstenite's write buffer is capped), and keeps its connection. Alone in
//! its file: it measures the resident memory of the process.

mod common;

use std::time::Duration;

use common::within;
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};

async fn write_to<IO: AsyncWrite + Unpin>(io: &mut IO, bytes: &[u8]) -> bool {
    io.write_all(bytes).await.is_ok()
}

/// A masked ping frame with a 125-byte payload (mask key 0: the payload goes as is).
fn ping(tag: u8) -> Vec<u8> {
    let mut frame = vec![0x89, 0x80 | 125, 0, 0, 0, 0];
    frame.extend(std::iter::repeat_n(tag, 125));
    frame
}

#[tokio::test]
async fn a_ping_flood_from_a_peer_that_never_reads_costs_bounded_memory() {
    let (url, _) = common::serve(common::spec_methods::spec_router()).await;
    let mut tcp = common::raw_upgrade(&url).await;

    // 400,000 pings (52 MB) in batches, never reading: unbounded, the server would
    // hold a pong (127 bytes) for each one it could not send, some 50 MB.
    let before = common::rss();
    let batch: Vec<u8> = (0..1000).flat_map(|_| ping(b'a')).collect();
    let flood = async {
        for _ in 0..400 {
            if !write_to(&mut tcp, &batch).await {
                return false;
            }
        }
        // The last ping is different: the one pong the server keeps answers it.
        write_to(&mut tcp, &ping(b'z')).await
    };
    let still_open = tokio::time::timeout(Duration::from_secs(60), flood)
        .await
        .expect("the flood took over 60 s");
    let grown = common::rss().saturating_sub(before);
    assert!(
        grown < 16 << 20,
        "the server grew by {} MiB during the flood",
        grown >> 20
    );
    assert!(still_open, "pings alone are no reason to close");

    // The client now reads: pongs arrive, and the last one answers the last ping.
    within(tcp.write_all(&ping_text_call())).await.unwrap();
    let mut seen_last_pong = false;
    let mut answered = false;
    let reading = async {
        let mut buf = vec![0u8; 1 << 16];
        let mut pending: Vec<u8> = Vec::new();
        for _ in 0..100_000 {
            let n = tcp.read(&mut buf).await.unwrap_or(0);
            if n == 0 {
                break;
            }
            pending.extend_from_slice(&buf[..n]);
            // Frames from the server are unmasked; pongs are 0x8A, text 0x81.
            while pending.len() >= 2 {
                let len = (pending[1] & 0x7f) as usize;
                let (start, len) = match len {
                    126 if pending.len() >= 4 => {
                        (4, u16::from_be_bytes([pending[2], pending[3]]) as usize)
                    }
                    126 => break,
                    127 => panic!("no frame here is that large"),
                    n => (2, n),
                };
                if pending.len() < start + len {
                    break;
                }
                let payload = &pending[start..start + len];
                match pending[0] {
                    0x8a if payload.first() == Some(&b'z') => seen_last_pong = true,
                    0x81 => answered = String::from_utf8_lossy(payload).contains(r#""result":19"#),
                    _ => {}
                }
                pending.drain(..start + len);
            }
            if seen_last_pong && answered {
                break;
            }
        }
    };
    within(reading).await;
    assert!(seen_last_pong, "the last ping was answered");
    assert!(answered, "the connection still serves calls");
}

/// `{"jsonrpc":"2.0","method":"subtract","params":[42,23],"id":1}` as a masked frame.
fn ping_text_call() -> Vec<u8> {
    let text = br#"{"jsonrpc":"2.0","method":"subtract","params":[42,23],"id":1}"#;
    let mut frame = vec![0x81, 0x80 | text.len() as u8, 0, 0, 0, 0];
    frame.extend_from_slice(text);
    frame
}

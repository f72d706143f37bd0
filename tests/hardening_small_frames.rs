//! A peer that sends many small frames that each need an answer (here: text that is
//! not JSON, answered with -32700) and never reads: the server stops reading once its
//! outgoing bound is reached, so its memory stays bounded. Alone in its file: it
//! measures the resident memory of the process.

mod common;

use std::time::Duration;

use common::RawClient;
use tokio::io::AsyncWriteExt;
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

#[tokio::test]
async fn many_small_frames_from_a_peer_that_never_reads_cost_bounded_memory() {
    let (url, _handle) = common::serve(common::spec_methods::spec_router()).await;
    let mut tcp = common::raw_upgrade(&url).await;

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
    let mut written = 0usize;
    let flood = async {
        for _ in 0..100 {
            tcp.write_all(&batch).await?;
            written += 1;
        }
        Ok::<_, std::io::Error>(())
    };
    // Once the server stops reading, the writes block: that is the bound working. A
    // server that hangs up ends the flood with an error, one that reads on ends it.
    let flood = tokio::time::timeout(Duration::from_secs(10), flood).await;
    assert!(
        flood.is_err(),
        "the server did not stop reading: the flood ended with {flood:?} after {written} of 100 batches"
    );
    let grown = common::rss().saturating_sub(before);
    assert!(grown < 32 << 20, "the server grew by {} MiB", grown >> 20);

    // It stopped reading because its answers wait for room, not because it stalled or
    // gave up: the connection is open, and what it holds is -32700 for each frame.
    let ws = WebSocketStream::from_raw_socket(MaybeTlsStream::Plain(tcp), Role::Client, None).await;
    let mut client = RawClient { ws };
    for n in 0..1000 {
        let answer = client.recv_json().await;
        assert_eq!(
            answer,
            common::json(
                r#"{"jsonrpc":"2.0","error":{"code":-32700,"message":"Parse error"},"id":null}"#
            ),
            "answer {n}"
        );
    }
}

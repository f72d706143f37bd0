//! A peer that sends many small frames that each need an answer (here: text that is
//! not JSON, answered with -32700) and never reads: the server stops reading once its
//! outgoing bound is reached, so its memory stays bounded. Alone in its file: it
//! measures the resident memory of the process.

mod common;

use std::time::Duration;

use tokio::io::AsyncWriteExt;

#[tokio::test]
async fn many_small_frames_from_a_peer_that_never_reads_cost_bounded_memory() {
    let (url, _) = common::serve(common::spec_methods::spec_router()).await;
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

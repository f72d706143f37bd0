//! What every bus with topic history must do, checked the same way on Redis (the
//! script) and on `MemoryHub`: offsets from 1, exact trimming by count, bytes and age,
//! the message published with its position, a new epoch when the history is lost.

use std::time::Duration;

use jsonrpc_peer::cluster::{Append, Backplane, BusEvent, TopicKeys};
use jsonrpc_peer::HistoryConfig;
use tokio::sync::mpsc;

use super::within;

fn offsets(read: &jsonrpc_peer::cluster::HistoryRead) -> Vec<u64> {
    read.entries.iter().map(|e| e.offset).collect()
}

/// The next message; a subscription taking effect on the way is passed over.
async fn next_message(events: &mut mpsc::Receiver<BusEvent>) -> (String, Vec<u8>) {
    loop {
        match within(events.recv()).await {
            Some(BusEvent::Message { channel, payload }) => return (channel, payload.to_vec()),
            Some(BusEvent::Subscribed { .. }) => {}
            other => panic!("expected a message, got {other:?}"),
        }
    }
}

/// `a` appends and reads; `b` listens (its events are `b_events`); `lose_history`
/// makes the bus lose every history (Redis restarted empty).
pub async fn history_semantics(
    a: &dyn Backplane,
    b: &dyn Backplane,
    b_events: &mut mpsc::Receiver<BusEvent>,
    lose_history: impl Fn(),
) {
    let keys = TopicKeys::new("jp", "prices");
    let three = HistoryConfig::default().max_len(3);
    within(b.subscribe(&keys.channel)).await.expect("subscribe");
    let head = br#"{"v":1,"k":"x","o":"a","i":"i1","s":0,"#;
    let mut epoch = String::new();
    for n in 1..=5u64 {
        let data = format!("[{n}]");
        let append = Append::new(&keys, &three, "e-one", head, data.as_bytes());
        let at = within(a.append(append)).await.expect("append");
        assert_eq!(at.offset, n, "offsets count from 1, one apart");
        if n == 1 {
            epoch = at.epoch.clone();
            assert_eq!(epoch, "e-one", "the first append starts the epoch given");
        }
        assert_eq!(at.epoch, epoch, "one epoch while the history lasts");
        let (channel, payload) = next_message(b_events).await;
        assert_eq!(channel, keys.channel);
        let want = format!(
            "{{\"v\":1,\"k\":\"x\",\"o\":\"a\",\"i\":\"i1\",\"s\":0,\"ep\":\"{epoch}\",\"off\":{n}}}\n[{n}]"
        );
        assert_eq!(String::from_utf8_lossy(&payload), want);
    }
    // Count: the last three are kept; reads continue only from first - 1 on.
    let read = within(a.read_history(&keys, &three, 2, 100))
        .await
        .expect("read");
    assert_eq!(
        (read.epoch.as_str(), read.first, read.last),
        ("e-one", 3, 5)
    );
    assert_eq!(offsets(&read), [3, 4, 5]);
    assert_eq!(read.entries[0].data.as_ref(), b"[3]");
    assert!(read.entries[0].age < Duration::from_secs(60));
    let read = within(a.read_history(&keys, &three, 3, 1)).await.unwrap();
    assert_eq!(offsets(&read), [4], "at most max");
    let read = within(a.read_history(&keys, &three, 1, 100)).await.unwrap();
    assert_eq!(
        offsets(&read),
        Vec::<u64>::new(),
        "2 is gone: nothing after 1"
    );
    assert_eq!(read.first, 3);
    let read = within(a.read_history(&keys, &three, 5, 100)).await.unwrap();
    assert_eq!((offsets(&read), read.last), (vec![], 5));

    // Bytes: 10 each, at most 25 kept.
    let keys = TopicKeys::new("jp", "bytes");
    let small = HistoryConfig::default().max_bytes(25);
    for _ in 0..4 {
        let append = Append::new(&keys, &small, "e-two", head, b"0123456789");
        within(a.append(append)).await.expect("append");
    }
    let read = within(a.read_history(&keys, &small, 0, 100)).await.unwrap();
    assert_eq!((read.first, read.last), (3, 4));

    // Age: kept for max_age, then trimmed (on the bus's clock).
    let keys = TopicKeys::new("jp", "age");
    let short = HistoryConfig::default().max_age(Duration::from_millis(200));
    let append = Append::new(&keys, &short, "e-three", head, b"1");
    within(a.append(append)).await.expect("append");
    let read = within(a.history_position(&keys, &short, "unused"))
        .await
        .unwrap();
    assert_eq!((read.first, read.last), (1, 1));
    let started = tokio::time::Instant::now();
    loop {
        let read = within(a.history_position(&keys, &short, "unused"))
            .await
            .unwrap();
        if read.first == 2 {
            assert_eq!((read.epoch.as_str(), read.last), ("e-three", 1));
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "never trimmed by age"
        );
        // The bound is time on the bus's clock: only time passing can show it.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Made at once (a bus may record them together, as one entry): each its own offset,
    // the bounds exact per publication, a read from inside what was recorded together.
    let keys = TopicKeys::new("jp", "burst");
    let seven = HistoryConfig::default().max_len(7);
    let data: Vec<String> = (1..=20).map(|n| format!("[{n}]")).collect();
    let appends = data
        .iter()
        .map(|d| a.append(Append::new(&keys, &seven, "e-six", head, d.as_bytes())));
    let mut by_offset = std::collections::BTreeMap::new();
    for (d, at) in data
        .iter()
        .zip(within(futures_util::future::join_all(appends)).await)
    {
        by_offset.insert(at.expect("append").offset, d.clone());
    }
    assert_eq!(
        by_offset.keys().copied().collect::<Vec<_>>(),
        (1..=20).collect::<Vec<_>>()
    );
    let read = within(a.read_history(&keys, &seven, 0, 100)).await.unwrap();
    assert_eq!((read.first, read.last), (14, 20));
    let read = within(a.read_history(&keys, &seven, 15, 2)).await.unwrap();
    let got: Vec<(u64, String)> = read
        .entries
        .iter()
        .map(|e| (e.offset, String::from_utf8_lossy(&e.data).into_owned()))
        .collect();
    assert_eq!(
        got,
        [(16, by_offset[&16].clone()), (17, by_offset[&17].clone())]
    );
    let keys = TopicKeys::new("jp", "burst-bytes");
    let appends =
        (0..20).map(|_| a.append(Append::new(&keys, &small, "e-seven", head, b"0123456789")));
    for at in within(futures_util::future::join_all(appends)).await {
        at.expect("append");
    }
    let read = within(a.read_history(&keys, &small, 18, 100))
        .await
        .unwrap();
    assert_eq!(
        (read.first, read.last, offsets(&read)),
        (19, 20, vec![19, 20])
    );

    // A topic never published on: a position starts its epoch, at offset 0.
    let keys = TopicKeys::new("jp", "{room}:new");
    let position = within(a.history_position(&keys, &three, "e-four"))
        .await
        .unwrap();
    assert_eq!(
        (position.epoch.as_str(), position.first, position.last),
        ("e-four", 1, 0)
    );
    let read = within(a.read_history(&TopicKeys::new("jp", "none"), &three, 0, 10))
        .await
        .unwrap();
    assert_eq!(read.epoch, "", "a read never starts an epoch");

    // The history is lost (Redis came back empty): a new epoch, from offset 1.
    lose_history();
    let keys = TopicKeys::new("jp", "prices");
    let append = Append::new(&keys, &three, "e-five", head, b"[6]");
    let at = within(a.append(append))
        .await
        .expect("append after the loss");
    assert_eq!((at.epoch.as_str(), at.offset), ("e-five", 1));
    let read = within(a.read_history(&keys, &three, 0, 100)).await.unwrap();
    assert_eq!((read.first, read.last, offsets(&read)), (1, 1, vec![1]));
}

//! Faults of one Redis under a `RedisBackplane` that its docs promise to survive: each
//! test starts its own `redis-server` (tests/common/redis_server.rs) and, where it needs
//! to change Redis's settings while Redis refuses new clients, keeps one connection of
//! its own open from the start (`Admin`).

mod common;
#[path = "common/redis_bus.rs"]
mod redis_bus;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use bytes::Bytes;
use common::redis_server::RedisServer;
use common::within;
use jsonrpc_peer::cluster::{Append, Backplane, BackplaneError, BusEvent, TopicKeys};
use jsonrpc_peer::HistoryConfig;
use redis_bus::backplane;
use tokio::sync::mpsc;

/// The next message event, passing over subscriptions taking effect; `None` for any
/// other event (Down, Up).
async fn next_message(events: &mut mpsc::Receiver<BusEvent>) -> Result<(String, Bytes), BusEvent> {
    loop {
        match within(events.recv()).await {
            Some(BusEvent::Message { channel, payload }) => return Ok((channel, payload)),
            Some(BusEvent::Subscribed { .. }) => {}
            Some(other) => return Err(other),
            None => panic!("the event stream ended"),
        }
    }
}

/// One connection of the test's own to Redis, opened before any fault, speaking RESP
/// by hand (blocking: the commands are quick, and the backplane's tasks run on other
/// threads).
struct Admin {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

impl Admin {
    fn open(redis: &RedisServer) -> Admin {
        let stream = UnixStream::connect(redis.socket()).expect("dial redis");
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        Admin {
            reader: BufReader::new(stream.try_clone().expect("clone")),
            writer: stream,
        }
    }

    /// Runs one command; its reply flattened to text (arrays joined by newlines).
    fn cmd(&mut self, args: &[&str]) -> String {
        let mut out = format!("*{}\r\n", args.len());
        for a in args {
            out.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        self.writer.write_all(out.as_bytes()).expect("write");
        self.reply()
    }

    fn line(&mut self) -> String {
        let mut line = String::new();
        self.reader.read_line(&mut line).expect("read a reply");
        line.trim_end().to_owned()
    }

    fn reply(&mut self) -> String {
        let line = self.line();
        let (kind, rest) = line.split_at(1);
        match kind {
            "+" | "-" | ":" => line.clone(),
            "$" => {
                let len: i64 = rest.parse().expect("a length");
                if len < 0 {
                    return String::new();
                }
                let mut buf = vec![0u8; len as usize + 2];
                std::io::Read::read_exact(&mut self.reader, &mut buf).expect("bulk");
                String::from_utf8_lossy(&buf[..len as usize]).into_owned()
            }
            "*" => {
                let n: i64 = rest.parse().expect("a count");
                (0..n.max(0))
                    .map(|_| self.reply())
                    .collect::<Vec<_>>()
                    .join("\n")
            }
            other => panic!("unexpected reply {other}{rest}"),
        }
    }

    /// A number from `INFO <section>`.
    fn info(&mut self, section: &str, field: &str) -> u64 {
        let info = self.cmd(&["INFO", section]);
        info.lines()
            .find_map(|l| l.strip_prefix(&format!("{field}:")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("{field} in INFO {section}: {info}"))
    }
}

/// The publishing connection is lost and its manager's own redial (in the background,
/// one retry) fails: here because Redis turns new clients away for a moment
/// (`maxclients` reached), as it fails when Redis is down for more than a second or
/// two and comes back. The subscriber link stays up the whole time: the bus never says
/// Down. Once Redis takes clients again, the next `publish` goes through (the writer
/// sends a batch once more when the connection was found dead), but the next history
/// `append` fails with the manager's stale "Reconnecting failed" although the command
/// was never sent and Redis is there: a `Topics::publish` on a topic with history
/// fails while the cluster is Up. (`read_history` and `history_position` share the
/// path: the first resume or follow after it fails too.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_append_after_the_publishing_connection_redialed_in_vain_goes_through() {
    let redis = RedisServer::start();
    let mut admin = Admin::open(&redis);
    let (a, _a_events) = backplane(&redis).await;
    let (b, mut b_events) = backplane(&redis).await;
    within(b.subscribe("jp:t:x")).await.expect("subscribe");
    within(a.publish("jp:t:x", Bytes::from_static(b"before")))
        .await
        .expect("published");
    assert_eq!(
        next_message(&mut b_events).await.expect("a message").1,
        Bytes::from_static(b"before")
    );

    // The fault: Redis takes no new client, and the publishing connections (type
    // normal; the subscriber links are type pubsub, and this one is skipped) are lost.
    let rejected = admin.info("stats", "rejected_connections");
    assert_eq!(admin.cmd(&["CONFIG", "SET", "maxclients", "1"]), "+OK");
    let killed = admin.cmd(&["CLIENT", "KILL", "TYPE", "normal"]);
    assert!(killed.starts_with(':'), "{killed}");
    // Each manager dials again, with one retry: wait until Redis has turned away both
    // attempts of both backplanes (an event Redis counts, not a timer).
    let mut turned_away = 0;
    for _ in 0..200 {
        turned_away = admin.info("stats", "rejected_connections") - rejected;
        if turned_away >= 4 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        turned_away >= 4,
        "only {turned_away} dials turned away in 10 s"
    );
    // The fault ends: Redis takes clients again.
    assert_eq!(admin.cmd(&["CONFIG", "SET", "maxclients", "10000"]), "+OK");
    assert!(
        a.is_up() && b.is_up(),
        "the subscriber links never went down"
    );

    // And a topic with history records again.
    let keys = TopicKeys::new("jp", "x");
    let bounds = HistoryConfig::default();
    let head = br#"{"v":1,"k":"x","o":"a","i":"i","s":0,"#;
    let appended = within(a.append(Append::new(&keys, &bounds, "e", head, b"[1]"))).await;
    // What a publish does at the same point, for comparison: it goes through.
    let published = within(a.publish("jp:t:x", Bytes::from_static(b"after"))).await;
    assert!(published.is_ok(), "{published:?}");
    assert!(
        appended.is_ok(),
        "Redis takes clients again and the bus is up, yet the append failed: {appended:?}"
    );
}

/// Redis refuses one subscribe (an ACL that does not allow the channel). The
/// subscribe fails, as it should; but the rest of the link must not be lost with it:
/// the channel stays in the set the link issues again on every redial, so every
/// redial fails too, and the bus stays Down for good (every publish refused, every
/// other channel deaf) though Redis is up and serves every other channel.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscribe_redis_refuses_does_not_take_the_whole_link_down_for_good() {
    let redis = RedisServer::start();
    let (a, _a_events) = backplane(&redis).await;
    let (b, mut b_events) = backplane(&redis).await;
    within(b.subscribe("jp:t:x")).await.expect("subscribe");
    // Only the cluster's own channels are allowed (the probe's `jp:probe:*` too).
    assert_eq!(
        redis.cli(&["ACL", "SETUSER", "default", "resetchannels", "&jp:*"]),
        "OK"
    );
    let refused = within(b.subscribe("other:y")).await;
    assert!(
        matches!(refused, Err(BackplaneError::Refused(_))),
        "an ACL-refused subscribe: {refused:?}"
    );
    // The link may drop and come back; within a test step it must be up, with jp:t:x
    // heard again.
    let mut events = Vec::new();
    let back = tokio::time::timeout(common::STEP, async {
        for i in 0..100 {
            if b.is_up() {
                within(a.publish("jp:t:x", Bytes::from(format!("m{i}"))))
                    .await
                    .expect("published while up");
            }
            match b_events.recv().await {
                Some(BusEvent::Message { channel, .. }) if channel == "jp:t:x" => return true,
                Some(BusEvent::Subscribed { .. }) => {}
                Some(event) => events.push(event),
                None => return false,
            }
        }
        false
    })
    .await;
    assert!(
        matches!(back, Ok(true)) && b.is_up(),
        "the link never came back after one refused subscribe: events {events:?}, \
         up {}, reconnects {}",
        b.is_up(),
        b.reconnects()
    );
}

/// Redis refuses one `PUBLISH` of a pipeline for good (an ACL that does not allow its
/// channel): that call fails with `Refused`, naming the channel, so that the outbox
/// gives it up instead of sending the same batch again for ever with everything behind
/// it held; the messages Redis took still went out (a pipeline is not a transaction),
/// and the publishes after it are not held to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_redis_refuses_for_good_fails_as_refused_and_holds_nothing_up() {
    let redis = RedisServer::start();
    let (a, _a_events) = backplane(&redis).await;
    let (b, mut b_events) = backplane(&redis).await;
    within(b.subscribe("jp:t:ok")).await.expect("subscribe");
    assert_eq!(
        redis.cli(&["ACL", "SETUSER", "default", "resetchannels", "&jp:*"]),
        "OK"
    );
    let result = within(a.publish_many(vec![
        ("other:refused".to_owned(), Bytes::from_static(b"first")),
        ("jp:t:ok".to_owned(), Bytes::from_static(b"second")),
    ]))
    .await;
    match &result {
        Err(BackplaneError::Refused(why)) => assert!(why.contains("other:refused"), "{why}"),
        other => panic!("not refused: {other:?}"),
    }
    within(a.publish("jp:t:ok", Bytes::from_static(b"marker")))
        .await
        .expect("published after it");
    let mut got = Vec::new();
    for _ in 0..3 {
        let (_, payload) = next_message(&mut b_events).await.expect("a message");
        got.push(String::from_utf8_lossy(&payload).into_owned());
        if payload.as_ref() == b"marker" {
            break;
        }
    }
    assert_eq!(got, ["second", "marker"]);
}

/// As above, but the manager's redial is refused with an error that is not an I/O
/// error (Redis asks for a password for a moment: `requirepass` set, then cleared).
/// The manager keeps that failed redial as its connection and never dials again
/// (it redials only after I/O errors), and the writer does not send a batch again
/// after it (not "unrecoverable"): every publish fails from then on, though Redis
/// serves everything and the subscriber link says the bus is up. A node in that state
/// sends no heartbeat: the others take it for dead while it goes on hearing them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_publishing_connection_comes_back_after_a_redial_redis_refused_with_an_error() {
    let redis = RedisServer::start();
    let mut admin = Admin::open(&redis);
    let (a, _a_events) = backplane(&redis).await;
    let (b, mut b_events) = backplane(&redis).await;
    within(b.subscribe("jp:t:x")).await.expect("subscribe");

    let dialed = admin.info("stats", "total_connections_received");
    assert_eq!(admin.cmd(&["CONFIG", "SET", "requirepass", "pw"]), "+OK");
    let killed = admin.cmd(&["CLIENT", "KILL", "TYPE", "normal"]);
    assert!(killed.starts_with(':'), "{killed}");
    // Both dials of each manager were refused once Redis has seen four new clients and
    // holds none of them any more (the admin link and two subscriber links remain).
    let mut settled = false;
    for _ in 0..200 {
        let new = admin.info("stats", "total_connections_received") - dialed;
        let clients = admin.info("clients", "connected_clients");
        if new >= 4 && clients == 3 {
            settled = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        settled,
        "the managers' redials were not all refused in 10 s"
    );
    assert_eq!(admin.cmd(&["CONFIG", "SET", "requirepass", ""]), "+OK");
    assert!(a.is_up(), "the subscriber link never went down");

    // Three tries, each awaited: the later ones after any redial an earlier one started.
    let dialed = admin.info("stats", "total_connections_received");
    let mut errors = Vec::new();
    for i in 0..3 {
        match within(a.publish("jp:t:x", Bytes::from(format!("after {i}")))).await {
            Ok(()) => break,
            Err(e) => errors.push(e.to_string()),
        }
    }
    let redials = admin.info("stats", "total_connections_received") - dialed;
    assert!(
        errors.len() < 3,
        "Redis serves clients again and the bus is up, yet every publish fails, \
         and the backplane dialed Redis {redials} times meanwhile: {errors:?}"
    );
    let (_, payload) = next_message(&mut b_events).await.expect("a message");
    assert!(payload.starts_with(b"after"), "{payload:?}");
}

/// A topic's history meta is a key of another type (left by another application, or a
/// key-naming clash). The script treats a meta it does not know (one of the older
/// layout, without `f`) as a history lost: a new epoch starts and the topic goes on.
/// A key of the wrong type instead fails every append, read and position of the
/// topic, for as long as the key lives: every publish on it is refused
/// (`Unavailable`), and every node's look at it is tried again every second, forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_history_key_of_the_wrong_type_does_not_stop_the_topic_for_good() {
    let redis = RedisServer::start();
    let (a, _a_events) = backplane(&redis).await;
    let keys = TopicKeys::new("jp", "clash");
    let bounds = HistoryConfig::default();
    assert_eq!(redis.cli(&["SET", &keys.meta, "not a hash"]), "OK");
    let head = br#"{"v":1,"k":"x","o":"a","i":"i","s":0,"#;
    let appended = within(a.append(Append::new(&keys, &bounds, "e-new", head, b"[1]"))).await;
    let position = within(a.history_position(&keys, &bounds, "e-new")).await;
    assert!(
        appended.is_ok() && position.is_ok(),
        "a wrong-typed meta stops the topic: append {appended:?}, position {position:?}"
    );
}

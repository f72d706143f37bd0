//! The engine over the in-memory transport, under paused time: back-pressure in both
//! directions, graceful close, keepalive, and every way a call leaves the pending map.
//!
//! One side is a `Peer`; the other is the raw end of the pair, driven by the test. The
//! raw end's queue toward the peer is what the peer reads, and the peer's sink is full
//! whenever the test stops reading the raw end. Time is paused: timers fire exactly on
//! their deadlines, and a test that waits on something that never comes fails at once
//! (the clock jumps to its timeout) instead of hanging.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::within;

/// How long the test waits on the raw end. Time is paused, so a long wait costs
/// nothing, and a wait that never ends fails at once.
const WAIT: Duration = Duration::from_secs(600);
use futures_util::{SinkExt, StreamExt};
use jsonrpc_peer::transport::{pair_with_capacity, Frame, Memory};
use jsonrpc_peer::{Caller, CloseReason, Context, Error, Peer, PeerConfig, Router, RpcError};
use serde_json::{json, Value};
use tokio::sync::{mpsc, Notify, Semaphore};
use tokio::time::Instant;

/// The end of the pair the test drives.
struct Raw {
    end: Memory,
}

impl Raw {
    async fn send(&mut self, text: String) {
        tokio::time::timeout(WAIT, self.end.send(Frame::Text(text.into())))
            .await
            .expect("the peer reads")
            .expect("the in-memory link is open");
    }

    /// Sends a frame unless the peer has stopped reading for `wait`.
    async fn try_send(&mut self, text: String, wait: Duration) -> bool {
        tokio::time::timeout(wait, self.end.send(Frame::Text(text.into())))
            .await
            .is_ok()
    }

    /// The next frame, whatever it is; `None` once the peer's side is closed.
    async fn next(&mut self) -> Option<Frame> {
        tokio::time::timeout(WAIT, self.end.next())
            .await
            .expect("the peer writes")
            .map(|f| f.expect("the in-memory link does not fail"))
    }

    /// The next text frame, parsed; pings and pongs are skipped (reading a ping answers
    /// it, as a WebSocket client does).
    async fn recv(&mut self) -> Value {
        loop {
            match self.next().await {
                Some(Frame::Text(t)) => {
                    return serde_json::from_str(&t).expect("the peer writes JSON")
                }
                Some(Frame::Ping(_) | Frame::Pong(_)) => continue,
                other => panic!("expected a text frame, got {other:?}"),
            }
        }
    }

    /// The close frame the peer sent, as the next frame: pings and pongs are skipped,
    /// any other frame before the close fails the test.
    async fn close_frame(&mut self) -> Option<(u16, String)> {
        loop {
            match self.next().await {
                Some(Frame::Close(frame)) => return frame,
                Some(Frame::Ping(_) | Frame::Pong(_)) => continue,
                Some(other) => panic!("expected the close frame, got {other:?} before it"),
                None => panic!("the peer closed without a close frame"),
            }
        }
    }
}

fn call(method: &str, params: Value, id: u64) -> String {
    json!({"jsonrpc": "2.0", "method": method, "params": params, "id": id}).to_string()
}

fn notification(method: &str, params: Value) -> String {
    json!({"jsonrpc": "2.0", "method": method, "params": params}).to_string()
}

/// A peer serving `router` on one end of a pair whose directions hold `capacity`
/// frames each; the other end is the test's.
fn start<S: Send + Sync + 'static>(
    router: Router<S>,
    config: &PeerConfig,
    capacity: usize,
) -> (Peer, Raw) {
    let (raw, end) = pair_with_capacity(capacity);
    (Peer::start(end, router, config), Raw { end: raw })
}

/// Lets the other tasks run until `done` holds, without moving the paused clock; fails
/// the test after 1,000 turns.
async fn until(done: impl Fn() -> bool) {
    for _ in 0..1_000 {
        if done() {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("never came to pass in 1,000 turns of the other tasks");
}

fn echo() -> Router {
    Router::new().method("echo", |_cx: Context, (n,): (u64,)| async move {
        Ok::<_, RpcError>(n)
    })
}

#[tokio::test(start_paused = true)]
async fn a_full_sink_does_not_stop_reading_and_answers_keep_their_order() {
    // The peer's sink takes 2 frames and its queue 4; nobody reads them. Of 40 answers,
    // 2 go into the sink, 4 into the queue, and 34 must wait beside the queue while the
    // connection goes on reading.
    let config = PeerConfig::default().outgoing_queue(4);
    let (peer, mut raw) = start(echo(), &config, 2);
    for id in 0..40 {
        // Each send waits for the peer to read: it completes only if reading goes on.
        raw.send(call("echo", json!([id]), id)).await;
    }
    for id in 0..40 {
        let answer = raw.recv().await;
        assert_eq!(answer["id"], id, "answers come in the order of the calls");
        assert_eq!(answer["result"], id);
    }
    assert!(!peer.is_closed());
}

/// Answers `blob [n]` with a string of `n` bytes.
fn blob() -> Router {
    Router::new().method("blob", |_cx: Context, (n,): (usize,)| async move {
        Ok::<_, RpcError>("x".repeat(n))
    })
}

#[tokio::test(start_paused = true)]
async fn the_outgoing_queue_is_bounded_in_bytes_and_waiting_answers_pause_reading() {
    // Answers of 2 KiB against a byte bound of 8 KiB, the frame bound (1,024) far away,
    // and a sink of 2 frames nobody reads.
    const BOUND: usize = 8 * 1024;
    // One message read ahead while paused (the default keeps 64, to read the cancels
    // behind them): the bounds below count it.
    let config = PeerConfig::default()
        .outgoing_queue_bytes(BOUND)
        .read_ahead(1);
    let (peer, mut raw) = start(blob(), &config, 2);
    let mut sent = 0u64;
    while sent < 200
        && raw
            .try_send(call("blob", json!([2048]), sent), Duration::from_secs(5))
            .await
    {
        sent += 1;
    }
    // Bounded in frames only, all 200 would be read. In bytes: 2 in the sink, 4 or 5
    // in the queue, 4 or 5 waiting on tasks of their own, 2 in the link toward the peer.
    assert!(sent < 20, "the peer read {sent} calls without writing");
    assert!(sent > 6, "the queue takes frames up to its bound: {sent}");
    let frame = call("blob", json!([2048]), 0).len() + 2048;
    assert!(
        peer.queued_bytes() <= BOUND + frame,
        "{} bytes queued",
        peer.queued_bytes()
    );
    // A notification from this side waits for room too.
    let notify = tokio::spawn({
        let peer = peer.clone();
        async move { peer.notify("note", ["y".repeat(4096)]).await }
    });
    tokio::task::yield_now().await;
    assert!(!notify.is_finished(), "a full queue makes the sender wait");

    // Reading lets everything through: the answers in the order of the calls, and the
    // notification (from another task: anywhere among them).
    let mut ids = Vec::new();
    let mut notes = 0;
    for _ in 0..=sent {
        let frame = raw.recv().await;
        if frame["method"] == "note" {
            notes += 1;
        } else {
            assert_eq!(frame["result"].as_str().map(str::len), Some(2048));
            ids.push(frame["id"].as_u64().unwrap());
        }
    }
    assert_eq!(notes, 1);
    assert_eq!(
        ids,
        (0..sent).collect::<Vec<_>>(),
        "answers keep their order"
    );
    within(notify).await.unwrap().unwrap();

    // One frame larger than the bound still goes.
    raw.send(call("blob", json!([4 * BOUND]), 1000)).await;
    let answer = raw.recv().await;
    assert_eq!(answer["result"].as_str().map(str::len), Some(4 * BOUND));
    assert_eq!(peer.queued_bytes(), 0);
    assert!(!peer.is_closed());
}

#[tokio::test(start_paused = true)]
async fn a_notification_backlog_pauses_reading_until_the_handler_catches_up() {
    let gate = Arc::new(Semaphore::new(0));
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let (seen_tx, mut seen) = mpsc::unbounded_channel();
    type Steps = (
        Arc<Semaphore>,
        mpsc::UnboundedSender<u64>,
        mpsc::UnboundedSender<u64>,
    );
    let router = Router::with_state((gate.clone(), started_tx, seen_tx)).notification(
        "step",
        |cx: Context<Steps>, (n,): (u64,)| async move {
            let (gate, started, seen) = cx.state();
            let _ = started.send(n);
            if let Ok(permit) = gate.acquire().await {
                permit.forget();
            }
            let _ = seen.send(n);
        },
    );
    let config = PeerConfig::default().notification_queue(2).read_ahead(3);
    let (peer, mut raw) = start(router, &config, 1);

    // The handler is stuck on the gate: notifications fill its queue, then a backlog,
    // and the peer stops reading, so a send finally finds no room.
    let mut sent = 0;
    let mut paused = false;
    for n in 0..20 {
        if !raw
            .try_send(notification("step", json!([n])), Duration::from_secs(1))
            .await
        {
            paused = true;
            break;
        }
        sent += 1;
    }
    assert!(paused, "the peer kept reading {sent} notifications");
    // At most: one running, the queue (2), one in the backlog, three read ahead (to
    // see whether a cancel or an answer is behind them: `read_ahead`), one in the link
    // (1).
    assert!(sent <= 8, "reading paused only after {sent} notifications");
    // Notifications run one at a time, in order: the first is the only one started.
    assert_eq!(started.try_recv(), Ok(0), "the first handler runs");
    assert!(
        started.try_recv().is_err(),
        "a second handler started while the first waits"
    );
    assert!(!peer.is_closed());

    // The handler catches up: reading resumes, and every notification ran, in order.
    gate.add_permits(100);
    raw.send(notification("step", json!([sent]))).await;
    for n in 0..=sent {
        assert_eq!(within(seen.recv()).await, Some(n));
    }
}

/// `wait` runs until the test notifies `release`, saying on `started` that it runs;
/// it answers "done". Dropping it (the connection stopped it) says so on `stopped`.
#[derive(Clone)]
struct Gate {
    release: Arc<Notify>,
    started: mpsc::UnboundedSender<()>,
    stopped: mpsc::UnboundedSender<()>,
}

struct SaysStopped(mpsc::UnboundedSender<()>, bool);

impl Drop for SaysStopped {
    fn drop(&mut self) {
        if !self.1 {
            let _ = self.0.send(());
        }
    }
}

type Events = (
    Arc<Notify>,
    mpsc::UnboundedReceiver<()>,
    mpsc::UnboundedReceiver<()>,
);

fn gated() -> (Router<Gate>, Events) {
    let (started, started_rx) = mpsc::unbounded_channel();
    let (stopped, stopped_rx) = mpsc::unbounded_channel();
    let release = Arc::new(Notify::new());
    let gate = Gate {
        release: release.clone(),
        started,
        stopped,
    };
    let router = Router::with_state(gate)
        .method("wait", |cx: Context<Gate>, (): ()| async move {
            let gate = cx.state().clone();
            let mut guard = SaysStopped(gate.stopped.clone(), false);
            let _ = gate.started.send(());
            gate.release.notified().await;
            guard.1 = true;
            Ok::<_, RpcError>("done")
        })
        .method("echo", |_cx: Context<Gate>, (n,): (u64,)| async move {
            Ok::<_, RpcError>(n)
        });
    (router, (release, started_rx, stopped_rx))
}

#[tokio::test(start_paused = true)]
async fn drain_lets_a_running_call_answer_refuses_new_ones_then_closes() {
    let (router, (release, mut started, _stopped)) = gated();
    let (peer, mut raw) = start(router, &PeerConfig::default(), 8);
    raw.send(call("wait", json!([]), 1)).await;
    within(started.recv()).await.expect("the call runs");

    let began = Instant::now();
    let mut drain = Box::pin(peer.drain_and_close(4000, "bye", Duration::from_secs(5)));
    // One poll asks for the close; the connection sees it before the next frame.
    assert!(futures_util::FutureExt::now_or_never(&mut drain).is_none());
    raw.send(call("echo", json!([2]), 2)).await;
    let refused = raw.recv().await;
    assert_eq!(refused["id"], 2);
    assert_eq!(refused["error"]["code"], -32000, "{refused}");

    release.notify_one();
    let answered = raw.recv().await;
    assert_eq!(
        answered,
        json!({"jsonrpc": "2.0", "result": "done", "id": 1})
    );
    assert_eq!(raw.close_frame().await, Some((4000, "bye".to_owned())));
    drop(raw);
    within(drain).await;
    assert!(
        began.elapsed() < Duration::from_secs(5),
        "closed once the call was done, not at the end of the grace"
    );
    assert!(matches!(
        peer.close_reason(),
        Some(CloseReason::Local { code: 4000, .. })
    ));
}

#[tokio::test(start_paused = true)]
async fn drain_stops_a_call_that_outlives_the_grace_and_closes_on_time() {
    let (router, (_release, mut started, mut stopped)) = gated();
    let (peer, mut raw) = start(router, &PeerConfig::default(), 8);
    raw.send(call("wait", json!([]), 1)).await;
    within(started.recv()).await.expect("the call runs");

    let grace = Duration::from_millis(300);
    let began = Instant::now();
    let drain = tokio::spawn({
        let peer = peer.clone();
        async move { peer.drain_and_close(1001, "going away", grace).await }
    });
    assert_eq!(
        raw.close_frame().await,
        Some((1001, "going away".to_owned())),
        "no answer comes before the close: the call was stopped"
    );
    assert_eq!(
        began.elapsed(),
        grace,
        "the close comes when the grace ends"
    );
    within(stopped.recv())
        .await
        .expect("the handler was stopped");
    drop(raw);
    within(drain).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn keepalive_pings_on_time_and_closes_a_silent_peer_with_1011() {
    // The defaults: a ping every 30 s, closed when one goes 30 s unanswered.
    let (peer, mut raw) = start(echo(), &PeerConfig::default(), 8);
    let began = Instant::now();
    match raw.next().await {
        // Reading it answers it (the transport sends the pong).
        Some(Frame::Ping(_)) => {}
        other => panic!("expected a ping, got {other:?}"),
    }
    assert_eq!(began.elapsed(), Duration::from_secs(30), "the first ping");

    // From now on the test reads nothing, so the next ping goes unanswered.
    let reason = tokio::time::timeout(Duration::from_secs(300), peer.closed())
        .await
        .expect("a silent peer is closed");
    assert!(
        matches!(reason, CloseReason::KeepaliveTimeout),
        "{reason:?}"
    );
    assert_eq!(
        began.elapsed(),
        Duration::from_secs(90),
        "pinged at 60 s, given up 30 s later"
    );
    match raw.next().await {
        Some(Frame::Ping(_)) => {}
        other => panic!("expected the second ping, got {other:?}"),
    }
    let close = raw.close_frame().await;
    assert_eq!(
        close.map(|(code, _)| code),
        Some(1011),
        "the close has a code"
    );
}

/// `Duration::MAX` reads as "never": a ping interval that long sends no ping, and a
/// timeout that long never gives up on one. Neither is a panic (adding it to an
/// instant overflows), in `Peer::start` or in the connection's task.
#[tokio::test(start_paused = true)]
async fn keepalive_periods_of_duration_max_mean_never() {
    let never = PeerConfig::default().ping_interval(Some(Duration::MAX));
    let (peer, mut raw) = start(echo(), &never, 8);
    tokio::time::sleep(Duration::from_secs(365 * 86_400)).await;
    raw.send(call("echo", json!([1]), 1)).await;
    match raw.next().await {
        Some(Frame::Text(answer)) => assert!(answer.contains(r#""result":1"#), "{answer}"),
        other => panic!("expected the answer, and no ping before it: {other:?}"),
    }
    assert!(!peer.is_closed());

    let patient = PeerConfig::default()
        .ping_interval(Some(Duration::from_secs(1)))
        .keepalive_timeout(Duration::MAX);
    let (peer, mut raw) = start(echo(), &patient, 8);
    assert!(matches!(raw.next().await, Some(Frame::Ping(_))));
    // The test reads nothing now: the pings go unanswered, for a year.
    tokio::time::sleep(Duration::from_secs(365 * 86_400)).await;
    assert!(!peer.is_closed(), "{:?}", peer.close_reason());
    raw.send(call("echo", json!([2]), 2)).await;
    assert_eq!(raw.recv().await["result"], 2);
}

#[tokio::test(start_paused = true)]
async fn a_responsive_peer_stays_open_and_a_frozen_one_is_closed_within_interval_plus_timeout() {
    let second = Duration::from_secs(1);
    let config = PeerConfig::default()
        .ping_interval(Some(second))
        .keepalive_timeout(second);
    let (peer, mut raw) = start(Router::new(), &config, 8);

    // A responsive client: it reads (and so answers every ping) until frozen.
    let (freeze, mut frozen) = tokio::sync::oneshot::channel::<()>();
    let reader = tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = &mut frozen => return raw,
                frame = raw.end.next() => assert!(frame.is_some(), "the peer closed"),
            }
        }
    });
    // A call from the peer waits on the client, which never answers it.
    let waiting = tokio::spawn({
        let peer = peer.clone();
        async move {
            peer.call::<()>("never", ())
                .timeout(Duration::from_secs(600))
                .await
        }
    });
    // Sixty keepalive rounds: the link is healthy, nothing closes.
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(!peer.is_closed(), "{:?}", peer.close_reason());
    assert_eq!(peer.pending_calls(), 1);

    let _ = freeze.send(());
    let _raw = within(reader).await.unwrap();
    let froze_at = Instant::now();
    let result = within(waiting).await.unwrap();
    assert!(
        matches!(result, Err(Error::Closed(CloseReason::KeepaliveTimeout))),
        "{result:?}"
    );
    assert!(
        froze_at.elapsed() <= 2 * second,
        "noticed {:?} after the freeze",
        froze_at.elapsed()
    );
    assert_eq!(peer.pending_calls(), 0);
}

#[tokio::test(start_paused = true)]
async fn keepalive_does_not_close_while_reading_is_paused_by_the_peer_itself() {
    let second = Duration::from_secs(1);
    let config = PeerConfig::default()
        .max_in_flight(1)
        .ping_interval(Some(second))
        .keepalive_timeout(second);
    let (router, (release, mut started, _stopped)) = gated();
    let (peer, mut raw) = start(router, &config, 8);
    // One call runs and fills the in-flight bound: the next stays unread.
    raw.send(call("wait", json!([]), 1)).await;
    within(started.recv()).await.expect("the call runs");
    raw.send(call("echo", json!([2]), 2)).await;

    // The test reads nothing (so it answers no ping) for ten keepalive periods; the
    // silence is the peer's own doing, as it does not read, so it does not count.
    tokio::time::sleep(10 * second).await;
    assert!(!peer.is_closed(), "{:?}", peer.close_reason());

    // Reading resumes; from then on the silence counts.
    let resumed = Instant::now();
    release.notify_one();
    let reason = within(peer.closed()).await;
    assert!(
        matches!(reason, CloseReason::KeepaliveTimeout),
        "{reason:?}"
    );
    assert!(
        resumed.elapsed() <= 2 * second,
        "closed {:?} after reading resumed",
        resumed.elapsed()
    );
    // Both calls were answered before the close.
    assert_eq!(raw.recv().await["id"], 1);
    assert_eq!(raw.recv().await["id"], 2);
}

/// A peer whose reading is held up by the answers its other side does not read: the
/// sink takes 2 frames, the queue 4, and 4 answers waiting beside it (`max_in_flight`)
/// pause reading. 12 calls are sent (all fit: one is read ahead, 2 wait in the link).
async fn held_up_by_unread_answers() -> (Peer, Raw) {
    let second = Duration::from_secs(1);
    let config = PeerConfig::default()
        .max_in_flight(4)
        .outgoing_queue(4)
        .ping_interval(Some(second))
        .keepalive_timeout(second);
    let (peer, mut raw) = start(echo(), &config, 2);
    for id in 0..12 {
        raw.send(call("echo", json!([id]), id)).await;
    }
    (peer, raw)
}

#[tokio::test(start_paused = true)]
async fn a_peer_that_stops_reading_its_answers_and_goes_silent_is_closed_by_keepalive() {
    let (peer, _raw) = held_up_by_unread_answers().await;
    // Nothing is read from now on: the pause is the other side's doing, and its
    // silence counts (its pongs could not be read anyway, behind its calls).
    let since = Instant::now();
    let reason = within(peer.closed()).await;
    assert!(
        matches!(reason, CloseReason::KeepaliveTimeout),
        "{reason:?}"
    );
    assert!(
        since.elapsed() <= Duration::from_secs(3),
        "{:?}",
        since.elapsed()
    );
}

#[tokio::test(start_paused = true)]
async fn a_peer_that_reads_its_answers_slowly_is_not_taken_for_silent() {
    let (peer, mut raw) = held_up_by_unread_answers().await;
    // Three frames 0.9 s apart: the peer stays held up until the third (each of the
    // first two lets it read one more call), past a keepalive period and its timeout,
    // with no ping answered (the queue is full, so none goes out). Each frame taken is
    // the sign of life.
    for id in 0..3 {
        tokio::time::sleep(Duration::from_millis(900)).await;
        assert!(!peer.is_closed(), "{:?}", peer.close_reason());
        assert_eq!(raw.recv().await["id"], id);
    }
    // Then it reads at once, and its pongs keep the link.
    for id in 3..12 {
        assert_eq!(raw.recv().await["id"], id);
    }
    assert!(!peer.is_closed(), "{:?}", peer.close_reason());
}

/// The id of the next call the peer sent, passing over notifications (the cancel a
/// call sends when it is given up).
async fn next_call_id(raw: &mut Raw) -> u64 {
    for _ in 0..100 {
        let frame = raw.recv().await;
        if let Some(id) = frame.get("id") {
            return id.as_u64().expect("a call with a numeric id");
        }
    }
    panic!("100 notifications and no call");
}

#[tokio::test(start_paused = true)]
async fn every_way_a_call_leaves_the_pending_map() {
    let (peer, mut raw) = start(Router::new(), &PeerConfig::default(), 8);

    // 1. Its answer arrives (a result, then an error).
    let answered = tokio::spawn({
        let peer = peer.clone();
        async move { peer.call::<u64>("one", ()).await }
    });
    let id = next_call_id(&mut raw).await;
    assert_eq!(peer.pending_calls(), 1);
    raw.send(json!({"jsonrpc": "2.0", "result": 7, "id": id}).to_string())
        .await;
    assert_eq!(within(answered).await.unwrap().unwrap(), 7);
    assert_eq!(peer.pending_calls(), 0);

    let failed = tokio::spawn({
        let peer = peer.clone();
        async move { peer.call::<u64>("two", ()).await }
    });
    let id = next_call_id(&mut raw).await;
    let error = json!({"code": -32601, "message": "Method not found"});
    raw.send(json!({"jsonrpc": "2.0", "error": error, "id": id}).to_string())
        .await;
    let err = within(failed).await.unwrap().unwrap_err();
    assert_eq!(
        err.rpc().map(|e| e.message.as_str()),
        Some("Method not found")
    );
    assert_eq!(peer.pending_calls(), 0);

    // An answer shaped like a response but not a valid one (both members) ends the
    // call at once, with its reason: it does not wait out its timeout.
    let invalid = tokio::spawn({
        let peer = peer.clone();
        async move { peer.call::<u64>("two-b", ()).await }
    });
    let id = next_call_id(&mut raw).await;
    let both = json!({"jsonrpc": "2.0", "result": 1, "error": error, "id": id});
    let began = Instant::now();
    raw.send(both.to_string()).await;
    let err = within(invalid).await.unwrap().unwrap_err();
    assert!(matches!(err, Error::InvalidResponse(_)), "{err:?}");
    assert_eq!(began.elapsed(), Duration::ZERO);
    assert_eq!(peer.pending_calls(), 0);

    // 2. Its caller gives up: the timeout, exactly on time; a late answer is ignored.
    let began = Instant::now();
    let timed_out = peer
        .call::<u64>("three", ())
        .timeout(Duration::from_secs(3))
        .await;
    assert!(
        matches!(timed_out, Err(Error::Timeout { .. })),
        "{timed_out:?}"
    );
    assert_eq!(began.elapsed(), Duration::from_secs(3));
    assert_eq!(peer.pending_calls(), 0);
    let late = next_call_id(&mut raw).await;
    raw.send(json!({"jsonrpc": "2.0", "result": 3, "id": late}).to_string())
        .await;

    // 3. Its caller gives up: the call's future is dropped.
    let dropped = tokio::spawn({
        let peer = peer.clone();
        async move { peer.call::<u64>("four", ()).await }
    });
    let _ = next_call_id(&mut raw).await;
    assert_eq!(peer.pending_calls(), 1);
    dropped.abort();
    assert!(dropped.await.unwrap_err().is_cancelled());
    assert_eq!(peer.pending_calls(), 0);

    // A batch: one call answered, the other given up at its deadline.
    let batch = tokio::spawn({
        let peer = peer.clone();
        async move {
            let mut batch = peer.batch();
            batch.call("five", ())?.call("six", ())?;
            batch.timeout(Duration::from_secs(2));
            batch.send().await
        }
    });
    let mut sent = Value::Null;
    for _ in 0..100 {
        sent = raw.recv().await;
        if sent.is_array() {
            break;
        }
    }
    let first = sent[0]["id"].clone();
    raw.send(json!([{"jsonrpc": "2.0", "result": 5, "id": first}]).to_string())
        .await;
    let outcomes = within(batch).await.unwrap().unwrap();
    assert_eq!(outcomes[0].as_ref().unwrap().decode::<u64>().unwrap(), 5);
    assert!(matches!(outcomes[1], Err(Error::Timeout { .. })));
    assert_eq!(peer.pending_calls(), 0);
    assert!(!peer.is_closed(), "a late answer does not upset the peer");

    // 4. The connection ends: every waiting call ends with it, at that instant.
    let waiting: Vec<_> = (0..3)
        .map(|_| {
            let peer = peer.clone();
            tokio::spawn(async move { peer.call::<u64>("seven", ()).await })
        })
        .collect();
    for _ in 0..3 {
        let _ = next_call_id(&mut raw).await;
    }
    assert_eq!(peer.pending_calls(), 3);
    let ended_at = Instant::now();
    drop(raw);
    for call in waiting {
        let result = within(call).await.unwrap();
        assert!(matches!(result, Err(Error::Closed(_))), "{result:?}");
    }
    assert_eq!(
        ended_at.elapsed(),
        Duration::ZERO,
        "calls end when the connection does"
    );
    assert_eq!(peer.pending_calls(), 0);

    // 5. After the end, a call fails at once and registers nothing.
    let after = within(peer.call::<u64>("eight", ())).await;
    assert!(matches!(after, Err(Error::Closed(_))), "{after:?}");
    assert_eq!(peer.pending_calls(), 0);
}

/// The calls off the common path: one that finds the outgoing queue full waits for room
/// until its deadline, then times out; one that finds it full and gets room in time is
/// sent after what was queued before it, and answered; one whose timeout is longer than
/// the connection's keeps a timer of its own and times out exactly then.
#[tokio::test(start_paused = true)]
async fn a_call_waits_for_room_until_its_deadline_and_a_longer_timeout_keeps_its_own_timer() {
    let config = PeerConfig::default()
        .outgoing_queue(2)
        .call_timeout(Duration::from_secs(10));
    let (peer, mut raw) = start(Router::new(), &config, 1);

    // The test reads nothing: the link fills, then the queue, and the rest of these
    // notifications wait for room (six are more than the link, the writer and the
    // queue hold), so the queue stays full once it is.
    let fills: Vec<_> = (0..6)
        .map(|i| {
            let peer = peer.clone();
            tokio::spawn(async move { peer.notify("fill", [i]).await })
        })
        .collect();
    let fill = notification("fill", json!([0])).len();
    until(|| peer.queued_bytes() == 2 * fill).await;

    // 1. No room until its deadline: it times out then, and leaves nothing behind.
    let began = Instant::now();
    let full = peer
        .call::<u64>("never-sent", ())
        .timeout(Duration::from_secs(3))
        .await;
    assert!(matches!(full, Err(Error::Timeout { .. })), "{full:?}");
    assert_eq!(began.elapsed(), Duration::from_secs(3));
    assert_eq!(peer.pending_calls(), 0);

    // 2. Room comes in time: the call goes out after the notifications queued before
    // it, and its answer ends it.
    let waits = tokio::spawn({
        let peer = peer.clone();
        async move { peer.call::<u64>("echo", [7]).await }
    });
    until(|| peer.pending_calls() == 1).await;
    assert_eq!(peer.pending_calls(), 1);
    let mut filled = Vec::new();
    let id = loop {
        let frame = raw.recv().await;
        match frame["method"].as_str() {
            Some("fill") => filled.push(frame["params"][0].as_u64().expect("its number")),
            Some("echo") => break frame["id"].as_u64().expect("a numeric id"),
            _ => panic!("unexpected frame {frame}"),
        }
        assert!(filled.len() <= 6, "the call never went out");
    };
    filled.sort_unstable();
    assert_eq!(
        filled,
        [0, 1, 2, 3, 4, 5],
        "every notification before the call"
    );
    raw.send(json!({"jsonrpc": "2.0", "result": 7, "id": id}).to_string())
        .await;
    assert_eq!(within(waits).await.unwrap().unwrap(), 7);
    for fill in fills {
        within(fill).await.unwrap().unwrap();
    }

    // 3. A timeout past the connection's: sent, unanswered, ended by its own timer.
    let began = Instant::now();
    let long = tokio::spawn({
        let peer = peer.clone();
        async move {
            peer.call::<u64>("unanswered", ())
                .timeout(Duration::from_secs(25))
                .await
        }
    });
    assert_eq!(raw.recv().await["method"], "unanswered");
    let long = tokio::time::timeout(WAIT, long)
        .await
        .expect("it ends")
        .unwrap();
    assert!(
        matches!(long, Err(Error::Timeout { after, .. }) if after == Duration::from_secs(25)),
        "{long:?}"
    );
    assert_eq!(began.elapsed(), Duration::from_secs(25));
    assert_eq!(peer.pending_calls(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_close_ends_waiting_calls_at_once_and_stops_running_handlers() {
    let (router, (_release, mut started, mut stopped)) = gated();
    let (peer, mut raw) = start(router, &PeerConfig::default(), 8);
    // The peer waits on the test's side, and the test's side waits on the peer.
    raw.send(call("wait", json!([]), 1)).await;
    within(started.recv()).await.expect("the handler runs");
    let waiting = tokio::spawn({
        let peer = peer.clone();
        async move { peer.call::<u64>("never", ()).await }
    });
    let _ = next_call_id(&mut raw).await;

    let closed_at = Instant::now();
    raw.end
        .send(Frame::Close(Some((1000, String::new()))))
        .await
        .unwrap();
    let result = within(waiting).await.unwrap();
    assert!(matches!(result, Err(Error::Closed(_))), "{result:?}");
    within(stopped.recv())
        .await
        .expect("the handler was stopped");
    assert_eq!(
        closed_at.elapsed(),
        Duration::ZERO,
        "the call ended and the handler stopped when the close frame came"
    );
    assert!(matches!(
        within(peer.closed()).await,
        CloseReason::Remote { code: 1000, .. }
    ));
}

/// A peer that never reads fills this side's outgoing side (the sink, the queue, and the
/// answers that wait for room, which pause reading), then sends a close frame: the
/// close is seen at once, though reading is paused, and the connection is gone when the
/// closing handshake's timeout runs out, whatever is still unwritten.
#[tokio::test(start_paused = true)]
async fn a_peer_that_fills_our_side_then_closes_is_gone_within_the_close_timeout() {
    // Answers twice the byte bound: the sink (one frame) takes one, the queue one, and
    // the next waits for room, holding the byte bound: reading pauses there.
    const BOUND: usize = 8 * 1024;
    // One message read ahead while paused (the default keeps 64, to read the cancels
    // behind them): the bounds below count it.
    let config = PeerConfig::default()
        .outgoing_queue_bytes(BOUND)
        .read_ahead(1);
    let (peer, mut raw) = start(blob(), &config, 1);
    let mut id = 0;
    while peer.queued_bytes() < BOUND && id < 10 {
        // Each send waits until the peer has read the call before it.
        raw.send(call("blob", json!([2 * BOUND]), id)).await;
        id += 1;
    }
    assert!(peer.queued_bytes() >= BOUND, "the queue is full");
    // The last call sent goes unanswered for want of room; the close goes in behind it
    // once the peer has read it.
    let close = Frame::Close(Some((1000, String::new())));
    within(raw.end.send(close)).await.unwrap();
    let closed_at = Instant::now();
    let reason = tokio::time::timeout(WAIT, peer.closed())
        .await
        .expect("the close frame is seen although reading is paused");
    assert!(
        matches!(reason, CloseReason::Remote { code: 1000, .. }),
        "{reason:?}"
    );
    assert_eq!(closed_at.elapsed(), Duration::ZERO, "seen at once");
    assert!(peer.queued_bytes() > 0, "what is queued is still unwritten");

    // The peer reads nothing after the other side's close: a frame fills the link
    // toward it, and the next send fails only once its transport is dropped.
    let mut dropped = false;
    for _ in 0..2 {
        let filler = Frame::Text("{}".to_owned().into());
        if tokio::time::timeout(WAIT, raw.end.send(filler))
            .await
            .expect("the transport is dropped")
            .is_err()
        {
            dropped = true;
            break;
        }
    }
    assert!(dropped, "the peer's transport is gone");
    assert_eq!(
        closed_at.elapsed(),
        config.close_timeout,
        "the closing handshake ends at its timeout, whatever is unwritten"
    );
}

//! The tasks behind one connection: a reader, a writer, and the notification queue.
//!
//! Ordering decisions, in one place:
//! - The reader never awaits user code. Each incoming call (or batch) runs on its own
//!   task, so a handler may call back the other side and the reader is free to route
//!   the answer. Answers to our calls are routed on the reader itself: that is a map
//!   lookup and a channel send.
//! - Notifications run on one task per connection, one after another, in the order
//!   they arrived: the sender's order is usually meaningful (updates, chat lines).
//! - One writer task owns the sink. It sends whatever is queued, then flushes once, so
//!   a burst of answers costs one system call, not one each.
//! - Back-pressure stops reading, never drops: when too many calls run or the
//!   notification handler falls behind, the reader waits, and the other side's writes
//!   wait on TCP. Every wait of the reader also watches for a close.

use std::collections::VecDeque;
use std::ops::Range;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{FutureExt, SinkExt, StreamExt};
use serde_json::value::RawValue;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::{Instant, MissedTickBehavior};

use crate::config::PeerConfig;
use crate::error::{CloseReason, RpcError};
use crate::message::{self, Incoming, Item, Outcome};
use crate::peer::{Outgoing, Peer, Shared};
use crate::pending::{Answer, Reply};
use crate::router::{Call, Context, NotificationFn, Router};
use crate::transport::{Frame, Text, Transport, TransportError};

/// Starts the connection's tasks and returns its handle.
pub(crate) fn spawn<T: Transport, S: Send + Sync + 'static>(
    transport: T,
    router: Arc<Router<S>>,
    config: &PeerConfig,
    info: crate::peer::ConnectionInfo,
    hooks: Hooks,
) -> Peer {
    let (out_tx, out_rx) = mpsc::channel(config.outgoing_queue.max(1));
    let peer = Peer {
        shared: Arc::new(Shared::new(out_tx, config, info)),
    };
    if let Some(on_start) = hooks.on_start {
        on_start(&peer);
    }
    let on_end = hooks.on_end;
    let (sink, stream) = transport.split();
    let (stop_tx, stop_rx) = oneshot::channel();
    let writer = tokio::spawn(write_loop(sink, out_rx, stop_rx));
    let reader = Reader {
        router,
        peer: peer.clone(),
        handlers: JoinSet::new(),
        notifications: None,
        backlog: VecDeque::new(),
        max_batch: config.max_batch_len,
        max_in_flight: config.max_in_flight.max(1),
        notification_queue: config.notification_queue.max(1),
        draining: false,
    };
    let config = config.clone();
    // Subscribed before the handle is returned: a close asked for before the reader
    // task first runs must still be seen as a change.
    let close_requests = peer.shared.close_request.subscribe();
    tokio::spawn(async move {
        let peer = reader.peer.clone();
        reader
            .run(close_requests, stream, writer, stop_tx, config)
            .await;
        if let Some(on_end) = on_end {
            on_end(&peer);
        }
    });
    peer
}

pub(crate) type OnStart = Box<dyn FnOnce(&Peer) + Send + 'static>;

/// What the owner of a connection (the server's registry) runs around its life.
#[derive(Default)]
pub(crate) struct Hooks {
    /// Runs before the connection reads its first frame.
    pub(crate) on_start: Option<OnStart>,
    /// Runs once the connection's tasks are all gone.
    pub(crate) on_end: Option<OnStart>,
}

/// Asks the writer to stop: with a close frame to send first, or just to finish.
struct Stop {
    close: Option<(u16, String)>,
    timeout: Duration,
}

struct NotificationJob<S> {
    handler: Arc<NotificationFn<S>>,
    frame: Text,
    params: Option<Range<usize>>,
}

struct Notifications<S> {
    tx: mpsc::Sender<NotificationJob<S>>,
    task: JoinHandle<()>,
}

struct Reader<S> {
    router: Arc<Router<S>>,
    peer: Peer,
    handlers: JoinSet<()>,
    notifications: Option<Notifications<S>>,
    /// Notifications that did not fit the queue. While any wait here, reading stops.
    backlog: VecDeque<NotificationJob<S>>,
    max_batch: usize,
    max_in_flight: usize,
    notification_queue: usize,
    /// Closing gracefully: new calls are refused.
    draining: bool,
}

impl<S: Send + Sync + 'static> Reader<S> {
    async fn run<T: Transport>(
        mut self,
        mut close_requests: watch::Receiver<Option<crate::peer::CloseRequest>>,
        mut stream: SplitStream<T>,
        mut writer: JoinHandle<Result<(), TransportError>>,
        stop: oneshot::Sender<Stop>,
        config: PeerConfig,
    ) {
        let shared = self.peer.shared.clone();
        let mut writer_done = false;
        // Keepalive: a ping every interval; a ping unanswered past the timeout (nothing at
        // all heard since it was sent) means the other side is gone. Checked on a tick of
        // the shorter of the two, so a silence is caught within interval + timeout.
        let timeout = config.keepalive_timeout;
        let mut keepalive = config.ping_interval.map(|interval| {
            let period = interval.min(timeout).max(Duration::from_millis(1));
            let mut tick = tokio::time::interval_at(Instant::now() + period, period);
            tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
            (tick, interval)
        });
        let mut last_ping = Instant::now();
        // When the oldest ping still without an answer was sent.
        let mut unanswered: Option<Instant> = None;
        // A graceful close waiting for running calls, and until when it waits.
        let mut draining: Option<(crate::peer::CloseRequest, Instant)> = None;

        let reason = loop {
            if let Some((request, _)) = &draining {
                if self.handlers.is_empty() {
                    break CloseReason::Local {
                        code: request.code,
                        reason: request.reason.clone(),
                    };
                }
            }
            let reading = self.handlers.len() < self.max_in_flight && self.backlog.is_empty();
            let notification_room = match (&self.notifications, self.backlog.is_empty()) {
                (Some(n), false) => Some(n.tx.clone()),
                _ => None,
            };
            let event = tokio::select! {
                biased;
                Ok(()) = close_requests.changed(), if draining.is_none() => {
                    let Some(request) = close_requests.borrow().clone() else { continue };
                    match request.drain_until {
                        Some(until) if !self.handlers.is_empty() => {
                            self.draining = true;
                            draining = Some((request, until));
                            continue;
                        }
                        _ => break CloseReason::Local { code: request.code, reason: request.reason },
                    }
                }
                _ = sleep_until(draining.as_ref().map(|d| d.1)), if draining.is_some() => {
                    if let Some((request, _)) = draining.take() {
                        tracing::debug!("grace period over; stopping the calls still running");
                        break CloseReason::Local { code: request.code, reason: request.reason };
                    }
                    continue;
                }
                result = &mut writer, if !writer_done => {
                    writer_done = true;
                    break match result {
                        Ok(Err(e)) => CloseReason::Transport(Arc::from(Box::<dyn std::error::Error + Send + Sync>::from(e))),
                        _ => CloseReason::Eof,
                    };
                }
                Some(done) = self.handlers.join_next(), if !self.handlers.is_empty() => {
                    if let Err(e) = done {
                        if e.is_panic() {
                            tracing::error!("a connection task panicked outside any handler");
                        }
                    }
                    continue;
                }
                Some(permit) = reserve(notification_room), if !self.backlog.is_empty() => {
                    Event::Room(permit)
                }
                now = tick(&mut keepalive), if keepalive.is_some() => {
                    // Silence only counts while we read: paused reading is our own doing.
                    if !reading {
                        unanswered = None;
                        continue;
                    }
                    if unanswered.is_some_and(|sent| now - sent >= timeout) {
                        break CloseReason::KeepaliveTimeout;
                    }
                    let interval = keepalive.as_ref().map_or(timeout, |k| k.1);
                    if unanswered.is_none() && now - last_ping >= interval {
                        // A full queue means the link is busy: the silence is timed anyway.
                        let _ = shared.out.try_send(Outgoing::Ping);
                        last_ping = now;
                        unanswered = Some(now);
                    }
                    continue;
                }
                frame = stream.next(), if reading => Event::Frame(frame),
            };
            match event {
                Event::Room(permit) => {
                    if let Some(job) = self.backlog.pop_front() {
                        permit.send(job);
                    }
                }
                Event::Frame(frame) => {
                    unanswered = None;
                    match frame {
                        Some(Ok(Frame::Text(text))) => self.on_text(text),
                        Some(Ok(Frame::Close(frame))) => {
                            let (code, reason) = frame.unwrap_or((1005, String::new()));
                            break CloseReason::Remote { code, reason };
                        }
                        Some(Ok(Frame::Binary(_))) => {
                            tracing::debug!("binary frame ignored: JSON-RPC is text");
                        }
                        Some(Ok(Frame::Ping(_) | Frame::Pong(_))) => {}
                        Some(Err(TransportError::MessageTooBig { size, max })) => {
                            tracing::debug!(size, max, "message too big; closing with 1009");
                            break CloseReason::Local {
                                code: 1009,
                                reason: format!("message exceeds {max} bytes"),
                            };
                        }
                        Some(Err(TransportError::Other(e))) => {
                            break CloseReason::Transport(Arc::from(e))
                        }
                        None => break CloseReason::Eof,
                    }
                }
            }
        };

        tracing::debug!(%reason, "connection closing");
        // Registries forget the peer first, so whoever sees it closed (below) also
        // sees it gone from them. Then calls waiting on us end, and handlers serving
        // the other side stop.
        shared.run_on_close();
        shared.mark_closed(reason.clone());
        self.handlers.abort_all();
        if let Some(n) = self.notifications.take() {
            n.task.abort();
        }
        self.backlog.clear();

        let close = match &reason {
            CloseReason::Local { code, reason } => Some((*code, reason.clone())),
            _ => None,
        };
        let we_close = close.is_some();
        let deadline = Instant::now() + config.close_timeout;
        if !writer_done {
            let _ = stop.send(Stop {
                close,
                timeout: config.close_timeout,
            });
        }
        // After our close frame, read until the other side answers it, so the
        // connection ends with a complete closing handshake.
        if we_close {
            let _ = tokio::time::timeout_at(deadline, async {
                while let Some(Ok(frame)) = stream.next().await {
                    if matches!(frame, Frame::Close(_)) {
                        break;
                    }
                }
            })
            .await;
        }
        if !writer_done
            && tokio::time::timeout_at(deadline, &mut writer)
                .await
                .is_err()
        {
            writer.abort();
        }
        // Handler tasks were aborted above; wait until they are gone, so nothing of
        // this connection outlives it.
        while self.handlers.join_next().await.is_some() {}
    }

    fn on_text(&mut self, frame: Text) {
        let text: &str = &frame;
        match message::classify(text, self.max_batch) {
            Incoming::Reject(error) => self.reply(message::error_response(None, &error)),
            Incoming::Single(item) => {
                if let Some(answer) = self.on_item(&frame, item, None) {
                    self.reply(answer);
                }
            }
            Incoming::Batch(items) => {
                let mut answers = Vec::new();
                let mut calls = Vec::new();
                for item in items {
                    if let Some(answer) = self.on_item(&frame, item, Some(&mut calls)) {
                        answers.push(answer);
                    }
                }
                if calls.is_empty() {
                    if !answers.is_empty() {
                        self.reply(join_batch(&answers));
                    }
                    return;
                }
                let out = self.peer.shared.out.clone();
                self.handlers.spawn(async move {
                    let running = calls
                        .into_iter()
                        .map(|(handler, call)| run_call(handler, call));
                    answers.extend(futures_util::future::join_all(running).await);
                    let _ = out.send(Outgoing::Frame(join_batch(&answers).into())).await;
                });
            }
        }
    }

    /// Handles one message. Returns an answer to send now, if any. A call is started on
    /// its own task, or pushed to `batch` to run with the rest of its batch.
    fn on_item(
        &mut self,
        frame: &Text,
        item: Item<'_>,
        batch: Option<&mut Vec<(MethodHandle<S>, Call)>>,
    ) -> Option<String> {
        match item {
            Item::Request { id, method, params } => {
                if self.draining {
                    return Some(message::error_response(
                        Some(id.get()),
                        &RpcError::new(-32000, "Closing").with_data("the connection is closing"),
                    ));
                }
                let Some(handler) = self.router.methods.get(&*method) else {
                    return Some(message::error_response(
                        Some(id.get()),
                        &RpcError::method_not_found(),
                    ));
                };
                let handle = MethodHandle {
                    handler: handler.clone(),
                    cx: Context::new(self.peer.clone(), self.router.state.clone()),
                };
                let call = Call {
                    frame: frame.clone(),
                    id: span(frame, id.get()),
                    params: params.map(|p| span(frame, p.get())),
                };
                match batch {
                    Some(batch) => batch.push((handle, call)),
                    None => {
                        let out = self.peer.shared.out.clone();
                        self.handlers.spawn(async move {
                            let answer = run_call(handle, call).await;
                            let _ = out.send(Outgoing::Frame(answer.into())).await;
                        });
                    }
                }
                None
            }
            Item::Notification { method, params } => {
                match self.router.notifications.get(&*method) {
                    Some(handler) => self.notify(NotificationJob {
                        handler: handler.clone(),
                        frame: frame.clone(),
                        params: params.map(|p| span(frame, p.get())),
                    }),
                    None => tracing::debug!(%method, "notification without a handler; dropped"),
                }
                None
            }
            Item::Response { id, outcome } => {
                let answer = match outcome {
                    Outcome::Result(r) => {
                        Answer::Result(Reply::new(frame.clone(), span(frame, r.get())))
                    }
                    Outcome::Error(e) => Answer::Error {
                        frame: frame.clone(),
                        range: span(frame, e.get()),
                    },
                };
                self.route(id, answer);
                None
            }
            Item::BadResponse { id, reason } => {
                tracing::debug!(reason, "invalid response");
                if let Some(id) = id {
                    self.route(id, Answer::Invalid(reason));
                }
                None
            }
            Item::Invalid { id, error } => {
                Some(message::error_response(id.map(RawValue::get), &error))
            }
        }
    }

    fn route(&self, id: &RawValue, answer: Answer) {
        // We only ever send numeric ids, so any other id answers nothing of ours.
        let delivered = id
            .get()
            .parse::<u64>()
            .is_ok_and(|id| self.peer.shared.pending.complete(id, answer));
        if !delivered {
            tracing::debug!(
                id = id.get(),
                "answer to no waiting call (late, or never sent); ignored"
            );
        }
    }

    fn notify(&mut self, job: NotificationJob<S>) {
        if !self.backlog.is_empty() {
            self.backlog.push_back(job);
            return;
        }
        let queue = self.notification_queue;
        let peer = &self.peer;
        let state = &self.router.state;
        let n = self.notifications.get_or_insert_with(|| {
            let (tx, rx) = mpsc::channel(queue);
            let cx = Context::new(peer.clone(), state.clone());
            Notifications {
                tx,
                task: tokio::spawn(notification_loop(rx, cx)),
            }
        });
        if let Err(mpsc::error::TrySendError::Full(job)) = n.tx.try_send(job) {
            self.backlog.push_back(job);
        }
    }

    /// Queues an answer made on the reader (errors it can give without a handler). When
    /// the writer's queue is full, a task waits for room, so the reader does not.
    fn reply(&mut self, answer: String) {
        let out = &self.peer.shared.out;
        match out.try_send(Outgoing::Frame(answer.into())) {
            Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => {}
            Err(mpsc::error::TrySendError::Full(frame)) => {
                let out = out.clone();
                self.handlers.spawn(async move {
                    let _ = out.send(frame).await;
                });
            }
        }
    }
}

/// A method's handler and the context it runs with.
struct MethodHandle<S> {
    handler: Arc<crate::router::MethodFn<S>>,
    cx: Context<S>,
}

/// Runs one call to its answer frame. A panic in the handler answers -32603.
async fn run_call<S: Send + Sync + 'static>(handle: MethodHandle<S>, call: Call) -> String {
    let id_frame = call.frame.clone();
    let id = call.id.clone();
    let MethodHandle { handler, cx } = handle;
    match AssertUnwindSafe(async move { handler(cx, call).await })
        .catch_unwind()
        .await
    {
        Ok(answer) => answer,
        Err(_) => {
            tracing::error!(id = &id_frame[id.clone()], "a method handler panicked");
            message::error_response(Some(&id_frame[id]), &RpcError::internal_error())
        }
    }
}

async fn notification_loop<S: Send + Sync + 'static>(
    mut rx: mpsc::Receiver<NotificationJob<S>>,
    cx: Context<S>,
) {
    while let Some(job) = rx.recv().await {
        let fut =
            AssertUnwindSafe(async { (job.handler)(cx.clone(), job.frame, job.params).await });
        if fut.catch_unwind().await.is_err() {
            tracing::error!("a notification handler panicked");
        }
    }
}

async fn reserve<S>(
    tx: Option<mpsc::Sender<NotificationJob<S>>>,
) -> Option<mpsc::OwnedPermit<NotificationJob<S>>> {
    match tx {
        Some(tx) => tx.reserve_owned().await.ok(),
        None => None,
    }
}

/// What woke the reader, when it needs `self` to handle it.
enum Event<S> {
    Frame(Option<Result<Frame, TransportError>>),
    Room(mpsc::OwnedPermit<NotificationJob<S>>),
}

async fn sleep_until(until: Option<Instant>) {
    match until {
        Some(until) => tokio::time::sleep_until(until).await,
        None => std::future::pending().await,
    }
}

async fn tick(keepalive: &mut Option<(tokio::time::Interval, Duration)>) -> Instant {
    match keepalive {
        Some((t, _)) => t.tick().await,
        None => std::future::pending().await,
    }
}

fn join_batch(answers: &[String]) -> String {
    let len = answers.iter().map(|a| a.len() + 1).sum::<usize>() + 1;
    let mut s = String::with_capacity(len);
    s.push('[');
    for (i, a) in answers.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        s.push_str(a);
    }
    s.push(']');
    s
}

/// Where `part`, a slice of `whole`, lies in it.
fn span(whole: &str, part: &str) -> Range<usize> {
    let start = part.as_ptr() as usize - whole.as_ptr() as usize;
    debug_assert!(start + part.len() <= whole.len());
    start..start + part.len()
}

/// Longest run of frames fed before one flush, so pings and fairness are not starved.
const MAX_COALESCE: usize = 256;

async fn write_loop<T: Transport>(
    mut sink: SplitSink<T, Frame>,
    mut rx: mpsc::Receiver<Outgoing>,
    mut stop: oneshot::Receiver<Stop>,
) -> Result<(), TransportError> {
    let work = async {
        while let Some(first) = rx.recv().await {
            sink.feed(first.into_frame()).await?;
            for _ in 1..MAX_COALESCE {
                match rx.try_recv() {
                    Ok(next) => sink.feed(next.into_frame()).await?,
                    Err(_) => break,
                }
            }
            sink.flush().await?;
        }
        Ok(())
    };
    let stop = tokio::select! {
        biased;
        stop = &mut stop => stop.ok(),
        result = work => return result,
    };
    let Some(stop) = stop else { return Ok(()) };
    let finish = async {
        // What was queued before the close goes out first: answers of calls that
        // finished during a graceful close, above all.
        while let Ok(next) = rx.try_recv() {
            sink.feed(next.into_frame()).await?;
        }
        if let Some((code, reason)) = stop.close {
            sink.send(Frame::Close(Some((code, reason)))).await?;
        }
        sink.close().await
    };
    match tokio::time::timeout(stop.timeout, finish).await {
        Ok(result) => result,
        Err(_) => Ok(()),
    }
}

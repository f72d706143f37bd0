//! The tasks behind one connection: a reader, a writer, and the notification queue.
//!
//! Ordering decisions, in one place:
//! - The reader never *awaits* user code, but it does *poll* a handler once. An
//!   incoming call's handler is started on the reader and polled one time (with a
//!   waker that does nothing); most handlers finish there, and their answer is queued
//!   at once. That saves, per call, a task spawn, its allocations and a wake-up of the
//!   reader when the task ends, which is most of what a call costs the engine. A
//!   handler that is not done after that first poll (it awaits I/O, a timer, or a call
//!   back to the other side) moves to its own task, which polls it again at once: so a
//!   handler may still call back the other side, and the reader is free to route the
//!   answer. The price: a handler's synchronous part (up to its first real await) runs
//!   on the reader, so a handler that computes for long before awaiting delays the
//!   reading of this connection, as it would delay its task's thread anyway.
//!   A panic in that first poll is caught like any other: the caller gets -32603.
//! - Notifications run one after another, in the order they arrived: the sender's
//!   order is usually meaningful (updates, chat lines). When none is queued or running,
//!   the next one is polled once on the reader, like a call; what does not finish there
//!   (and what arrives while one is unfinished) goes to one task per connection, in
//!   order.
//! - Answers to our calls are routed on the reader itself: a map lookup and a channel
//!   send.
//! - One writer task owns the sink. It sends whatever is queued, then flushes once, so
//!   a burst of answers costs one system call, not one each.
//! - Back-pressure stops reading, never drops: when too many calls run or the
//!   notification handler falls behind, the reader waits, and the other side's writes
//!   wait on TCP. Every wait of the reader also watches for a close.

use std::collections::VecDeque;
use std::future::Future;
use std::ops::Range;
use std::panic::AssertUnwindSafe;
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll, Waker};
use std::time::Duration;

use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{FutureExt, SinkExt, StreamExt};
use serde_json::value::RawValue;
use tokio::sync::{mpsc, oneshot};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::{Instant, Sleep};

use crate::config::PeerConfig;
use crate::error::{CloseReason, RpcError};
use crate::message::{self, Incoming, Item, Outcome};
use crate::peer::{CloseRequest, Outgoing, Peer, Shared};
use crate::pending::{Answer, Reply};
use crate::router::{BoxFuture, Call, Context, MethodFn, NotificationFn, Router};
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
        room: None,
        max_batch: config.max_batch_len,
        max_in_flight: config.max_in_flight.max(1),
        notification_queue: config.notification_queue.max(1),
        draining: false,
    };
    // Only what the reader needs of the config: its task lives as long as the
    // connection, so every byte here is paid by every idle connection.
    let timing = Timing {
        ping_interval: config.ping_interval,
        keepalive_timeout: config.keepalive_timeout,
        close_timeout: config.close_timeout,
    };
    tokio::spawn(async move {
        let peer = reader.peer.clone();
        reader.run(stream, writer, stop_tx, timing).await;
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

/// The reader's share of the config.
struct Timing {
    ping_interval: Option<Duration>,
    keepalive_timeout: Duration,
    close_timeout: Duration,
}

/// Asks the writer to stop: with a close frame to send first, or just to finish.
struct Stop {
    close: Option<(u16, String)>,
    timeout: Duration,
}

/// One notification for the ordered notification task.
enum NotificationJob<S> {
    /// Not started yet.
    Start {
        handler: Arc<NotificationFn<S>>,
        frame: Text,
        params: Option<Range<usize>>,
    },
    /// Started on the reader and not finished by its first poll.
    Resume(BoxFuture<()>),
}

struct Notifications<S> {
    tx: mpsc::Sender<NotificationJob<S>>,
    /// Jobs sent to the task and not yet finished. While it is zero, nothing is queued
    /// or running, so the reader may start the next notification itself in order.
    busy: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

struct Reader<S> {
    router: Arc<Router<S>>,
    peer: Peer,
    handlers: JoinSet<()>,
    notifications: Option<Notifications<S>>,
    /// Notifications that did not fit the queue. While any wait here, reading stops.
    backlog: VecDeque<NotificationJob<S>>,
    /// Waits for room in the notification queue while the backlog is not empty.
    room: Option<BoxFuture<Option<mpsc::OwnedPermit<NotificationJob<S>>>>>,
    max_batch: usize,
    max_in_flight: usize,
    notification_queue: usize,
    /// Closing gracefully: new calls are refused.
    draining: bool,
}

/// What woke the reader, when the loop itself has to act on it.
enum Event {
    Close(CloseRequest),
    GraceOver,
    WriterDone(Result<Result<(), TransportError>, tokio::task::JoinError>),
    /// The end of the stream, an error, or a close frame.
    Frame(Option<Result<Frame, TransportError>>),
    KeepaliveTick(Instant),
    /// State changed (a handler ended, reading paused): look again.
    Again,
}

impl<S: Send + Sync + 'static> Reader<S> {
    fn reading(&self) -> bool {
        self.handlers.len() < self.max_in_flight && self.backlog.is_empty()
    }

    async fn run<T: Transport>(
        mut self,
        mut stream: SplitStream<T>,
        mut writer: JoinHandle<Result<(), TransportError>>,
        stop: oneshot::Sender<Stop>,
        timing: Timing,
    ) {
        let shared = self.peer.shared.clone();
        let mut writer_done = false;
        // A close is asked for at most once, so this wait is made once per connection,
        // not on every pass of the reader.
        let mut close = pin!(shared.close_requested());
        let mut close_seen = false;
        // Keepalive: a ping every interval; a ping unanswered past the timeout (nothing at
        // all heard since it was sent) means the other side is gone. Checked on one timer
        // of the shorter of the two, so a silence is caught within interval + timeout.
        let timeout = timing.keepalive_timeout;
        let period = timing
            .ping_interval
            .map(|interval| interval.min(timeout).max(Duration::from_millis(1)));
        let mut keepalive = pin!(tokio::time::sleep(period.unwrap_or(Duration::ZERO)));
        let mut last_ping = Instant::now();
        // When the oldest ping still without an answer was sent.
        let mut unanswered: Option<Instant> = None;
        // A graceful close waiting for running calls, and its grace period.
        let mut draining: Option<(CloseRequest, Pin<Box<Sleep>>)> = None;

        let reason = loop {
            if let Some((request, _)) = &draining {
                if self.handlers.is_empty() {
                    break CloseReason::Local {
                        code: request.code,
                        reason: request.reason.clone(),
                    };
                }
            }
            // One pass over every source, in priority order. Written by hand rather than
            // with `select!` so that no future is re-created per pass: the reader makes
            // a pass for nearly every frame, so this is on every call's path.
            let event = std::future::poll_fn(|cx| {
                if !close_seen {
                    if let Poll::Ready(request) = close.as_mut().poll(cx) {
                        close_seen = true;
                        return Poll::Ready(Event::Close(request));
                    }
                }
                if let Some((_, grace)) = &mut draining {
                    if grace.as_mut().poll(cx).is_ready() {
                        return Poll::Ready(Event::GraceOver);
                    }
                }
                if !writer_done {
                    if let Poll::Ready(result) = Pin::new(&mut writer).poll(cx) {
                        writer_done = true;
                        return Poll::Ready(Event::WriterDone(result));
                    }
                }
                // Finished handlers are reaped on the way; they are waited for only when
                // their number holds up reading, or a graceful close waits for them.
                while let Some(done) = self.handlers.try_join_next() {
                    log_join(done);
                }
                if draining.is_some() || self.handlers.len() >= self.max_in_flight {
                    if let Poll::Ready(Some(done)) = self.handlers.poll_join_next(cx) {
                        log_join(done);
                        return Poll::Ready(Event::Again);
                    }
                }
                if !self.backlog.is_empty() && self.poll_room(cx).is_ready() {
                    return Poll::Ready(Event::Again);
                }
                // Every frame already there is handled in this pass.
                while self.reading() {
                    match stream.poll_next_unpin(cx) {
                        Poll::Pending => break,
                        Poll::Ready(Some(Ok(frame))) => {
                            unanswered = None;
                            match frame {
                                Frame::Text(text) => self.on_text(text),
                                Frame::Binary(_) => {
                                    tracing::debug!("binary frame ignored: JSON-RPC is text");
                                }
                                Frame::Ping(_) | Frame::Pong(_) => {}
                                Frame::Close(frame) => {
                                    return Poll::Ready(Event::Frame(Some(Ok(Frame::Close(
                                        frame,
                                    )))));
                                }
                            }
                        }
                        Poll::Ready(other) => return Poll::Ready(Event::Frame(other)),
                    }
                    if !self.reading() {
                        // Reading paused: the waits that resume it are set up next pass.
                        return Poll::Ready(Event::Again);
                    }
                }
                if period.is_some() && keepalive.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Event::KeepaliveTick(keepalive.deadline()));
                }
                Poll::Pending
            })
            .await;
            match event {
                Event::Again => {}
                Event::Close(request) => match request.drain_until {
                    Some(until) if !self.handlers.is_empty() => {
                        self.draining = true;
                        draining = Some((request, Box::pin(tokio::time::sleep_until(until))));
                    }
                    _ => {
                        break CloseReason::Local {
                            code: request.code,
                            reason: request.reason,
                        }
                    }
                },
                Event::GraceOver => {
                    if let Some((request, _)) = draining.take() {
                        tracing::debug!("grace period over; stopping the calls still running");
                        break CloseReason::Local {
                            code: request.code,
                            reason: request.reason,
                        };
                    }
                }
                Event::WriterDone(result) => {
                    break match result {
                        Ok(Err(e)) => {
                            CloseReason::Transport(Arc::from(Box::<
                                dyn std::error::Error + Send + Sync,
                            >::from(e)))
                        }
                        _ => CloseReason::Eof,
                    };
                }
                Event::KeepaliveTick(now) => {
                    let (Some(period), Some(interval)) = (period, timing.ping_interval) else {
                        continue;
                    };
                    keepalive.as_mut().reset(now + period);
                    // Silence only counts while we read: paused reading is our own doing.
                    if !self.reading() {
                        unanswered = None;
                        continue;
                    }
                    if unanswered.is_some_and(|sent| now - sent >= timeout) {
                        break CloseReason::KeepaliveTimeout;
                    }
                    if unanswered.is_none() && now - last_ping >= interval {
                        // A full queue means the link is busy: the silence is timed anyway.
                        let _ = shared.out.try_send(Outgoing::Ping);
                        last_ping = now;
                        unanswered = Some(now);
                    }
                }
                Event::Frame(frame) => match frame {
                    Some(Ok(Frame::Close(frame))) => {
                        let (code, reason) = frame.unwrap_or((1005, String::new()));
                        break CloseReason::Remote { code, reason };
                    }
                    Some(Ok(_)) => {}
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
                },
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
        self.room = None;

        let close = match &reason {
            CloseReason::Local { code, reason } => Some((*code, reason.clone())),
            _ => None,
        };
        let we_close = close.is_some();
        let deadline = Instant::now() + timing.close_timeout;
        if !writer_done {
            let _ = stop.send(Stop {
                close,
                timeout: timing.close_timeout,
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

    /// Moves backlogged notifications into the queue as room appears.
    fn poll_room(&mut self, cx: &mut TaskContext<'_>) -> Poll<()> {
        let Some(n) = &self.notifications else {
            return Poll::Pending;
        };
        let room = self.room.get_or_insert_with(|| {
            let tx = n.tx.clone();
            Box::pin(async move { tx.reserve_owned().await.ok() })
        });
        let permit = std::task::ready!(room.as_mut().poll(cx));
        self.room = None;
        if let (Some(permit), Some(job)) = (permit, self.backlog.pop_front()) {
            n.busy.fetch_add(1, Ordering::AcqRel);
            permit.send(job);
        }
        Poll::Ready(())
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
                        .map(|(handle, call)| run_call(handle, call));
                    answers.extend(futures_util::future::join_all(running).await);
                    let _ = out.send(Outgoing::Frame(join_batch(&answers).into())).await;
                });
            }
        }
    }

    /// Handles one message. Returns an answer to send now, if any. A call is started
    /// here, or pushed to `batch` to run with the rest of its batch.
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
                let cx = Context::new(self.peer.clone(), self.router.state.clone());
                let call = Call {
                    frame: frame.clone(),
                    id: span(frame, id.get()),
                    params: params.map(|p| span(frame, p.get())),
                };
                match batch {
                    Some(batch) => {
                        let handle = MethodHandle {
                            handler: handler.clone(),
                            cx,
                        };
                        batch.push((handle, call));
                        None
                    }
                    None => self.start_call(handler.clone(), cx, call, frame, id),
                }
            }
            Item::Notification { method, params } => {
                match self.router.notifications.get(&*method) {
                    Some(handler) => {
                        let handler = handler.clone();
                        self.notify(handler, frame, params.map(|p| span(frame, p.get())));
                    }
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

    /// Starts a call and polls it once; returns its answer if that was enough. If not,
    /// the call goes on on its own task (see the module docs).
    fn start_call(
        &mut self,
        handler: Arc<MethodFn<S>>,
        cx: Context<S>,
        call: Call,
        frame: &Text,
        id: &RawValue,
    ) -> Option<String> {
        let started = std::panic::catch_unwind(AssertUnwindSafe(|| {
            let mut fut = handler(cx, call);
            match fut
                .as_mut()
                .poll(&mut TaskContext::from_waker(Waker::noop()))
            {
                Poll::Ready(answer) => Ok(answer),
                Poll::Pending => Err(fut),
            }
        }));
        match started {
            Ok(Ok(answer)) => Some(answer),
            Ok(Err(fut)) => {
                // The task polls it again at once, with its own waker: what the first poll
                // registered with the no-op waker is registered anew.
                let (id_frame, id) = (frame.clone(), span(frame, id.get()));
                let out = self.peer.shared.out.clone();
                self.handlers.spawn(async move {
                    let answer = finish_call(fut, &id_frame[id]).await;
                    let _ = out.send(Outgoing::Frame(answer.into())).await;
                });
                None
            }
            Err(_) => Some(panicked(id.get())),
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

    fn notify(
        &mut self,
        handler: Arc<NotificationFn<S>>,
        frame: &Text,
        params: Option<Range<usize>>,
    ) {
        if !self.backlog.is_empty() {
            self.backlog.push_back(NotificationJob::Start {
                handler,
                frame: frame.clone(),
                params,
            });
            return;
        }
        let idle = self
            .notifications
            .as_ref()
            .is_none_or(|n| n.busy.load(Ordering::Acquire) == 0);
        let job = if idle {
            // Nothing before it is queued or running: it may start here, in order.
            let cx = Context::new(self.peer.clone(), self.router.state.clone());
            let started = std::panic::catch_unwind(AssertUnwindSafe(|| {
                let mut fut = handler(cx, frame.clone(), params);
                match fut
                    .as_mut()
                    .poll(&mut TaskContext::from_waker(Waker::noop()))
                {
                    Poll::Ready(()) => None,
                    Poll::Pending => Some(fut),
                }
            }));
            match started {
                Ok(None) => return,
                Ok(Some(fut)) => NotificationJob::Resume(fut),
                Err(_) => {
                    tracing::error!("a notification handler panicked");
                    return;
                }
            }
        } else {
            NotificationJob::Start {
                handler,
                frame: frame.clone(),
                params,
            }
        };
        let queue = self.notification_queue;
        let peer = &self.peer;
        let state = &self.router.state;
        let n = self.notifications.get_or_insert_with(|| {
            let (tx, rx) = mpsc::channel(queue);
            let busy = Arc::new(AtomicUsize::new(0));
            let cx = Context::new(peer.clone(), state.clone());
            Notifications {
                tx,
                busy: busy.clone(),
                task: tokio::spawn(notification_loop(rx, cx, busy)),
            }
        });
        n.busy.fetch_add(1, Ordering::AcqRel);
        match n.tx.try_send(job) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(job)) => {
                n.busy.fetch_sub(1, Ordering::AcqRel);
                self.backlog.push_back(job);
            }
            // The task is gone only once the connection ends.
            Err(mpsc::error::TrySendError::Closed(_)) => {
                n.busy.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }

    /// Queues an answer made on the reader. When the writer's queue is full, a task
    /// waits for room, so the reader does not.
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

fn log_join(done: Result<(), tokio::task::JoinError>) {
    if let Err(e) = done {
        if e.is_panic() {
            tracing::error!("a connection task panicked outside any handler");
        }
    }
}

/// The -32603 answer of a call whose handler panicked.
fn panicked(id: &str) -> String {
    tracing::error!(id, "a method handler panicked");
    message::error_response(Some(id), &RpcError::internal_error())
}

/// A method's handler and the context it runs with.
struct MethodHandle<S> {
    handler: Arc<MethodFn<S>>,
    cx: Context<S>,
}

/// Runs one call of a batch to its answer frame. A panic in the handler answers -32603.
async fn run_call<S: Send + Sync + 'static>(handle: MethodHandle<S>, call: Call) -> String {
    let id_frame = call.frame.clone();
    let id = call.id.clone();
    let MethodHandle { handler, cx } = handle;
    match AssertUnwindSafe(async move { handler(cx, call).await })
        .catch_unwind()
        .await
    {
        Ok(answer) => answer,
        Err(_) => panicked(&id_frame[id]),
    }
}

/// Runs a started call to its answer frame. A panic in the handler answers -32603.
async fn finish_call(fut: BoxFuture<String>, id: &str) -> String {
    match AssertUnwindSafe(fut).catch_unwind().await {
        Ok(answer) => answer,
        Err(_) => panicked(id),
    }
}

async fn notification_loop<S: Send + Sync + 'static>(
    mut rx: mpsc::Receiver<NotificationJob<S>>,
    cx: Context<S>,
    busy: Arc<AtomicUsize>,
) {
    while let Some(job) = rx.recv().await {
        let fut = match job {
            NotificationJob::Start {
                handler,
                frame,
                params,
            } => std::panic::catch_unwind(AssertUnwindSafe(|| handler(cx.clone(), frame, params))),
            NotificationJob::Resume(fut) => Ok(fut),
        };
        let finished = match fut {
            Ok(fut) => AssertUnwindSafe(fut).catch_unwind().await,
            Err(panic) => Err(panic),
        };
        if finished.is_err() {
            tracing::error!("a notification handler panicked");
        }
        // Released after the handler is done, so the reader that sees zero also sees
        // everything this handler did before it starts the next one.
        busy.fetch_sub(1, Ordering::AcqRel);
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

//! What the connection does with each incoming frame: classify it, start calls,
//! route answers, run notifications in order.
//!
//! Ordering decisions, in one place:
//! - The connection never *awaits* user code, but it does *poll* a handler once. An
//!   incoming call's handler is started on the connection's task and polled one time
//!   (with a waker that does nothing); most handlers finish there, and their answer is
//!   written at once. That saves, per call, a task spawn, its allocations and a
//!   wake-up of the connection when the task ends, which is most of what a call costs
//!   the engine. A handler that is not done after that first poll (it awaits I/O, a
//!   timer, or a call back to the other side) moves to its own task, which polls it
//!   again at once: so a handler may still call back the other side, and the
//!   connection is free to route the answer. The price: a handler's synchronous part
//!   (up to its first real await) runs on the connection's task, so a handler that
//!   computes for long before awaiting delays this connection, as it would delay its
//!   task's thread anyway. A panic in that first poll is caught like any other: the
//!   caller gets -32603.
//! - Notifications run one after another, in the order they arrived (see `ordered`).
//! - Answers to our calls are routed at once: a map lookup and a channel send.
//! - Back-pressure stops reading, never drops: when too many calls run, too many of
//!   our answers (in number or in bytes) wait for room in the outgoing queue, or the
//!   notification handler falls behind, reading pauses, and the other side's writes
//!   wait on TCP.

use std::future::Future;
use std::ops::Range;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};

use crate::message::Raw;
use futures_util::FutureExt;
use tokio::task::JoinSet;
use tokio::time::Sleep;

use crate::config::{CancelStyle, PeerConfig};
use crate::error::{CloseReason, Error, ErrorCode, RpcError};
use crate::message::{self, Incoming, Item};
use crate::peer::{CloseRequest, Peer, Reply};
use crate::pending::Answer;
use crate::queue::Outgoing;
use crate::router::{Call, Context, MethodFn, Router};
use crate::transport::Text;

use super::cancel;
use super::lanes::Keyed;
use super::ordered::Ordered;
use super::{poll_once, FirstPoll};
use crate::lanes::Lane;

/// The connection's dispatcher: what it has started and what waits to start.
pub(super) struct Dispatch<S> {
    router: Arc<Router<S>>,
    peer: Peer,
    /// Calls running on their own tasks and batches; with the answers waiting for
    /// room (the writer's), everything that counts against the in-flight bound.
    handlers: JoinSet<()>,
    notifications: Ordered<S>,
    /// The keyed lanes, from the first keyed call on.
    keyed: Option<Keyed>,
    max_batch: usize,
    max_in_flight: usize,
    /// Closing gracefully: new calls are refused while running ones finish. The one
    /// place the drain state lives.
    drain: Option<Drain>,
}

/// A graceful close waiting for the running calls, and its grace period.
struct Drain {
    code: u16,
    reason: String,
    grace: Pin<Box<Sleep>>,
}

impl<S: Send + Sync + 'static> Dispatch<S> {
    pub(super) fn new(router: Arc<Router<S>>, peer: Peer, config: &PeerConfig) -> Self {
        Dispatch {
            router,
            peer,
            handlers: JoinSet::new(),
            notifications: Ordered::new(config.notification_queue.max(1)),
            keyed: None,
            max_batch: config.max_batch_len,
            max_in_flight: config.max_in_flight.max(1),
            drain: None,
        }
    }

    /// Whether to read more, with `waiting` answers waiting for room (they count as
    /// running calls): not while too many calls run or notifications wait.
    pub(super) fn may_read(&self, waiting: usize) -> bool {
        self.handlers.len() + waiting < self.max_in_flight && !self.notifications.blocked()
    }

    /// Whether a graceful close is under way.
    pub(super) fn draining(&self) -> bool {
        self.drain.is_some()
    }

    /// A close asked for by this side. Returns the reason to close with now, or `None`
    /// when it drains first: running calls may finish until its deadline, new ones are
    /// refused.
    pub(super) fn close(&mut self, request: CloseRequest) -> Option<CloseReason> {
        match request.drain_until {
            Some(until) if !self.handlers.is_empty() => {
                self.drain = Some(Drain {
                    code: request.code,
                    reason: request.reason,
                    grace: Box::pin(tokio::time::sleep_until(until)),
                });
                None
            }
            _ => Some(CloseReason::Local {
                code: request.code,
                reason: request.reason,
            }),
        }
    }

    /// Ready with the close reason once a graceful close is done: every running call
    /// finished, or the grace period is over (the calls still running are stopped by
    /// the close).
    pub(super) fn poll_drained(&mut self, cx: &mut TaskContext<'_>) -> Poll<CloseReason> {
        let Some(drain) = &mut self.drain else {
            return Poll::Pending;
        };
        if !self.handlers.is_empty() {
            if drain.grace.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            tracing::debug!("grace period over; stopping the calls still running");
        }
        Poll::Ready(CloseReason::Local {
            code: drain.code,
            reason: std::mem::take(&mut drain.reason),
        })
    }

    /// Reaps finished handlers; when their number holds up reading (or a graceful
    /// close waits for them), waits for one. Ready when something changed.
    pub(super) fn poll_progress(&mut self, cx: &mut TaskContext<'_>) -> Poll<()> {
        // `try_join_next` takes the set's lock even when it is empty.
        let mut reaped = false;
        if !self.handlers.is_empty() {
            while let Some(done) = self.handlers.try_join_next() {
                log_join(done);
                reaped = true;
            }
        }
        // A graceful close ends when the last call does: say so, or it would wait for
        // the end of its grace.
        let draining = self.draining();
        if draining && reaped {
            return Poll::Ready(());
        }
        if draining || self.handlers.len() >= self.max_in_flight {
            if let Poll::Ready(Some(done)) = self.handlers.poll_join_next(cx) {
                log_join(done);
                return Poll::Ready(());
            }
        }
        if self.notifications.poll_room(cx).is_ready() {
            return Poll::Ready(());
        }
        Poll::Pending
    }

    /// Stops everything this connection started: handlers, the notification task.
    pub(super) fn stop(&mut self) {
        self.handlers.abort_all();
        self.peer.shared.running.clear();
        self.notifications.stop();
    }

    /// Waits until the tasks stopped by [`stop`](Self::stop) are gone, so nothing of
    /// the connection outlives it.
    pub(super) async fn stopped(&mut self) {
        while self.handlers.join_next().await.is_some() {}
    }

    /// Handles one text frame. Returns the one answer to write now, if any: a frame
    /// gets at most one (a batch's answers are joined into one array).
    pub(super) fn on_text(&mut self, frame: Text) -> Option<String> {
        let text: &str = &frame;
        match message::classify(text, self.max_batch) {
            Incoming::Reject(error) => Some(message::error_response(None, &error)),
            Incoming::Single(item) => self.on_item(&frame, item, None),
            Incoming::Batch(items) => {
                let mut answers = Vec::new();
                let mut calls = Vec::new();
                for item in items {
                    if let Some(answer) = self.on_item(&frame, item, Some(&mut calls)) {
                        answers.push(answer);
                    }
                }
                if calls.is_empty() {
                    return (!answers.is_empty()).then(|| join_batch(&answers));
                }
                let shared = self.peer.shared.clone();
                self.handlers.spawn(async move {
                    let running = calls
                        .into_iter()
                        .map(|(handle, call)| run_call(handle, call));
                    answers.extend(futures_util::future::join_all(running).await);
                    let frame = Outgoing::Frame(join_batch(&answers).into());
                    let _ = shared.out.send(frame).await;
                });
                None
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
            Item::Request {
                id,
                method,
                params,
                progress,
            } => {
                if self.draining() {
                    return Some(message::error_response(
                        Some(id.get()),
                        &RpcError::new(ErrorCode::CLOSING, "Closing")
                            .with_data("the connection is closing"),
                    ));
                }
                let Some(route) = self.router.route(&method) else {
                    return Some(message::error_response(
                        Some(id.get()),
                        &RpcError::method_not_found(),
                    ));
                };
                let handler = route.handler();
                let mut cx = self.router.context(&self.peer);
                if route.cooperative() {
                    cx.cancel = Some(Default::default());
                }
                let lane = route.lane();
                cx.progress = progress.map(|token| token.get().into());
                let call = Call {
                    frame: frame.clone(),
                    id: span(frame, id.get()),
                    params: params.map(|p| span(frame, p.get())),
                    notification: false,
                };
                match batch {
                    Some(batch) => {
                        let handle = MethodHandle {
                            handler: handler.clone(),
                            cx,
                            method: (*method).into(),
                        };
                        batch.push((handle, call));
                        None
                    }
                    None => match lane {
                        Lane::Concurrent => {
                            self.start_call(handler.clone(), cx, call, frame, &method, Some(id))
                        }
                        Lane::Ordered => {
                            let token = cx.cancel.clone();
                            let (id_frame, id) = (frame.clone(), call.id.clone());
                            let fut = handler(cx, call);
                            let job = cancel::stoppable_call(
                                &self.peer, fut, id_frame, id, &method, token,
                            );
                            let (peer, router) = (&self.peer, &*self.router);
                            self.notifications.push_call(Box::pin(job), peer, router);
                            None
                        }
                        Lane::Keyed(key) => match key(frame, call.params.clone()) {
                            Some(key) => {
                                let token = cx.cancel.clone();
                                let (id_frame, id) = (frame.clone(), call.id.clone());
                                let fut = handler(cx, call);
                                let job = cancel::stoppable_call(
                                    &self.peer, fut, id_frame, id, &method, token,
                                );
                                let queued = self.keyed.get_or_insert_with(Default::default);
                                self.handlers.spawn(queued.queue(key, job));
                                None
                            }
                            // Params that do not fit: the handler answers -32602 at once.
                            None => {
                                self.start_call(handler.clone(), cx, call, frame, &method, Some(id))
                            }
                        },
                    },
                }
            }
            Item::Notification { method, params } => {
                // Cancels are handled here, before any queue: a cancel must reach its
                // call even while ordered work runs.
                if let Some(style) = CancelStyle::of_method(&method) {
                    return cancel::on_cancel(&self.peer, style, params.map(Raw::get));
                }
                // Progress of our own calls goes to their callers, before any queue.
                if method == crate::progress::METHOD
                    && self
                        .peer
                        .shared
                        .progress
                        .deliver(frame, params.map(Raw::get))
                {
                    return None;
                }
                match self.router.notification_handler(&method) {
                    Some(handler) => {
                        let params = params.map(|p| span(frame, p.get()));
                        let (peer, router) = (&self.peer, &*self.router);
                        self.notifications
                            .push(handler, frame, params, peer, router);
                    }
                    // A notification is a request without an id: a method of that name
                    // runs, as a call whose answer (and failure) is dropped.
                    None => match self.router.route(&method) {
                        Some(route) => {
                            let handler = route.handler();
                            let cx = self.router.context(&self.peer);
                            let call = Call {
                                frame: frame.clone(),
                                id: 0..0,
                                params: params.map(|p| span(frame, p.get())),
                                notification: true,
                            };
                            let _ =
                                self.start_call(handler.clone(), cx, call, frame, &method, None);
                        }
                        None => {
                            tracing::warn!(%method, "notification without a handler; dropped")
                        }
                    },
                }
                None
            }
            Item::Response { id, outcome } => {
                let outcome = outcome.map(|raw| Reply::new(frame.clone(), span(frame, raw.get())));
                self.route(id, Ok(outcome));
                None
            }
            Item::BadResponse { id, reason } => {
                tracing::debug!(reason, "invalid response");
                if let Some(id) = id {
                    self.route(id, Err(Error::InvalidResponse(reason.to_owned())));
                }
                None
            }
            Item::Invalid { id, error } => Some(message::error_response(id.map(Raw::get), &error)),
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
        method: &str,
        id: Option<Raw<'_>>,
    ) -> Option<String> {
        let token = cx.cancel.clone();
        let peer = self.peer.id();
        // One span per incoming call (or notification run by a method): what the handler
        // logs says which call it serves.
        let call_span = match id {
            Some(id) => tracing::debug_span!("incoming", method, id = id.get()),
            None => tracing::debug_span!("incoming", method, notification = true),
        };
        let polled = call_span.in_scope(|| poll_once(|| handler(cx, call)));
        match (polled, id) {
            // A notification's run (no id) answers nothing.
            (FirstPoll::Done(answer), id) => id.map(|_| answer),
            (FirstPoll::Waiting(fut), Some(id)) => {
                // From here on a cancel can stop it.
                let (id_frame, id) = (frame.clone(), span(frame, id.get()));
                let rest = cancel::stoppable_call(&self.peer, fut, id_frame, id, method, token);
                self.handlers
                    .spawn(tracing::Instrument::instrument(rest, call_span));
                None
            }
            (FirstPoll::Waiting(fut), None) => {
                // No id to cancel it by, no answer to send.
                let method = Box::<str>::from(method);
                let rest = async move {
                    if AssertUnwindSafe(fut).catch_unwind().await.is_err() {
                        panicked(None, &method, peer);
                    }
                };
                self.handlers
                    .spawn(tracing::Instrument::instrument(rest, call_span));
                None
            }
            (FirstPoll::Panicked, id) => panicked(id.map(|id| id.get()), method, peer),
        }
    }

    fn route(&self, id: Raw<'_>, answer: Answer) {
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
}

fn log_join(done: Result<(), tokio::task::JoinError>) {
    if let Err(e) = done {
        if e.is_panic() {
            tracing::error!("a connection task panicked outside any handler");
        }
    }
}

/// The -32603 answer of a call whose handler panicked; none for a notification's run
/// (no id).
pub(super) fn panicked(id: Option<&str>, method: &str, peer: u64) -> Option<String> {
    tracing::error!(
        method,
        id,
        peer,
        "a method handler panicked; answered -32603"
    );
    id.map(|id| message::error_response(Some(id), &RpcError::internal_error()))
}

/// A method's handler and the context it runs with.
struct MethodHandle<S> {
    handler: Arc<MethodFn<S>>,
    cx: Context<S>,
    method: Box<str>,
}

/// Runs one call of a batch to its answer frame. A panic in the handler answers -32603.
async fn run_call<S: Send + Sync + 'static>(handle: MethodHandle<S>, call: Call) -> String {
    let id_frame = call.frame.clone();
    let id = call.id.clone();
    let MethodHandle {
        handler,
        cx,
        method,
    } = handle;
    let peer = cx.peer().id();
    match AssertUnwindSafe(async move { handler(cx, call).await })
        .catch_unwind()
        .await
    {
        Ok(answer) => answer,
        Err(_) => panicked(Some(&id_frame[id]), &method, peer).unwrap_or_default(),
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

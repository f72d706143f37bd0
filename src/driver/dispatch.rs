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

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};

use futures_util::FutureExt;

use crate::config::{CancelStyle, PeerConfig};
use crate::error::{CloseReason, Error, ErrorCode, RpcError};
use crate::lanes::Lane;
use crate::layer::Direction;
use crate::message::{self, span, Incoming, Item, Outcome, Raw};
use crate::peer::{CloseRequest, Peer, Reply};
use crate::pending::Answer;
use crate::router::{Call, Context, Router, Scope};
use crate::transport::Text;

use super::cancel;
use super::in_flight::{join_batch, BatchCall, InFlight};
use super::lanes::Keyed;
use super::ordered::Ordered;
use super::run::{caught, panicked};

/// What `starts_nothing` gives back while reading is paused.
pub(super) enum Waits {
    /// A message that starts something (a call, a notification, a batch, or a refusal
    /// to write): it waits for its turn.
    Turn(Text),
    /// A cancel for the call whose raw id this is, which no handler runs: it may be a
    /// call waiting for its turn (in `style`'s form).
    Cancel(Box<str>, CancelStyle),
}

/// The connection's dispatcher: what each message starts, and what runs.
pub(super) struct Dispatch<S> {
    /// The connection and its router, shared with every handler's context.
    scope: Arc<Scope<S>>,
    /// Calls (and batches) running on tasks of their own; the drain state.
    in_flight: InFlight,
    /// Notifications and ordered calls, one after another.
    ordered: Ordered<S>,
    /// The keyed lanes, from the first keyed call on (boxed: see `Ahead`).
    keyed: Option<Box<Keyed>>,
    max_batch: usize,
    /// Answers made while reading a batch that are not the batch's (a cancel's
    /// `-32800`): written alone after it. Boxed on first use (see `Ahead`).
    #[allow(
        clippy::box_collection,
        reason = "one pointer in every connection's task"
    )]
    loose: Option<Box<Vec<String>>>,
}

impl<S: Send + Sync + 'static> Dispatch<S> {
    pub(super) fn new(router: Arc<Router<S>>, peer: Peer, config: &PeerConfig) -> Self {
        Dispatch {
            scope: Scope::new(peer, router),
            in_flight: InFlight::new(config.max_in_flight),
            ordered: Ordered::new(config.notification_queue.max(1)),
            keyed: None,
            max_batch: config.max_batch_len,
            loose: None,
        }
    }

    /// Whether to read more, with `waiting` answers waiting for room (they count as
    /// running calls): not while too many calls run or notifications wait.
    pub(super) fn may_read(&self, waiting: usize) -> bool {
        self.in_flight.has_room(waiting) && !self.ordered.blocked()
    }

    /// Whether a graceful close is under way.
    pub(super) fn draining(&self) -> bool {
        self.in_flight.draining()
    }

    /// A close asked for by this side: the reason to close with now, or `None` while
    /// the running calls may finish (see [`InFlight::close`]).
    pub(super) fn close(&mut self, request: CloseRequest) -> Option<CloseReason> {
        self.in_flight.close(request, self.ordered.is_idle())
    }

    /// Ready with the close reason once a graceful close is done.
    pub(super) fn poll_drained(&mut self, cx: &mut TaskContext<'_>) -> Poll<CloseReason> {
        let ordered_idle = self.ordered.poll_idle(cx).is_ready();
        self.in_flight.poll_drained(cx, ordered_idle)
    }

    /// Ready when something that holds reading up moved: a call ended, or a
    /// notification found room in the ordered queue.
    pub(super) fn poll_progress(&mut self, cx: &mut TaskContext<'_>) -> Poll<()> {
        if self.in_flight.poll_reaped(cx).is_ready() || self.ordered.poll_room(cx).is_ready() {
            return Poll::Ready(());
        }
        Poll::Pending
    }

    /// Stops everything this connection started: calls, the notification task.
    pub(super) fn stop(&mut self) {
        self.in_flight.stop();
        self.scope.peer.shared.running().clear();
        self.ordered.stop();
    }

    /// Waits until the tasks stopped by [`stop`](Self::stop) are gone, so nothing of
    /// the connection outlives it.
    pub(super) async fn stopped(&mut self) {
        self.in_flight.stopped().await;
        self.ordered.stopped().await;
    }

    /// The longest batch read (`max_batch_len`).
    pub(super) fn max_batch(&self) -> usize {
        self.max_batch
    }

    /// Answers made by the last frame beside its own (see `loose`).
    pub(super) fn take_loose(&mut self) -> Option<String> {
        let loose = self.loose.as_mut().filter(|loose| !loose.is_empty())?;
        Some(loose.remove(0))
    }

    /// While reading is paused: acts on `frame` at once if it starts nothing: answers
    /// to this side's calls (a response, or an array of them), which may be what a
    /// running handler waits for, or a cancel, which may be what stops the handler that
    /// holds reading up. Returns the answer a cancel makes (`-32800`), if any. Anything
    /// else is given back, to wait for its turn; so is a cancel for a call no handler
    /// runs (it may be one waiting for its turn).
    pub(super) fn starts_nothing(&mut self, frame: Text) -> Result<Option<String>, Waits> {
        let starts_nothing = match message::classify(&frame, self.max_batch) {
            Incoming::Single(Item::Notification { method, params }) => {
                match CancelStyle::of_method(&method) {
                    None => false,
                    Some(style) => match cancel::named(style, params.map(Raw::get)) {
                        Some(id) if !self.scope.peer.shared.running().contains(&id) => {
                            crate::metrics::cancel_received();
                            return Err(Waits::Cancel(id, style));
                        }
                        _ => true,
                    },
                }
            }
            Incoming::Single(item) => item.is_answer(),
            Incoming::Batch(items) => items.iter().all(Item::is_answer),
            Incoming::Reject(_) => false,
        };
        if !starts_nothing {
            return Err(Waits::Turn(frame));
        }
        Ok(self.on_text(frame))
    }

    /// A cancel, read earlier, for a call that has started since: stops it as a cancel
    /// read now would. The answer to write for it, if any (none for a batch's call: its
    /// batch answers it).
    pub(super) fn cancel_started(&self, id: &str, style: CancelStyle) -> Option<String> {
        self.scope.peer.shared.running().cancel(id, style)
    }

    /// Handles one text frame. Returns the one answer to write now, if any: a frame
    /// gets at most one (a batch's answers are joined into one array).
    pub(super) fn on_text(&mut self, frame: Text) -> Option<String> {
        match message::classify(&frame, self.max_batch) {
            Incoming::Reject(error) => {
                let error = self.admit().err().unwrap_or(error);
                Some(message::error_response(None, &error))
            }
            // An answer alone in its frame takes the frame with it, rather than a
            // clone: a clone and its drop are two atomic read-modify-writes.
            Incoming::Single(Item::Response { id, outcome }) => {
                let Some(id) = ours(id) else {
                    self.refused_whole(&frame, id, outcome);
                    return None;
                };
                let outcome = outcome.map(|raw| span(&frame, raw.get()));
                self.on_response(id, Ok(outcome.map(|range| Reply::new(frame, range))));
                None
            }
            Incoming::Single(item) => self.on_item(&frame, item, None),
            Incoming::Batch(items) => {
                if let Some(layers) = self.scope.peer.shared.layers() {
                    // A batch of calls; an array of answers to a batch of ours is not.
                    let calls = items.iter().filter(|item| !item.is_answer()).count();
                    // The application's code, on the connection's task: a panic is logged.
                    let seen = || layers.on_batch(Direction::Served, calls);
                    if calls > 0 && caught(seen).is_none() {
                        tracing::error!(calls, "a call layer's on_batch panicked");
                    }
                }
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
                self.in_flight.spawn_batch(&self.scope.peer, answers, calls);
                None
            }
        }
    }

    /// Handles one message by its kind. Returns an answer to send now, if any; a call
    /// of a batch goes to `batch`, to run with the rest of it.
    fn on_item(
        &mut self,
        frame: &Text,
        item: Item<'_>,
        batch: Option<&mut Vec<BatchCall>>,
    ) -> Option<String> {
        match item {
            Item::Request {
                id,
                method,
                params,
                progress,
            } => self.on_request(frame, id.get(), &method, params, progress, batch),
            Item::Notification { method, params } => {
                let answer = self.on_notification(frame, &method, params.map(Raw::get));
                match (answer, batch) {
                    // A cancel's answer is for the call it stopped, not a member of
                    // this batch's array: it goes out alone.
                    (Some(answer), Some(_)) => {
                        self.loose.get_or_insert_default().push(answer);
                        None
                    }
                    (answer, _) => answer,
                }
            }
            Item::Response { id, outcome } => {
                let Some(ours) = ours(id) else {
                    self.refused_whole(frame, id, outcome);
                    return None;
                };
                let outcome = outcome.map(|raw| Reply::new(frame.clone(), span(frame, raw.get())));
                self.on_response(ours, Ok(outcome));
                None
            }
            Item::BadResponse { id, reason } => {
                tracing::debug!(reason, "invalid response");
                let answer = Err(Error::InvalidResponse(reason.to_owned()));
                self.on_response(ours(id?)?, answer);
                None
            }
            Item::Invalid { id, error } => {
                let error = self.admit().err().unwrap_or(error);
                Some(message::error_response(id.map(Raw::get), &error))
            }
        }
    }

    /// What is answered but is no call (a request that is not valid, a frame that is
    /// not JSON) counts against the rate limit as a call does: else a flood of them
    /// would be answered without end and never closed with 4029. The error to answer
    /// instead when past the limit.
    fn admit(&self) -> Result<(), RpcError> {
        match self.scope.peer.shared.layers() {
            Some(stack) => stack.admit(&self.scope.peer),
            None => Ok(()),
        }
    }

    /// A call: refused while draining, `-32601` for an unknown method; else started in
    /// its lane (or with its batch). Returns its answer if it has one already.
    fn on_request(
        &mut self,
        frame: &Text,
        id: &str,
        method: &str,
        params: Option<Raw<'_>>,
        progress: Option<Raw<'_>>,
        batch: Option<&mut Vec<BatchCall>>,
    ) -> Option<String> {
        if self.draining() {
            let closing =
                RpcError::new(ErrorCode::CLOSING, "Closing").with_data("the connection is closing");
            return Some(message::error_response(Some(id), &closing));
        }
        let (route, unrouted) = match self.scope.router.route(method) {
            Some(route) => (route, false),
            None => match self.scope.router.fallback_route() {
                Some(route) => (route, true),
                None => return Some(self.not_found(frame, Some(id), method, params.map(Raw::get))),
            },
        };
        let mut cx = Context::new(&self.scope);
        if route.cooperative() {
            cx.cancel = Some(Default::default());
        }
        cx.progress = progress.map(|token| crate::progress::Token::new(token.get()));
        let mut call = Call::new(frame, Some(id), params.map(Raw::get));
        if unrouted {
            call.unrouted = Some(method.into());
        }
        if let Some(batch) = batch {
            batch.push(BatchCall::new(route.handler().clone(), cx, method, call));
            return None;
        }
        let (handler, peer) = (&**route.handler(), &self.scope.peer);
        // The key function is the application's code: its panic answers -32603, as a
        // handler's does.
        let Some(turn) = Turn::of(route.lane(), frame, &call) else {
            return panicked(Some(id), method, peer.id());
        };
        if let Turn::Now = turn {
            let id = Some((frame, id));
            return self.in_flight.start(peer, handler, cx, call, method, id);
        }
        // Waiting for its turn, it may wait long: a cancel can stop it from the start.
        let token = cx.cancel.clone();
        let call_id = (call.frame.clone(), call.id.clone());
        // Making the future runs the call layers' `on_call`: a panic there answers -32603.
        let Some(future) = caught(|| handler(cx, call)) else {
            return panicked(Some(id), method, peer.id());
        };
        let job = cancel::stoppable_call(peer, future, call_id, method, token);
        if let Turn::Keyed(key) = turn {
            let keyed = self.keyed.get_or_insert_with(Default::default);
            self.in_flight.spawn(keyed.queue(key, job));
        } else {
            self.ordered.push_call(Box::pin(job), &self.scope);
        }
        None
    }

    /// A notification: a cancel or progress of ours is handled at once, before any
    /// queue; others go to their handler in order, or run a method of that name.
    /// Returns the answer a cancel makes (`-32800` for the call it stopped), if any.
    fn on_notification(
        &mut self,
        frame: &Text,
        method: &str,
        params: Option<&str>,
    ) -> Option<String> {
        // A cancel must reach its call even while ordered work runs.
        if let Some(style) = CancelStyle::of_method(method) {
            return cancel::on_cancel(&self.scope.peer, style, params);
        }
        // Progress of our own calls goes to their callers.
        if method == crate::progress::METHOD
            && self.scope.peer.shared.progress().deliver(frame, params)
        {
            return None;
        }
        if let Some(handler) = self.scope.router.notification_handler(method) {
            let params = params.map(|p| span(frame, p));
            self.ordered.push(handler, frame, params, &self.scope);
            return None;
        }
        // A notification is a request without an id: a method of that name runs, as a
        // call whose answer (and failure) is dropped, in the method's lane.
        if let Some(route) = self.scope.router.route(method) {
            let cx = Context::new(&self.scope);
            let call = Call::new(frame, None, params);
            let peer = &self.scope.peer;
            let (handler, peer_id) = (route.handler(), peer.id());
            // The key function's panic costs the notification, as a handler's does.
            let Some(turn) = Turn::of(route.lane(), frame, &call) else {
                let _ = panicked(None, method, peer_id);
                return None;
            };
            if let Turn::Now = turn {
                let _ = self
                    .in_flight
                    .start(peer, &**handler, cx, call, method, None);
                return None;
            }
            let Some(run) = caught(|| handler(cx, call)) else {
                let _ = panicked(None, method, peer_id);
                return None;
            };
            let name = Box::<str>::from(method);
            let job = async move {
                if AssertUnwindSafe(run).catch_unwind().await.is_err() {
                    let _ = panicked(None, &name, peer_id);
                }
            };
            if let Turn::Keyed(key) = turn {
                let keyed = self.keyed.get_or_insert_with(Default::default);
                self.in_flight.spawn(keyed.queue(key, job));
            } else {
                self.ordered.push_call(Box::pin(job), &self.scope);
            }
            return None;
        }
        // The fallback gets it in order, as notification handlers do: a bridge
        // forwards them in the order they were sent.
        if let Some(route) = self.scope.router.fallback_route() {
            let mut call = Call::new(frame, None, params);
            call.unrouted = Some(method.into());
            let made = || route.handler()(Context::new(&self.scope), call);
            let Some(run) = caught(made) else {
                let _ = panicked(None, method, self.scope.peer.id());
                return None;
            };
            let job = Box::pin(async move {
                run.await;
            });
            self.ordered.push_call(job, &self.scope);
            return None;
        }
        crate::logs::throttled!(warn, %method, "notification without a handler; dropped");
        self.not_found(frame, None, method, params);
        None
    }

    /// A call (or notification, `id` `None`) of a name nothing serves: `-32601`, or
    /// what a call layer answers instead; the layers see it.
    fn not_found(
        &self,
        frame: &Text,
        id: Option<&str>,
        method: &str,
        params: Option<&str>,
    ) -> String {
        if self.scope.peer.shared.layers().is_none() {
            return match id {
                Some(id) => message::error_response(Some(id), &RpcError::method_not_found()),
                None => String::new(),
            };
        }
        let call = Call::new(frame, id, params);
        // The layers are the application's code: a panic answers -32603, as a
        // handler's does.
        let peer = &self.scope.peer;
        caught(|| crate::layer::not_found(peer, &call, method))
            .unwrap_or_else(|| panicked(id, method, peer.id()).unwrap_or_default())
    }

    /// An answer whose id is not one of ours. An Invalid Request or Parse error with
    /// `id: null` is how the other side refuses a whole batch it will not read (too
    /// long, not understood): it names no batch, so it ends the calls of the one batch
    /// of ours waiting, if exactly one is (`Pending::refused_batch`), rather than leave
    /// them to their timeout. Anything else is ignored.
    fn refused_whole(&self, frame: &Text, id: Raw<'_>, outcome: Outcome<Raw<'_>>) {
        if let (Outcome::Error(error), "null") = (outcome, id.get()) {
            #[derive(serde::Deserialize)]
            struct Code {
                code: i64,
            }
            let code = serde_json::from_str::<Code>(error.get()).map(|e| e.code);
            if matches!(code, Ok(-32600 | -32700)) {
                let range = span(frame, error.get());
                let refused =
                    self.scope.peer.shared.pending().refused_batch(|| {
                        Ok(Outcome::Error(Reply::new(frame.clone(), range.clone())))
                    });
                if refused > 0 {
                    tracing::debug!(refused, "a batch of ours refused whole");
                    return;
                }
            }
        }
        tracing::debug!(id = id.get(), "answer with an id we never send; ignored");
    }

    /// An answer to one of our calls, handed to the call that waits for it.
    fn on_response(&self, id: u64, answer: Answer) {
        if !self.scope.peer.shared.pending().complete(id, answer) {
            tracing::debug!(
                id,
                "answer to no waiting call (late, or never sent); ignored"
            );
        }
    }
}

/// An answer's id as one of ours. We only ever send numeric ids, so any other id
/// answers nothing of ours (but see [`Dispatch::refused_whole`]).
fn ours(id: Raw<'_>) -> Option<u64> {
    id.get().parse::<u64>().ok()
}

/// When a call starts: now, or after those before it in its lane.
enum Turn {
    Now,
    Ordered,
    Keyed(u64),
}

impl Turn {
    /// The turn of `call` in `lane`; `None` when the lane's key function panicked.
    /// Params that do not fit have no key: the call starts at once (and its handler
    /// answers -32602).
    fn of(lane: &Lane, frame: &Text, call: &Call) -> Option<Turn> {
        Some(match lane {
            Lane::Concurrent => Turn::Now,
            Lane::Ordered => Turn::Ordered,
            Lane::Keyed(key) => {
                caught(|| key(frame, call.params.clone()))?.map_or(Turn::Now, Turn::Keyed)
            }
        })
    }
}

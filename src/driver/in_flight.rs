//! The calls a connection runs on tasks of their own, and the graceful close that
//! waits for them.
//!
//! A call whose handler is not done after its first poll on the connection's task
//! moves to a task here, as does a batch with calls (run together, answered as one
//! array) and a call waiting in a keyed lane. Together with the answers waiting for
//! room (the writer's), they count against `max_in_flight`, a batch as many as its
//! calls: past it, reading pauses until one ends. (A batch read while there was room
//! runs whole, so a connection runs at most `max_in_flight` plus one batch's calls.)

use std::future::Future;
use std::ops::Range;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};

use futures_util::future::Abortable;
use futures_util::FutureExt;
use tokio::task::JoinSet;
use tokio::time::Sleep;

use super::cancel::{self, Ticket};
use super::run::{panicked, poll_once, FirstPoll};
use crate::error::CloseReason;
use crate::message::span;
use crate::peer::{CloseRequest, Peer};
use crate::router::{Call, Context, HandlerFuture, MethodFn};
use crate::transport::Text;

pub(super) struct InFlight {
    /// Each task ends with its weight beyond one: a batch's calls but one, 0 otherwise.
    tasks: JoinSet<u32>,
    max: u32,
    /// The running tasks' weights beyond one (see `tasks`), so that `tasks.len() +
    /// extra` counts calls.
    extra: u32,
    /// Closing gracefully: new calls are refused while running ones finish. The one
    /// place the drain state lives; boxed, as only a closing connection has one (every
    /// idle one keeps this struct in its task: see `Ahead`).
    drain: Option<Box<Drain>>,
}

/// A graceful close waiting for the running calls, and its grace period.
struct Drain {
    code: u16,
    reason: String,
    grace: Pin<Box<Sleep>>,
}

impl InFlight {
    pub(super) fn new(max: usize) -> Self {
        InFlight {
            tasks: JoinSet::new(),
            max: u32::try_from(max).unwrap_or(u32::MAX).max(1),
            extra: 0,
            drain: None,
        }
    }

    /// Whether another call may start, with `waiting` answers waiting for room.
    pub(super) fn has_room(&self, waiting: usize) -> bool {
        self.running() + waiting < self.max as usize
    }

    /// The calls running on tasks of their own, a batch's each counted.
    fn running(&self) -> usize {
        self.tasks.len() + self.extra as usize
    }

    /// A task ended: its weight no longer counts.
    fn reaped(&mut self, done: Result<u32, tokio::task::JoinError>) {
        match done {
            Ok(extra) => self.extra = self.extra.saturating_sub(extra),
            Err(e) if e.is_panic() => {
                tracing::error!("a connection task panicked outside any handler");
            }
            Err(_) => {}
        }
    }

    /// Whether a graceful close is under way.
    pub(super) fn draining(&self) -> bool {
        self.drain.is_some()
    }

    /// A close asked for by this side. Returns the reason to close with now, or `None`
    /// when it drains first: running calls (these, and the ordered work unless
    /// `ordered_idle`) may finish until its deadline, new ones are refused.
    pub(super) fn close(
        &mut self,
        request: CloseRequest,
        ordered_idle: bool,
    ) -> Option<CloseReason> {
        match request.drain_until {
            Some(until) if !self.tasks.is_empty() || !ordered_idle => {
                self.drain = Some(Box::new(Drain {
                    code: request.code,
                    reason: request.reason,
                    grace: Box::pin(tokio::time::sleep_until(until)),
                }));
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
    pub(super) fn poll_drained(
        &mut self,
        cx: &mut TaskContext<'_>,
        ordered_idle: bool,
    ) -> Poll<CloseReason> {
        let Some(drain) = self.drain.as_deref_mut() else {
            return Poll::Pending;
        };
        if !self.tasks.is_empty() || !ordered_idle {
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

    /// Reaps finished calls; when their number holds up reading (or a graceful close
    /// waits for them), waits for one. Ready when one ended.
    pub(super) fn poll_reaped(&mut self, cx: &mut TaskContext<'_>) -> Poll<()> {
        // `try_join_next` takes the set's lock even when it is empty.
        let mut reaped = false;
        if !self.tasks.is_empty() {
            while let Some(done) = self.tasks.try_join_next() {
                self.reaped(done);
                reaped = true;
            }
        }
        // A graceful close ends when the last call does: say so, or it would wait for
        // the end of its grace.
        let draining = self.draining();
        if draining && reaped {
            return Poll::Ready(());
        }
        if draining || self.running() >= self.max as usize {
            if let Poll::Ready(Some(done)) = self.tasks.poll_join_next(cx) {
                self.reaped(done);
                return Poll::Ready(());
            }
        }
        Poll::Pending
    }

    /// Runs `task` on a task of its own, counted as a running call.
    pub(super) fn spawn(&mut self, task: impl Future<Output = ()> + Send + 'static) {
        self.tasks.spawn(task.map(|()| 0));
    }

    /// Starts a call and polls it once; returns its answer if that was enough. If not,
    /// the call goes on on a task of its own (see `dispatch`), where a cancel can stop
    /// it. `id` is the frame and the call's raw id in it; `None` for a notification run
    /// by a method, which answers nothing.
    pub(super) fn start<S: Send + Sync + 'static>(
        &mut self,
        peer: &Peer,
        handler: &MethodFn<S>,
        cx: Context<S>,
        call: Call,
        method: &str,
        id: Option<(&Text, &str)>,
    ) -> Option<String> {
        let token = cx.cancel.clone();
        // One span per incoming call (or notification run by a method): what the handler
        // logs says which call it serves.
        let call_span = match id {
            Some((_, id)) => tracing::debug_span!("incoming", method, id),
            None => tracing::debug_span!("incoming", method, notification = true),
        };
        let polled = call_span.in_scope(|| poll_once(|| handler(cx, call)));
        match (polled, id) {
            // A notification's run (no id) answers nothing.
            (FirstPoll::Done(answer), id) => id.map(|_| answer),
            (FirstPoll::Waiting(fut), Some((frame, id))) => {
                // From here on a cancel can stop it.
                let id = (frame.clone(), span(frame, id));
                let rest = cancel::stoppable_call(peer, fut, id, method, token);
                self.spawn(tracing::Instrument::instrument(rest, call_span));
                None
            }
            (FirstPoll::Waiting(fut), None) => {
                // No id to cancel it by, no answer to send.
                let (method, peer) = (Box::<str>::from(method), peer.id());
                let rest = async move {
                    if AssertUnwindSafe(fut).catch_unwind().await.is_err() {
                        panicked(None, &method, peer);
                    }
                };
                self.spawn(tracing::Instrument::instrument(rest, call_span));
                None
            }
            (FirstPoll::Panicked, id) => panicked(id.map(|(_, id)| id), method, peer.id()),
        }
    }

    /// Runs the calls of a batch together on one task and sends their answers, with
    /// `answers` (those made at once), as one array.
    pub(super) fn spawn_batch(
        &mut self,
        peer: &Peer,
        mut answers: Vec<String>,
        calls: Vec<BatchCall>,
    ) {
        let shared = peer.shared.clone();
        // Counted as many calls as it runs, until its task ends (whatever ends it:
        // each call's panic is answered, and the task returns its weight).
        let extra = u32::try_from(calls.len().saturating_sub(1)).unwrap_or(u32::MAX);
        self.extra = self.extra.saturating_add(extra);
        self.tasks.spawn(async move {
            let running = calls.into_iter().map(BatchCall::run);
            answers.extend(
                futures_util::future::join_all(running)
                    .await
                    .into_iter()
                    .flatten(),
            );
            // Every call cancelled in the MCP form, and nothing else to answer: no array.
            if !answers.is_empty() {
                shared.send_answer(join_batch(&answers)).await;
            }
            extra
        });
    }

    /// Stops every call running.
    pub(super) fn stop(&mut self) {
        self.tasks.abort_all();
    }

    /// Waits until the calls stopped by [`stop`](Self::stop) are gone.
    pub(super) async fn stopped(&mut self) {
        while self.tasks.join_next().await.is_some() {}
    }
}

/// A call of a batch, ready to run with the others. A cancel can stop it from the
/// moment it is read: the batch's array then answers it as the cancel says.
pub(super) struct BatchCall {
    run: Abortable<HandlerFuture<String>>,
    ticket: Ticket,
    peer: Peer,
    method: Box<str>,
    id: (Text, Range<usize>),
}

impl BatchCall {
    /// The call of `method` to `handler`, registered where a cancel finds it.
    pub(super) fn new<S: Send + Sync + 'static>(
        handler: Arc<MethodFn<S>>,
        cx: Context<S>,
        method: &str,
        call: Call,
    ) -> Self {
        let peer = cx.peer().clone();
        let id = (call.frame.clone(), call.id.clone());
        let token = cx.cancel.clone();
        // Made when the batch runs: making it runs the call layers' `on_call`, whose
        // panic is the call's, caught with the handler's.
        let fut: HandlerFuture<String> = Box::pin(async move { handler(cx, call).await });
        let (run, ticket) = peer
            .shared
            .running()
            .register(&id.0[id.1.clone()], fut, token, true);
        BatchCall {
            run,
            ticket,
            peer,
            method: method.into(),
            id,
        }
    }

    /// Runs the call to its answer frame for the batch's array: `None` when a cancel
    /// in the MCP form took it. A panic in the handler answers -32603.
    async fn run(self) -> Option<String> {
        let BatchCall {
            run,
            ticket,
            peer,
            method,
            id: (frame, id),
        } = self;
        let answer = match AssertUnwindSafe(run).catch_unwind().await {
            Ok(Ok(answer)) => answer,
            // Stopped by a cancel: its answer is the one it made.
            Ok(Err(_aborted)) => return ticket.cancelled_answer(),
            Err(_) => panicked(Some(&frame[id]), &method, peer.id()).unwrap_or_default(),
        };
        if peer.shared.running().finish(&ticket) {
            Some(answer)
        } else {
            ticket.cancelled_answer()
        }
    }
}

pub(super) fn join_batch(answers: &[String]) -> String {
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

//! Calls and notifications served, through the layers: what the router's handlers
//! and the dispatcher run instead of their plain path when a connection has layers.
//!
//! Every hook runs inside the handler's own future (allocated anyway), so a layered
//! call still finishes in its first poll on the connection's task when its handler
//! does. A `Served` value goes along with the call: its end reports the outcome, and
//! if the future is dropped before (a cancel, the connection's end, a panic), its
//! `Drop` reports that instead.

use std::cell::Cell;
use std::future::Future;
use std::ops::Range;
use std::sync::Arc;

use serde::Serialize;
use tokio::time::Instant;

use super::{CallInfo, CallOutcome, Decision, Direction, Parts, Stack};
use crate::error::RpcError;
use crate::message;
use crate::peer::Peer;
use crate::router::{Call, Context, HandlerFuture};
use crate::transport::Text;

/// One call or notification served, seen by the layers, on its way to its outcome.
struct Served {
    peer: Peer,
    frame: Text,
    method: Arc<str>,
    id: Option<Range<usize>>,
    params: Option<Range<usize>>,
    known: bool,
    /// How many layers saw `on_call`: they, and only they, see the outcome. Counted
    /// as each returns, so a panic in a later one leaves it right.
    seen: Cell<usize>,
    /// The clock at the start, if a layer wants the duration.
    started: Option<Instant>,
    ended: bool,
}

impl Served {
    /// Runs the layers' `on_call`; returns the call and what they decided.
    fn start(
        peer: &Peer,
        frame: &Text,
        method: Arc<str>,
        id: Option<Range<usize>>,
        params: Option<Range<usize>>,
        known: bool,
    ) -> (Served, Decision) {
        let mut served = Served {
            peer: peer.clone(),
            frame: frame.clone(),
            method,
            id,
            params,
            known,
            seen: Cell::new(0),
            started: None,
            ended: false,
        };
        let decision = match peer.shared.layers() {
            Some(stack) => {
                served.started = stack.start_clock(served.id.is_none());
                stack.on_call(&served.info(), &served.seen)
            }
            None => Decision::Continue,
        };
        (served, decision)
    }

    /// The served `call` of `method`.
    fn of_call(peer: &Peer, call: &Call, method: Arc<str>, known: bool) -> (Served, Decision) {
        let id = (!call.notification).then(|| call.id.clone());
        Served::start(peer, &call.frame, method, id, call.params.clone(), known)
    }

    fn stack(&self) -> Option<&Stack> {
        self.peer.shared.layers()
    }

    fn info(&self) -> CallInfo<'_> {
        CallInfo {
            direction: Direction::Served,
            method: &self.method,
            parts: Parts::Found {
                params: self.params.clone().map(|range| &self.frame[range]),
                id: self.id(),
            },
            peer: &self.peer,
            known: self.known,
        }
    }

    fn id(&self) -> Option<&str> {
        self.id.clone().map(|range| &self.frame[range])
    }

    /// Reports the outcome to the layers that saw the call.
    fn finish(mut self, outcome: &CallOutcome<'_>) {
        self.report(outcome);
    }

    fn report(&mut self, outcome: &CallOutcome<'_>) {
        self.ended = true;
        if let Some(stack) = self.stack() {
            stack.on_outcome(self.seen.get(), &self.info(), outcome, self.started);
        }
    }

    /// Answers with `error` (nothing for a notification), reported as the outcome.
    fn fail(self, error: &RpcError) -> String {
        let frame = self
            .id()
            .map(|id| message::error_response(Some(id), error))
            .unwrap_or_default();
        self.finish(&CallOutcome::Error(error));
        frame
    }

    /// Answers with a result (nothing for a notification), reported as the outcome.
    fn succeed<T: Serialize + ?Sized>(self, result: &T) -> String {
        let Some(range) = self.id.clone() else {
            self.finish(&CallOutcome::Notified);
            return String::new();
        };
        let request = self.frame.clone();
        let id = &request[range];
        match message::response(id, result) {
            Ok(frame) => {
                self.finish(&CallOutcome::Result(message::result_in(&frame, id)));
                frame
            }
            Err(e) => self.fail(&RpcError::internal_error(format_args!(
                "the result could not be serialized: {e}"
            ))),
        }
    }

    /// The answer a layer decided on instead of the handler.
    fn answer_instead(self, decision: Decision) -> String {
        match decision {
            Decision::Error(error) => self.fail(&error),
            Decision::Result(result) => self.succeed(&*result),
            // Not given: the caller runs the handler on `Continue`.
            Decision::Continue => self.fail(&RpcError::new(
                crate::ErrorCode::INTERNAL_ERROR,
                "Internal error",
            )),
        }
    }
}

impl Drop for Served {
    /// The call's future went away before its end: a panic unwinding through it, the
    /// connection's end (its calls are stopped), or else a cancel.
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        let outcome = if std::thread::panicking() {
            CallOutcome::Panicked
        } else if self.peer.shared.ended().is_some() {
            CallOutcome::Closed
        } else {
            CallOutcome::Cancelled
        };
        self.report(&outcome);
    }
}

/// A method's call (or a notification it runs) through the layers: `start` reads the
/// params and makes the handler's future, as the plain path does (`router.rs`).
pub(crate) fn run_method<S, T, Fut>(
    cx: Context<S>,
    call: Call,
    method: Arc<str>,
    known: bool,
    start: impl FnOnce(Context<S>, &Call) -> Result<Fut, serde_json::Error>,
) -> HandlerFuture<String>
where
    Fut: Future<Output = Result<T, RpcError>> + Send + 'static,
    T: Serialize + Send + 'static,
{
    let (served, decision) = Served::of_call(cx.peer(), &call, method, known);
    if !matches!(decision, Decision::Continue) {
        return Box::pin(std::future::ready(served.answer_instead(decision)));
    }
    let ends = crate::progress::Ends::of(&cx);
    let fut = match start(cx, &call) {
        Ok(fut) => fut,
        Err(e) => {
            // Logged as the plain path (`router.rs`) logs it: a layer silences nothing.
            match served.id() {
                None => {
                    crate::logs::throttled!(warn, method = %served.method, error = %e, "notification params do not fit the method; dropped");
                }
                Some(id) => {
                    tracing::debug!(method = %served.method, id, error = %e, "params do not fit; answered -32602");
                }
            }
            let frame = served.fail(&RpcError::invalid_params(e));
            return Box::pin(std::future::ready(frame));
        }
    };
    Box::pin(async move {
        let outcome = fut.await;
        drop(ends);
        match outcome {
            Ok(result) => served.succeed(&result),
            Err(error) => {
                if served.id.is_none() {
                    tracing::debug!(method = %served.method, %error, "a method run by a notification failed; nothing is answered");
                }
                served.fail(&error)
            }
        }
    })
}

/// A notification handler's run through the layers; `start` reads the params and
/// makes the handler's future (`None` when they do not fit: dropped).
pub(crate) fn run_notification<S, Fut>(
    cx: Context<S>,
    frame: &Text,
    params: Option<Range<usize>>,
    method: Arc<str>,
    start: impl FnOnce(Context<S>) -> Result<Fut, serde_json::Error>,
) -> HandlerFuture<()>
where
    Fut: Future<Output = ()> + Send + 'static,
{
    let (served, decision) = Served::start(cx.peer(), frame, method, None, params, true);
    if !matches!(decision, Decision::Continue) {
        served.answer_instead(decision);
        return Box::pin(std::future::ready(()));
    }
    match start(cx) {
        Ok(fut) => Box::pin(async move {
            fut.await;
            served.finish(&CallOutcome::Notified);
        }),
        Err(e) => {
            crate::logs::throttled!(warn, method = %served.method, error = %e, "notification params do not fit; dropped");
            served.fail(&RpcError::invalid_params(e));
            Box::pin(std::future::ready(()))
        }
    }
}

/// A call of a method the router does not know (and no fallback takes): `-32601`, or
/// what a layer answers instead. A notification nothing handles is dropped (the
/// layers see it): the answer is empty.
pub(crate) fn not_found(peer: &Peer, call: &Call, method: &str) -> String {
    let (served, decision) = Served::of_call(peer, call, method.into(), false);
    match decision {
        Decision::Continue => served.fail(&RpcError::method_not_found()),
        decision => served.answer_instead(decision),
    }
}

//! Calls and notifications made, through the layers: what `Peer::call_inner` and
//! `Peer::notify` run when the connection has layers. The layers see the frame as it
//! will go out (its params and id as written, looked for only if a layer asks; at the
//! outcome only if a layer [wants](super::Wants::outcome_parts) them), and the call's `Result` at its end; a
//! call whose future is dropped first reports [`CallOutcome::Cancelled`].

use std::cell::Cell;
use std::future::Future;

use tokio::time::Instant;

use super::{CallInfo, CallOutcome, Decision, Direction, Parts};
use crate::error::{Error, Result};
use crate::peer::{Peer, Reply};
use crate::transport::Text;

/// One call or notification made, seen by the layers, on its way to its outcome.
struct Made<'a> {
    peer: &'a Peer,
    method: &'a str,
    /// The frame, kept for the outcome if a layer wants its params and id.
    frame: Option<Text>,
    has_id: bool,
    /// How many layers saw `on_call` (see `serve.rs`).
    seen: Cell<usize>,
    /// The clock at the start, if a layer wants the duration.
    started: Option<Instant>,
    ended: bool,
}

impl<'a> Made<'a> {
    /// Runs the layers' `on_call` for `frame`, a request (`has_id`) or a notification.
    fn start(peer: &'a Peer, method: &'a str, frame: &Text, has_id: bool) -> (Self, Decision) {
        let mut made = Made {
            peer,
            method,
            frame: None,
            has_id,
            seen: Cell::new(0),
            started: None,
            ended: false,
        };
        let decision = match peer.shared.layers() {
            Some(stack) => {
                made.started = stack.start_clock(!has_id);
                if stack.keeps_parts() {
                    made.frame = Some(frame.clone());
                }
                stack.on_call(&made.info(frame), &made.seen)
            }
            None => Decision::Continue,
        };
        (made, decision)
    }

    /// What the layers see of it, with `frame` for its params and id.
    fn info<'f>(&'f self, frame: &'f str) -> CallInfo<'f> {
        CallInfo {
            direction: Direction::Made,
            method: self.method,
            parts: Parts::Written {
                frame,
                has_id: self.has_id,
            },
            peer: self.peer,
            known: true,
        }
    }

    fn finish(mut self, outcome: &CallOutcome<'_>) {
        self.report(outcome);
    }

    fn report(&mut self, outcome: &CallOutcome<'_>) {
        self.ended = true;
        if let Some(stack) = self.peer.shared.layers() {
            let frame = self.frame.as_ref().map_or("", Text::as_str);
            stack.on_outcome(self.seen.get(), &self.info(frame), outcome, self.started);
        }
    }

    fn refused(&self, error: &crate::error::RpcError) -> Error {
        Error::Rpc {
            method: self.method.into(),
            error: error.clone(),
        }
    }
}

impl Drop for Made<'_> {
    /// Dropped before its end: the caller gave the call up.
    fn drop(&mut self) {
        if !self.ended {
            let outcome = if std::thread::panicking() {
                CallOutcome::Panicked
            } else {
                CallOutcome::Cancelled
            };
            self.report(&outcome);
        }
    }
}

/// A call made through the layers: `send` sends `frame` and waits for the answer.
pub(crate) async fn made_call<Fut>(
    peer: &Peer,
    method: &str,
    frame: String,
    send: impl FnOnce(Text) -> Fut,
) -> Result<Reply>
where
    Fut: Future<Output = Result<Reply>>,
{
    let frame = Text::from(frame);
    let (made, decision) = Made::start(peer, method, &frame, true);
    match decision {
        Decision::Continue => {}
        Decision::Error(error) => {
            let refused = made.refused(&error);
            made.finish(&CallOutcome::Error(&error));
            return Err(refused);
        }
        Decision::Result(result) => {
            let text = Text::from(String::from(Box::<str>::from(result)));
            let reply = Reply::new(text.clone(), 0..text.len());
            made.finish(&CallOutcome::Result(reply.get()));
            return Ok(reply);
        }
    }
    let outcome = send(frame).await;
    made.finish(&match &outcome {
        Ok(reply) => CallOutcome::Result(reply.get()),
        Err(e) => failed(e),
    });
    outcome
}

/// A notification made through the layers: `send` queues `frame`.
pub(crate) async fn made_notification<Fut>(
    peer: &Peer,
    method: &str,
    frame: String,
    send: impl FnOnce(Text) -> Fut,
) -> Result<()>
where
    Fut: Future<Output = Result<()>>,
{
    let frame = Text::from(frame);
    let (made, decision) = Made::start(peer, method, &frame, false);
    match decision {
        Decision::Continue => {}
        Decision::Error(error) => {
            let refused = made.refused(&error);
            made.finish(&CallOutcome::Error(&error));
            return Err(refused);
        }
        Decision::Result(result) => {
            made.finish(&CallOutcome::Result(result.get()));
            return Ok(());
        }
    }
    let outcome = send(frame).await;
    made.finish(&match &outcome {
        Ok(()) => CallOutcome::Notified,
        Err(e) => failed(e),
    });
    outcome
}

/// How a call made that failed ended.
fn failed(e: &Error) -> CallOutcome<'_> {
    match e {
        Error::Rpc { error, .. } => CallOutcome::Error(error),
        Error::Timeout { .. } => CallOutcome::Timeout,
        Error::Closed(_) => CallOutcome::Closed,
        other => CallOutcome::Failed(other),
    }
}

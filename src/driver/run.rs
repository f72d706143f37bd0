//! Running a handler on the connection's task: its first poll, and the `-32603` a
//! panic answers. Used by every room of the driver that starts handlers (calls,
//! ordered notifications, the rest of a call made stoppable).

use std::panic::AssertUnwindSafe;
use std::task::{Context as TaskContext, Poll, Waker};

use crate::error::RpcError;
use crate::message;
use crate::router::HandlerFuture;

/// What became of a handler polled once on the connection's task.
pub(super) enum FirstPoll<T> {
    Done(T),
    /// Not done: it moves to a task of its own, which polls it again at once (what the
    /// first poll registered with the no-op waker is registered anew).
    Waiting(HandlerFuture<T>),
    /// Panicked, in making its future or in the poll.
    Panicked,
}

/// Makes a handler's future with `start` and polls it once, with a waker that does
/// nothing. Most handlers finish there, which saves a task per call; see `dispatch`.
#[inline]
pub(super) fn poll_once<T>(start: impl FnOnce() -> HandlerFuture<T>) -> FirstPoll<T> {
    let polled = std::panic::catch_unwind(AssertUnwindSafe(|| {
        let mut fut = start();
        match fut
            .as_mut()
            .poll(&mut TaskContext::from_waker(Waker::noop()))
        {
            Poll::Ready(value) => FirstPoll::Done(value),
            Poll::Pending => FirstPoll::Waiting(fut),
        }
    }));
    polled.unwrap_or(FirstPoll::Panicked)
}

/// Runs the application's code (a call layer, a lane's key, the making of a handler's
/// future) on the connection's task: `None` if it panicked, which the caller answers.
#[inline]
pub(super) fn caught<R>(code: impl FnOnce() -> R) -> Option<R> {
    std::panic::catch_unwind(AssertUnwindSafe(code)).ok()
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
    id.map(|id| {
        message::error_response(Some(id), &RpcError::internal_error("the handler panicked"))
    })
}

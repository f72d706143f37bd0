//! The deadlines of this side's calls: one timer for the whole connection, set to the
//! front of the pending map's deadline deque (see `pending.rs`), instead of a tokio
//! timer per call.
//!
//! The timer exists only while calls wait: it is made when a call asks for it (the
//! pending map's `rearm`, with a wake-up of this task), and dropped when it fires and
//! no deadline is left, so an idle connection holds none. It is not moved when calls
//! are answered: it fires at the deadline it was set to, finds that call gone, and is
//! set to the new front. With a steady stream of calls it is reset about once per call
//! timeout, not once per call.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

use crate::pending::Pending;

/// The connection's timer for its calls' deadlines.
#[derive(Default)]
pub(super) struct CallTimer {
    /// Fires at the earliest deadline; `None` while no call waits.
    timer: Option<Pin<Box<Sleep>>>,
}

impl CallTimer {
    /// Sets the timer again if a call asked, and ends the calls past their deadline
    /// when it fires. On every pass that returns `Pending`, like the keepalive timer,
    /// so calls time out while writing is blocked, reading is paused or the connection
    /// drains. The task's waker was registered for the call's wake-up (with the close
    /// request) before this looks.
    /// `later` is the connection's call timeout, for the calls the task stamps.
    pub(super) fn poll(&mut self, cx: &mut TaskContext<'_>, pending: &Pending, later: Duration) {
        // Whether the timer was made or set again since it was last polled.
        let mut fresh = pending.rearm_wanted();
        if fresh {
            self.set(pending.rearm(later));
        }
        while let Some(timer) = &mut self.timer {
            if poll_timer(timer, fresh, cx).is_pending() {
                return;
            }
            // The timer fired, so its deadline has passed, whatever the clock reads.
            let now = Instant::now().max(timer.deadline());
            self.set(pending.expire(now, later));
            fresh = true;
        }
    }

    /// Drops the timer: the connection ends.
    pub(super) fn stop(&mut self) {
        self.timer = None;
    }

    /// Sets the timer to fire at `at`, or drops it.
    fn set(&mut self, at: Option<Instant>) {
        match (self.timer.as_mut(), at) {
            (_, None) => self.timer = None,
            (Some(sleep), Some(at)) => {
                if sleep.deadline() != at {
                    sleep.as_mut().reset(at);
                }
            }
            (None, Some(at)) => self.timer = Some(Box::pin(tokio::time::sleep_until(at))),
        }
    }
}

/// Polls a timer of the connection's task when there is something to see: when it is
/// `fresh` (made or set again since its last poll), and once it has fired. tokio's
/// timer stores the waker it is polled with anew on every poll (a clone of it and a
/// drop of the one before: two atomic operations on the task's header), and keeps it
/// through `reset` until it fires and wakes it. The connection's task is one tokio
/// task, whose waker does not change, so polling a timer that holds it, before it
/// fires, only paid for that: 5 polls per call in the rpc bench's (a), the keepalive's
/// on every pass of the loop and the call timer's (PERF-NOTES.md, "Stop 54").
///
/// The poll runs unconstrained: out of its cooperative budget, a task would get
/// `Pending` from a fresh timer that never stored its waker, and is not polled again.
pub(super) fn poll_timer(
    timer: &mut Pin<Box<Sleep>>,
    fresh: bool,
    cx: &mut TaskContext<'_>,
) -> Poll<()> {
    if !fresh && !timer.is_elapsed() {
        return Poll::Pending;
    }
    Pin::new(&mut tokio::task::coop::unconstrained(timer.as_mut())).poll(cx)
}

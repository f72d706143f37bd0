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
use std::task::Context as TaskContext;

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
    pub(super) fn poll(&mut self, cx: &mut TaskContext<'_>, pending: &Pending) {
        if pending.rearm_wanted() {
            self.set(pending.rearm());
        }
        while let Some(timer) = &mut self.timer {
            if timer.as_mut().poll(cx).is_pending() {
                return;
            }
            // The timer fired, so its deadline has passed, whatever the clock reads.
            let now = Instant::now().max(timer.deadline());
            self.set(pending.expire(now));
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

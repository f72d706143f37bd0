//! Keepalive: a ping every interval; a ping unanswered past the timeout (nothing at all
//! heard since it was sent) means the other side is gone. One timer, set to the next
//! instant at which something is due, so a silence is caught within interval + timeout.

use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

use super::deadlines::poll_timer;

/// The shortest interval or timeout the timer runs on, so a zero setting cannot spin.
const MIN_PERIOD: Duration = Duration::from_millis(1);

pub(super) struct Keepalive {
    interval: Duration,
    timeout: Duration,
    /// Boxed so the connection need not be pinned; only connections that ping pay it.
    /// Made at the first [`poll_tick`](Self::poll_tick), which polls it at once (see
    /// [`poll_timer`]).
    timer: Option<Pin<Box<Sleep>>>,
    /// When the last ping was sent (the connection's start before the first).
    last_ping: Instant,
    /// When the ping still without an answer was sent.
    unanswered: Option<Instant>,
}

/// What a tick of the timer asks of the connection.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Tick {
    Wait,
    Ping,
    TimedOut,
}

impl Keepalive {
    /// `None` when `interval` is: no pings, no timer.
    pub(super) fn new(interval: Option<Duration>, timeout: Duration) -> Option<Self> {
        // A period too long for the clock (`Duration::MAX`: "never, really") is capped,
        // as every instant below adds one to another.
        let interval = crate::deadline::capped(interval?).max(MIN_PERIOD);
        // The first ping goes out one interval after the start.
        Some(Keepalive {
            interval,
            timeout: crate::deadline::capped(timeout).max(MIN_PERIOD),
            timer: None,
            last_ping: Instant::now(),
            unanswered: None,
        })
    }

    /// Something arrived: the other side is there.
    pub(super) fn heard(&mut self) {
        self.unanswered = None;
    }

    /// Whether a ping waits for its answer (or was due, and the queue took none).
    pub(super) fn awaiting(&self) -> bool {
        self.unanswered.is_some()
    }

    /// Ready with the timer's deadline when it fires, or the clock's reading if it
    /// fired late: a task that did not run for a while (a stopped process, a starved
    /// runtime) must not replay the schedule it missed, where a ping "sent" at one past
    /// deadline is given up at the next, in the instant it really goes out.
    pub(super) fn poll_tick(&mut self, cx: &mut TaskContext<'_>) -> Poll<Instant> {
        let (timer, fresh) = match &mut self.timer {
            Some(timer) => (timer, false),
            None => {
                let due = self.next_due(Instant::now());
                (
                    self.timer.insert(Box::pin(tokio::time::sleep_until(due))),
                    true,
                )
            }
        };
        let deadline = timer.deadline();
        poll_timer(timer, fresh, cx).map(|()| deadline.max(Instant::now()))
    }

    /// The timer fired at `now`; `reading` says whether silence counts: not while this
    /// side's own handlers have paused reading (it cannot hear then), but while the
    /// other side does not read the answers it asked for. Sets the timer again, and
    /// says what to do.
    pub(super) fn tick(&mut self, now: Instant, reading: bool) -> Tick {
        let tick = match self.unanswered {
            _ if !reading => {
                self.unanswered = None;
                Tick::Wait
            }
            Some(sent) if now >= sent + self.timeout => return Tick::TimedOut,
            Some(_) => Tick::Wait,
            None if now >= self.last_ping + self.interval => {
                self.last_ping = now;
                self.unanswered = Some(now);
                Tick::Ping
            }
            None => Tick::Wait,
        };
        let next = self.next_due(now);
        // Made by the `poll_tick` whose firing this tick follows. (Were it not made yet,
        // the next `poll_tick` makes it for what is due then.)
        if let Some(timer) = &mut self.timer {
            timer.as_mut().reset(next);
        }
        tick
    }

    /// The next instant at which something may be due: the next ping, or giving up on
    /// the unanswered one.
    fn next_due(&self, now: Instant) -> Instant {
        let next_ping = self.last_ping + self.interval;
        match self.unanswered {
            // If an answer comes first, the next ping is due at its time.
            Some(sent) if next_ping > now => next_ping.min(sent + self.timeout),
            Some(sent) => sent + self.timeout,
            None if next_ping > now => next_ping,
            // Reading is paused (or a ping could not be sent): look again a period on.
            None => now + self.interval.min(self.timeout),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    /// The next tick, as the connection's loop gets it: through `poll_tick`, on the
    /// paused clock (which jumps to the next timer while the test waits).
    async fn next_tick(k: &mut Keepalive) -> Instant {
        // An hour of the paused clock, no time at all on the wall's: a timer that
        // never wakes the task fails the test here rather than hang it.
        tokio::time::timeout(secs(3600), std::future::poll_fn(|cx| k.poll_tick(cx)))
            .await
            .expect("the keepalive timer wakes the task")
    }

    /// A keepalive pinging every `interval` seconds and giving up after `timeout`;
    /// waits for each tick in turn and checks it: its instant, `at` seconds after the
    /// start; whether something was heard just before; whether this side reads; and
    /// what the tick asks for.
    async fn expect_ticks(interval: u64, timeout: u64, steps: &[(u64, bool, bool, Tick)]) {
        let start = Instant::now();
        let mut k = Keepalive::new(Some(secs(interval)), secs(timeout)).unwrap();
        for (at, heard, reading, then) in steps {
            let now = next_tick(&mut k).await;
            assert_eq!(now, start + secs(*at));
            if *heard {
                k.heard();
            }
            assert_eq!(&k.tick(now, *reading), then, "at {at} s");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn pings_at_the_interval_and_gives_up_after_the_timeout() {
        // The first ping at 30 s; answered, the next one interval later; unanswered,
        // given up one timeout after it was sent.
        let steps = [
            (30, false, true, Tick::Ping),
            (60, true, true, Tick::Ping),
            (90, false, true, Tick::TimedOut),
        ];
        expect_ticks(30, 30, &steps).await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_timeout_shorter_or_longer_than_the_interval_is_kept() {
        // Timeout 5 s, interval 30 s: checked at 35 s, and if answered, pings at 60 s.
        let steps = [
            (30, false, true, Tick::Ping),
            (35, true, true, Tick::Wait),
            (60, false, true, Tick::Ping),
        ];
        expect_ticks(30, 5, &steps).await;
        // Timeout 30 s, interval 5 s: no new ping while one is unanswered.
        let steps = [
            (5, false, true, Tick::Ping),
            (10, false, true, Tick::Wait),
            (35, false, true, Tick::TimedOut),
        ];
        expect_ticks(5, 30, &steps).await;
    }

    #[tokio::test(start_paused = true)]
    async fn silence_while_reading_is_paused_does_not_count() {
        let steps = [
            (1, false, true, Tick::Ping),
            (2, false, false, Tick::Wait),
            (3, false, false, Tick::Wait),
            (4, false, true, Tick::Ping),
            (5, false, true, Tick::TimedOut),
        ];
        expect_ticks(1, 1, &steps).await;
    }

    /// The timer is polled again only once it has fired (`poll_timer`): a poll before
    /// leaves it waiting, and the task is still woken when it fires.
    #[tokio::test(start_paused = true)]
    async fn a_timer_not_polled_between_its_first_poll_and_its_firing_still_wakes_the_task() {
        let start = Instant::now();
        let mut k = Keepalive::new(Some(secs(1)), secs(1)).unwrap();
        for _ in 0..3 {
            let polled = std::future::poll_fn(|cx| Poll::Ready(k.poll_tick(cx))).await;
            assert!(polled.is_pending());
        }
        assert_eq!(next_tick(&mut k).await, start + secs(1));
    }

    /// A pass that has spent the task's cooperative budget (reading many frames, say)
    /// still arms a fresh timer: were its first poll `Pending` for want of budget, the
    /// timer would never store the task's waker, and never be polled again.
    #[tokio::test(start_paused = true)]
    async fn a_timer_first_polled_out_of_budget_still_wakes_the_task() {
        let start = Instant::now();
        let mut k = Keepalive::new(Some(secs(1)), secs(1)).unwrap();
        let polled = std::future::poll_fn(|cx| {
            for _ in 0..10_000 {
                match tokio::task::coop::poll_proceed(cx) {
                    Poll::Ready(restore) => restore.made_progress(),
                    Poll::Pending => break,
                }
            }
            assert!(!tokio::task::coop::has_budget_remaining());
            Poll::Ready(k.poll_tick(cx))
        })
        .await;
        assert!(polled.is_pending());
        assert_eq!(next_tick(&mut k).await, start + secs(1));
    }
}

//! Keepalive: a ping every interval; a ping unanswered past the timeout (nothing at all
//! heard since it was sent) means the other side is gone. One timer, set to the next
//! instant at which something is due, so a silence is caught within interval + timeout.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

/// The shortest interval or timeout the timer runs on, so a zero setting cannot spin.
const MIN_PERIOD: Duration = Duration::from_millis(1);

pub(super) struct Keepalive {
    interval: Duration,
    timeout: Duration,
    /// Boxed so the connection need not be pinned; only connections that ping pay it.
    timer: Pin<Box<Sleep>>,
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
        // One instant for the timer and the count it is compared with: the first ping
        // goes out one interval after the start, not one tick later.
        let now = Instant::now();
        Some(Keepalive {
            interval,
            timeout: crate::deadline::capped(timeout).max(MIN_PERIOD),
            timer: Box::pin(tokio::time::sleep_until(now + interval)),
            last_ping: now,
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
        let deadline = self.timer.deadline();
        self.timer
            .as_mut()
            .poll(cx)
            .map(|()| deadline.max(Instant::now()))
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
        self.timer.as_mut().reset(next);
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

    #[tokio::test(start_paused = true)]
    async fn pings_at_the_interval_and_gives_up_after_the_timeout() {
        let start = Instant::now();
        let mut k = Keepalive::new(Some(secs(30)), secs(30)).unwrap();
        assert_eq!(k.timer.deadline(), start + secs(30), "first ping at 30 s");
        assert_eq!(k.tick(start + secs(30), true), Tick::Ping);
        // Answered: the next ping is one interval after the last.
        k.heard();
        assert_eq!(k.timer.deadline(), start + secs(60));
        assert_eq!(k.tick(start + secs(60), true), Tick::Ping);
        // Unanswered: given up one timeout after it was sent.
        assert_eq!(k.timer.deadline(), start + secs(90));
        assert_eq!(k.tick(start + secs(90), true), Tick::TimedOut);
    }

    #[tokio::test(start_paused = true)]
    async fn a_timeout_shorter_or_longer_than_the_interval_is_kept() {
        let start = Instant::now();
        // Timeout 5 s, interval 30 s: checked at 35 s, and if answered, pings at 60 s.
        let mut k = Keepalive::new(Some(secs(30)), secs(5)).unwrap();
        assert_eq!(k.tick(start + secs(30), true), Tick::Ping);
        assert_eq!(k.timer.deadline(), start + secs(35));
        k.heard();
        assert_eq!(k.tick(start + secs(35), true), Tick::Wait);
        assert_eq!(k.timer.deadline(), start + secs(60));
        // Timeout 30 s, interval 5 s: no new ping while one is unanswered.
        let mut k = Keepalive::new(Some(secs(5)), secs(30)).unwrap();
        assert_eq!(k.tick(start + secs(5), true), Tick::Ping);
        assert_eq!(k.timer.deadline(), start + secs(10));
        assert_eq!(k.tick(start + secs(10), true), Tick::Wait);
        assert_eq!(k.timer.deadline(), start + secs(35));
        assert_eq!(k.tick(start + secs(35), true), Tick::TimedOut);
    }

    #[tokio::test(start_paused = true)]
    async fn silence_while_reading_is_paused_does_not_count() {
        let start = Instant::now();
        let mut k = Keepalive::new(Some(secs(1)), secs(1)).unwrap();
        assert_eq!(k.tick(start + secs(1), true), Tick::Ping);
        assert_eq!(k.tick(start + secs(2), false), Tick::Wait);
        assert_eq!(k.tick(start + secs(3), false), Tick::Wait);
        assert_eq!(k.tick(start + secs(4), true), Tick::Ping);
        assert_eq!(k.tick(start + secs(5), true), Tick::TimedOut);
    }
}

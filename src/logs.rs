//! Log lines a remote side can cause once per message (a notification nothing serves,
//! params that do not fit, a refused handshake) are written at most once a second per
//! place in the code: a client without a rate limit must not be able to flood the
//! logs. Each line written says in `skipped` how many like it were not written since
//! the last one. The interval is fixed ([`INTERVAL`]); to see every one, serve the
//! method, or install a fallback route (it sees every notification nothing serves).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use tokio::time::Instant;

/// At most one line per place in the code this often.
pub(crate) const INTERVAL: Duration = Duration::from_secs(1);

/// One place in the code's budget: when the next line may be written, and how many
/// were not since the last.
pub(crate) struct Throttle {
    /// When it was first asked: what `next` counts from.
    start: OnceLock<Instant>,
    /// Nanoseconds since `start` before which nothing more is written; 0: at once.
    next: AtomicU64,
    skipped: AtomicU64,
}

impl Throttle {
    pub(crate) const fn new() -> Self {
        Throttle {
            start: OnceLock::new(),
            next: AtomicU64::new(0),
            skipped: AtomicU64::new(0),
        }
    }

    /// `Some(skipped)` if a line may be written now (how many were not since the last
    /// one); `None` if not, and it is counted.
    pub(crate) fn allow(&self) -> Option<u64> {
        let start = *self.start.get_or_init(Instant::now);
        let now = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let next = self.next.load(Ordering::Relaxed);
        let until = now.saturating_add(INTERVAL.as_nanos() as u64);
        // One winner per interval: whoever moves `next` on writes the line.
        if now >= next
            && self
                .next
                .compare_exchange(next, until.max(1), Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            return Some(self.skipped.swap(0, Ordering::Relaxed));
        }
        self.skipped.fetch_add(1, Ordering::Relaxed);
        None
    }
}

/// `tracing::$level!` with the same arguments, at most once a second for this place
/// in the code, with a `skipped` field (see the module's docs).
macro_rules! throttled {
    ($level:ident, $($arg:tt)+) => {{
        static THROTTLE: $crate::logs::Throttle = $crate::logs::Throttle::new();
        if let Some(skipped) = THROTTLE.allow() {
            ::tracing::$level!(skipped, $($arg)+);
        }
    }};
}
pub(crate) use throttled;

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn one_line_an_interval_and_the_rest_counted() {
        let t = Throttle::new();
        assert_eq!(t.allow(), Some(0));
        for _ in 0..1_000 {
            assert_eq!(t.allow(), None);
        }
        tokio::time::advance(INTERVAL / 2).await;
        assert_eq!(t.allow(), None);
        tokio::time::advance(INTERVAL / 2).await;
        assert_eq!(t.allow(), Some(1_001));
        assert_eq!(t.allow(), None);
        tokio::time::advance(INTERVAL * 5).await;
        assert_eq!(t.allow(), Some(1));
    }
}

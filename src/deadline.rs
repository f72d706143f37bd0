//! Deadlines from durations the application sets. A duration too long for the clock
//! (`Duration::MAX`, for "as long as it takes") is a deadline far away, never a panic:
//! `Instant + Duration` panics on overflow.

use std::time::Duration;

use tokio::time::Instant;

/// About thirty years, as far as tokio's own timers look ahead.
const FAR: Duration = Duration::from_secs(86_400 * 365 * 30);

/// `wait`, at most [`FAR`]: for a period the code adds to instants again and again
/// (an interval, a timeout it compares with), so that no sum of a few overflows.
pub(crate) fn capped(wait: Duration) -> Duration {
    wait.min(FAR)
}

/// `n` periods (a heartbeat window: the interval times the beats it may miss), at
/// most [`FAR`]: `Duration * u32` panics on overflow too.
pub(crate) fn times(period: Duration, n: u32) -> Duration {
    capped(period.saturating_mul(n))
}

/// The instant `wait` from now, at most [`FAR`] away.
pub(crate) fn after(wait: Duration) -> Instant {
    from(Instant::now(), wait)
}

/// The instant `wait` after `start`, at most [`FAR`] after it.
pub(crate) fn from(start: Instant, wait: Duration) -> Instant {
    start + wait.min(FAR)
}

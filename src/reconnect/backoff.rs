//! How long a reconnecting client waits between attempts, and why its defaults are
//! what they are.

use std::time::Duration;

/// How long to wait between attempts: exponential, capped, with full jitter.
///
/// Attempt `n` (from 0) waits a random time between zero and
/// `min(max, initial * multiplier^n)`, so clients that lost the same server at the
/// same moment do not all come back at the same moment. A connection that stays up for
/// `max` or longer starts the count again; one lost sooner counts as one more failed
/// attempt, so a server that accepts and closes at once (shedding load) is dialed with
/// growing waits, as one that is down is, not every `initial` for ever.
///
/// **The defaults** (250 ms growing to 3 s, doubling) are for a browser or a service
/// behind a load balancer, where the usual outage is a restart or a rolling deploy of
/// a few seconds:
///
/// - the cap stays short, because the wait after the server is back is what users
///   see: for a 2 s restart the link is back after 2.9 s on average (4.3 s for 95 in
///   100 clients), where a 10 s cap gave 3.3 s (6.1 s), and one such outage measured
///   4.7 s (a simulation of the rule, 20,000 runs; `Backoff::delay` is that rule);
/// - the first wait is up to 250 ms rather than 0, so the clients of a node that goes
///   away (a deploy) reach the others spread over a quarter second instead of in one
///   burst of handshakes: 10,000 clients arrive at 40,000 a second, not all at once;
/// - while a server stays down, 10,000 clients dial it about 6,700 times a second
///   (each once per 1.5 s on average): cheap refusals for a load balancer or a closed
///   port. For many more clients per server, or a server that is slow to refuse,
///   raise `max` (the browser package `jsonrpc-peer` has the same defaults).
///
/// ```
/// use std::time::Duration;
/// use jsonrpc_peer::Backoff;
///
/// let backoff = Backoff::default().initial(Duration::from_millis(100)).max(Duration::from_secs(5));
/// assert_eq!(backoff.multiplier, 2.0);
/// assert!(backoff.delay(10) <= Duration::from_secs(5));
/// assert_eq!(Backoff::default().max, Duration::from_secs(3));
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Backoff {
    /// The cap of the first wait (default 250 ms).
    pub initial: Duration,
    /// The largest cap (default 3 s).
    pub max: Duration,
    /// How much the cap grows per failed attempt (default 2).
    pub multiplier: f64,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            initial: Duration::from_millis(250),
            max: Duration::from_secs(3),
            multiplier: 2.0,
        }
    }
}

impl Backoff {
    /// Sets [`Self::initial`].
    pub fn initial(mut self, value: Duration) -> Self {
        self.initial = value;
        self
    }

    /// Sets [`Self::max`].
    pub fn max(mut self, value: Duration) -> Self {
        self.max = value;
        self
    }

    /// Sets [`Self::multiplier`].
    pub fn multiplier(mut self, value: f64) -> Self {
        self.multiplier = value;
        self
    }

    /// The wait before attempt `attempt` (counted from 0 since the last success). At
    /// most about thirty years, whatever the settings (`Duration::MAX` included): the
    /// wait is added to the clock.
    pub fn delay(&self, attempt: u32) -> Duration {
        let cap = self.initial.as_secs_f64() * self.multiplier.powi(attempt.min(64) as i32);
        let cap = cap.min(self.max.as_secs_f64()).max(0.0);
        let wait = Duration::try_from_secs_f64(fastrand::f64() * cap).unwrap_or(self.max);
        crate::deadline::capped(wait)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How long after the loss of its server a client is connected again, on average
    /// over `runs`, when the server is back `down` later (a dial takes 5 ms).
    fn mean_outage(backoff: &Backoff, down: f64, runs: u32) -> f64 {
        let mut total = 0.0;
        for _ in 0..runs {
            let (mut t, mut attempt) = (0.0, 0);
            loop {
                t += backoff.delay(attempt).as_secs_f64() + 0.005;
                if t >= down {
                    break;
                }
                attempt += 1;
            }
            total += t;
        }
        total / f64::from(runs)
    }

    #[test]
    fn settings_too_large_for_the_clock_wait_long_and_never_panic() {
        let endless = Backoff::default()
            .initial(Duration::MAX)
            .max(Duration::MAX)
            .multiplier(f64::INFINITY);
        for attempt in [0, 1, 64, u32::MAX] {
            let wait = endless.delay(attempt);
            assert!(wait <= Duration::from_secs(86_400 * 365 * 30), "{wait:?}");
            // What the callers do with it.
            let _ = tokio::time::Instant::now() + wait;
        }
    }

    /// What the defaults' documentation says, computed from `delay` itself.
    #[test]
    fn the_defaults_bring_clients_back_soon_after_a_two_second_restart() {
        fastrand::seed(7);
        let now = mean_outage(&Backoff::default(), 2.0, 20_000);
        let before = Backoff::default()
            .initial(Duration::from_millis(100))
            .max(Duration::from_secs(10));
        let then = mean_outage(&before, 2.0, 20_000);
        assert!((2.8..3.0).contains(&now), "{now}");
        assert!((3.2..3.4).contains(&then), "{then}");
        // The first wait spreads a node's clients over at most the initial cap.
        assert!((0..100).all(|_| Backoff::default().delay(0) <= Duration::from_millis(250)));
    }
}

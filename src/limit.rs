//! Rate limits: calls per second per connection (a token bucket, checked as the
//! innermost step of the call layers, so each item of a batch counts), and
//! connections per remote address (checked at the handshake).
//!
//! Past the call rate, a call is answered `-32005` with a retry-after
//! ([`ErrorCode::RATE_LIMITED`](crate::ErrorCode::RATE_LIMITED)); a notification is dropped. A connection that goes on
//! past it, [`RateLimit::close_after`] refusals within ten seconds, is closed with
//! [`RATE_LIMIT_CLOSE`] (4029). The concurrent calls of a connection are bounded by
//! [`PeerConfig::max_in_flight`](crate::PeerConfig::max_in_flight), which pauses
//! reading instead of refusing.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::error::RpcError;
use crate::peer::{CloseRequest, Peer};
use crate::sync::lock;

/// The close code of a connection closed for going on past its rate limit: 4029, in
/// the range RFC 6455 leaves to applications (4000-4999), after HTTP's 429.
pub const RATE_LIMIT_CLOSE: u16 = 4029;

/// Refusals are counted over the last this long for [`RateLimit::close_after`].
const ABUSE_WINDOW: Duration = Duration::from_secs(10);

/// How many calls per second one connection may make to this side: a token bucket of
/// [`burst`](Self::burst) tokens refilled at [`per_second`](Self::per_second), each
/// call and notification taking one (each item of a batch too: a batch is not a way
/// around the limit; nor are requests that are not valid and frames that are not JSON,
/// which are answered as calls are and take one too).
///
/// ```
/// use jsonrpc_peer::{PeerConfig, RateLimit};
///
/// let config = PeerConfig::default().rate_limit(Some(RateLimit::per_second(100).burst(200)));
/// assert_eq!(config.rate_limit.map(|r| r.burst), Some(200));
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct RateLimit {
    /// Tokens added per second.
    pub per_second: f64,
    /// The most tokens the bucket holds: how many calls may come at once after a
    /// quiet spell (default: one second's worth, at least 1).
    pub burst: u32,
    /// Refusals within ten seconds past which the connection is closed with
    /// [`RATE_LIMIT_CLOSE`] (default 1,000); `None` never closes. The ten seconds
    /// slide: they are the last ten at each refusal (estimated from two fixed windows,
    /// the earlier one weighted by its part still in them), not blocks from the start.
    pub close_after: Option<u32>,
}

impl RateLimit {
    /// `calls` per second, with a burst of as many.
    pub fn per_second(calls: u32) -> Self {
        RateLimit {
            per_second: f64::from(calls.max(1)),
            burst: calls.max(1),
            close_after: Some(1_000),
        }
    }

    /// Sets [`Self::burst`].
    pub fn burst(mut self, value: u32) -> Self {
        self.burst = value.max(1);
        self
    }

    /// Sets [`Self::close_after`].
    pub fn close_after(mut self, value: Option<u32>) -> Self {
        self.close_after = value;
        self
    }
}

/// One connection's bucket.
pub(crate) struct Limiter {
    limit: RateLimit,
    state: Mutex<Bucket>,
}

struct Bucket {
    tokens: f64,
    refilled: Instant,
    refused: Refusals,
    closing: bool,
}

/// The refusals of the last [`ABUSE_WINDOW`], estimated as a sliding window over two
/// fixed ones: the current one's count, plus the previous one's weighted by how much
/// of it the sliding window still covers. Two counters, and no way around it at a
/// window's edge: with fixed windows alone, a burst split across the edge (the limit
/// just before it, the limit again just after) was counted as two halves and never
/// closed.
struct Refusals {
    /// Where the current fixed window began.
    start: Instant,
    current: u32,
    previous: u32,
}

impl Refusals {
    fn new(now: Instant) -> Self {
        Refusals {
            start: now,
            current: 0,
            previous: 0,
        }
    }

    /// Counts one refusal at `now`; the refusals of the last window, this one included.
    fn refuse(&mut self, now: Instant) -> f64 {
        let since = now.saturating_duration_since(self.start);
        if since >= ABUSE_WINDOW * 2 {
            *self = Refusals::new(now);
        } else if since >= ABUSE_WINDOW {
            self.previous = self.current;
            self.current = 0;
            self.start += ABUSE_WINDOW;
        }
        self.current = self.current.saturating_add(1);
        let into = now.saturating_duration_since(self.start).as_secs_f64();
        let left = 1.0 - into / ABUSE_WINDOW.as_secs_f64();
        f64::from(self.previous) * left.max(0.0) + f64::from(self.current)
    }
}

impl Limiter {
    pub(crate) fn new(limit: RateLimit) -> Self {
        let now = Instant::now();
        Limiter {
            limit,
            state: Mutex::new(Bucket {
                tokens: f64::from(limit.burst.max(1)),
                refilled: now,
                refused: Refusals::new(now),
                closing: false,
            }),
        }
    }

    /// Takes a token for one call of `peer`, or says when to try again. Closes the
    /// connection once it has gone on past the limit for too long.
    pub(crate) fn admit(&self, peer: &Peer) -> Result<(), RpcError> {
        let now = Instant::now();
        let rate = self.limit.per_second.max(f64::MIN_POSITIVE);
        let mut bucket = lock(&self.state);
        let earned = now.duration_since(bucket.refilled).as_secs_f64() * rate;
        bucket.tokens = (bucket.tokens + earned).min(f64::from(self.limit.burst.max(1)));
        bucket.refilled = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            return Ok(());
        }
        let retry_after_ms = ((1.0 - bucket.tokens) / rate * 1000.0).ceil() as u64;
        let refused = bucket.refused.refuse(now);
        let abuse = self
            .limit
            .close_after
            .is_some_and(|n| refused > f64::from(n));
        if abuse && !bucket.closing {
            bucket.closing = true;
            drop(bucket);
            tracing::info!(peer = peer.id(), remote = ?peer.remote_addr(), "rate limit exceeded again and again; closing with 4029");
            crate::metrics::rate_limit_close();
            peer.shared
                .ask_close(CloseRequest::new(RATE_LIMIT_CLOSE, "rate limit exceeded"));
        }
        Err(RpcError::rate_limited(retry_after_ms))
    }
}

/// The connections open per remote address, for
/// [`HandshakePolicy::max_connections_per_address`](crate::HandshakePolicy::max_connections_per_address).
/// IPv6 addresses count per /64, the block one host usually has.
#[derive(Debug)]
pub(crate) struct Addresses {
    max: usize,
    open: Mutex<HashMap<IpAddr, usize>>,
}

/// One connection's place in its address's count, given back on drop.
#[derive(Debug)]
pub(crate) struct AddressSlot {
    table: Arc<Addresses>,
    key: IpAddr,
}

impl Addresses {
    pub(crate) fn new(max: usize) -> Arc<Self> {
        Arc::new(Addresses {
            max,
            open: Mutex::new(HashMap::new()),
        })
    }

    /// A place for one more connection from `addr`, if its address has room.
    pub(crate) fn take(self: &Arc<Self>, addr: IpAddr) -> Option<AddressSlot> {
        let key = address_key(addr);
        let mut open = lock(&self.open);
        // Refused before any entry is made: with a limit of 0, every address refused
        // would otherwise leave one behind.
        if self.max == 0 {
            return None;
        }
        let count = open.entry(key).or_insert(0);
        if *count >= self.max {
            return None;
        }
        *count += 1;
        Some(AddressSlot {
            table: self.clone(),
            key,
        })
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        lock(&self.open).len()
    }
}

impl Drop for AddressSlot {
    fn drop(&mut self) {
        let mut open = lock(&self.table.open);
        if let Some(count) = open.get_mut(&self.key) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.key);
            }
        }
    }
}

/// What an address counts as: an IPv4 address (also when mapped into IPv6), or the
/// /64 of an IPv6 one.
fn address_key(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let mut segments = v6.segments();
                segments[4..].fill(0);
                IpAddr::V6(segments.into())
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The limit just before a fixed window's end and again just after it: counted
    /// within the last ten seconds, not as two halves.
    #[test]
    fn refusals_across_a_window_edge_count_together() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut refusals = Refusals::new(t0);
        let mut last = 0.0;
        for _ in 0..10 {
            last = refusals.refuse(at(9_900));
        }
        assert_eq!(last, 10.0);
        for _ in 0..5 {
            last = refusals.refuse(at(10_100));
        }
        assert!(last > 14.0 && last <= 15.0, "{last}");
        // Ten seconds on, the ten have slid out (the five, just about: the estimate
        // spreads a window's count over it).
        let later = refusals.refuse(at(20_200));
        assert!(later > 1.0 && later < 7.0, "{later}");
        // Long after, a refusal counts alone.
        assert_eq!(refusals.refuse(at(60_000)), 1.0);
    }

    /// Fewer than the limit every ten seconds, for a minute: never past it.
    #[test]
    fn a_steady_rate_under_the_limit_is_never_past_it() {
        let t0 = Instant::now();
        let mut refusals = Refusals::new(t0);
        let most = (0..60u64)
            .map(|s| refusals.refuse(t0 + Duration::from_millis(s * 1_000 + 500)))
            .fold(0.0, f64::max);
        // One a second: ten in any ten seconds, and the estimate one more at most.
        assert!(most <= 11.0, "{most}");
    }

    #[test]
    fn an_address_has_room_again_once_its_connections_end() {
        let table = Addresses::new(2);
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        let a = table.take(ip).unwrap();
        let _b = table.take(ip).unwrap();
        assert!(table.take(ip).is_none());
        assert!(table.take("10.0.0.2".parse().unwrap()).is_some());
        drop(a);
        let _c = table.take(ip).unwrap();
        assert!(table.take(ip).is_none());
        drop(_c);
        drop(_b);
        assert_eq!(
            table.len(),
            0,
            "no entry is kept for an address without connections"
        );
    }

    #[test]
    fn a_limit_of_zero_refuses_every_address_and_keeps_no_entry() {
        let table = Addresses::new(0);
        for last in 1..=100u8 {
            assert!(table.take(IpAddr::from([10, 0, 0, last])).is_none());
        }
        assert_eq!(table.len(), 0);
    }

    #[test]
    fn ipv6_counts_per_64_and_mapped_ipv4_as_ipv4() {
        let table = Addresses::new(1);
        let _a = table.take("2001:db8::1".parse().unwrap()).unwrap();
        assert!(table.take("2001:db8::ffff:2".parse().unwrap()).is_none());
        assert!(table.take("2001:db8:0:1::1".parse().unwrap()).is_some());
        let _v4 = table.take("192.0.2.1".parse().unwrap()).unwrap();
        assert!(table.take("::ffff:192.0.2.1".parse().unwrap()).is_none());
    }
}

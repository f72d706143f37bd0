//! The settings of a [`RedisBackplane`](super::RedisBackplane), each with its default.

use std::time::Duration;

use crate::reconnect::Backoff;

/// Settings of a [`RedisBackplane`](super::RedisBackplane); every one has a default.
#[derive(Clone, Debug)]
pub struct RedisOptions {
    pub(super) prefix: String,
    pub(super) probe_interval: Duration,
    pub(super) probe_misses: u32,
    pub(super) event_capacity: usize,
    pub(super) publish_queue: usize,
    pub(super) batch_max: usize,
    pub(super) connect_timeout: Duration,
    pub(super) response_timeout: Duration,
    pub(super) backoff: Backoff,
}

impl Default for RedisOptions {
    fn default() -> Self {
        RedisOptions {
            prefix: "jp".to_owned(),
            probe_interval: Duration::from_secs(1),
            probe_misses: 2,
            event_capacity: 4096,
            publish_queue: 4096,
            batch_max: 256,
            connect_timeout: Duration::from_secs(2),
            response_timeout: Duration::from_secs(2),
            backoff: Backoff {
                initial: Duration::from_millis(50),
                max: Duration::from_secs(2),
                multiplier: 2.0,
            },
        }
    }
}

impl RedisOptions {
    /// The defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// The prefix of this backplane's own keys: its probe channel is
    /// `{prefix}:probe:{random}` (default `"jp"`). Channels given to
    /// [`Backplane::publish`](crate::cluster::Backplane::publish) and
    /// [`Backplane::subscribe`](crate::cluster::Backplane::subscribe) are used as they are.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// How often the subscribing connection sends itself a probe (default 1 s).
    pub fn probe_interval(mut self, interval: Duration) -> Self {
        self.probe_interval = interval.max(Duration::from_millis(1));
        self
    }

    /// How many probe intervals without the probe coming back make the subscribing
    /// connection count as dead and be dialed again (default 2, at least 1).
    pub fn probe_misses(mut self, misses: u32) -> Self {
        self.probe_misses = misses.max(1);
        self
    }

    /// The bound of the event stream (default 4096 events). A consumer that falls that
    /// far behind loses messages (counted by
    /// [`RedisBackplane::dropped`](super::RedisBackplane::dropped)); `Down` and
    /// `Up` are never dropped.
    pub fn event_capacity(mut self, capacity: usize) -> Self {
        self.event_capacity = capacity.max(1);
        self
    }

    /// How many publishes may wait for the writer (default 4096); past that `publish`
    /// waits for room.
    pub fn publish_queue(mut self, len: usize) -> Self {
        self.publish_queue = len.max(1);
        self
    }

    /// The most `publish` calls sent as one pipeline (default 256; a `publish_many`
    /// counts as one).
    pub fn batch_max(mut self, len: usize) -> Self {
        self.batch_max = len.max(1);
        self
    }

    /// How long one dial may take (default 2 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long Redis may take to answer one command or pipeline (default 2 s).
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// The waits between dials of the subscribing connection (default 50 ms growing to
    /// 2 s, full jitter).
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }
}

//! The `Metrics` call layer: calls and notifications served and made, by method and
//! outcome, their latencies, and batches.
//!
//! A call costs one lookup of its method's handles (a read lock and an Fx hash of the
//! name), a counter and a histogram: the handles are taken once per method and
//! outcome, not built from names on every call.

use std::sync::{Arc, OnceLock, PoisonError, RwLock};
use std::time::Duration;

use metrics::{counter, histogram, Counter, Histogram};
use rustc_hash::FxHashMap;

use super::names::{
    BATCH_ITEMS, CALLS_MADE_DURATION, CALLS_MADE_TOTAL, CALLS_SERVED_DURATION, CALLS_SERVED_TOTAL,
    NOTIFICATIONS_RECEIVED_TOTAL, NOTIFICATIONS_SENT_TOTAL, OTHER_METHOD, OUTCOMES,
};
use crate::error::ErrorCode;
use crate::layer::{CallInfo, CallOutcome, Direction, Layer, Wants};

/// How many method names of calls made get a label of their own; the rest count as
/// `other`. Calls served are labelled by the router, which bounds them already.
const MAX_MADE_METHODS: usize = 256;

/// A call layer that counts every call and notification, in both directions, through
/// the `metrics` facade, and turns on the engine's own metrics (see the
/// [module](crate::metrics)).
///
/// ```
/// use jsonrpc_peer::{metrics::Metrics, PeerConfig};
///
/// // metrics_exporter_prometheus::PrometheusBuilder::new().install_recorder()?; first
/// let config = PeerConfig::default().layer(Metrics::new());
/// # let _ = config;
/// ```
///
/// One value may serve every connection config of the process (it is cheap to
/// clone: the clones share their handles).
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

struct Inner {
    served: Table,
    made: Table,
    batches_received: Histogram,
    batches_sent: Histogram,
}

impl Metrics {
    /// A metrics layer; also turns on the engine's metrics, process-wide. Install the
    /// recorder first.
    pub fn new() -> Self {
        super::engine::start();
        Metrics {
            inner: Arc::new(Inner {
                served: Table::new(Direction::Served),
                made: Table::new(Direction::Made),
                batches_received: histogram!(BATCH_ITEMS, "direction" => "received"),
                batches_sent: histogram!(BATCH_ITEMS, "direction" => "sent"),
            }),
        }
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Layer for Metrics {
    /// Only calls have a duration histogram (a notification reads no clock), and no
    /// label comes from params or ids (a call made keeps no frame).
    fn wants(&self) -> Wants {
        Wants::NOTHING.call_durations()
    }

    fn on_outcome(&self, call: &CallInfo<'_>, outcome: &CallOutcome<'_>, took: Duration) {
        let table = match call.direction() {
            Direction::Served => &self.inner.served,
            Direction::Made => &self.inner.made,
        };
        let index = outcome_index(outcome);
        table.with(call, |handles| {
            if call.is_notification() {
                handles.notification(index).increment(1);
            } else {
                handles.call(index).increment(1);
                handles.duration().record(took.as_secs_f64());
            }
        });
    }

    fn on_batch(&self, direction: Direction, len: usize) {
        let histogram = match direction {
            Direction::Served => &self.inner.batches_received,
            Direction::Made => &self.inner.batches_sent,
        };
        histogram.record(len as f64);
    }
}

/// Where an outcome counts in [`OUTCOMES`].
fn outcome_index(outcome: &CallOutcome<'_>) -> usize {
    let code = match outcome {
        CallOutcome::Result(_) | CallOutcome::Notified => return 0,
        CallOutcome::Error(error) => error.code,
        CallOutcome::Cancelled => return 7,
        CallOutcome::Timeout => return 8,
        CallOutcome::Closed => return 9,
        CallOutcome::Panicked => return 10,
        CallOutcome::Failed(_) => return 11,
    };
    match code {
        ErrorCode::METHOD_NOT_FOUND => 2,
        ErrorCode::INVALID_PARAMS => 3,
        ErrorCode::INTERNAL_ERROR => 4,
        ErrorCode::INVALID_REQUEST => 5,
        ErrorCode::RATE_LIMITED => 6,
        code if code.get() == ErrorCode::REQUEST_CANCELLED => 7,
        _ => 1,
    }
}

/// The handles of one direction, per method name.
struct Table {
    direction: Direction,
    methods: RwLock<FxHashMap<Box<str>, Handles>>,
    other: Handles,
}

impl Table {
    fn new(direction: Direction) -> Self {
        Table {
            direction,
            methods: RwLock::default(),
            other: Handles::new(direction, OTHER_METHOD),
        }
    }

    /// Runs `count` with the handles of `call`'s method: its own name when the router
    /// knows it (calls made: among the first names seen), `other` otherwise.
    fn with(&self, call: &CallInfo<'_>, count: impl FnOnce(&Handles)) {
        if !call.is_known() {
            return count(&self.other);
        }
        let method = call.method();
        {
            let methods = self.methods.read().unwrap_or_else(PoisonError::into_inner);
            if let Some(handles) = methods.get(method) {
                return count(handles);
            }
        }
        let mut methods = self.methods.write().unwrap_or_else(PoisonError::into_inner);
        if methods.len() >= MAX_MADE_METHODS && self.direction == Direction::Made {
            drop(methods);
            return count(&self.other);
        }
        let handles = methods
            .entry(method.into())
            .or_insert_with(|| Handles::new(self.direction, method));
        count(handles);
    }
}

/// One method's handles in one direction, each taken the first time it counts.
struct Handles {
    direction: Direction,
    method: Arc<str>,
    calls: [OnceLock<Counter>; OUTCOMES.len()],
    notifications: [OnceLock<Counter>; OUTCOMES.len()],
    duration: OnceLock<Histogram>,
}

impl Handles {
    fn new(direction: Direction, method: &str) -> Self {
        Handles {
            direction,
            method: method.into(),
            calls: Default::default(),
            notifications: Default::default(),
            duration: OnceLock::new(),
        }
    }

    fn labelled(&self, name: &'static str, outcome: usize) -> Counter {
        counter!(name, "method" => self.method.to_string(), "outcome" => OUTCOMES[outcome])
    }

    fn call(&self, outcome: usize) -> &Counter {
        let name = match self.direction {
            Direction::Served => CALLS_SERVED_TOTAL,
            Direction::Made => CALLS_MADE_TOTAL,
        };
        self.calls[outcome].get_or_init(|| self.labelled(name, outcome))
    }

    fn notification(&self, outcome: usize) -> &Counter {
        let name = match self.direction {
            Direction::Served => NOTIFICATIONS_RECEIVED_TOTAL,
            Direction::Made => NOTIFICATIONS_SENT_TOTAL,
        };
        self.notifications[outcome].get_or_init(|| self.labelled(name, outcome))
    }

    fn duration(&self) -> &Histogram {
        let name = match self.direction {
            Direction::Served => CALLS_SERVED_DURATION,
            Direction::Made => CALLS_MADE_DURATION,
        };
        self.duration
            .get_or_init(|| histogram!(name, "method" => self.method.to_string()))
    }
}

//! Measuring: samples, CPU time, latency histograms, arrival tracking, medians.

use hdrhistogram::Histogram;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

use crate::{Contender, Each};

/// One contender's round.
pub(crate) struct Sample {
    pub(crate) count: u64,
    pub(crate) elapsed: Duration,
    pub(crate) cpu: Duration,
    pub(crate) latencies: Option<Histogram<u64>>,
}

/// Wall clock and process CPU time from the start of a round.
pub(crate) struct Meter {
    pub(crate) start: Instant,
    pub(crate) cpu: Duration,
}

impl Meter {
    pub(crate) fn start() -> Meter {
        Meter {
            start: Instant::now(),
            cpu: cpu_time(),
        }
    }

    pub(crate) fn finish(self, latencies: Latencies) -> Sample {
        let latencies = latencies.0.lock().expect("not poisoned").clone();
        Sample {
            count: latencies.len(),
            elapsed: self.start.elapsed(),
            cpu: cpu_time().saturating_sub(self.cpu),
            latencies: Some(latencies),
        }
    }

    pub(crate) fn finish_count(self, count: u64, last: Instant) -> Sample {
        Sample {
            count,
            elapsed: last - self.start,
            cpu: cpu_time().saturating_sub(self.cpu),
            latencies: None,
        }
    }
}

/// One round's call latencies in nanoseconds, shared by every caller of the round
/// (one histogram: making one is a 300 KB memset, too dear to do per task).
#[derive(Clone)]
pub(crate) struct Latencies(Arc<Mutex<Histogram<u64>>>);

impl Default for Latencies {
    fn default() -> Self {
        let histogram = Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid bounds");
        Latencies(Arc::new(Mutex::new(histogram)))
    }
}

impl Latencies {
    pub(crate) fn record(&self, latency: Duration) {
        let nanos = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        self.0
            .lock()
            .expect("not poisoned")
            .saturating_record(nanos);
    }
}

/// Counts arrivals of a broadcast or a flood; remembers when the last one came.
#[derive(Default)]
pub(crate) struct Tracker {
    pub(crate) seen: AtomicUsize,
    pub(crate) target: AtomicUsize,
    pub(crate) last: Mutex<Option<Instant>>,
    pub(crate) done: Notify,
}

impl Tracker {
    pub(crate) fn arm(&self, target: usize) {
        self.seen.store(0, Ordering::SeqCst);
        *self.last.lock().expect("not poisoned") = None;
        self.target.store(target, Ordering::SeqCst);
    }

    pub(crate) fn hit(&self) {
        let seen = self.seen.fetch_add(1, Ordering::SeqCst) + 1;
        if seen == self.target.load(Ordering::SeqCst) {
            *self.last.lock().expect("not poisoned") = Some(Instant::now());
            self.done.notify_one();
        }
    }

    pub(crate) async fn wait(&self) -> Instant {
        tokio::time::timeout(Duration::from_secs(60), self.done.notified())
            .await
            .expect("every message arrives within a minute");
        self.last
            .lock()
            .expect("not poisoned")
            .expect("set before notified")
    }
}

/// CPU time (user + system) of this whole process, from `/proc/self/stat`.
pub(crate) fn cpu_time() -> Duration {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return Duration::ZERO;
    };
    // The fields after the command name, which is in parentheses: utime and stime are
    // fields 14 and 15 of the line, in clock ticks (USER_HZ, 100 on Linux).
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<u64> = after
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|f| f.parse().ok())
        .collect();
    Duration::from_millis(fields.iter().sum::<u64>() * 10)
}

/// Prints how many calls each side made, warm-up included: with the instruction count
/// of a profiler, that gives instructions per call.
pub(crate) fn report_totals(samples: &Each<Vec<Sample>>) {
    let total = |c: Contender| samples[c].iter().map(|s| s.count).sum::<u64>();
    eprintln!(
        "    messages: {} through jsonrpc-peer, {} through the baseline, {} through jsonrpsee \
         (warm-up included)",
        total(Contender::Ours),
        total(Contender::Raw),
        total(Contender::Jsonrpsee),
    );
}

pub(crate) fn median(mut values: Vec<f64>) -> f64 {
    values.retain(|v| v.is_finite());
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    }
}

pub(crate) fn rate(samples: &[Sample]) -> f64 {
    median(
        samples
            .iter()
            .map(|s| s.count as f64 / s.elapsed.as_secs_f64())
            .collect(),
    )
}

/// CPU time per call over all rounds together: `/proc/self/stat` counts in 10 ms ticks,
/// too coarse for one short round.
pub(crate) fn cpu(samples: &[Sample]) -> f64 {
    let cpu: Duration = samples.iter().map(|s| s.cpu).sum();
    let count: u64 = samples.iter().map(|s| s.count).sum();
    cpu.as_secs_f64() * 1e6 / count as f64
}

/// The median over rounds of each round's latency quantile, in microseconds.
pub(crate) fn p(samples: &[Sample], quantile: f64) -> f64 {
    median(
        samples
            .iter()
            .filter_map(|s| s.latencies.as_ref())
            .map(|h| h.value_at_quantile(quantile) as f64 / 1e3)
            .collect(),
    )
}

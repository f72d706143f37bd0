//! A small Prometheus recorder for the web demo's `/metrics` (feature `metrics`):
//! counters, gauges and histograms (fixed buckets) kept in memory, rendered in the
//! text exposition format. Built on the `metrics` facade alone, which the feature
//! brings: an exporter crate would be a dev-dependency, and cargo builds those for
//! every example, so `cargo run --example web_demo --features axum` would build it
//! too. An application installs the exporter it prefers
//! (`metrics-exporter-prometheus`, say) the same way, before `Metrics::new()`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use metrics::{
    Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder, SharedString, Unit,
};

/// Upper bounds of the buckets of a histogram in seconds (latencies).
const SECONDS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];
/// Upper bounds of the buckets of any other histogram (batch sizes).
const COUNTS: &[f64] = &[1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0];

/// The recorder; clones share what it holds.
#[derive(Clone, Default)]
pub struct Prometheus {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    /// By name, then by rendered labels.
    metrics: Mutex<BTreeMap<String, Family>>,
    help: Mutex<BTreeMap<String, String>>,
}

struct Family {
    kind: &'static str,
    series: BTreeMap<String, Series>,
}

enum Series {
    Counter(Arc<AtomicU64>),
    Gauge(Arc<AtomicU64>),
    Histogram(Arc<Buckets>),
}

struct Buckets {
    bounds: &'static [f64],
    counts: Vec<AtomicU64>,
    count: AtomicU64,
    /// An f64, as bits.
    sum: AtomicU64,
}

impl HistogramFn for Buckets {
    fn record(&self, value: f64) {
        if let Some(i) = self.bounds.iter().position(|&bound| value <= bound) {
            self.counts[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        let _ = self
            .sum
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
                Some((f64::from_bits(bits) + value).to_bits())
            });
    }
}

impl Prometheus {
    /// Installs a recorder as the process's; returns a handle to render it.
    pub fn install() -> Result<Prometheus, Box<dyn std::error::Error>> {
        let recorder = Prometheus::default();
        metrics::set_global_recorder(recorder.clone())
            .map_err(|_| "a metrics recorder was installed already")?;
        Ok(recorder)
    }

    fn series(&self, key: &Key, kind: &'static str, make: impl FnOnce() -> Series) -> Series {
        let labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}=\"{}\"", l.key(), escape(l.value())))
            .collect();
        let mut metrics = self.inner.metrics.lock().unwrap_or_else(|e| e.into_inner());
        let family = metrics
            .entry(key.name().to_owned())
            .or_insert_with(|| Family {
                kind,
                series: BTreeMap::new(),
            });
        let series = family.series.entry(labels.join(",")).or_insert_with(make);
        match series {
            Series::Counter(c) => Series::Counter(c.clone()),
            Series::Gauge(g) => Series::Gauge(g.clone()),
            Series::Histogram(h) => Series::Histogram(h.clone()),
        }
    }

    fn describe(&self, key: KeyName, description: SharedString) {
        let mut help = self.inner.help.lock().unwrap_or_else(|e| e.into_inner());
        help.insert(key.as_str().to_owned(), description.into_owned());
    }

    /// Everything recorded, in the Prometheus text format.
    pub fn render(&self) -> String {
        let metrics = self.inner.metrics.lock().unwrap_or_else(|e| e.into_inner());
        let help = self.inner.help.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = String::new();
        for (name, family) in metrics.iter() {
            if let Some(text) = help.get(name) {
                let _ = writeln!(out, "# HELP {name} {text}");
            }
            let _ = writeln!(out, "# TYPE {name} {}", family.kind);
            for (labels, series) in &family.series {
                let braces = |extra: &str| {
                    let all: Vec<&str> = [labels.as_str(), extra]
                        .into_iter()
                        .filter(|s| !s.is_empty())
                        .collect();
                    if all.is_empty() {
                        String::new()
                    } else {
                        format!("{{{}}}", all.join(","))
                    }
                };
                match series {
                    Series::Counter(c) => {
                        let _ = writeln!(out, "{name}{} {}", braces(""), c.load(Ordering::Relaxed));
                    }
                    Series::Gauge(g) => {
                        let value = f64::from_bits(g.load(Ordering::Relaxed));
                        let _ = writeln!(out, "{name}{} {value}", braces(""));
                    }
                    Series::Histogram(h) => {
                        let mut cumulative = 0;
                        for (bound, count) in h.bounds.iter().zip(&h.counts) {
                            cumulative += count.load(Ordering::Relaxed);
                            let le = format!("le=\"{bound}\"");
                            let _ = writeln!(out, "{name}_bucket{} {cumulative}", braces(&le));
                        }
                        let count = h.count.load(Ordering::Relaxed);
                        let inf = braces("le=\"+Inf\"");
                        let _ = writeln!(out, "{name}_bucket{inf} {count}");
                        let sum = f64::from_bits(h.sum.load(Ordering::Relaxed));
                        let _ = writeln!(out, "{name}_sum{} {sum}", braces(""));
                        let _ = writeln!(out, "{name}_count{} {count}", braces(""));
                    }
                }
            }
        }
        out
    }
}

fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

impl Recorder for Prometheus {
    fn describe_counter(&self, key: KeyName, _: Option<Unit>, description: SharedString) {
        self.describe(key, description);
    }

    fn describe_gauge(&self, key: KeyName, _: Option<Unit>, description: SharedString) {
        self.describe(key, description);
    }

    fn describe_histogram(&self, key: KeyName, _: Option<Unit>, description: SharedString) {
        self.describe(key, description);
    }

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        match self.series(key, "counter", || Series::Counter(Arc::default())) {
            Series::Counter(c) => Counter::from_arc(c),
            _ => Counter::noop(),
        }
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        match self.series(key, "gauge", || Series::Gauge(Arc::default())) {
            Series::Gauge(g) => Gauge::from_arc(g),
            _ => Gauge::noop(),
        }
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        let bounds = if key.name().ends_with("_seconds") {
            SECONDS
        } else {
            COUNTS
        };
        let make = || {
            Series::Histogram(Arc::new(Buckets {
                bounds,
                counts: bounds.iter().map(|_| AtomicU64::new(0)).collect(),
                count: AtomicU64::new(0),
                sum: AtomicU64::new(0),
            }))
        };
        match self.series(key, "histogram", make) {
            Series::Histogram(h) => Histogram::from_arc(h),
            _ => Histogram::noop(),
        }
    }
}

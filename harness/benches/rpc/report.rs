//! The report: rows, targets and the Markdown table.

use std::path::PathBuf;
use std::time::Duration;

use crate::process::allowed_cpus;
use crate::{Contender, Each, Opts};

/// What a row's figure must meet.
#[derive(Clone, Copy)]
pub(crate) enum Target {
    /// Shown only.
    None,
    /// ours / baseline at least this.
    AtLeast(f64),
    /// ours / baseline at most this.
    AtMost(f64),
    /// Our own figure at most this, in the row's unit.
    OursAtMost(f64),
}

/// The targets, all against the baseline or on our own figure (never against
/// jsonrpsee, which is shown for comparison only).
pub(crate) mod targets {
    use super::Target;

    /// (a) p50 latency, ours / baseline.
    pub(crate) const A_P50: Target = Target::AtMost(1.05);
    /// (b) rate, ours / baseline (issue 26 raised (b) to (d) from 0.9x and 0.85x).
    pub(crate) const B_RATE: Target = Target::AtLeast(0.95);
    /// (c) rate, ours / baseline.
    pub(crate) const C_RATE: Target = Target::AtLeast(0.95);
    /// (d) notifications per second, ours / baseline.
    pub(crate) const D_RATE: Target = Target::AtLeast(0.95);
    /// (e) ms until the last of 1,000 connections has the broadcast (larger
    /// audiences are reported only).
    pub(crate) const E_LAST_1000: Target = Target::OursAtMost(50.0);
    /// (f) KiB of server RSS per idle connection, at every count.
    pub(crate) const F_KIB: Target = Target::OursAtMost(6.0);
}

pub(crate) struct Row {
    pub(crate) scenario: String,
    pub(crate) metric: &'static str,
    pub(crate) values: Each<f64>,
    pub(crate) target: Target,
}

impl Row {
    pub(crate) fn new(
        scenario: &str,
        metric: &'static str,
        values: Each<f64>,
        target: Target,
    ) -> Row {
        Row {
            scenario: scenario.to_owned(),
            metric,
            values,
            target,
        }
    }

    pub(crate) fn info(scenario: &str, metric: &'static str, values: Each<f64>) -> Row {
        Row::new(scenario, metric, values, Target::None)
    }

    /// ours / baseline: what the targets are about.
    pub(crate) fn ratio(&self) -> f64 {
        self.values[Contender::Ours] / self.values[Contender::Raw]
    }

    pub(crate) fn cells(&self) -> [String; COLUMNS] {
        let ours = self.values[Contender::Ours];
        let (target, mut verdict) = match self.target {
            Target::None => (String::new(), ""),
            Target::AtLeast(t) => (format!(">= {t}x"), met(self.ratio() >= t)),
            Target::AtMost(t) => (format!("<= {t}x"), met(self.ratio() <= t)),
            Target::OursAtMost(t) => (format!("ours <= {t}"), met(ours <= t)),
        };
        let measured = match self.target {
            Target::OursAtMost(_) => ours,
            _ => self.ratio(),
        };
        if !measured.is_finite() {
            verdict = "";
        }
        let ratio = |r: f64| {
            if r.is_finite() {
                format!("{r:.2}x")
            } else {
                "n/a".to_owned()
            }
        };
        [
            self.scenario.clone(),
            self.metric.to_owned(),
            number(ours),
            number(self.values[Contender::Raw]),
            number(self.values[Contender::Jsonrpsee]),
            ratio(self.ratio()),
            ratio(ours / self.values[Contender::Jsonrpsee]),
            target,
            verdict.to_owned(),
        ]
    }
}

pub(crate) const COLUMNS: usize = 9;
/// The columns that hold numbers (aligned right).
const NUMBERS: std::ops::RangeInclusive<usize> = 2..=6;

pub(crate) fn met(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "MISSED"
    }
}

pub(crate) fn number(v: f64) -> String {
    if !v.is_finite() {
        "n/a".to_owned()
    } else if v >= 1000.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// The table as Markdown, which also reads well as plain text.
pub(crate) fn render(opts: &Opts, rows: &[Row], took: Duration) -> String {
    let header = [
        "scenario",
        "metric",
        "jsonrpc-peer",
        "baseline",
        "jsonrpsee",
        "ours / baseline",
        "ours / jsonrpsee",
        "target (vs baseline)",
        "",
    ];
    let cells: Vec<[String; COLUMNS]> = rows.iter().map(Row::cells).collect();
    let widths: Vec<usize> = (0..header.len())
        .map(|i| {
            cells
                .iter()
                .map(|c| c[i].chars().count())
                .chain([header[i].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cols: &[&str]| {
        let padded: Vec<String> = cols
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(i, (c, &w))| {
                let pad = w - c.chars().count();
                // Numbers align right.
                if NUMBERS.contains(&i) {
                    format!("{}{c}", " ".repeat(pad))
                } else {
                    format!("{c}{}", " ".repeat(pad))
                }
            })
            .collect();
        format!("| {} |\n", padded.join(" | "))
    };
    let mut out = String::from("# jsonrpc-peer vs raw tokio-tungstenite vs jsonrpsee 0.26.1\n\n");
    out += &format!(
        "Mode: {}{}, {} rounds (medians), took {:.0} s. Runs on CPU(s) {} (online: {}); \
         server and client on separate current-thread runtimes. \
         CPU per call is client + server, over all rounds. (e) and (f) run each server \
         in a child process on the same CPU; (e)'s server CPU is the child's, all threads, \
         from schedstat. Targets are against the baseline.\n\n",
        if opts.quick { "--quick" } else { "full" },
        if opts.metrics {
            ", ours with the Metrics layer (--metrics)"
        } else {
            ""
        },
        opts.rounds,
        took.as_secs_f64(),
        allowed_cpus(),
        std::fs::read_to_string("/sys/devices/system/cpu/online")
            .map_or_else(|_| "?".to_owned(), |s| s.trim().to_owned()),
    );
    out += &line(&header);
    let rule: Vec<String> = widths
        .iter()
        .enumerate()
        .map(|(i, &w)| {
            if NUMBERS.contains(&i) {
                format!("{}:", "-".repeat(w.max(2) - 1))
            } else {
                "-".repeat(w)
            }
        })
        .collect();
    out += &line(&rule.iter().map(String::as_str).collect::<Vec<_>>());
    for row in &cells {
        out += &line(&row.iter().map(String::as_str).collect::<Vec<_>>());
    }
    out
}

pub(crate) fn target_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(dir);
    }
    // target/<profile>/deps/rpc-<hash>
    std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.parent()?.to_path_buf()))
        .unwrap_or_else(|| PathBuf::from("target"))
}

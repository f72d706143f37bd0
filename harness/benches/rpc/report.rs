//! The report: rows, targets and the Markdown table.

use std::path::PathBuf;
use std::time::Duration;

use crate::process::allowed_cpus;
use crate::Opts;

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

pub(crate) struct Row {
    pub(crate) scenario: String,
    pub(crate) metric: &'static str,
    pub(crate) ours: f64,
    pub(crate) base: f64,
    pub(crate) target: Target,
}

impl Row {
    pub(crate) fn new(
        scenario: &str,
        metric: &'static str,
        ours: f64,
        base: f64,
        target: Target,
    ) -> Row {
        Row {
            scenario: scenario.to_owned(),
            metric,
            ours,
            base,
            target,
        }
    }

    pub(crate) fn info(scenario: &str, metric: &'static str, ours: f64, base: f64) -> Row {
        Row::new(scenario, metric, ours, base, Target::None)
    }

    pub(crate) fn ratio(&self) -> f64 {
        self.ours / self.base
    }

    pub(crate) fn cells(&self) -> [String; 7] {
        let (target, mut verdict) = match self.target {
            Target::None => (String::new(), ""),
            Target::AtLeast(t) => (format!(">= {t}x"), met(self.ratio() >= t)),
            Target::AtMost(t) => (format!("<= {t}x"), met(self.ratio() <= t)),
            Target::OursAtMost(t) => (format!("ours <= {t}"), met(self.ours <= t)),
        };
        let ratio = self.ratio();
        if !ratio.is_finite() {
            verdict = "";
        }
        [
            self.scenario.clone(),
            self.metric.to_owned(),
            number(self.ours),
            number(self.base),
            if ratio.is_finite() {
                format!("{ratio:.2}x")
            } else {
                "n/a".to_owned()
            },
            target,
            verdict.to_owned(),
        ]
    }
}

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
        "ratio",
        "target",
        "",
    ];
    let cells: Vec<[String; 7]> = rows.iter().map(Row::cells).collect();
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
                if (2..=4).contains(&i) {
                    format!("{}{c}", " ".repeat(pad))
                } else {
                    format!("{c}{}", " ".repeat(pad))
                }
            })
            .collect();
        format!("| {} |\n", padded.join(" | "))
    };
    let mut out = String::from("# jsonrpc-peer vs raw tokio-tungstenite\n\n");
    out += &format!(
        "Mode: {}, {} rounds (medians), took {:.0} s. Runs on CPU(s) {} (online: {}); \
         server and client on separate current-thread runtimes. \
         CPU per call is client + server, over all rounds.\n\n",
        if opts.quick { "--quick" } else { "full" },
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
            if (2..=4).contains(&i) {
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

//! The tables: per-size figures with their growth, and the storm against its baseline.

use std::fmt::Write as _;

/// How a figure should grow with the number of peers if the cost is linear.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Growth {
    /// Already per peer (RSS per connection, CPU per recipient): stays flat.
    PerPeer,
    /// A total over all peers (time until the last has it): grows with the peers, so
    /// it is divided by them before comparing.
    Total,
}

/// What a figure must meet, in its own unit.
#[derive(Clone, Copy)]
pub(crate) enum Target {
    None,
    AtMost(f64),
}

pub(crate) struct Row {
    pub(crate) scenario: &'static str,
    pub(crate) peers: usize,
    pub(crate) metric: String,
    pub(crate) value: f64,
    pub(crate) growth: Growth,
    pub(crate) target: Target,
    pub(crate) note: String,
}

impl Row {
    pub(crate) fn new(
        scenario: &'static str,
        peers: usize,
        metric: impl Into<String>,
        value: f64,
        growth: Growth,
    ) -> Row {
        Row {
            scenario,
            peers,
            metric: metric.into(),
            value,
            growth,
            target: Target::None,
            note: String::new(),
        }
    }

    pub(crate) fn target(mut self, target: Target) -> Row {
        self.target = target;
        self
    }

    pub(crate) fn note(mut self, note: impl Into<String>) -> Row {
        self.note = note.into();
        self
    }

    pub(crate) fn per_peer(&self) -> f64 {
        match self.growth {
            Growth::PerPeer => self.value,
            Growth::Total => self.value / self.peers as f64,
        }
    }
}

/// One storm figure for both servers.
pub(crate) struct StormRow {
    /// Paced or herd.
    pub(crate) variant: String,
    pub(crate) metric: &'static str,
    pub(crate) ours: f64,
    pub(crate) raw: f64,
    /// The ratio is raw / ours (a time or a cost: lower is better) rather than
    /// ours / raw.
    pub(crate) lower_is_better: bool,
    /// The least the ratio must be.
    pub(crate) target: Option<f64>,
}

impl StormRow {
    fn ratio(&self) -> f64 {
        if self.lower_is_better {
            self.raw / self.ours
        } else {
            self.ours / self.raw
        }
    }
}

pub(crate) fn number(v: f64) -> String {
    if !v.is_finite() {
        "n/a".to_owned()
    } else if v >= 1000.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else if v >= 0.1 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "MISSED"
    }
}

/// Markdown, aligned so it reads as plain text too.
fn table(header: &[&str], rows: &[Vec<String>], numeric: &[usize]) -> String {
    let widths: Vec<usize> = (0..header.len())
        .map(|i| {
            rows.iter()
                .map(|r| r[i].chars().count())
                .chain([header[i].chars().count()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: &[String]| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(i, (c, &w))| {
                let pad = " ".repeat(w - c.chars().count());
                if numeric.contains(&i) {
                    format!("{pad}{c}")
                } else {
                    format!("{c}{pad}")
                }
            })
            .collect();
        format!("| {} |\n", padded.join(" | "))
    };
    let mut out = line(&header.iter().map(|h| (*h).to_owned()).collect::<Vec<_>>());
    let rule: Vec<String> = widths
        .iter()
        .enumerate()
        .map(|(i, &w)| {
            if numeric.contains(&i) {
                format!("{}:", "-".repeat(w.max(2) - 1))
            } else {
                "-".repeat(w)
            }
        })
        .collect();
    out += &line(&rule);
    for row in rows {
        out += &line(row);
    }
    out
}

/// The per-size table: each figure, and per peer against the same figure at the
/// smallest size of its scenario (1.00x everywhere if every cost is linear).
pub(crate) fn render_sizes(rows: &[Row]) -> String {
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|row| {
            let first = rows
                .iter()
                .find(|r| r.scenario == row.scenario && r.metric == row.metric)
                .expect("the row itself at least");
            let growth = row.per_peer() / first.per_peer();
            let (target, met) = match row.target {
                Target::None => (String::new(), ""),
                Target::AtMost(t) => (format!("<= {}", number(t)), verdict(row.value <= t)),
            };
            vec![
                row.scenario.to_owned(),
                row.peers.to_string(),
                row.metric.clone(),
                number(row.value),
                if growth.is_finite() {
                    format!("{growth:.2}x")
                } else {
                    "n/a".to_owned()
                },
                target,
                met.to_owned(),
                row.note.clone(),
            ]
        })
        .collect();
    table(
        &[
            "scenario",
            "peers",
            "metric",
            "value",
            "per peer vs smallest",
            "target",
            "",
            "note",
        ],
        &cells,
        &[1, 3, 4],
    )
}

pub(crate) fn render_storm(rows: &[StormRow]) -> String {
    let cells: Vec<Vec<String>> = rows
        .iter()
        .enumerate()
        .map(|(i, row)| {
            let ratio = row.ratio();
            // The variant once, on the first of its rows.
            let first = i == 0 || rows[i - 1].variant != row.variant;
            let (target, met) = match row.target {
                Some(t) => (format!(">= {t}x"), verdict(ratio >= t)),
                None => (String::new(), ""),
            };
            vec![
                if first {
                    row.variant.clone()
                } else {
                    String::new()
                },
                row.metric.to_owned(),
                number(row.ours),
                number(row.raw),
                if ratio.is_finite() {
                    format!("{ratio:.2}x")
                } else {
                    "n/a".to_owned()
                },
                target,
                met.to_owned(),
            ]
        })
        .collect();
    table(
        &[
            "reconnect storm",
            "metric",
            "jsonrpc-peer",
            "raw tokio-tungstenite",
            "ours vs raw (higher is better)",
            "target",
            "",
        ],
        &cells,
        &[2, 3, 4],
    )
}

/// Lines of notes under a table.
pub(crate) fn notes(lines: &[String]) -> String {
    let mut out = String::new();
    for line in lines {
        let _ = writeln!(out, "- {line}");
    }
    out
}

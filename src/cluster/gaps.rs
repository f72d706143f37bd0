//! Reporting a gap: counted, handed to the `on_gap` hook, and, with a gap notification
//! method set, told to the topic's local subscribers. Shared by the receive loop (gaps
//! between sequence numbers, bus outages) and the history room (a lost history).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use serde::Serialize;

use super::status::{Counters, Gap, GapHook};
use crate::history::Position;
use crate::topics::Topics;
use crate::transport::Text;

/// What a node does with a gap.
pub(super) struct Gaps {
    pub counters: Arc<Counters>,
    pub hook: Option<GapHook>,
    /// The notification's method (`$/gap` in the examples), if subscribers are told.
    pub method: Option<String>,
    pub topics: Topics,
}

/// The params of the gap notice of a topic with history.
#[derive(Serialize)]
struct HistoryNotice<'a> {
    topic: &'a str,
    epoch: &'a str,
    offset: u64,
}

impl Gaps {
    /// A gap of a topic without history, or of broadcasts: counted, the hook, and the
    /// topic's local subscribers notified with `{"topic": name}`.
    pub fn report(&self, gap: Gap) {
        self.count(&gap);
        if let (Some(method), Some(topic)) = (&self.method, &gap.topic) {
            let params = serde_json::json!({ "topic": topic });
            if let Ok(frame) = crate::message::request(method, &params, None) {
                self.topics.deliver(topic, Text::from(frame));
            }
        }
    }

    /// Counted and handed to the hook only (a topic with history: its notice goes out
    /// with the topic's own deliveries, in order).
    pub fn count(&self, gap: &Gap) {
        self.counters.gaps.fetch_add(1, Ordering::Relaxed);
        crate::metrics::cluster_gap();
        tracing::debug!(?gap, "gap");
        if let Some(hook) = &self.hook {
            hook(gap);
        }
    }

    /// The notice of a topic whose history was lost, continuing at `at`:
    /// `{"topic":T,"epoch":E,"offset":K}`; `None` when subscribers are not told.
    pub fn history_notice(&self, topic: &str, at: &Position) -> Option<Text> {
        let method = self.method.as_deref()?;
        let params = HistoryNotice {
            topic,
            epoch: &at.epoch,
            offset: at.offset,
        };
        crate::message::request(method, &params, None)
            .ok()
            .map(Text::from)
    }
}

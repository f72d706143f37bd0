//! The topic histories a [`MemoryHub`](super::MemoryHub) keeps for its links: the same
//! semantics as the Redis script (offsets from 1 per topic, an epoch started when none
//! is there, the oldest trimmed while any bound is exceeded), in one process.

use std::collections::{HashMap, VecDeque};

use bytes::Bytes;
use tokio::time::Instant;

use crate::cluster::backplane::{HistoryEntry, HistoryRead};
use crate::history::HistoryConfig;

/// One topic's history.
struct Log {
    epoch: String,
    last: u64,
    /// `(data, recorded at)`, oldest first; the newest is `last`.
    entries: VecDeque<(Bytes, Instant)>,
    bytes: usize,
}

impl Log {
    fn first(&self) -> u64 {
        self.last + 1 - self.entries.len() as u64
    }

    fn trim(&mut self, bounds: &HistoryConfig, now: Instant) {
        while let Some((data, at)) = self.entries.front() {
            let over = self.entries.len() > bounds.max_len
                || self.bytes > bounds.max_bytes
                || now.saturating_duration_since(*at) >= bounds.max_age;
            if !over {
                break;
            }
            self.bytes -= data.len();
            self.entries.pop_front();
        }
    }

    fn read(&self, after: Option<(u64, usize)>, now: Instant) -> HistoryRead {
        let first = self.first();
        let entries = match after {
            Some((after, max)) if after + 1 >= first => {
                let skip = usize::try_from(after + 1 - first).unwrap_or(usize::MAX);
                self.entries
                    .iter()
                    .skip(skip)
                    .take(max)
                    .enumerate()
                    .map(|(i, (data, at))| HistoryEntry {
                        offset: after + 1 + i as u64,
                        age: now.saturating_duration_since(*at),
                        data: data.clone(),
                    })
                    .collect()
            }
            _ => Vec::new(),
        };
        HistoryRead {
            epoch: self.epoch.clone(),
            first,
            last: self.last,
            entries,
        }
    }
}

/// Every topic's history on one hub, by its meta key.
#[derive(Default)]
pub(super) struct Histories {
    logs: HashMap<String, Log>,
    /// Reads of entries ([`read`](Self::read) calls), for tests of coalescing.
    pub(super) reads: u64,
}

impl Histories {
    fn log(&mut self, meta: &str, new_epoch: &str) -> &mut Log {
        self.logs.entry(meta.to_owned()).or_insert_with(|| Log {
            epoch: new_epoch.to_owned(),
            last: 0,
            entries: VecDeque::new(),
            bytes: 0,
        })
    }

    /// Records `data`; its epoch and offset.
    pub(super) fn append(
        &mut self,
        meta: &str,
        bounds: &HistoryConfig,
        new_epoch: &str,
        data: &[u8],
        now: Instant,
    ) -> (String, u64) {
        let log = self.log(meta, new_epoch);
        log.last += 1;
        log.bytes += data.len();
        log.entries.push_back((Bytes::copy_from_slice(data), now));
        log.trim(bounds, now);
        (log.epoch.clone(), log.last)
    }

    pub(super) fn read(
        &mut self,
        meta: &str,
        bounds: &HistoryConfig,
        after: u64,
        max: usize,
        now: Instant,
    ) -> HistoryRead {
        self.reads += 1;
        match self.logs.get_mut(meta) {
            Some(log) => {
                log.trim(bounds, now);
                log.read(Some((after, max)), now)
            }
            None => HistoryRead {
                first: 1,
                ..HistoryRead::default()
            },
        }
    }

    pub(super) fn position(
        &mut self,
        meta: &str,
        bounds: &HistoryConfig,
        new_epoch: &str,
        now: Instant,
    ) -> HistoryRead {
        let log = self.log(meta, new_epoch);
        log.trim(bounds, now);
        log.read(None, now)
    }

    /// Every history lost, as by a Redis restarted empty.
    pub(super) fn clear(&mut self) {
        self.logs.clear();
    }
}

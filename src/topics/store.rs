//! Where a topic's history is kept: the [`Store`] seam, and [`MemoryStore`], the window
//! of recent publications one process keeps.
//!
//! The ordering logic (`log.rs`: offsets handed out in order, subscribers switched
//! from the history to live under the topic's lock) is written against the seam. In a
//! cluster the history is kept on the bus (a Redis Stream, offsets given by Redis) and
//! the store is this node's cache of it: publications are appended as they come down
//! from the bus, in offset order ([`Store::append`] at the offset the bus gave),
//! the epoch and newest offset are set from the bus ([`Store::reset`]), and older
//! publications read from the bus for a resume are kept too ([`Store::prepend`]).

use std::collections::VecDeque;

use tokio::time::Instant;

use crate::history::HistoryConfig;
use crate::relay::Kept;
use crate::transport::Text;

/// A publication that does not fit the store: its data alone is over `max_bytes`.
#[derive(Debug)]
pub(crate) struct TooLarge {
    pub(crate) max_bytes: usize,
}

/// A topic's history: publications by offset, in one epoch.
pub(crate) trait Store: Send {
    /// The history's epoch.
    fn epoch(&self) -> &str;
    /// The newest offset (0 before the first publication).
    fn last(&self) -> u64;
    /// The bounds; what is kept is trimmed to them at once.
    fn configure(&mut self, config: HistoryConfig, now: Instant);
    /// Records the publication at `last() + 1`: `frame` is its notification as sent,
    /// `bytes` the size of its data. Trims the oldest while a bound is exceeded.
    fn append(&mut self, frame: Text, bytes: usize, now: Instant) -> Result<u64, TooLarge>;
    /// Whether a subscriber that has everything up to `offset` can continue from the
    /// history: `offset` is the newest, or the one before a publication still kept.
    fn continues(&mut self, offset: u64, now: Instant) -> bool;
    /// Appends to `out` at most `max` publications after `after`, in offset order.
    /// False, and nothing appended, if the history no longer continues from `after`.
    fn read_after(
        &mut self,
        after: u64,
        max: usize,
        now: Instant,
        out: &mut Vec<(u64, Text)>,
    ) -> bool;
    /// The oldest offset kept, `last() + 1` when none is.
    fn first(&mut self, now: Instant) -> u64;
    /// The bounds.
    fn config(&self) -> &HistoryConfig;
    /// Forgets what is kept and starts over at `last` in `epoch` (a cache that starts
    /// following the bus, or whose history the bus lost).
    fn reset(&mut self, epoch: String, last: u64);
    /// Keeps the publications of `older` (in offset order) that come before the oldest
    /// kept, as far as the bounds allow, newest first, down to the first jump in their
    /// offsets (an entry left out). Ignored unless they reach `first() - 1`.
    fn prepend(&mut self, older: &[Kept], now: Instant);
    /// How many publications are held now, not trimmed first.
    #[cfg(test)]
    fn held(&self) -> usize;
}

/// One publication kept.
struct Entry {
    frame: Text,
    bytes: usize,
    at: Instant,
}

/// The history one process keeps: a window of the newest publications, bounded by
/// [`HistoryConfig`]. Its epoch is made when it is: a new process has a new one.
pub(crate) struct MemoryStore {
    epoch: String,
    // (In a cluster, `epoch` and `last` come from the bus.)
    config: HistoryConfig,
    /// Publications `first..=last`, oldest first.
    window: VecDeque<Entry>,
    /// Sum of the kept publications' `bytes`.
    bytes: usize,
    last: u64,
}

impl MemoryStore {
    pub(crate) fn new(config: HistoryConfig) -> Self {
        MemoryStore {
            // 12 hex digits: enough that two processes' epochs do not meet.
            epoch: format!("{:012x}", fastrand::u64(..) >> 16),
            config,
            window: VecDeque::new(),
            bytes: 0,
            last: 0,
        }
    }

    /// Removes the oldest while a bound is exceeded.
    fn trim(&mut self, now: Instant) {
        while let Some(oldest) = self.window.front() {
            let over = self.window.len() > self.config.max_len
                || self.bytes > self.config.max_bytes
                || now.saturating_duration_since(oldest.at) >= self.config.max_age;
            if !over {
                break;
            }
            self.bytes -= oldest.bytes;
            self.window.pop_front();
        }
        if self.window.is_empty() && self.window.capacity() > 64 {
            self.window = VecDeque::new();
        }
    }
}

impl Store for MemoryStore {
    fn epoch(&self) -> &str {
        &self.epoch
    }

    fn last(&self) -> u64 {
        self.last
    }

    fn configure(&mut self, config: HistoryConfig, now: Instant) {
        self.config = config;
        self.trim(now);
    }

    fn append(&mut self, frame: Text, bytes: usize, now: Instant) -> Result<u64, TooLarge> {
        if bytes > self.config.max_bytes {
            return Err(TooLarge {
                max_bytes: self.config.max_bytes,
            });
        }
        self.last += 1;
        self.bytes += bytes;
        self.window.push_back(Entry {
            frame,
            bytes,
            at: now,
        });
        self.trim(now);
        Ok(self.last)
    }

    fn continues(&mut self, offset: u64, now: Instant) -> bool {
        offset <= self.last && offset.saturating_add(1) >= self.first(now)
    }

    fn read_after(
        &mut self,
        after: u64,
        max: usize,
        now: Instant,
        out: &mut Vec<(u64, Text)>,
    ) -> bool {
        if !self.continues(after, now) {
            return false;
        }
        let first = self.first(now);
        // `after + 1 >= first`, so this is the index of `after + 1` (or the length).
        let skip = usize::try_from(after + 1 - first).unwrap_or(usize::MAX);
        out.extend(
            self.window
                .iter()
                .skip(skip)
                .take(max)
                .enumerate()
                .map(|(i, entry)| (after + 1 + i as u64, entry.frame.clone())),
        );
        true
    }

    fn first(&mut self, now: Instant) -> u64 {
        self.trim(now);
        self.last + 1 - self.window.len() as u64
    }

    fn config(&self) -> &HistoryConfig {
        &self.config
    }

    fn reset(&mut self, epoch: String, last: u64) {
        self.epoch = epoch;
        self.last = last;
        self.window = VecDeque::new();
        self.bytes = 0;
    }

    fn prepend(&mut self, older: &[Kept], now: Instant) {
        let first = self.first(now);
        let before = older.partition_point(|k| k.offset < first);
        let older = &older[..before];
        if older.last().map(|k| k.offset + 1) != Some(first) {
            return;
        }
        let mut next = first;
        for kept in older.iter().rev() {
            // The window holds offsets one apart: it stops at a hole.
            if kept.offset + 1 != next {
                break;
            }
            next = kept.offset;
            let Some(at) = now.checked_sub(kept.age) else {
                break;
            };
            let fits = self.window.len() < self.config.max_len
                && self.bytes + kept.bytes <= self.config.max_bytes
                && kept.age < self.config.max_age;
            if !fits {
                break;
            }
            self.bytes += kept.bytes;
            self.window.push_front(Entry {
                frame: kept.frame.clone(),
                bytes: kept.bytes,
                at,
            });
        }
    }

    #[cfg(test)]
    fn held(&self) -> usize {
        self.window.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn frame(i: u64) -> Text {
        Text::from(i.to_string())
    }

    fn offsets(store: &mut MemoryStore, after: u64, now: Instant) -> Option<Vec<u64>> {
        let mut out = Vec::new();
        store
            .read_after(after, usize::MAX, now, &mut out)
            .then(|| out.into_iter().map(|(o, _)| o).collect())
    }

    #[test]
    fn a_cache_starts_over_from_the_bus_and_keeps_older_ones_read_from_it() {
        let now = Instant::now();
        let mut store = MemoryStore::new(HistoryConfig::default().max_len(4));
        store.reset("bus".into(), 10);
        assert_eq!(store.first(now), 11);
        assert_eq!((store.epoch(), store.last()), ("bus", 10));
        store.append(frame(11), 1, now).unwrap();
        assert_eq!(store.last(), 11);
        let kept = |offset| Kept {
            offset,
            frame: frame(offset),
            bytes: 1,
            age: Duration::from_secs(1),
        };
        // Not right before the oldest kept: ignored.
        store.prepend(&[kept(7), kept(8)], now);
        assert_eq!(store.first(now), 11);
        // Up to it (or past it: what it has already is left as it is): kept, newest
        // first, as far as max_len allows.
        store.prepend(
            &[kept(6), kept(7), kept(8), kept(9), kept(10), kept(11)],
            now,
        );
        assert_eq!(offsets(&mut store, 7, now), Some(vec![8, 9, 10, 11]));
        assert_eq!(offsets(&mut store, 6, now), None);
    }

    #[test]
    fn offsets_count_from_one_and_each_bound_trims_the_oldest() {
        let now = Instant::now();
        let mut store = MemoryStore::new(HistoryConfig::default().max_len(3));
        assert_eq!(store.last(), 0);
        assert_eq!(offsets(&mut store, 0, now), Some(vec![]));
        for i in 1..=5 {
            assert_eq!(store.append(frame(i), 1, now).unwrap(), i);
        }
        assert_eq!(store.first(now), 3);
        assert_eq!(offsets(&mut store, 2, now), Some(vec![3, 4, 5]));
        assert_eq!(offsets(&mut store, 4, now), Some(vec![5]));
        assert_eq!(offsets(&mut store, 5, now), Some(vec![]));
        assert_eq!(offsets(&mut store, 1, now), None, "2 is gone");
        assert_eq!(offsets(&mut store, 6, now), None, "6 is not there yet");

        // Bytes: 10 each, at most 25 kept.
        let mut store = MemoryStore::new(HistoryConfig::default().max_bytes(25));
        for i in 1..=4 {
            store.append(frame(i), 10, now).unwrap();
        }
        assert_eq!(offsets(&mut store, 2, now), Some(vec![3, 4]));
        assert!(
            store.append(frame(5), 26, now).is_err(),
            "over the bound alone"
        );
        assert_eq!(store.last(), 4, "a refused publication takes no offset");

        // Age: kept for max_age, then gone (an empty window still continues from last).
        let mut store = MemoryStore::new(HistoryConfig::default().max_age(Duration::from_secs(10)));
        store.append(frame(1), 1, now).unwrap();
        store
            .append(frame(2), 1, now + Duration::from_secs(5))
            .unwrap();
        let later = now + Duration::from_secs(10);
        assert_eq!(offsets(&mut store, 0, later), None);
        assert_eq!(offsets(&mut store, 1, later), Some(vec![2]));
        let much_later = now + Duration::from_secs(60);
        assert_eq!(offsets(&mut store, 1, much_later), None);
        assert_eq!(offsets(&mut store, 2, much_later), Some(vec![]));
    }
}

//! Sequence numbers per (origin, incarnation, channel): what makes delivery "never
//! twice", and what tells a gap.

use std::collections::HashMap;

use super::node::{lock, Node};

pub(super) struct Mark {
    pub(super) incarnation: String,
    pub(super) last: u64,
    /// After a bus outage the gap is already reported: the next number sets a new
    /// baseline (anything at or below the old one is still a duplicate).
    pub(super) resync: bool,
}

/// What the receive loop makes of a sequence number.
pub(super) enum Seen {
    Fresh,
    Duplicate,
    Gap(u64),
}

impl Node {
    pub(super) fn check_sequence(
        &self,
        channel: &str,
        origin: &str,
        incarnation: &str,
        s: u64,
    ) -> Seen {
        let mut marks = lock(&self.marks);
        let per_origin = match marks.get_mut(channel) {
            Some(m) => m,
            None => marks.entry(channel.to_owned()).or_default(),
        };
        let fresh = || Mark {
            incarnation: incarnation.to_owned(),
            last: s,
            resync: false,
        };
        match per_origin.get_mut(origin) {
            Some(mark) if mark.incarnation == incarnation => {
                if s <= mark.last {
                    return Seen::Duplicate;
                }
                let missed = s - mark.last - 1;
                mark.last = s;
                if std::mem::take(&mut mark.resync) || missed == 0 {
                    Seen::Fresh
                } else {
                    Seen::Gap(missed)
                }
            }
            // A restarted origin: a new baseline.
            Some(mark) => {
                *mark = fresh();
                Seen::Fresh
            }
            None => {
                per_origin.insert(origin.to_owned(), fresh());
                Seen::Fresh
            }
        }
    }

    /// Forgets the sequence numbers of a channel this node no longer listens to, so a
    /// later subscription starts a new baseline rather than seeing a false gap.
    pub(crate) fn forget_channel(&self, channel: &str) {
        lock(&self.marks).remove(channel);
    }

    /// After a bus outage, whose gap is reported once for all: the next number from
    /// each origin sets a new baseline.
    pub(super) fn resync_all(&self) {
        for per_origin in lock(&self.marks).values_mut() {
            for mark in per_origin.values_mut() {
                mark.resync = true;
            }
        }
    }
}

pub(super) trait RemoveIfIncarnation {
    fn remove_if_incarnation(&mut self, origin: &str, incarnation: &str);
}

impl RemoveIfIncarnation for HashMap<String, Mark> {
    fn remove_if_incarnation(&mut self, origin: &str, incarnation: &str) {
        if self
            .get(origin)
            .is_some_and(|m| m.incarnation == incarnation)
        {
            self.remove(origin);
        }
    }
}

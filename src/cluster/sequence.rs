//! Sequence numbers per (origin, incarnation, channel): what makes delivery "never
//! twice", and what tells a gap. The receive loop owns the [`Marks`]; the other tasks
//! ask it to [`Forget`] what no longer applies.

use std::collections::HashMap;

struct Mark {
    incarnation: String,
    last: u64,
    /// After a bus outage the gap is already reported: the next number sets a new
    /// baseline (anything at or below the old one is still a duplicate).
    resync: bool,
}

/// What the receive loop makes of a sequence number.
pub(super) enum Seen {
    Fresh,
    Duplicate,
    Gap(u64),
}

/// Marks that no longer apply, sent to the receive loop.
#[derive(Debug)]
pub(super) enum Forget {
    /// A channel this node no longer listens to (the subscriptions task unsubscribed
    /// it): a later subscription starts a new baseline rather than seeing a false gap.
    Channel(String),
    /// A node gone long ago (the nodes task keeps it a while first, so that copies it
    /// re-sends when it is back are still dropped).
    Origin { node: String, incarnation: String },
}

/// Per channel, per origin: the last sequence number seen.
#[derive(Default)]
pub(super) struct Marks(HashMap<String, HashMap<String, Mark>>);

impl Marks {
    /// `restart`: the origin numbered the channel anew (the header's `r`): above its
    /// last number, with nothing to say about what came between.
    pub fn check(
        &mut self,
        channel: &str,
        origin: &str,
        incarnation: &str,
        s: u64,
        restart: bool,
    ) -> Seen {
        let per_origin = match self.0.get_mut(channel) {
            Some(m) => m,
            None => self.0.entry(channel.to_owned()).or_default(),
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
                if std::mem::take(&mut mark.resync) || missed == 0 || restart {
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

    pub fn forget(&mut self, what: Forget) {
        match what {
            Forget::Channel(channel) => {
                self.0.remove(&channel);
            }
            Forget::Origin { node, incarnation } => {
                for per_origin in self.0.values_mut() {
                    if per_origin
                        .get(&node)
                        .is_some_and(|m| m.incarnation == incarnation)
                    {
                        per_origin.remove(&node);
                    }
                }
                self.0.retain(|_, per_origin| !per_origin.is_empty());
            }
        }
    }

    /// After `channel` was interrupted, its gap reported once: the next number from each
    /// origin on it sets a new baseline.
    pub fn resync_channel(&mut self, channel: &str) {
        for mark in self
            .0
            .get_mut(channel)
            .into_iter()
            .flat_map(|m| m.values_mut())
        {
            mark.resync = true;
        }
    }

    /// After a bus outage, whose gap is reported once for all: the next number from
    /// each origin sets a new baseline.
    pub fn resync(&mut self) {
        for per_origin in self.0.values_mut() {
            for mark in per_origin.values_mut() {
                mark.resync = true;
            }
        }
    }
}

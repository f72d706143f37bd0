//! Messages read ahead while reading is paused (calls past `max_in_flight`, or behind
//! notifications): they wait here for their turn, in order, so that the cancels and
//! answers behind them can be read and acted on (a cancel for a call of a waiting
//! batch waits here too, right behind its batch). Bounded by `read_ahead` messages and
//! `max_message_size` bytes (one is always kept, whatever its size): past either,
//! reading stops, and the other side feels the back-pressure.

use std::collections::VecDeque;

use crate::config::{CancelStyle, PeerConfig};
use crate::message::{self, Incoming, Item};
use crate::transport::Text;

use super::cancel;

/// Kept in every connection, idle ones included. The queue itself is allocated when
/// reading first pauses, and kept: an idle connection holds one pointer here. (tokio
/// gives a task its memory 128 bytes at a time, and every idle connection keeps its
/// task: what is empty while idle is boxed on first use, here and in the writer, the
/// dispatch and the adapter; the driver's unit test keeps the task within 768 bytes,
/// PERF-NOTES "Stop 53" has the figures.) The bounds as `u32`: a message is at most
/// `max_message_size`, and more than 4 GiB of them is past any sane bound.
pub(super) struct Ahead {
    queue: Option<Box<Queue>>,
    max_len: u32,
    max_bytes: u32,
}

/// What waits, and its bytes.
#[derive(Default)]
struct Queue {
    waiting: VecDeque<Waiting>,
    bytes: u32,
}

/// What waits for its turn.
enum Waiting {
    /// A message read while reading was paused.
    Message(Text),
    /// A cancel for a call of the batch right before it (in `style`'s form), acted on
    /// as the batch starts: a batch runs whole, so its calls cannot be taken out of it.
    Cancel(Box<str>, CancelStyle),
}

impl Waiting {
    fn len(&self) -> usize {
        match self {
            Waiting::Message(text) => text.len(),
            Waiting::Cancel(id, _) => id.len(),
        }
    }
}

fn clamp(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

impl Ahead {
    pub fn new(config: &PeerConfig) -> Self {
        Ahead {
            queue: None,
            max_len: clamp(config.read_ahead.max(1)),
            max_bytes: clamp(config.max_message_size),
        }
    }

    /// Whether one more message may be read and kept.
    pub fn has_room(&self) -> bool {
        self.queue.as_deref().is_none_or(|queue| {
            queue.waiting.is_empty()
                || (clamp(queue.waiting.len()) < self.max_len && queue.bytes < self.max_bytes)
        })
    }

    pub fn push(&mut self, text: Text) {
        let queue = self.queue.get_or_insert_default();
        queue.bytes = queue.bytes.saturating_add(clamp(text.len()));
        queue.waiting.push_back(Waiting::Message(text));
    }

    /// The first message waiting, whose turn it is.
    #[inline]
    pub fn next(&mut self) -> Option<Text> {
        let queue = self.queue.as_deref_mut()?;
        loop {
            match queue.take_front()? {
                Waiting::Message(text) => return Some(text),
                // Only ever right behind its batch, taken with it (`next_cancel`).
                Waiting::Cancel(..) => continue,
            }
        }
    }

    /// A cancel for a call of the batch [`next`](Self::next) just gave, to act on now
    /// that the batch has started.
    pub fn next_cancel(&mut self) -> Option<(Box<str>, CancelStyle)> {
        let queue = self.queue.as_deref_mut()?;
        if !matches!(queue.waiting.front(), Some(Waiting::Cancel(..))) {
            return None;
        }
        match queue.take_front()? {
            Waiting::Cancel(id, style) => Some((id, style)),
            Waiting::Message(_) => None,
        }
    }

    /// A cancel for the call whose raw id is `id`, which no handler runs. If that call
    /// waits here alone in its frame, it is taken out and never starts: returns the
    /// answer to send for it (`-32800`; none in the MCP form). If it waits in a batch,
    /// the cancel waits right behind the batch and is acted on as the batch starts (a
    /// batch runs whole: the call is stopped there, and the batch's array answers it as
    /// the cancel says). Otherwise it names no call, and is ignored.
    pub fn cancel(&mut self, id: &str, style: CancelStyle, max_batch: usize) -> Option<String> {
        let names = |item: &Item<'_>| matches!(item, Item::Request { id: waiting, .. } if waiting.get() == id);
        // Where the call waits, and whether alone in its frame.
        let found = self.queue.as_deref_mut().and_then(|queue| {
            let at = queue.waiting.iter().enumerate().find_map(|(at, waiting)| {
                let Waiting::Message(text) = waiting else {
                    return None;
                };
                match message::classify(text, max_batch) {
                    Incoming::Single(item) if names(&item) => Some((at, true)),
                    Incoming::Batch(items) if items.iter().any(names) => Some((at, false)),
                    _ => None,
                }
            })?;
            Some((queue, at))
        });
        let Some((queue, (at, alone))) = found else {
            tracing::debug!(id, "cancel for a call neither running nor waiting; ignored");
            return None;
        };
        if alone {
            let taken = queue.waiting.remove(at)?;
            queue.bytes = queue.bytes.saturating_sub(clamp(taken.len()));
            return cancel::cancel_answer(id, style);
        }
        // Behind the batch, and behind the cancels already there.
        let mut behind = at + 1;
        while matches!(queue.waiting.get(behind), Some(Waiting::Cancel(..))) {
            behind += 1;
        }
        queue.bytes = queue.bytes.saturating_add(clamp(id.len()));
        queue
            .waiting
            .insert(behind, Waiting::Cancel(id.into(), style));
        None
    }
}

impl Queue {
    fn take_front(&mut self) -> Option<Waiting> {
        let waiting = self.waiting.pop_front()?;
        self.bytes = self.bytes.saturating_sub(clamp(waiting.len()));
        Some(waiting)
    }
}

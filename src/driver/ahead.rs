//! Messages read ahead while reading is paused (calls past `max_in_flight`, or behind
//! notifications): they wait here for their turn, in order, so that the cancels and
//! answers behind them can be read and acted on. Bounded by `read_ahead` messages and
//! `max_message_size` bytes (one is always kept, whatever its size): past either,
//! reading stops, and the other side feels the back-pressure.

use std::collections::VecDeque;

use crate::config::{CancelStyle, PeerConfig};
use crate::message::{self, Incoming, Item};
use crate::transport::Text;

use super::cancel;

/// Kept in every connection, idle ones included: sizes as `u32` (a message is at
/// most `max_message_size`, and more than 4 GiB of them is past any sane bound).
pub(super) struct Ahead {
    waiting: VecDeque<Text>,
    bytes: u32,
    max_len: u32,
    max_bytes: u32,
}

fn clamp(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

impl Ahead {
    pub fn new(config: &PeerConfig) -> Self {
        Ahead {
            waiting: VecDeque::new(),
            bytes: 0,
            max_len: clamp(config.read_ahead.max(1)),
            max_bytes: clamp(config.max_message_size),
        }
    }

    /// Whether one more message may be read and kept.
    pub fn has_room(&self) -> bool {
        self.waiting.is_empty()
            || (clamp(self.waiting.len()) < self.max_len && self.bytes < self.max_bytes)
    }

    pub fn push(&mut self, text: Text) {
        self.bytes = self.bytes.saturating_add(clamp(text.len()));
        self.waiting.push_back(text);
    }

    /// The first message waiting, whose turn it is.
    #[inline]
    pub fn next(&mut self) -> Option<Text> {
        let text = self.waiting.pop_front()?;
        self.bytes = self.bytes.saturating_sub(clamp(text.len()));
        Some(text)
    }

    /// A cancel for the call whose raw id is `id`, which no handler runs: if that call
    /// waits here, alone in its frame, it is taken out and never starts. Returns the
    /// answer to send for it (`-32800`; none in the MCP form). A call of a batch that
    /// waits is not taken out of it: the cancel is acted on as one for a call that is
    /// not running (nothing), and the batch runs whole at its turn.
    pub fn cancel(&mut self, id: &str, style: CancelStyle, max_batch: usize) -> Option<String> {
        let at = self.waiting.iter().position(|text| {
            matches!(
                message::classify(text, max_batch),
                Incoming::Single(Item::Request { id: waiting, .. }) if waiting.get() == id
            )
        });
        let Some(text) = at.and_then(|at| self.waiting.remove(at)) else {
            tracing::debug!(id, "cancel for a call neither running nor waiting; ignored");
            return None;
        };
        self.bytes = self.bytes.saturating_sub(clamp(text.len()));
        cancel::cancel_answer(id, style)
    }
}

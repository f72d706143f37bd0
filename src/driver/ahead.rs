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

pub(super) struct Ahead {
    waiting: VecDeque<Text>,
    bytes: usize,
    max_len: usize,
    max_bytes: usize,
    max_batch: usize,
}

impl Ahead {
    pub fn new(config: &PeerConfig) -> Self {
        Ahead {
            waiting: VecDeque::new(),
            bytes: 0,
            max_len: config.read_ahead.max(1),
            max_bytes: config.max_message_size,
            max_batch: config.max_batch_len,
        }
    }

    /// Whether one more message may be read and kept.
    pub fn has_room(&self) -> bool {
        self.waiting.is_empty()
            || (self.waiting.len() < self.max_len && self.bytes < self.max_bytes)
    }

    pub fn push(&mut self, text: Text) {
        self.bytes += text.len();
        self.waiting.push_back(text);
    }

    /// The first message waiting, whose turn it is.
    #[inline]
    pub fn next(&mut self) -> Option<Text> {
        let text = self.waiting.pop_front()?;
        self.bytes -= text.len();
        Some(text)
    }

    /// A cancel for the call whose raw id is `id`, which no handler runs: if that call
    /// waits here, alone in its frame, it is taken out and never starts. Returns the
    /// answer to send for it (`-32800`; none in the MCP form). A call of a batch that
    /// waits is not taken out of it: the cancel is acted on as one for a call that is
    /// not running (nothing), and the batch runs whole at its turn.
    pub fn cancel(&mut self, id: &str, style: CancelStyle) -> Option<String> {
        let at = self.waiting.iter().position(|text| {
            matches!(
                message::classify(text, self.max_batch),
                Incoming::Single(Item::Request { id: waiting, .. }) if waiting.get() == id
            )
        });
        let Some(text) = at.and_then(|at| self.waiting.remove(at)) else {
            tracing::debug!(id, "cancel for a call neither running nor waiting; ignored");
            return None;
        };
        self.bytes -= text.len();
        cancel::cancel_answer(id, style)
    }
}

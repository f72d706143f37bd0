//! Keyed lanes: a FIFO per key, keys concurrent.
//!
//! Each call of a keyed method gets a task of its own (so it counts toward
//! `max_in_flight` like any running call, and reading pauses past it) that first
//! waits for the call before it with the same key, then runs. The calls of one key
//! form a chain: each holds the signal of the one before and leaves its own for the
//! next. The map holds, per key, only the signal of the last call in the chain, and
//! the last call removes its key when it ends: a key's queue exists only while it
//! holds calls.
//!
//! A cancelled call that still waits keeps its place until its turn and then ends at
//! once (its answer, `-32800`, was sent when the cancel came), so the calls behind it
//! never start before the one ahead of it has finished.

use std::future::Future;
use std::sync::{Arc, Mutex};

use rustc_hash::FxHashMap;
use tokio::sync::oneshot;

use crate::sync::lock;

/// The end of the chain of one key.
struct Tail {
    serial: u64,
    /// Resolves when the last call of the key has ended; taken by the next call.
    done: Option<oneshot::Receiver<()>>,
}

/// The keyed lanes of one connection. Allocated at the first keyed call.
#[derive(Default)]
pub(super) struct Keyed {
    tails: Arc<Mutex<FxHashMap<u64, Tail>>>,
    next: u64,
}

impl Keyed {
    /// `run` made to wait for every call of `key` queued before it.
    pub(super) fn queue(
        &mut self,
        key: u64,
        run: impl Future<Output = ()> + Send + 'static,
    ) -> impl Future<Output = ()> + Send + 'static {
        let serial = self.next;
        self.next += 1;
        let (done_tx, done_rx) = oneshot::channel();
        let tails = self.tails.clone();
        let before = {
            let mut map = lock(&tails);
            let tail = map.entry(key).or_insert(Tail { serial, done: None });
            tail.serial = serial;
            tail.done.replace(done_rx)
        };
        async move {
            if let Some(before) = before {
                // An error means the call before ended without a word (its task was
                // stopped): it has ended all the same.
                let _ = before.await;
            }
            run.await;
            let mut map = lock(&tails);
            if map.get(&key).is_some_and(|t| t.serial == serial) {
                map.remove(&key);
            }
            drop(map);
            let _ = done_tx.send(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex as StdMutex;

    #[tokio::test(start_paused = true)]
    async fn a_keys_queue_is_gone_once_its_last_call_ends() {
        let mut keyed = Keyed::default();
        let order = Arc::new(StdMutex::new(Vec::new()));
        let job = |n: u32, ms: u64| {
            let order = order.clone();
            async move {
                tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
                order.lock().unwrap().push(n);
            }
        };
        // The first is the slowest: the others of its key still wait for it.
        let a = tokio::spawn(keyed.queue(1, job(1, 30)));
        let b = tokio::spawn(keyed.queue(1, job(2, 10)));
        let c = tokio::spawn(keyed.queue(2, job(3, 20)));
        assert_eq!(lock(&keyed.tails).len(), 2);
        for task in [a, b, c] {
            task.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), [3, 1, 2]);
        assert_eq!(
            lock(&keyed.tails).len(),
            0,
            "no queue is kept for an idle key"
        );
    }
}

//! The history commands of a Redis backplane, on whichever connection it has: one
//! Redis's, or a Redis Cluster's client, which sends each call to the master of its
//! topic's slot (the topic's keys and channel share it, keys.rs) and follows `MOVED`,
//! `ASK` and `TRYAGAIN` while a slot moves. Appends go through append.rs (grouped per
//! topic); reads and positions are one script call each.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use redis::aio::ConnectionLike;
use redis::Script;
use tokio::sync::{mpsc, oneshot};

use super::{append, history, unavailable};
use crate::cluster::backplane::{Append, BackplaneError, BoxFuture, HistoryRead};
use crate::cluster::keys::TopicKeys;
use crate::history::{HistoryConfig, Position};

/// The script, a connection to run it on, and the queue of appends.
pub(super) struct Scripts<C> {
    conn: C,
    script: Script,
    appends: mpsc::Sender<append::Record>,
    /// The topic of the last append, shared with the next when it is the same: a
    /// burst on one topic copies its names and head once, not once a publication.
    last: Mutex<Option<Arc<append::Topic>>>,
}

impl<C: ConnectionLike + Clone + Send + Sync + 'static> Scripts<C> {
    /// Starts the appends' task on `conn`; the script publishes with `publish`.
    pub fn start(conn: C, publish: &'static str, queue: usize, batch_max: usize) -> Self {
        let script = Script::new(history::SCRIPT);
        let (appends, appends_rx) = mpsc::channel(queue);
        tokio::spawn(append::run(
            conn.clone(),
            script.clone(),
            appends_rx,
            batch_max,
            publish,
        ));
        Scripts {
            conn,
            script,
            appends,
            last: Mutex::new(None),
        }
    }

    /// [`Backplane::append`](crate::cluster::Backplane::append).
    pub fn append<'a>(
        &'a self,
        append: Append<'a>,
    ) -> BoxFuture<'a, Result<Position, BackplaneError>> {
        let (done, answer) = oneshot::channel();
        let record = append::Record {
            topic: self.topic(&append),
            new_epoch: append.new_epoch.to_owned(),
            data: Bytes::copy_from_slice(append.data),
            done,
        };
        let appends = self.appends.clone();
        Box::pin(async move {
            appends
                .send(record)
                .await
                .map_err(|_| BackplaneError::Closed)?;
            answer.await.map_err(|_| BackplaneError::Closed)?
        })
    }

    /// The shared topic of `append`: the last one's when the same.
    fn topic(&self, append: &Append<'_>) -> Arc<append::Topic> {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        match &*last {
            Some(topic)
                if topic.keys == *append.keys
                    && topic.bounds == *append.bounds
                    && topic.head == append.head =>
            {
                topic.clone()
            }
            _ => {
                let topic = Arc::new(append::Topic {
                    keys: append.keys.clone(),
                    bounds: append.bounds.clone(),
                    head: Bytes::copy_from_slice(append.head),
                });
                *last = Some(topic.clone());
                topic
            }
        }
    }

    /// [`Backplane::read_history`](crate::cluster::Backplane::read_history).
    pub fn read<'a>(
        &'a self,
        keys: &'a TopicKeys,
        bounds: &'a HistoryConfig,
        after: u64,
        max: usize,
    ) -> BoxFuture<'a, Result<HistoryRead, BackplaneError>> {
        let invocation = history::read(&self.script, keys, bounds, after, max);
        self.history(invocation, after, max)
    }

    /// [`Backplane::history_position`](crate::cluster::Backplane::history_position).
    pub fn position<'a>(
        &'a self,
        keys: &'a TopicKeys,
        bounds: &'a HistoryConfig,
        new_epoch: &'a str,
    ) -> BoxFuture<'a, Result<HistoryRead, BackplaneError>> {
        let invocation = history::position(&self.script, keys, bounds, new_epoch);
        self.history(invocation, u64::MAX, 0)
    }

    fn history<'a>(
        &'a self,
        invocation: redis::ScriptInvocation<'a>,
        after: u64,
        max: usize,
    ) -> BoxFuture<'a, Result<HistoryRead, BackplaneError>> {
        let mut conn = self.conn.clone();
        Box::pin(async move {
            let value = invocation
                .invoke_async(&mut conn)
                .await
                .map_err(unavailable)?;
            history::history(value, after, max)
        })
    }
}

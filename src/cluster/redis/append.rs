//! The appends of a [`RedisBackplane`](super::RedisBackplane), committed in groups: one
//! task takes every append waiting (up to `batch_max`), and sends one script call per
//! topic with all of that topic's data, in the order they came, as one pack (up to
//! [`PACK_BYTES`] of data a call; one larger goes alone): the history stores it as one
//! entry and publishes it as one recorded run (history.rs). At most
//! [`IN_FLIGHT`] groups of calls are on their way at once; what comes meanwhile waits
//! and goes out together next, so the more is published at once, the fewer calls carry
//! it (one publisher awaiting each publish still gets a call of its own).

use std::sync::Arc;

use bytes::Bytes;
use redis::aio::ConnectionLike;
use redis::Script;
use tokio::sync::{mpsc, oneshot, Semaphore};

use super::history;
use crate::cluster::backplane::BackplaneError;
use crate::cluster::envelope::PACK_BYTES;
use crate::cluster::keys::TopicKeys;
use crate::history::{HistoryConfig, Position};

/// Groups of script calls on their way at once. Two: one group fills while the other is
/// on its way, and what comes meanwhile goes in one call. With four, calls carried half
/// as much and cost Redis and the nodes more per publication (`--only history-alone`
/// of the cluster bench, alternated builds: 1, 2, 4 and 8 tried; 2 and 1 best).
const IN_FLIGHT: usize = 2;

/// What the appends to one topic share: its names, its bounds and the message head.
#[derive(PartialEq, Eq)]
pub(super) struct Topic {
    pub keys: TopicKeys,
    pub bounds: HistoryConfig,
    pub head: Bytes,
}

/// One publication waiting to be recorded.
pub(super) struct Record {
    /// Shared with the other appends to the topic while they come one after another
    /// (`Scripts::append` keeps the last one's).
    pub topic: Arc<Topic>,
    pub new_epoch: String,
    pub data: Bytes,
    pub done: oneshot::Sender<Result<Position, BackplaneError>>,
}

impl Record {
    /// Whether `other` can go in the same script call.
    fn goes_with(&self, other: &Record) -> bool {
        Arc::ptr_eq(&self.topic, &other.topic) || self.topic == other.topic
    }
}

/// Sends what `queue` brings, grouped (see the module's doc), until it ends, on `conn`
/// (one Redis, or a Redis Cluster's client that routes each call to its topic's slot);
/// the script publishes with `publish` (`PUBLISH`, or `SPUBLISH` on a cluster).
pub(super) async fn run<C>(
    conn: C,
    script: Script,
    mut queue: mpsc::Receiver<Record>,
    batch_max: usize,
    publish: &'static str,
) where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    let in_flight = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut batch = Vec::with_capacity(batch_max);
    loop {
        let Ok(permit) = in_flight.clone().acquire_owned().await else {
            return;
        };
        if queue.recv_many(&mut batch, batch_max).await == 0 {
            return;
        }
        let groups = groups(batch.drain(..));
        let (conn, script) = (conn.clone(), script.clone());
        tokio::spawn(async move {
            let calls = groups
                .into_iter()
                .map(|group| commit(&script, conn.clone(), group, publish));
            futures_util::future::join_all(calls).await;
            drop(permit);
        });
    }
}

/// `records` in groups of one topic each, in the order they came, each group's data at
/// most [`PACK_BYTES`] (a record larger goes alone).
fn groups(records: impl Iterator<Item = Record>) -> Vec<Vec<Record>> {
    let mut groups: Vec<(usize, Vec<Record>)> = Vec::new();
    for record in records {
        let bytes = 4 + record.data.len();
        let open = groups
            .iter_mut()
            .rev()
            .find(|(_, g)| g[0].goes_with(&record))
            .filter(|(size, _)| size + bytes <= PACK_BYTES);
        match open {
            Some((size, group)) => {
                *size += bytes;
                group.push(record);
            }
            None => groups.push((bytes, vec![record])),
        }
    }
    groups.into_iter().map(|(_, group)| group).collect()
}

/// One script call for `group` (one topic); each record gets its own offset.
async fn commit<C: ConnectionLike + Send>(
    script: &Script,
    mut conn: C,
    group: Vec<Record>,
    publish: &str,
) {
    let first = &group[0];
    let invocation = history::append(
        script,
        &first.topic.keys,
        &first.topic.bounds,
        &first.new_epoch,
        &first.topic.head,
        publish,
        &history::pack(group.iter().map(|r| r.data.as_ref())),
    );
    let answer = match invocation.invoke_async(&mut conn).await {
        Ok(value) => history::appended(value),
        Err(e) => Err(BackplaneError::Unavailable(e.to_string())),
    };
    let n = group.len() as u64;
    for (i, record) in group.into_iter().enumerate() {
        let answer = match &answer {
            Ok(last) => Ok(Position {
                epoch: last.epoch.clone(),
                offset: (last.offset + 1 + i as u64).saturating_sub(n),
            }),
            Err(e) => Err(BackplaneError::Unavailable(e.to_string())),
        };
        let _ = record.done.send(answer);
    }
}

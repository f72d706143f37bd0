//! The publishing side of a [`RedisClusterBackplane`](super::RedisClusterBackplane):
//! one connection per master, fed by one writer task. Whatever waits in the queue (up
//! to `batch_max` calls) is split by master, keeping call order within each, and goes
//! out as one pipeline of `SPUBLISH` to every master at once. A message Redis redirects
//! (`MOVED`: its slot has another master now) or that meets a lost connection goes again
//! after the slot map is fetched anew; what still fails after that fails the call, and
//! the cluster's outbox sends it again (receivers drop what had gone through). A call
//! whose messages failed only in part, or whose masters failed while the others answered
//! (the cluster is up: one shard has no master), says which with
//! [`BackplaneError::Partial`], so that the outbox holds back only those channels.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{AsyncConnectionConfig, Value};
use tokio::sync::mpsc;

use super::topology::{dial, Map};
use crate::cluster::backplane::BackplaneError;
use crate::cluster::redis::subscriber::Shared;
use crate::cluster::redis::Publish;
use crate::cluster::slot::slot;

/// Rounds per batch: the first, then after a fresh map.
const ATTEMPTS: usize = 3;

/// Sends the queue: each batch split by master, in call order within each.
pub(super) async fn write_loop(
    map: Arc<Map>,
    mut queue: mpsc::Receiver<Publish>,
    batch_max: usize,
    config: AsyncConnectionConfig,
    shared: Arc<Shared>,
) {
    let mut writer = Writer {
        map,
        conns: HashMap::new(),
        config,
    };
    let mut batch = Vec::with_capacity(batch_max);
    while queue.recv_many(&mut batch, batch_max).await > 0 {
        let messages: Vec<(&str, &Bytes)> = batch
            .iter()
            .flat_map(|item| &item.messages)
            .map(|(channel, payload)| (channel.as_str(), payload))
            .collect();
        let result = writer.send(&messages).await;
        // Up: every master was linked for pub/sub the last time that changed, so what
        // failed failed where it went, not everywhere.
        let up = shared.up.load(Ordering::Acquire);
        let mut start = 0;
        for item in batch.drain(..) {
            let places = start..start + item.messages.len();
            start = places.end;
            let answer = match &result {
                Ok(()) => Ok(()),
                Err((failed, why)) => {
                    let mine: Vec<usize> = failed
                        .iter()
                        .filter(|i| places.contains(i))
                        .map(|i| i - places.start)
                        .collect();
                    match mine.len() {
                        0 => Ok(()),
                        n if n < places.len() || up => Err(BackplaneError::Partial {
                            failed: mine,
                            why: why.clone(),
                        }),
                        _ => Err(BackplaneError::Unavailable(why.clone())),
                    }
                }
            };
            let _ = item.done.send(answer);
        }
    }
}

struct Writer {
    map: Arc<Map>,
    /// One connection per master, `host:port`; dropped when it fails, dialed again.
    conns: HashMap<String, MultiplexedConnection>,
    config: AsyncConnectionConfig,
}

/// How one round ended for the messages that did not go through.
#[derive(Default)]
struct Round {
    failed: Vec<usize>,
    /// The map is stale (a redirect, a master gone or unknown).
    stale: bool,
    why: Option<String>,
}

impl Writer {
    /// Sends every message to its slot's master; `Err` with those that still failed
    /// after [`ATTEMPTS`] rounds (their places, in order) and the last reason.
    async fn send(&mut self, messages: &[(&str, &Bytes)]) -> Result<(), (Vec<usize>, String)> {
        let mut todo: Vec<usize> = (0..messages.len()).collect();
        let mut why = String::new();
        for attempt in 0..ATTEMPTS {
            let seen = self.map.fetched();
            let round = self.round(messages, &todo).await;
            if round.failed.is_empty() {
                return Ok(());
            }
            todo = round.failed;
            why = round.why.unwrap_or_default();
            if attempt + 1 == ATTEMPTS {
                break;
            }
            if round.stale {
                if let Err(e) = self.map.refresh(seen).await {
                    why = format!("{why}; slot map: {e}");
                }
            } else {
                // TRYAGAIN, CLUSTERDOWN and the like: Redis is busy with a change.
                tokio::time::sleep(Duration::from_millis(20 << attempt)).await;
            }
        }
        Err((todo, why))
    }

    /// One pipeline per master for the messages in `todo` (indices in order).
    async fn round(&mut self, messages: &[(&str, &Bytes)], todo: &[usize]) -> Round {
        let topology = self.map.get();
        let mut round = Round::default();
        let mut groups: Vec<Vec<usize>> = vec![Vec::new(); topology.masters().len()];
        for &i in todo {
            match topology.master_index(slot(messages[i].0.as_bytes())) {
                Some(m) => groups[m].push(i),
                None => {
                    round.failed.push(i);
                    round.stale = true;
                    round.why = Some(format!("no master serves {}", messages[i].0));
                }
            }
        }
        let mut sends = Vec::new();
        for (addr, group) in topology.masters().iter().zip(groups) {
            if group.is_empty() {
                continue;
            }
            match self.connection(addr).await {
                Ok(conn) => sends.push(pipeline(addr.clone(), conn, messages, group)),
                Err(e) => {
                    round.failed.extend(group);
                    round.stale = true;
                    round.why = Some(format!("{addr}: {e}"));
                }
            }
        }
        for (addr, group, result) in futures_util::future::join_all(sends).await {
            match result {
                Ok(values) if values.len() != group.len() => {
                    round.why = Some(format!(
                        "{addr}: {} replies to {}",
                        values.len(),
                        group.len()
                    ));
                    round.failed.extend(group);
                }
                Ok(values) => {
                    for (i, value) in group.into_iter().zip(values) {
                        if let Value::ServerError(e) = value {
                            round.stale |= matches!(e.code(), "MOVED" | "ASK");
                            round.why = Some(format!(
                                "{addr}: {} {}",
                                e.code(),
                                e.details().unwrap_or("")
                            ));
                            round.failed.push(i);
                        }
                    }
                }
                Err(e) => {
                    // The connection is gone (or too slow): dial again next time.
                    self.conns.remove(&addr);
                    round.stale = true;
                    round.why = Some(format!("{addr}: {e}"));
                    round.failed.extend(group);
                }
            }
        }
        round.failed.sort_unstable();
        round
    }

    async fn connection(&mut self, addr: &str) -> redis::RedisResult<MultiplexedConnection> {
        if let Some(conn) = self.conns.get(addr) {
            return Ok(conn.clone());
        }
        let conn = dial(addr, &self.config).await?;
        self.conns.insert(addr.to_owned(), conn.clone());
        Ok(conn)
    }
}

/// Sends `group` (indices into `messages`) as one pipeline; every reply comes back,
/// errors included, one per message.
async fn pipeline(
    addr: String,
    mut conn: MultiplexedConnection,
    messages: &[(&str, &Bytes)],
    group: Vec<usize>,
) -> (String, Vec<usize>, redis::RedisResult<Vec<Value>>) {
    let mut pipe = redis::pipe();
    for &i in &group {
        let (channel, payload) = messages[i];
        pipe.cmd("SPUBLISH").arg(channel).arg(payload.as_ref());
    }
    let result = conn.req_packed_commands(&pipe, 0, group.len()).await;
    (addr, group, result)
}

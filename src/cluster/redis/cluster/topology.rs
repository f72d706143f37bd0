//! Which master serves which slot: `CLUSTER SLOTS`, asked of the first node that
//! answers (the masters known, then the replicas, then the seeds). The publisher and the
//! shards' task share one [`Map`]; either asks it to look again when Redis says the map
//! is stale (`MOVED`, a `sunsubscribe` nobody asked for, a master gone), and the shards'
//! task watches it for changes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, Value};
use tokio::sync::{watch, Mutex};

use crate::cluster::slot::SLOTS;

/// No master serves the slot.
const NONE: u16 = u16::MAX;

/// One view of the cluster: each slot's master, and every node seen.
#[derive(Debug, PartialEq, Eq)]
pub(in crate::cluster::redis) struct Topology {
    /// Per slot, the index of its master in `masters`, or [`NONE`].
    owner: Vec<u16>,
    /// Masters as `host:port`.
    masters: Vec<String>,
    /// Masters and replicas, for the next time the map is asked for.
    nodes: Vec<String>,
}

impl Topology {
    /// The master serving `slot`, if one does.
    pub fn master_of(&self, slot: u16) -> Option<&str> {
        let i = self.master_index(slot)?;
        self.masters.get(i).map(String::as_str)
    }

    /// The index in [`masters`](Self::masters) of the master serving `slot`.
    pub fn master_index(&self, slot: u16) -> Option<usize> {
        let i = *self.owner.get(usize::from(slot))?;
        (i != NONE).then_some(usize::from(i))
    }

    /// Every master serving a slot.
    pub fn masters(&self) -> &[String] {
        &self.masters
    }

    /// Reads a `CLUSTER SLOTS` answer. `asked` is the node that gave it (`host:port`),
    /// whose host stands in for a master announced without one.
    fn parse(value: Value, asked: &str) -> Result<Topology, String> {
        let Value::Array(ranges) = value else {
            return Err(format!("CLUSTER SLOTS answered {value:?}"));
        };
        let asked_host = asked.rsplit_once(':').map_or(asked, |(h, _)| h);
        let mut topology = Topology {
            owner: vec![NONE; usize::from(SLOTS)],
            masters: Vec::new(),
            nodes: Vec::new(),
        };
        for range in ranges {
            let Value::Array(parts) = range else {
                return Err("a CLUSTER SLOTS entry is not an array".into());
            };
            let mut parts = parts.into_iter();
            let (Some(Value::Int(start)), Some(Value::Int(end))) = (parts.next(), parts.next())
            else {
                return Err("a CLUSTER SLOTS entry without its range".into());
            };
            let mut addrs = parts.filter_map(|node| address(node, asked_host));
            let Some(master) = addrs.next() else {
                return Err("a CLUSTER SLOTS entry without a master".into());
            };
            let index = match topology.masters.iter().position(|m| *m == master) {
                Some(i) => i,
                None => {
                    topology.masters.push(master.clone());
                    topology.masters.len() - 1
                }
            };
            let index = u16::try_from(index).map_err(|_| "too many masters".to_owned())?;
            let last = usize::from(SLOTS) - 1;
            let start = usize::try_from(start).unwrap_or(usize::MAX);
            let end = usize::try_from(end).unwrap_or(usize::MAX).min(last);
            for owner in topology.owner.get_mut(start..=end).into_iter().flatten() {
                *owner = index;
            }
            for node in std::iter::once(master).chain(addrs) {
                if !topology.nodes.contains(&node) {
                    topology.nodes.push(node);
                }
            }
        }
        if topology.masters.is_empty() {
            return Err("the cluster serves no slot".into());
        }
        Ok(topology)
    }
}

/// `host:port` of a node in a `CLUSTER SLOTS` entry (`[host, port, id, ...]`); an
/// empty or unknown host (`?`) is the asked node's.
fn address(node: Value, asked_host: &str) -> Option<String> {
    let Value::Array(fields) = node else {
        return None;
    };
    let mut fields = fields.into_iter();
    let host = match fields.next()? {
        Value::BulkString(b) => String::from_utf8(b).ok()?,
        Value::SimpleString(s) => s,
        _ => return None,
    };
    let Value::Int(port) = fields.next()? else {
        return None;
    };
    let host = if host.is_empty() || host == "?" {
        asked_host.to_owned()
    } else {
        host
    };
    Some(if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    })
}

/// Opens a plain connection to `addr` (`host:port`) with the backplane's timeouts.
pub(super) async fn dial(
    addr: &str,
    config: &AsyncConnectionConfig,
) -> redis::RedisResult<MultiplexedConnection> {
    let client = Client::open(format!("redis://{addr}"))?;
    client
        .get_multiplexed_async_connection_with_config(config)
        .await
}

/// The map every part of one backplane reads, and asks to refresh.
pub(in crate::cluster::redis) struct Map {
    seeds: Vec<String>,
    current: watch::Sender<Arc<Topology>>,
    /// Fetches done, so that callers who asked together share one.
    fetched: AtomicU64,
    fetching: Mutex<()>,
    config: AsyncConnectionConfig,
}

impl Map {
    /// Asks the seeds (`host:port`) for the first map.
    pub async fn new(
        seeds: Vec<String>,
        connect_timeout: Duration,
        response_timeout: Duration,
    ) -> Result<Map, String> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(connect_timeout)
            .set_response_timeout(response_timeout);
        let first = fetch(&seeds, &config).await?;
        Ok(Map {
            seeds,
            current: watch::Sender::new(Arc::new(first)),
            fetched: AtomicU64::new(0),
            fetching: Mutex::new(()),
            config,
        })
    }

    /// The map as last fetched.
    pub fn get(&self) -> Arc<Topology> {
        self.current.borrow().clone()
    }

    /// Wakes when the map changes.
    pub fn watch(&self) -> watch::Receiver<Arc<Topology>> {
        self.current.subscribe()
    }

    /// How many fetches have completed: pass it to [`refresh`](Self::refresh).
    pub fn fetched(&self) -> u64 {
        self.fetched.load(Ordering::Acquire)
    }

    /// Asks the cluster again, unless a fetch completed since `seen` (then that one
    /// counts). Watchers wake only when the map changed.
    pub async fn refresh(&self, seen: u64) -> Result<Arc<Topology>, String> {
        let _one = self.fetching.lock().await;
        if self.fetched() > seen {
            return Ok(self.get());
        }
        let known = self.get();
        let candidates: Vec<String> = known
            .masters
            .iter()
            .chain(&known.nodes)
            .chain(&self.seeds)
            .cloned()
            .collect();
        let result = fetch(&candidates, &self.config).await;
        self.fetched.fetch_add(1, Ordering::AcqRel);
        let fresh = Arc::new(result?);
        self.current.send_if_modified(|map| {
            let changed = **map != *fresh;
            if changed {
                tracing::info!(masters = ?fresh.masters, "redis cluster: slot map changed");
                *map = fresh.clone();
            }
            changed
        });
        Ok(self.get())
    }
}

/// The map from the first of `candidates` that gives one.
async fn fetch(candidates: &[String], config: &AsyncConnectionConfig) -> Result<Topology, String> {
    let mut tried = std::collections::HashSet::new();
    let mut last = String::from("no address to ask");
    for addr in candidates {
        if !tried.insert(addr.as_str()) {
            continue;
        }
        let asked = async {
            let mut conn = dial(addr, config).await.map_err(|e| e.to_string())?;
            let value: Value = redis::cmd("CLUSTER")
                .arg("SLOTS")
                .query_async(&mut conn)
                .await
                .map_err(|e| e.to_string())?;
            Topology::parse(value, addr)
        };
        match asked.await {
            Ok(topology) => return Ok(topology),
            Err(e) => {
                tracing::debug!(addr, error = %e, "redis cluster: no slot map from this node");
                last = format!("{addr}: {e}");
            }
        }
    }
    Err(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    fn node(host: &str, port: i64) -> Value {
        Value::Array(vec![bulk(host), Value::Int(port), bulk("id")])
    }

    #[test]
    fn a_slots_answer_maps_each_slot_to_its_master() {
        let answer = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(5460),
                node("127.0.0.1", 7001),
                node("127.0.0.1", 7004),
            ]),
            Value::Array(vec![Value::Int(5461), Value::Int(10922), node("", 7002)]),
            // A second range of the first master (a slot moved to it).
            Value::Array(vec![
                Value::Int(10923),
                Value::Int(10923),
                node("127.0.0.1", 7001),
            ]),
        ]);
        let t = Topology::parse(answer, "10.0.0.9:7002").unwrap();
        assert_eq!(t.masters(), ["127.0.0.1:7001", "10.0.0.9:7002"]);
        assert_eq!(t.master_of(0), Some("127.0.0.1:7001"));
        assert_eq!(t.master_of(5460), Some("127.0.0.1:7001"));
        assert_eq!(t.master_of(5461), Some("10.0.0.9:7002"));
        assert_eq!(t.master_of(10923), Some("127.0.0.1:7001"));
        assert_eq!(t.master_of(10924), None, "a slot nobody serves");
        assert_eq!(t.master_of(SLOTS), None);
        assert!(t.nodes.contains(&"127.0.0.1:7004".to_owned()));
    }

    #[test]
    fn a_broken_answer_is_an_error_not_a_panic() {
        for bad in [
            Value::Nil,
            Value::Array(vec![Value::Int(1)]),
            Value::Array(vec![Value::Array(vec![Value::Int(0), Value::Int(9)])]),
            Value::Array(vec![]),
        ] {
            assert!(Topology::parse(bad, "h:1").is_err());
        }
        // A range past the last slot is cut, not a panic.
        let wide = Value::Array(vec![Value::Array(vec![
            Value::Int(16000),
            Value::Int(99999),
            node("h", 1),
        ])]);
        let t = Topology::parse(wide, "h:1").unwrap();
        assert_eq!(t.master_of(16383), Some("h:1"));
    }
}

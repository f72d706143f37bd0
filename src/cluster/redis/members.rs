//! Presence on Redis: the parts, index and generation of `member_store.rs`, each
//! operation one Lua script on one topic's keys (one slot), so a write, its version and
//! its expiry land together, and a read sees one moment. Written against any async
//! connection, so a Redis Cluster backplane can run the same scripts.

use std::time::Duration;

use bytes::Bytes;
use redis::aio::ConnectionLike;
use redis::{RedisResult, Value};

use crate::cluster::member_store::{
    PartWrite, PresenceKey, PresenceRead, StoredPart, StoredPresence,
};

/// KEYS: index, part. ARGV: node, incarnation, version, ttl (ms), replace (1/0), a
/// generation for a new index, how many members are set, their ids and infos, then the
/// ids removed. A change (not replace) to a part that is gone (or another
/// incarnation's) writes nothing and returns '': the part must be written whole. A part
/// of another incarnation is dropped before a replace; a part left empty is deleted and
/// its node taken out of the index. Returns the index's generation.
const WRITE: &str = r"
local index, part = KEYS[1], KEYS[2]
local node, inc = ARGV[1], ARGV[2]
local mine = redis.call('HGET', part, '~i') == inc
if ARGV[5] ~= '1' and not mine then
  return ''
end
if ARGV[5] == '1' then
  redis.call('DEL', part)
end
local n = tonumber(ARGV[7])
local i = 8
for _ = 1, n do
  redis.call('HSET', part, ARGV[i], ARGV[i + 1])
  i = i + 2
end
for j = i, #ARGV do
  redis.call('HDEL', part, ARGV[j])
end
redis.call('HSETNX', index, '~g', ARGV[6])
local len = redis.call('HLEN', part)
if redis.call('HEXISTS', part, '~i') == 1 then len = len - 2 end
if len > 0 then
  redis.call('HSET', part, '~i', inc, '~v', ARGV[3])
  redis.call('PEXPIRE', part, ARGV[4])
  redis.call('HSET', index, node, inc)
else
  redis.call('DEL', part)
  redis.call('HDEL', index, node)
end
redis.call('PEXPIRE', index, ARGV[4])
return redis.call('HGET', index, '~g')
";

/// KEYS: index. ARGV: the parts' key prefix, one node ('' for every node), with members
/// (1/0). Returns the generation ('' without an index), then per part found: node,
/// incarnation, version, size, and (with members) its fields. Index entries whose part
/// expired are taken out.
const READ: &str = r"
local index, prefix, only, with = KEYS[1], ARGV[1], ARGV[2], ARGV[3] == '1'
local out = { redis.call('HGET', index, '~g') or '' }
local nodes = {}
if only ~= '' then
  nodes[1] = only
else
  for _, n in ipairs(redis.call('HKEYS', index)) do
    if n ~= '~g' then nodes[#nodes + 1] = n end
  end
end
for _, node in ipairs(nodes) do
  local part = prefix .. node
  local meta = redis.call('HMGET', part, '~i', '~v')
  if meta[1] then
    local entry = { node, meta[1], meta[2], redis.call('HLEN', part) - 2 }
    if with then entry[5] = redis.call('HGETALL', part) end
    out[#out + 1] = entry
  elseif only == '' then
    redis.call('HDEL', index, node)
  end
end
return out
";

/// KEYS: index, part. ARGV: node, ttl (ms), a generation for a new index. 0 when the
/// part is gone (it must be written again).
const REFRESH: &str = r"
if redis.call('PEXPIRE', KEYS[2], ARGV[2]) == 0 then return 0 end
redis.call('HSETNX', KEYS[1], '~g', ARGV[3])
redis.call('HSET', KEYS[1], ARGV[1], redis.call('HGET', KEYS[2], '~i'))
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
";

fn millis(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1)
}

fn generation() -> String {
    format!("{:016x}", fastrand::u64(..))
}

/// Applies `writes` in order, as one pipeline; each topic's generation.
pub(crate) async fn write<C: ConnectionLike + Send>(
    conn: &mut C,
    writes: Vec<PartWrite>,
) -> RedisResult<Vec<String>> {
    if writes.is_empty() {
        return Ok(Vec::new());
    }
    let mut pipe = redis::pipe();
    for w in &writes {
        let cmd = pipe
            .cmd("EVAL")
            .arg(WRITE)
            .arg(2)
            .arg(&w.key.index)
            .arg(w.key.part(&w.node))
            .arg(&w.node)
            .arg(&w.incarnation)
            .arg(w.version)
            .arg(millis(w.ttl))
            .arg(if w.replace { "1" } else { "0" })
            .arg(generation())
            .arg(w.set.len());
        for (id, info) in &w.set {
            cmd.arg(*id).arg(info.as_ref());
        }
        for id in &w.remove {
            cmd.arg(*id);
        }
    }
    let first = pipe.query_async(conn).await;
    if first.as_ref().is_err_and(|e| e.is_unrecoverable_error()) {
        // The manager dials again on this error (after a Redis restart, say): once more
        // on the new connection. Writing a part twice leaves it as written once.
        return pipe.query_async(conn).await;
    }
    first
}

/// As [`write()`], but one pipeline per topic, the topics' pipelines at once: what a
/// Redis Cluster needs (a pipeline runs on one slot; each topic's keys are one slot).
/// One topic's writes keep their order; the answers come in the order of `writes`.
#[cfg(feature = "redis-cluster")]
pub(crate) async fn write_per_topic<C: ConnectionLike + Clone + Send>(
    conn: &C,
    writes: Vec<PartWrite>,
) -> RedisResult<Vec<String>> {
    let total = writes.len();
    let mut groups: Vec<(Vec<usize>, Vec<PartWrite>)> = Vec::new();
    let mut by_topic: std::collections::HashMap<String, usize> = Default::default();
    for (at, w) in writes.into_iter().enumerate() {
        let group = *by_topic.entry(w.key.index.clone()).or_insert_with(|| {
            groups.push((Vec::new(), Vec::new()));
            groups.len() - 1
        });
        groups[group].0.push(at);
        groups[group].1.push(w);
    }
    let runs = groups.into_iter().map(|(places, writes)| {
        let mut conn = conn.clone();
        async move { write(&mut conn, writes).await.map(|g| (places, g)) }
    });
    let mut out = vec![String::new(); total];
    for (places, generations) in futures_util::future::try_join_all(runs).await? {
        for (at, generation) in places.into_iter().zip(generations) {
            out[at] = generation;
        }
    }
    Ok(out)
}

/// Reads one topic's presence.
pub(crate) async fn read<C: ConnectionLike + Send>(
    conn: &mut C,
    read: PresenceRead,
) -> RedisResult<StoredPresence> {
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(READ)
        .arg(1)
        .arg(&read.key.index)
        .arg(&read.key.parts)
        .arg(read.node.as_deref().unwrap_or(""))
        .arg(if read.members { "1" } else { "0" });
    let mut value = cmd.query_async::<Value>(conn).await;
    if value.as_ref().is_err_and(|e| e.is_unrecoverable_error()) {
        value = cmd.query_async(conn).await;
    }
    Ok(parse_read(value?))
}

/// Extends `node`'s parts of the topics at `keys`; whether each was there.
pub(crate) async fn refresh<C: ConnectionLike + Send>(
    conn: &mut C,
    keys: &[PresenceKey],
    node: &str,
    ttl: Duration,
) -> RedisResult<Vec<bool>> {
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let mut pipe = redis::pipe();
    for key in keys {
        pipe.cmd("EVAL")
            .arg(REFRESH)
            .arg(2)
            .arg(&key.index)
            .arg(key.part(node))
            .arg(node)
            .arg(millis(ttl))
            .arg(generation());
    }
    let mut found = pipe.query_async::<Vec<i64>>(conn).await;
    if found.as_ref().is_err_and(|e| e.is_unrecoverable_error()) {
        found = pipe.query_async(conn).await;
    }
    Ok(found?.into_iter().map(|n| n == 1).collect())
}

/// As [`refresh`], one pipeline per topic, at once (a Redis Cluster's need, as
/// [`write_per_topic`]); the answers in the order of `keys`.
#[cfg(feature = "redis-cluster")]
pub(crate) async fn refresh_per_topic<C: ConnectionLike + Clone + Send>(
    conn: &C,
    keys: &[PresenceKey],
    node: &str,
    ttl: Duration,
) -> RedisResult<Vec<bool>> {
    let runs = keys.iter().map(|key| {
        let mut conn = conn.clone();
        async move { refresh(&mut conn, std::slice::from_ref(key), node, ttl).await }
    });
    // Each topic on its own: one whose shard does not answer costs no other its
    // refresh. It counts as there (not written anew, which would fail as well); its
    // part expires if its shard stays away, as the others' on that shard do.
    let mut found = Vec::with_capacity(keys.len());
    let (mut failures, mut first) = (0, None);
    for (key, result) in keys.iter().zip(futures_util::future::join_all(runs).await) {
        match result {
            Ok(there) => found.extend(there),
            Err(e) => {
                tracing::debug!(index = %key.index, error = %e, "presence part not refreshed");
                found.push(true);
                failures += 1;
                first.get_or_insert(e);
            }
        }
    }
    match first {
        // None answered: the store is away.
        Some(e) if failures == keys.len() => Err(e),
        _ => Ok(found),
    }
}

fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        Value::Int(n) => Some(n.to_string()),
        _ => None,
    }
}

fn number(value: &Value) -> Option<u64> {
    match value {
        Value::Int(n) => u64::try_from(*n).ok(),
        other => text(other)?.parse().ok(),
    }
}

/// What the read script returned; anything malformed is left out.
fn parse_read(value: Value) -> StoredPresence {
    let Value::Array(items) = value else {
        return StoredPresence::default();
    };
    let mut items = items.into_iter();
    let generation = items
        .next()
        .and_then(|g| text(&g))
        .filter(|g| !g.is_empty());
    let parts = items.filter_map(|entry| parse_part(&entry)).collect();
    StoredPresence { generation, parts }
}

fn parse_part(entry: &Value) -> Option<StoredPart> {
    let Value::Array(fields) = entry else {
        return None;
    };
    let members = match fields.get(4) {
        Some(Value::Array(flat)) => Some(
            flat.chunks_exact(2)
                .filter_map(|pair| {
                    let id = text(&pair[0])?.parse::<u64>().ok()?;
                    let info = match &pair[1] {
                        Value::BulkString(bytes) => Bytes::from(bytes.clone()),
                        other => Bytes::from(text(other)?),
                    };
                    Some((id, info))
                })
                .collect(),
        ),
        _ => None,
    };
    Some(StoredPart {
        node: text(fields.first()?)?,
        incarnation: text(fields.get(1)?)?,
        version: number(fields.get(2)?)?,
        len: usize::try_from(number(fields.get(3)?)?).ok()?,
        members,
    })
}

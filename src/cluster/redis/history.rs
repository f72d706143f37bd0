//! Topic history on Redis: one Lua script keeps a topic's history beside its channel.
//!
//! A topic's history is a Stream (`<prefix>:h:<tagged topic>`) whose entry ids are
//! the offsets (`<offset>-0`, so `XRANGE key (K+1)-0 +` reads what follows K), each
//! entry `t` (Redis's time in ms when recorded) and `d` (the data), with a meta hash
//! (`<prefix>:m:<tagged topic>`: `e` the epoch, `o` the newest offset, `b` the data
//! bytes kept, `t` the oldest kept entry's time). The three keys of a topic share its hash tag (keys.rs), so the script
//! runs on one Redis Cluster slot.
//!
//! One script, three operations, each atomic (a script runs alone):
//! - `append`: start an epoch if the meta has none (no history yet, or Redis came back
//!   empty: the epoch is the caller's random one, and a stream left of an older epoch
//!   goes), take the next offsets, `XADD` the entries, trim, store offset and bytes, and
//!   `PUBLISH` each message (head, `"ep":E,"off":N}`, newline, data) on the channel: a
//!   subscriber never sees a publication the history lacks, nor the other way round.
//!   One call records several publications of a topic (what a node's publishers handed
//!   in while its previous calls were on their way): the script's fixed cost (its call,
//!   the meta, the clock, the trim, the expiry) is paid once for all of them, which is
//!   what keeps a topic with history within reach of a bare `XADD` + `PUBLISH`.
//! - `read`: trim, then the position and up to `max` entries after an offset.
//! - `position`: start an epoch if none (as `append`), trim, the position.
//!
//! Trimming is exact: while the stream holds more than `max_len` entries, or more than
//! `max_bytes` bytes of data (the counter `b`), or its oldest entry is `max_age` old or
//! older (the meta's `t`), the oldest goes (read a few at a time from the front, then
//! one `XTRIM MINID` to the first kept). Within every bound nothing is read: a read of
//! entries is one `XRANGE`, a position none. After an append the stream expires `max_age` later (every entry
//! would be trimmed by then), so an idle topic keeps only its meta; a meta made by
//! `position` alone (a topic subscribed to, never published on) expires a day after
//! the last subscription anywhere looked, and the first append keeps it for good.
//!
//! The script is sent by its SHA (`EVALSHA`) and loaded again when Redis answers
//! `NOSCRIPT` (after a restart), by redis-rs's `Script`.

use bytes::Bytes;
use redis::{Script, ScriptInvocation, Value};

use crate::cluster::backplane::{BackplaneError, HistoryEntry, HistoryRead};
use crate::cluster::keys::TopicKeys;
use crate::history::{HistoryConfig, Position};

/// The script. `KEYS`: the stream, the meta. `ARGV`: the operation (`append`, `read`,
/// `position`), `max_len`, `max_bytes`, `max_age` in ms, then per operation: append:
/// the new epoch, the message head, the publish command (`PUBLISH`, or `SPUBLISH` on a
/// sharded Redis Cluster), the channel, then one or more data, recorded in that order at
/// consecutive offsets (the answer is the epoch and the last one's offset) and published
/// as one envelope each, several packed into one bus message as the outbox packs them
/// (up to `envelope::PACK_BYTES` of envelopes a pack);
/// read: after, max; position: the new epoch.
///
/// The channel is an argument, not a key, though it shares the keys' slot: it never
/// exists as a key, and on a Redis Cluster a call naming a key that does not exist is
/// refused (`TRYAGAIN`) for as long as its slot migrates.
pub(crate) const SCRIPT: &str = r#"
local stream, meta = KEYS[1], KEYS[2]
local op = ARGV[1]
local max_len, max_bytes, max_age = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local m = redis.call('HMGET', meta, 'e', 'o', 'b', 't')
local epoch, last, bytes, oldest = m[1], tonumber(m[2]) or 0, tonumber(m[3]) or 0, tonumber(m[4])
if not epoch then
  if op == 'read' then
    return {'', 1, 0, {}}
  end
  epoch, last, bytes, oldest = ARGV[5], 0, 0, nil
  redis.call('DEL', stream)
  redis.call('HSET', meta, 'e', epoch, 'o', 0, 'b', 0)
end
local bytes_before, oldest_before = bytes, oldest

-- Removes the oldest while any bound is exceeded; the entries left.
local function trim()
  local len = redis.call('XLEN', stream)
  if len == 0 then
    bytes, oldest = 0, nil
    return 0
  end
  if len <= max_len and bytes <= max_bytes and oldest and now - oldest < max_age then
    return len
  end
  local keep, start, removed = nil, '-', 0
  while not keep do
    local count = len - max_len + 1
    if count < 2 then count = 2 end
    if count > 64 then count = 64 end
    local batch = redis.call('XRANGE', stream, start, '+', 'COUNT', count)
    if #batch == 0 then break end
    for _, e in ipairs(batch) do
      local at, size = tonumber(e[2][2]), string.len(e[2][4])
      if len > max_len or bytes > max_bytes or now - at >= max_age then
        len, bytes, removed = len - 1, bytes - size, removed + 1
      else
        keep, oldest = e[1], at
        break
      end
    end
    if not keep then start = '(' .. batch[#batch][1] end
  end
  if removed > 0 then
    if keep then
      redis.call('XTRIM', stream, 'MINID', keep)
    else
      redis.call('DEL', stream)
    end
  end
  if len == 0 then bytes, oldest = 0, nil end
  return len
end

-- Stores bytes and the oldest entry's time when they changed.
local function store()
  if bytes ~= bytes_before then
    redis.call('HSET', meta, 'b', string.format('%d', bytes))
  end
  if oldest ~= oldest_before then
    if oldest then
      redis.call('HSET', meta, 't', string.format('%d', oldest))
    else
      redis.call('HDEL', meta, 't')
    end
  end
end

if op == 'append' then
  local head, publish, channel, n = ARGV[6], ARGV[7], ARGV[8], #ARGV - 8
  local first_one = last == 0
  local len = redis.call('XLEN', stream)
  if len == 0 then oldest = now end
  local at = string.format('%d', now)
  for i = 9, #ARGV do
    last = last + 1
    redis.call('XADD', stream, string.format('%d-0', last), 't', at, 'd', ARGV[i])
    bytes = bytes + string.len(ARGV[i])
  end
  trim()
  redis.call('HSET', meta, 'o', string.format('%d', last))
  store()
  if first_one then redis.call('PERSIST', meta) end
  redis.call('PEXPIRE', stream, max_age)
  local prefix = head .. '"ep":"' .. epoch .. '","off":'
  local function envelope(i)
    return prefix .. string.format('%d', last - n + i - 8) .. '}\n' .. ARGV[i]
  end
  if n == 1 then
    redis.call(publish, channel, envelope(9))
    return {epoch, last}
  end
  -- Several go out packed as the outbox packs them (envelope.rs): '*', then each
  -- envelope after its length (4 bytes, big-endian), at most 65536 bytes of them a
  -- pack (one larger goes alone in its pack).
  local parts, size = {'*'}, 0
  for i = 9, #ARGV do
    local one = envelope(i)
    if size > 0 and size + 4 + #one > 65536 then
      redis.call(publish, channel, table.concat(parts))
      parts, size = {'*'}, 0
    end
    parts[#parts + 1] = struct.pack('>I4', #one)
    parts[#parts + 1] = one
    size = size + 4 + #one
  end
  redis.call(publish, channel, table.concat(parts))
  return {epoch, last}
end

local len = trim()
store()
local first = last + 1 - len
local entries = {}
if op == 'read' then
  local after, max = tonumber(ARGV[5]), tonumber(ARGV[6])
  if max > 0 and after + 1 >= first and after < last then
    local found = redis.call('XRANGE', stream, string.format('%d-0', after + 1), '+', 'COUNT', max)
    for i, e in ipairs(found) do
      local age = now - tonumber(e[2][2])
      if age < 0 then age = 0 end
      entries[i] = {e[1], age, e[2][4]}
    end
  end
elseif last == 0 then
  redis.call('PEXPIRE', meta, 86400000)
end
return {epoch, first, last, entries}
"#;

/// The bounds as the script takes them: counts and bytes up to 2^53 (Lua's numbers),
/// the age in whole milliseconds (at least 1, at most ten years).
fn bounds(bounds: &HistoryConfig) -> [String; 3] {
    const MAX_EXACT: u64 = 1 << 53;
    const TEN_YEARS_MS: u64 = 10 * 365 * 24 * 3600 * 1000;
    let ms = u64::try_from(bounds.max_age.as_millis()).unwrap_or(u64::MAX);
    [
        (bounds.max_len as u64).min(MAX_EXACT).to_string(),
        (bounds.max_bytes as u64).min(MAX_EXACT).to_string(),
        ms.clamp(1, TEN_YEARS_MS).to_string(),
    ]
}

fn invocation<'s>(
    script: &'s Script,
    op: &str,
    keys: &TopicKeys,
    config: &HistoryConfig,
) -> ScriptInvocation<'s> {
    let mut invocation = script.prepare_invoke();
    invocation.key(&keys.stream).key(&keys.meta).arg(op);
    for bound in bounds(config) {
        invocation.arg(bound);
    }
    invocation
}

/// The invocation of an append of `data` (one or more, in order) to the history at
/// `keys`; `publish` is the command the script publishes with.
pub(crate) fn append<'s, 'd>(
    script: &'s Script,
    keys: &TopicKeys,
    bounds: &HistoryConfig,
    new_epoch: &str,
    head: &[u8],
    publish: &str,
    data: impl IntoIterator<Item = &'d [u8]>,
) -> ScriptInvocation<'s> {
    let mut invocation = invocation(script, "append", keys, bounds);
    invocation
        .arg(new_epoch)
        .arg(head)
        .arg(publish)
        .arg(&keys.channel);
    for data in data {
        invocation.arg(data);
    }
    invocation
}

/// The invocation of a read of at most `max` entries after `after`.
pub(crate) fn read<'s>(
    script: &'s Script,
    keys: &TopicKeys,
    config: &HistoryConfig,
    after: u64,
    max: usize,
) -> ScriptInvocation<'s> {
    let mut invocation = invocation(script, "read", keys, config);
    invocation.arg(after).arg(max);
    invocation
}

/// The invocation of a position.
pub(crate) fn position<'s>(
    script: &'s Script,
    keys: &TopicKeys,
    config: &HistoryConfig,
    new_epoch: &str,
) -> ScriptInvocation<'s> {
    let mut invocation = invocation(script, "position", keys, config);
    invocation.arg(new_epoch);
    invocation
}

fn protocol(what: &str, value: &Value) -> BackplaneError {
    BackplaneError::Protocol(format!("{what}: {value:?}"))
}

fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        _ => None,
    }
}

fn number(value: &Value) -> Option<u64> {
    match value {
        Value::Int(n) => u64::try_from(*n).ok(),
        other => text(other)?.parse().ok(),
    }
}

/// An append's answer: `{epoch, offset}`, the offset of the last data appended.
pub(crate) fn appended(value: Value) -> Result<Position, BackplaneError> {
    let Value::Array(items) = &value else {
        return Err(protocol("append", &value));
    };
    match items.as_slice() {
        [epoch, offset] => Ok(Position {
            epoch: text(epoch).ok_or_else(|| protocol("append's epoch", epoch))?,
            offset: number(offset).ok_or_else(|| protocol("append's offset", offset))?,
        }),
        _ => Err(protocol("append", &value)),
    }
}

/// A read's or position's answer: `{epoch, first, last, {{id, age_ms, data}...}}`.
pub(crate) fn history(value: Value) -> Result<HistoryRead, BackplaneError> {
    let Value::Array(items) = &value else {
        return Err(protocol("history", &value));
    };
    let [epoch, first, last, entries] = items.as_slice() else {
        return Err(protocol("history", &value));
    };
    let entries = match entries {
        Value::Array(entries) => entries.iter().map(entry).collect::<Result<_, _>>()?,
        other => return Err(protocol("history entries", other)),
    };
    Ok(HistoryRead {
        epoch: text(epoch).ok_or_else(|| protocol("epoch", epoch))?,
        first: number(first).ok_or_else(|| protocol("first", first))?,
        last: number(last).ok_or_else(|| protocol("last", last))?,
        entries,
    })
}

fn entry(value: &Value) -> Result<HistoryEntry, BackplaneError> {
    let Value::Array(parts) = value else {
        return Err(protocol("entry", value));
    };
    let [id, age, data] = parts.as_slice() else {
        return Err(protocol("entry", value));
    };
    let offset = text(id)
        .and_then(|id| id.strip_suffix("-0").and_then(|o| o.parse().ok()))
        .ok_or_else(|| protocol("entry id", id))?;
    let age = number(age).ok_or_else(|| protocol("entry age", age))?;
    let data = match data {
        Value::BulkString(b) => Bytes::from(b.clone()),
        other => return Err(protocol("entry data", other)),
    };
    Ok(HistoryEntry {
        offset,
        age: std::time::Duration::from_millis(age),
        data,
    })
}

#[cfg(test)]
mod tests {
    use super::SCRIPT;
    use crate::cluster::envelope::PACK_BYTES;

    #[test]
    fn the_script_packs_at_most_what_the_outbox_does() {
        assert!(SCRIPT.contains(&format!("> {PACK_BYTES} then")));
    }
}

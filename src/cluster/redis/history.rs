//! Topic history on Redis: one Lua script keeps a topic's history beside its channel.
//!
//! A topic's history is a Stream (`<prefix>:h:<tagged topic>`) of *packs*: each entry
//! holds the publications one append recorded together (a node's publishers' data
//! committed in one script call), its id the last one's offset (`<offset>-0`), its
//! fields `t` (Redis's time in ms when recorded), `n` (how many), `s` (the bytes of
//! data recorded in the epoch before it) and `d` (each publication's data after its
//! length, 4 bytes big-endian: the body of a recorded run, `envelope::run`). Beside
//! it a meta hash (`<prefix>:m:<tagged topic>`): `e` the epoch, `o` the newest offset,
//! `f` the oldest offset kept, `c` the bytes of data recorded in the epoch, `k` those
//! before `f` (so `c - k` are kept), `t` the time of the pack holding `f`. The three keys
//! of a topic share its hash tag (keys.rs), so the script runs on one Redis Cluster
//! slot.
//!
//! Why packs: an entry per publication cost Redis an `XADD` each (about 1.2 µs from
//! Lua) and every append over the count bound a read of as many entries to trim (about
//! 1.5 µs a publication more): a topic with history ran at a fifth of one without. A
//! pack costs one `XADD` however many it holds, and the bounds are found from the meta
//! and at most a few packs (below).
//!
//! One script, three operations, each atomic (a script runs alone):
//! - `append`: start an epoch if the meta has none (no history yet, Redis came back
//!   empty, or one kept before packs: the epoch is the caller's random one, and a
//!   stream left of an older epoch goes), take the next offsets, `XADD` the pack, trim,
//!   store the meta, and `PUBLISH` the publications on the channel: one alone as an
//!   envelope (head, `"ep":E,"off":N}`, newline, data), several as one recorded run
//!   (head, `"n":N,"ep":E,"off":FIRST}`, newline, the pack's data as stored). A
//!   subscriber never sees a publication the history lacks, nor the other way round.
//! - `read`: trim, then the position and the packs holding up to `max` publications
//!   after an offset (the node takes them apart, `history`).
//! - `position`: start an epoch if none (as `append`), trim, the position.
//!
//! Trimming is exact, per publication: while more than `max_len` are kept, or more than
//! `max_bytes` bytes of data (`c - k`), or the oldest is `max_age` old or older (`t`),
//! the oldest goes. The new oldest is the first offset that keeps every bound: the
//! count's bound gives it at once, and when bytes or age bind too, a binary search over
//! the offsets finds it (a read of one pack each step, about 17 at most). Packs wholly
//! before it go (`XTRIM MINID`); one it falls inside stays, and reads pass over the
//! publications before `f`. Within every bound nothing is read: a read of packs is one
//! `XRANGE` (two when the last publication asked for falls inside a pack), a position
//! none. After an append the stream expires `max_age`
//! later (every entry would be trimmed by then), so an idle topic keeps only its meta; a
//! meta made by `position` alone (a topic subscribed to, never published on) expires a
//! day after the last subscription anywhere looked, and the first append keeps it for
//! good.
//!
//! A meta or stream key of another type (left by another application, a naming clash)
//! is taken for a history lost: the keys are replaced and a new epoch starts, with one
//! gap, as when Redis comes back empty.
//!
//! Every node of a cluster runs the same version: a node from before packs reads
//! neither the packs nor the runs, and its script would write the older layout.
//!
//! The script is sent by its SHA (`EVALSHA`) and loaded again when Redis answers
//! `NOSCRIPT` (after a restart), by redis-rs's `Script`.

use bytes::{BufMut, Bytes, BytesMut};
use redis::{Script, ScriptInvocation, Value};

use crate::cluster::backplane::{BackplaneError, HistoryEntry, HistoryRead};
use crate::cluster::envelope;
use crate::cluster::keys::TopicKeys;
use crate::history::{HistoryConfig, Position};

/// The script. `KEYS`: the stream, the meta. `ARGV`: the operation (`append`, `read`,
/// `position`), `max_len`, `max_bytes`, `max_age` in ms, then per operation: append:
/// the new epoch, the message head, the publish command (`PUBLISH`, or `SPUBLISH` on a
/// sharded Redis Cluster), the channel, the count of publications and their data as a
/// pack ([`pack`]), recorded in that order at consecutive offsets (the answer is the
/// epoch and the last one's offset); read: after, max; position: the new epoch.
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
-- A key of another type (another application's, a naming clash) holds no history: as
-- a history lost, a new epoch goes over it.
local mt, st = redis.call('TYPE', meta)['ok'], redis.call('TYPE', stream)['ok']
if (mt ~= 'none' and mt ~= 'hash') or (st ~= 'none' and st ~= 'stream') then
  if op == 'read' then
    return {'', 1, 0, {}}
  end
  redis.call('DEL', stream, meta)
end
local m = redis.call('HMGET', meta, 'e', 'o', 'f', 'c', 'k', 't')
local epoch, last, first = m[1], tonumber(m[2]) or 0, tonumber(m[3])
local total, before, oldest = tonumber(m[4]) or 0, tonumber(m[5]) or 0, tonumber(m[6])
if not epoch or not first then
  -- No history, or one kept before packs (no 'f'): a new epoch.
  if op == 'read' then
    return {'', 1, 0, {}}
  end
  epoch, last, first, total, before, oldest = ARGV[5], 0, 1, 0, 0, nil
  redis.call('DEL', stream, meta)
  redis.call('HSET', meta, 'e', epoch, 'o', 0, 'f', 1, 'c', 0, 'k', 0)
end
local stored = {last, first, total, before, oldest}

local function id(offset)
  return string.format('%d-0', offset)
end

-- An entry as a pack: its last offset, time, count, bytes before it, data. One that
-- something else wrote in another layout (other fields, another kind of id) is taken as
-- a pack of one empty item at its id, which no reader takes for JSON (it is skipped and
-- counted as a gap, as an entry whose data is not a node's), as recent and with no
-- bytes after it: it goes when the length bound passes it, and fails nothing.
local function packed(e)
  local f = e[2]
  local at = tonumber(string.match(e[1], '^(%d+)'))
  local t, n, s, d = tonumber(f[2]), tonumber(f[4]), tonumber(f[6]), f[8]
  if string.match(e[1], '^%d+%-0$') and f[1] == 't' and f[3] == 'n' and f[5] == 's'
      and f[7] == 'd' and t and n and n >= 1 and s and type(d) == 'string' then
    return {last = at, t = t, n = n, s = s, d = d}
  end
  return {last = at, t = now, n = 1, s = total, d = struct.pack('>I4', 0)}
end

-- The pack holding `offset`, or nil.
local packs = {}
local function pack_at(offset)
  local found = redis.call('XRANGE', stream, id(offset), '+', 'COUNT', 1)[1]
  if not found then return nil end
  local p = packed(found)
  -- A later pack when `offset`'s is gone (the stream expired and a pack came since).
  if p.last - p.n >= offset then return nil end
  packs[offset] = p
  return p
end

-- The bytes of data recorded before `offset`, which pack `p` holds.
local function bytes_before(p, offset)
  local bytes, at = p.s, 1
  for _ = 1, offset - (p.last - p.n + 1) do
    local len = struct.unpack('>I4', p.d, at)
    bytes, at = bytes + len, at + 4 + len
  end
  return bytes
end

-- Whether `offset` as the oldest kept keeps every bound.
local function fits(offset)
  if last - offset + 1 > max_len then return false end
  local p = packs[offset] or pack_at(offset)
  if not p or now - p.t >= max_age then return false end
  return total - bytes_before(p, offset) <= max_bytes
end

-- Removes the oldest while any bound is exceeded.
local function trim()
  if first > last then return end
  if last - first + 1 <= max_len and total - before <= max_bytes
      and oldest and now - oldest < max_age then
    return
  end
  local low = math.max(first, last - max_len + 1)
  local keep = last + 1
  if fits(low) then
    keep = low
  else
    local a, b = low + 1, last
    while a <= b do
      local mid = math.floor((a + b) / 2)
      if fits(mid) then keep, b = mid, mid - 1 else a = mid + 1 end
    end
  end
  if keep > last then
    redis.call('DEL', stream)
    first, before, oldest = last + 1, total, nil
  else
    local p = packs[keep]
    if keep > first then
      redis.call('XTRIM', stream, 'MINID', id(keep))
    end
    first, before, oldest = keep, bytes_before(p, keep), p.t
  end
end

-- Stores what changed.
local function store()
  local now_stored = {last, first, total, before, oldest}
  local names, changed = {'o', 'f', 'c', 'k', 't'}, {}
  for i = 1, 4 do
    if now_stored[i] ~= stored[i] then
      changed[#changed + 1] = names[i]
      changed[#changed + 1] = string.format('%d', now_stored[i])
    end
  end
  if oldest and oldest ~= stored[5] then
    changed[#changed + 1] = 't'
    changed[#changed + 1] = string.format('%d', oldest)
  end
  if #changed > 0 then redis.call('HSET', meta, unpack(changed)) end
  if not oldest and stored[5] then redis.call('HDEL', meta, 't') end
end

if op == 'append' then
  local head, publish, channel = ARGV[6], ARGV[7], ARGV[8]
  local n, data = tonumber(ARGV[9]), ARGV[10]
  local first_one = last == 0
  if first > last then oldest = now end
  local s = total
  last, total = last + n, total + #data - 4 * n
  if not pcall(redis.call, 'XADD', stream, id(last), 't', now, 'n', n, 's', s, 'd', data) then
    -- Something else wrote past the last offset: the stream is no longer a history
    -- this one goes on; as a history lost, a new epoch goes over it.
    epoch, last, first, total, before, oldest = ARGV[5], n, 1, #data - 4 * n, 0, now
    stored, first_one = {0, 1, 0, 0, nil}, true
    redis.call('DEL', stream, meta)
    redis.call('HSET', meta, 'e', epoch, 'o', 0, 'f', 1, 'c', 0, 'k', 0)
    redis.call('XADD', stream, id(last), 't', now, 'n', n, 's', 0, 'd', data)
  end
  trim()
  store()
  if first_one then redis.call('PERSIST', meta) end
  redis.call('PEXPIRE', stream, max_age)
  local at = '"ep":"' .. epoch .. '","off":' .. string.format('%d', last - n + 1) .. '}\n'
  if n == 1 then
    redis.call(publish, channel, head .. at .. string.sub(data, 5))
  else
    redis.call(publish, channel, head .. string.format('"n":%d,', n) .. at .. data)
  end
  return {epoch, last}
end

trim()
store()
local entries = {}
if op == 'read' then
  local after, max = tonumber(ARGV[5]), tonumber(ARGV[6])
  if max > 0 and after + 1 >= first and after < last then
    -- The packs ending up to after + max, then the one holding after + max when it
    -- ends later: max publications and at most one pack more, in one or two reads.
    local upto = math.min(after + max, last)
    local covered = after
    local function add(e)
      local p = packed(e)
      -- Past the last offset: not this history's (something else's, with a later id).
      if p.last > last then return end
      local age = now - p.t
      if age < 0 then age = 0 end
      entries[#entries + 1] = {id(p.last), age, p.n, p.d}
      covered = p.last
    end
    for _, e in ipairs(redis.call('XRANGE', stream, id(after + 1), id(upto))) do add(e) end
    if covered < upto then
      for _, e in ipairs(redis.call('XRANGE', stream, '(' .. id(covered), '+', 'COUNT', 1)) do
        add(e)
      end
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

/// The invocation of an append of the publications in `pack` to the history at `keys`;
/// `publish` is the command the script publishes with.
pub(crate) fn append<'s>(
    script: &'s Script,
    keys: &TopicKeys,
    bounds: &HistoryConfig,
    new_epoch: &str,
    head: &[u8],
    publish: &str,
    pack: &Pack,
) -> ScriptInvocation<'s> {
    let mut invocation = invocation(script, "append", keys, bounds);
    invocation
        .arg(new_epoch)
        .arg(head)
        .arg(publish)
        .arg(&keys.channel)
        .arg(pack.count)
        .arg(&pack.data[..]);
    invocation
}

/// Publications recorded together: how many, and their data as the history's entry
/// stores it, each after its length (4 bytes, big-endian), as a recorded run's body
/// carries them (`envelope::run`).
pub(crate) struct Pack {
    pub count: usize,
    pub data: Bytes,
}

/// `data` as one [`Pack`].
pub(crate) fn pack<'d, I>(data: I) -> Pack
where
    I: IntoIterator<Item = &'d [u8]>,
    I::IntoIter: Clone,
{
    let data = data.into_iter();
    let size = data.clone().map(|d| 4 + d.len()).sum();
    let (mut count, mut pack) = (0, BytesMut::with_capacity(size));
    for data in data {
        // A publication is never 4 GiB: `max_bytes` refuses it long before.
        pack.put_u32(u32::try_from(data.len()).unwrap_or(u32::MAX));
        pack.put_slice(data);
        count += 1;
    }
    Pack {
        count,
        data: pack.freeze(),
    }
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

/// A read's or position's answer: `{epoch, first, last, {{id, age_ms, count, data}...}}`,
/// each entry a pack (its id the last offset it holds); the entries are its publications
/// after `after`, at most `max`.
pub(crate) fn history(value: Value, after: u64, max: usize) -> Result<HistoryRead, BackplaneError> {
    let Value::Array(items) = &value else {
        return Err(protocol("history", &value));
    };
    let [epoch, first, last, packs] = items.as_slice() else {
        return Err(protocol("history", &value));
    };
    let mut entries = Vec::new();
    match packs {
        Value::Array(packs) => {
            for pack in packs {
                unpack(pack, after, &mut entries)?;
                if entries.len() >= max {
                    entries.truncate(max);
                    break;
                }
            }
        }
        other => return Err(protocol("history entries", other)),
    }
    Ok(HistoryRead {
        epoch: text(epoch).ok_or_else(|| protocol("epoch", epoch))?,
        first: number(first).ok_or_else(|| protocol("first", first))?,
        last: number(last).ok_or_else(|| protocol("last", last))?,
        entries,
    })
}

/// The publications after `after` of one pack, onto `entries`.
fn unpack(
    value: &Value,
    after: u64,
    entries: &mut Vec<HistoryEntry>,
) -> Result<(), BackplaneError> {
    let Value::Array(parts) = value else {
        return Err(protocol("pack", value));
    };
    let [id, age, count, data] = parts.as_slice() else {
        return Err(protocol("pack", value));
    };
    let last: u64 = text(id)
        .and_then(|id| id.strip_suffix("-0").and_then(|o| o.parse().ok()))
        .ok_or_else(|| protocol("pack id", id))?;
    let age =
        std::time::Duration::from_millis(number(age).ok_or_else(|| protocol("pack age", age))?);
    let count = number(count).ok_or_else(|| protocol("pack count", count))?;
    let data = match data {
        Value::BulkString(b) => Bytes::from(b.clone()),
        other => return Err(protocol("pack data", other)),
    };
    // A pack of `count` ends at `last`: from `last + 1 - count`, without overflow either
    // way (what Redis holds is not trusted to be ours).
    let Some(first) = last.checked_add(1).and_then(|end| end.checked_sub(count)) else {
        return Err(protocol("pack count", value));
    };
    let mut items = 0;
    let mut run = envelope::run(data);
    for (offset, data) in (first..=last).zip(&mut run) {
        items += 1;
        if offset > after {
            entries.push(HistoryEntry { offset, age, data });
        }
    }
    if items != count || run.next().is_some() {
        return Err(protocol("pack data", value));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(b: &[u8]) -> Value {
        Value::BulkString(b.to_vec())
    }

    fn answer(packs: Vec<Value>) -> Value {
        Value::Array(vec![
            bulk(b"ep"),
            Value::Int(3),
            Value::Int(9),
            Value::Array(packs),
        ])
    }

    fn stored(last: u64, data: &[&[u8]]) -> Value {
        let pack = pack(data.iter().copied());
        Value::Array(vec![
            bulk(format!("{last}-0").as_bytes()),
            Value::Int(5),
            bulk(pack.count.to_string().as_bytes()),
            bulk(&pack.data),
        ])
    }

    #[test]
    fn a_read_takes_the_packs_apart_after_the_offset_and_up_to_max() {
        let packs = || {
            vec![
                stored(5, &[b"[3]", b"[4]", b"[5]"]),
                stored(7, &[b"[6]", b"[7]"]),
            ]
        };
        let read = history(answer(packs()), 3, 100).unwrap();
        let got: Vec<(u64, &[u8])> = read
            .entries
            .iter()
            .map(|e| (e.offset, &e.data[..]))
            .collect();
        assert_eq!(
            got,
            [(4, &b"[4]"[..]), (5, b"[5]"), (6, b"[6]"), (7, b"[7]")]
        );
        assert_eq!(read.entries[0].age, std::time::Duration::from_millis(5));
        assert_eq!((read.epoch.as_str(), read.first, read.last), ("ep", 3, 9));
        let read = history(answer(packs()), 3, 3).unwrap();
        let offsets: Vec<u64> = read.entries.iter().map(|e| e.offset).collect();
        assert_eq!(offsets, [4, 5, 6], "at most max");
    }

    #[test]
    fn a_pack_whose_count_and_data_disagree_is_a_protocol_error() {
        let mut short = stored(5, &[b"[4]", b"[5]"]);
        if let Value::Array(parts) = &mut short {
            parts[2] = bulk(b"3");
        }
        assert!(matches!(
            history(answer(vec![short]), 0, 10),
            Err(BackplaneError::Protocol(_))
        ));
        let cut = stored(5, &[b"[4]", b"[5]"]);
        let Value::Array(mut parts) = cut else {
            unreachable!()
        };
        let Value::BulkString(data) = &mut parts[3] else {
            unreachable!()
        };
        data.truncate(data.len() - 1);
        assert!(matches!(
            history(answer(vec![Value::Array(parts)]), 0, 10),
            Err(BackplaneError::Protocol(_))
        ));
    }
}

//! Redis Cluster's key slots, computed here: the slot of a channel or key (CRC16 of its
//! hash tag, as Redis does), and names made to land in a chosen range of slots, so that
//! channels the cluster spreads (broadcasts, heartbeats, probes) fall on different
//! shards. Pure functions; nothing here needs Redis.

use std::ops::Range;

/// How many slots a Redis Cluster has.
pub(crate) const SLOTS: u16 = 16384;

/// CRC16/XMODEM (polynomial 0x1021, initial 0), the checksum Redis Cluster hashes with.
const TABLE: [u16; 256] = {
    let mut table = [0u16; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = (i as u16) << 8;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
};

fn crc16(bytes: &[u8]) -> u16 {
    bytes.iter().fold(0u16, |crc, &b| {
        (crc << 8) ^ TABLE[usize::from(((crc >> 8) as u8) ^ b)]
    })
}

/// The part of `key` that is hashed: the text between the first `{` and the next `}`
/// when that is not empty, else the whole key (Redis's hash tag rule).
fn hashed(key: &[u8]) -> &[u8] {
    if let Some(open) = key.iter().position(|&b| b == b'{') {
        let rest = &key[open + 1..];
        if let Some(len) = rest.iter().position(|&b| b == b'}') {
            if len > 0 {
                return &rest[..len];
            }
        }
    }
    key
}

/// The slot of a key or shard channel.
pub(crate) fn slot(key: &[u8]) -> u16 {
    crc16(hashed(key)) % SLOTS
}

/// The `i`-th of `n` equal ranges of slots.
pub(crate) fn range(i: usize, n: usize) -> Range<u16> {
    let n = n.clamp(1, usize::from(SLOTS));
    let at = |k: usize| u16::try_from(k * usize::from(SLOTS) / n).unwrap_or(SLOTS);
    at(i.min(n))..at((i + 1).min(n))
}

/// A hash tag (the text to put between `{` and `}`) whose slot `wanted` accepts: `seed`
/// followed by the first number that fits. Deterministic, so every node finds the same
/// one. `None` only when nothing fits within a million tries (`wanted` accepts almost
/// no slot).
pub(crate) fn tag_where(seed: &str, wanted: impl Fn(u16) -> bool) -> Option<String> {
    (0..1_000_000u32)
        .map(|n| format!("{seed}{n}"))
        .find(|tag| wanted(slot(tag.as_bytes())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_the_ones_redis_computes() {
        // Figures from `redis-cli cluster keyslot` (Redis 7.0.15) and the cluster spec.
        assert_eq!(crc16(b"123456789"), 0x31c3);
        assert_eq!(slot(b"foo"), 12182);
        assert_eq!(slot(b"123456789"), 12739);
        assert_eq!(slot(b"jp:t:news"), 4134);
        // A hash tag: only what is between the first `{` and the next `}` counts.
        assert_eq!(slot(b"{user1000}.following"), 3443);
        assert_eq!(slot(b"user1000"), 3443);
        // An empty tag hashes the whole key; `{{bar}}` hashes `{bar`.
        assert_eq!(slot(b"foo{}{bar}"), 8363);
        assert_eq!(slot(b"foo{{bar}}zap"), 4015);
        assert_eq!(slot(b"foo{bar}{zap}"), 5061);
    }

    #[test]
    fn ranges_cover_every_slot_once() {
        for n in [1, 3, 16, 7, 16384] {
            let mut next = 0;
            for i in 0..n {
                let r = range(i, n);
                assert_eq!(r.start, next, "n = {n}, i = {i}");
                assert!(!r.is_empty());
                next = r.end;
            }
            assert_eq!(next, SLOTS);
        }
    }

    #[test]
    fn a_tag_lands_where_it_is_asked_to() {
        for i in 0..16 {
            let r = range(i, 16);
            let tag = tag_where("b", |s| r.contains(&s)).expect("a tag");
            assert!(r.contains(&slot(format!("jp:all:{{{tag}}}").as_bytes())));
        }
        assert_eq!(tag_where("x", |_| false), None);
    }
}

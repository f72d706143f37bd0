//! The bus names of one topic: its channel and its history's keys, made so that all of
//! them fall in one Redis Cluster hash slot.
//!
//! Every name of topic `T` is `<prefix>:<kind>:` followed by [`tagged`]`(T)`:
//!
//! | `T` | `tagged(T)` | channel (`t`) | history stream (`h`) | history meta (`m`) |
//! | --- | --- | --- | --- | --- |
//! | `prices` (no hash tag) | `{prices}` | `jp:t:{prices}` | `jp:h:{prices}` | `jp:m:{prices}` |
//! | `room:{42}:chat` (a hash tag) | `:room:{42}:chat` | `jp:t::room:{42}:chat` | `jp:h::room:{42}:chat` | `jp:m::room:{42}:chat` |
//!
//! A topic without a hash tag is wrapped in one, so its channel and keys share a slot
//! (Redis hashes only what is inside the first non-empty `{...}`); a topic with one
//! keeps it, so an application can put related topics (`room:{42}:chat`,
//! `room:{42}:typing`) in one slot. The prefix must hold no brace, or its tag would
//! rule every name (checked when a node starts).
//!
//! A topic with a tag gets a leading `:` so the two forms never meet: without it, the
//! topic `{prices}` (a tag) and the topic `prices` (none, wrapped) would both become
//! `{prices}` and share a channel and a history. With it, a wrapped name always starts
//! with `{` and a kept one with `:`, and each form is one-to-one, so [`topic_of`]
//! reads the topic back from a channel name.
//!
//! The kinds: `t` the topic's channel (pub/sub), `h` its history (a Stream whose
//! entry ids are the offsets, `<offset>-0`), `m` the history's meta (a hash: epoch,
//! newest offset, bytes kept). The other channels of a cluster (`jp:all`, `jp:ctl`,
//! `jp:n:<node>`) are per cluster or per node, not per topic.
//!
//! The empty topic would be wrapped as `{}`, which Redis Cluster does not read as a
//! tag (its names would hash apart, and every script and pipeline over them fail with
//! `CROSSSLOT`): its names end in `!{empty}`, a form no other topic's takes (wrapped
//! names start with `{`, kept ones with `:`).

use std::borrow::Cow;

/// Whether `name` holds a hash tag as Redis Cluster reads it: a `{`, then a `}` after
/// it with at least one byte between the first `{` and that first `}`.
pub(crate) fn has_hash_tag(name: &str) -> bool {
    let Some(open) = name.find('{') else {
        return false;
    };
    name[open + 1..].find('}').is_some_and(|close| close > 0)
}

/// The part of every bus name of `topic` after `<prefix>:<kind>:`: `{topic}` when it has
/// no hash tag, `:topic` when it has one (see the module's table).
pub(crate) fn tagged(topic: &str) -> Cow<'_, str> {
    if topic.is_empty() {
        Cow::Borrowed(EMPTY)
    } else if has_hash_tag(topic) {
        Cow::Owned(format!(":{topic}"))
    } else {
        Cow::Owned(format!("{{{topic}}}"))
    }
}

/// What the empty topic's names end in (see the module's docs).
const EMPTY: &str = "!{empty}";

/// The topic of a `tagged` name: the inverse of [`tagged`].
pub(crate) fn untagged(name: &str) -> Option<&str> {
    if name == EMPTY {
        return Some("");
    }
    if let Some(topic) = name.strip_prefix(':') {
        return has_hash_tag(topic).then_some(topic);
    }
    let topic = name.strip_prefix('{')?.strip_suffix('}')?;
    (!has_hash_tag(topic)).then_some(topic)
}

/// `<prefix>:<kind>:` + [`tagged`]`(topic)`.
pub(crate) fn key(prefix: &str, kind: char, topic: &str) -> String {
    // Written out rather than `format!`ed: a topic's channel is named on every publish.
    let mut key = String::with_capacity(prefix.len() + topic.len() + 5);
    key.push_str(prefix);
    key.push(':');
    key.push(kind);
    key.push(':');
    if topic.is_empty() {
        key.push_str(EMPTY);
    } else if has_hash_tag(topic) {
        key.push(':');
        key.push_str(topic);
    } else {
        key.push('{');
        key.push_str(topic);
        key.push('}');
    }
    key
}

/// The topic of a topic channel name (`<prefix>:t:...`), if it is one.
pub(crate) fn topic_of<'c>(prefix: &str, channel: &'c str) -> Option<&'c str> {
    untagged(channel.strip_prefix(prefix)?.strip_prefix(":t:")?)
}

/// Whether `prefix` can start every bus name: not empty, no brace, no whitespace.
pub(crate) fn valid_prefix(prefix: &str) -> bool {
    !prefix.is_empty()
        && !prefix
            .chars()
            .any(|c| c == '{' || c == '}' || c.is_whitespace())
}

/// The names of one topic's channel and history on the bus.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicKeys {
    /// The topic's pub/sub channel: `<prefix>:t:` + tagged.
    pub channel: String,
    /// Its history, a Stream whose entries are publications recorded together (an
    /// entry's id is the last one's offset, `<offset>-0`): `<prefix>:h:` + tagged.
    pub stream: String,
    /// Its history's meta, a hash of the epoch (`e`), the newest and oldest offsets kept
    /// (`o`, `f`), and the bytes recorded and kept: `<prefix>:m:` + tagged.
    pub meta: String,
}

impl TopicKeys {
    /// The names of `topic` under `prefix`.
    pub fn new(prefix: &str, topic: &str) -> Self {
        // Named on every publish with history: written out, not `format!`ed.
        TopicKeys {
            channel: key(prefix, 't', topic),
            stream: key(prefix, 'h', topic),
            meta: key(prefix, 'm', topic),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Redis Cluster's slot rule: the first non-empty `{...}`, else the whole name.
    fn hashed(name: &str) -> &str {
        if let Some(open) = name.find('{') {
            if let Some(close) = name[open + 1..].find('}') {
                if close > 0 {
                    return &name[open + 1..open + 1 + close];
                }
            }
        }
        name
    }

    #[test]
    fn every_name_of_a_topic_hashes_alike_and_reads_back() {
        for topic in [
            "",
            "prices",
            "room:{42}:chat",
            "{prices}",
            "a{}b",
            "a}b{",
            "{",
            "}{x}",
            "weird {a}{b}",
        ] {
            let keys = TopicKeys::new("jp", topic);
            let tag = hashed(&keys.channel);
            assert_eq!(hashed(&keys.stream), tag, "{topic:?}");
            assert_eq!(hashed(&keys.meta), tag, "{topic:?}");
            assert_ne!(tag, keys.channel, "{topic:?}: a tag, not the whole name");
            assert_eq!(topic_of("jp", &keys.channel), Some(topic), "{topic:?}");
        }
        assert_eq!(TopicKeys::new("jp", "").meta, "jp:m:!{empty}");
        assert_eq!(
            crate::cluster::member_store::PresenceKey::new("jp", "").part("a"),
            "jp:pm:!{empty}|a"
        );
        assert_eq!(TopicKeys::new("jp", "prices").channel, "jp:t:{prices}");
        assert_eq!(
            TopicKeys::new("jp", "room:{42}:chat").stream,
            "jp:h::room:{42}:chat"
        );
        // A tagged topic keeps its tag: related topics share a slot.
        assert_eq!(
            hashed(&TopicKeys::new("jp", "room:{42}:chat").channel),
            hashed(&TopicKeys::new("jp", "room:{42}:typing").channel)
        );
    }

    #[test]
    fn two_topics_never_share_a_name() {
        let topics = [
            "prices",
            "{prices}",
            ":{prices}",
            "{prices}}",
            "{{prices}}",
            "",
            "empty",
            "{empty}",
            "!{empty}",
        ];
        let channels: std::collections::HashSet<String> = topics
            .iter()
            .map(|t| TopicKeys::new("jp", t).channel)
            .collect();
        assert_eq!(channels.len(), topics.len(), "{channels:?}");
    }

    #[test]
    fn prefixes_with_braces_are_refused() {
        assert!(valid_prefix("jp") && valid_prefix("app-1:jp"));
        assert!(!valid_prefix("{jp}") && !valid_prefix("") && !valid_prefix("j p"));
        assert_eq!(topic_of("jp", "jp:all"), None);
        assert_eq!(topic_of("jp", "jp:t:prices"), None, "the old form");
    }
}

//! What travels on the bus: one JSON header line, `\n`, then a body.
//!
//! For broadcasts, topics and notifies the body is the JSON-RPC frame exactly as the
//! origin serialized it (compact JSON has no raw newline), so a receiving node hands
//! the same bytes to every local peer: serialized once for the whole cluster. The
//! receiver parses only the header.
//!
//! **Packs.** Envelopes waiting in the outbox for the same channel go out as one bus
//! message, a *pack*: the byte `*`, then each envelope as its length (4 bytes,
//! big-endian) and its bytes ([`pack`], [`unpack`]). One `PUBLISH` then carries up to
//! [`PACK_BYTES`] of them, so Redis, both nodes' Redis clients and the receiving node's
//! event stream handle one message where a burst had hundreds (which envelopes pack
//! together, and what may pass what: `outbox::packed`). An envelope alone goes as it
//! is, so a message at a low rate costs what it did. Every envelope keeps its own
//! header and sequence number: duplicates, gaps and each channel's order are decided
//! per envelope, as without packs. A node that predates packs ignores them (to it they
//! are not envelopes): every node of a cluster runs the same version.

use std::borrow::Cow;

use bytes::{BufMut, Bytes, BytesMut};
use serde::{Deserialize, Serialize};

mod header;

use super::keys::{self, TopicKeys};
use super::slot;

/// What an envelope carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Kind {
    /// A broadcast to every connection.
    #[serde(rename = "b")]
    Broadcast,
    /// A publish on a topic (the topic is the channel's).
    #[serde(rename = "t")]
    Topic,
    /// A call to one peer; the body is the request as a notification frame.
    #[serde(rename = "c")]
    Call,
    /// The answer to a call, to the asking node only.
    #[serde(rename = "r")]
    Reply,
    /// A notification to one peer; the body is the frame.
    #[serde(rename = "n")]
    Notify,
    /// A heartbeat, with the node's connection count.
    #[serde(rename = "h")]
    Heartbeat,
    /// A node leaving on purpose.
    #[serde(rename = "g")]
    Goodbye,
    /// A publication on a topic with history, as the bus recorded it (the header gets
    /// `ep` and `off` from the bus; the body is the data alone).
    #[serde(rename = "x")]
    Recorded,
    /// A change of the origin's members of a topic (the topic is the channel's), or a
    /// word that it wrote them anew (`members.rs`).
    #[serde(rename = "p")]
    Presence,
}

/// The header line. Short member names: it rides on every message.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Header<'a> {
    /// Format version.
    pub v: u8,
    pub k: Kind,
    /// Origin node and its incarnation.
    #[serde(borrow)]
    pub o: Cow<'a, str>,
    #[serde(borrow)]
    pub i: Cow<'a, str>,
    /// Sequence number per (origin, incarnation, channel): each higher than the last on
    /// the channel.
    pub s: u64,
    /// The first on its channel since the origin (re)numbered it: a receiver takes `s`
    /// as a new baseline rather than a gap. An origin forgets the number of a channel
    /// idle for a while (`outbox::SEQUENCE_IDLE`) and numbers it again above every
    /// number it has given.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub r: bool,
    /// Correlation of a call and its reply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub c: Option<u64>,
    /// The target peer's local id (call, notify).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p: Option<u64>,
    /// A call's timeout in milliseconds; a timed-out reply's too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub t: Option<u64>,
    /// A reply's outcome: absent for a result, else one of [`Outcome`]'s names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub e: Option<Outcome>,
    /// A heartbeat's connection count; on a recorded publication, that the body is a
    /// run of this many, recorded at once at `off` and the offsets after it ([`run`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n: Option<u64>,
    /// A heartbeat that asks every other node to announce itself at once.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hello: bool,
    /// A recorded publication's epoch and offset, written by the bus.
    #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
    pub ep: Option<Cow<'a, str>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub off: Option<u64>,
}

impl<'a> Header<'a> {
    /// A header of `kind` from `origin`, with everything optional left out; the
    /// sequence number is set when the envelope is queued.
    pub fn new(kind: Kind, origin: &'a str, incarnation: &'a str) -> Self {
        Header {
            v: 1,
            k: kind,
            o: Cow::Borrowed(origin),
            i: Cow::Borrowed(incarnation),
            s: 0,
            r: false,
            c: None,
            p: None,
            t: None,
            e: None,
            n: None,
            hello: false,
            ep: None,
            off: None,
        }
    }
}

/// How a remote call ended, when it did not end with a result.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Outcome {
    /// The peer answered with an error object (the body).
    Rpc,
    /// No answer within the timeout (`t`).
    Timeout,
    /// The peer's connection closed; the body is a [`Closed`].
    Closed,
    /// No peer with that id on the node.
    NoPeer,
    /// The node could not make the call (the body is the message).
    Failed,
}

/// A closed connection's reason, as it crosses the bus.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Closed {
    pub kind: String,
    #[serde(default)]
    pub code: u16,
    #[serde(default)]
    pub reason: String,
}

/// Writes an envelope: the header, `\n`, the body.
pub(crate) fn write(header: &Header<'_>, body: &[u8]) -> Bytes {
    let mut buf = BytesMut::with_capacity(96 + body.len());
    header::write(&mut buf, header);
    buf.put_u8(b'\n');
    buf.put_slice(body);
    buf.freeze()
}

/// Splits an envelope into its header and body; `None` when it is not one of ours.
pub(crate) fn read(payload: &Bytes) -> Option<(Header<'_>, Bytes)> {
    let newline = payload.iter().position(|&b| b == b'\n')?;
    let line = &payload[..newline];
    let header = match header::read(line) {
        Some(header) => header,
        None => serde_json::from_slice(line).ok()?,
    };
    if header.v != 1 {
        return None;
    }
    Some((header, payload.slice(newline + 1..)))
}

/// The first byte of a pack (an envelope's first byte is `{`).
const PACK: u8 = b'*';

/// The most bytes of envelopes one pack carries (an envelope larger than this goes
/// alone).
pub(crate) const PACK_BYTES: usize = 64 * 1024;

/// Packs `envelopes` (each one whole, as [`write()`] made it) into one bus message.
pub(crate) fn pack<'e>(envelopes: impl IntoIterator<Item = &'e Bytes>) -> Bytes {
    let envelopes: Vec<&Bytes> = envelopes.into_iter().collect();
    let len = 1 + envelopes.iter().map(|e| 4 + e.len()).sum::<usize>();
    let mut buf = BytesMut::with_capacity(len);
    buf.put_u8(PACK);
    for envelope in envelopes {
        // Under PACK_BYTES, or alone: an envelope is never 4 GiB (the outbox's bound).
        buf.put_u32(u32::try_from(envelope.len()).unwrap_or(u32::MAX));
        buf.put_slice(envelope);
    }
    buf.freeze()
}

/// The envelopes in one bus message: a pack's, in order, or the message itself. A
/// pack cut short yields the envelopes before the cut.
pub(crate) fn unpack(message: Bytes) -> Unpack {
    if message.first() == Some(&PACK) {
        Unpack {
            rest: message.slice(1..),
            single: None,
        }
    } else {
        Unpack {
            rest: Bytes::new(),
            single: Some(message),
        }
    }
}

/// The publications of a recorded run (a `Recorded` envelope whose header has `n`: the
/// bus recorded `n` publications at once, at `off` and the offsets after it): each
/// after its length (4 bytes, big-endian), as a pack carries envelopes. A body cut
/// short yields the publications before the cut.
pub(crate) fn run(body: Bytes) -> Unpack {
    Unpack {
        rest: body,
        single: None,
    }
}

/// The iterator [`unpack`] and [`run`] return.
pub(crate) struct Unpack {
    rest: Bytes,
    single: Option<Bytes>,
}

impl Iterator for Unpack {
    type Item = Bytes;

    fn next(&mut self) -> Option<Bytes> {
        if let Some(single) = self.single.take() {
            return Some(single);
        }
        let len = u32::from_be_bytes(self.rest.get(..4)?.try_into().ok()?) as usize;
        if self.rest.len() < 4 + len {
            self.rest = Bytes::new();
            return None;
        }
        let envelope = self.rest.slice(4..4 + len);
        self.rest = self.rest.slice(4 + len..);
        Some(envelope)
    }
}

/// This node as its envelopes name it, and the channels it uses.
#[derive(Debug)]
pub(crate) struct Me {
    pub id: String,
    /// A random value of this run, so a restarted node is told apart from its earlier self.
    pub incarnation: String,
    pub channels: Channels,
    /// This node's own channel: calls, replies and notifies to it.
    pub own: String,
    /// The broadcast channel this node publishes on (one of [`Channels::all`]).
    pub broadcast: String,
    /// The control channel this node publishes on (one of [`Channels::control`]).
    pub control: String,
    /// The head of this node's recorded publications: its header of kind `x` without
    /// the closing brace, so the bus can add the position (`Append::head`).
    pub recorded_head: Vec<u8>,
}

impl Me {
    /// `spread`: over how many channels broadcasts and heartbeats go
    /// ([`Backplane::spread`](super::Backplane::spread)).
    pub fn new(id: String, prefix: &str, spread: usize) -> Self {
        let channels = Channels::new(prefix, spread);
        // The same pick for every publish of this node: its own order holds.
        let pick = usize::from(slot::slot(id.as_bytes())) % channels.all.len();
        let incarnation = format!("{:012x}", fastrand::u64(..) >> 16);
        let mut recorded_head =
            serde_json::to_vec(&Header::new(Kind::Recorded, &id, &incarnation)).unwrap_or_default();
        // `{...,"s":0}` -> `{...,"s":0,`
        recorded_head.pop();
        recorded_head.push(b',');
        Me {
            own: channels.node(&id),
            broadcast: channels.all[pick].clone(),
            control: channels.control[pick].clone(),
            incarnation,
            id,
            channels,
            recorded_head,
        }
    }

    /// A header of `kind` from this node.
    pub fn header(&self, kind: Kind) -> Header<'_> {
        Header::new(kind, &self.id, &self.incarnation)
    }
}

/// The most channels broadcasts (and heartbeats) are spread over.
const MAX_SPREAD: usize = 1024;

/// The channels of a cluster, under one prefix.
#[derive(Debug, Clone)]
pub(crate) struct Channels {
    prefix: String,
    all: Vec<String>,
    control: Vec<String>,
}

impl Channels {
    /// With `spread` 1: `{prefix}:all` and `{prefix}:ctl`. With more: as many of each,
    /// `{prefix}:all:{TAG}` and `{prefix}:ctl:{TAG}`, the `i`-th tag's slot in the
    /// `i`-th of `spread` equal ranges of Redis Cluster's slots, so they fall on
    /// different shards; a broadcast channel and the control channel of the same rank
    /// share a slot (a node's broadcasts and its heartbeats ride on one shard).
    pub fn new(prefix: &str, spread: usize) -> Self {
        let spread = spread.clamp(1, MAX_SPREAD);
        let (all, control) = if spread == 1 {
            (vec![format!("{prefix}:all")], vec![format!("{prefix}:ctl")])
        } else {
            (0..spread)
                .map(|i| {
                    let slots = slot::range(i, spread);
                    let tag = slot::tag_where(&format!("{i}."), |s| slots.contains(&s))
                        .unwrap_or_else(|| i.to_string());
                    (
                        format!("{prefix}:all:{{{tag}}}"),
                        format!("{prefix}:ctl:{{{tag}}}"),
                    )
                })
                .unzip()
        };
        Channels {
            prefix: prefix.to_owned(),
            all,
            control,
        }
    }
    /// Broadcasts to every connection: every node listens to all of them.
    pub fn all(&self) -> &[String] {
        &self.all
    }
    /// Whether `channel` is one of the broadcast channels.
    pub fn is_broadcast(&self, channel: &str) -> bool {
        self.all.iter().any(|c| c == channel)
    }
    /// Heartbeats, hellos and goodbyes: every node listens to all of them.
    pub fn control(&self) -> &[String] {
        &self.control
    }
    /// Calls, replies and notifies to one node.
    pub fn node(&self, node: &str) -> String {
        format!("{}:n:{node}", self.prefix)
    }
    /// One topic: `<prefix>:t:` + its tagged name (keys.rs).
    pub fn topic(&self, topic: &str) -> String {
        keys::key(&self.prefix, 't', topic)
    }
    /// The topic of a topic channel.
    pub fn topic_of<'c>(&self, channel: &'c str) -> Option<&'c str> {
        keys::topic_of(&self.prefix, channel)
    }
    /// Every bus name of one topic: its channel and its history's keys.
    pub fn keys(&self, topic: &str) -> TopicKeys {
        TopicKeys::new(&self.prefix, topic)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_envelope_reads_back_with_its_frame_untouched() {
        let mut h = Header::new(Kind::Topic, "a", "x1");
        h.s = 7;
        let frame = br#"{"jsonrpc":"2.0","method":"t","params":["a\nb"]}"#;
        let bytes = write(&h, frame);
        let (back, body) = read(&bytes).unwrap();
        assert_eq!(
            (back.k, back.s, &*back.o, &*back.i),
            (Kind::Topic, 7, "a", "x1")
        );
        assert_eq!(&body[..], &frame[..]);
    }

    #[test]
    fn a_recorded_publication_reads_back_with_the_position_the_bus_added() {
        let me = Me::new("a".into(), "jp", 1);
        let keys = me.channels.keys("t");
        let bounds = crate::history::HistoryConfig::default();
        let append =
            crate::cluster::backplane::Append::new(&keys, &bounds, "e", &me.recorded_head, b"[1]");
        let message = append.message("ep1", 42);
        let (header, body) = read(&message).unwrap();
        assert_eq!(header.k, Kind::Recorded);
        assert_eq!((header.ep.as_deref(), header.off), (Some("ep1"), Some(42)));
        assert_eq!((&*header.o, &*header.i), ("a", me.incarnation.as_str()));
        assert_eq!(&body[..], b"[1]");
    }

    #[test]
    fn a_pack_gives_back_its_envelopes_in_order_and_a_lone_envelope_itself() {
        let envelopes: Vec<Bytes> = (1..=3)
            .map(|s| {
                let mut h = Header::new(Kind::Topic, "a", "x1");
                h.s = s;
                write(&h, format!("[{s}]").as_bytes())
            })
            .collect();
        let packed = pack(&envelopes);
        let back: Vec<Bytes> = unpack(packed.clone()).collect();
        assert_eq!(back, envelopes);
        let seqs: Vec<u64> = back.iter().map(|e| read(e).unwrap().0.s).collect();
        assert_eq!(seqs, [1, 2, 3]);
        assert_eq!(
            unpack(envelopes[0].clone()).collect::<Vec<_>>(),
            [envelopes[0].clone()]
        );
        // Cut short: what came whole before the cut, then nothing (no panic).
        for cut in 0..packed.len() {
            let whole = unpack(packed.slice(..cut)).count();
            assert!(whole <= 3, "{whole} envelopes from {cut} bytes");
            assert!(whole < 3 || cut == packed.len(), "cut at {cut} yet whole");
        }
        assert_eq!(
            unpack(Bytes::from_static(b"*\xff\xff\xff\xffab")).count(),
            0
        );
    }

    #[test]
    fn foreign_bytes_are_not_an_envelope() {
        assert!(read(&Bytes::from_static(b"hello")).is_none());
        assert!(read(&Bytes::from_static(b"{\"v\":2}\n{}")).is_none());
    }

    #[test]
    fn topic_channels_name_their_topic() {
        let c = Channels::new("jp", 1);
        assert_eq!(c.topic_of(&c.topic("a:b")), Some("a:b"));
        assert_eq!(c.topic("a:b"), "jp:t:{a:b}");
        assert_eq!(c.topic_of(&c.all()[0]), None);
    }

    #[test]
    fn one_bus_channel_keeps_the_names_of_one_redis() {
        let me = Me::new("a".into(), "jp", 1);
        assert_eq!(me.channels.all(), ["jp:all"]);
        assert_eq!(me.channels.control(), ["jp:ctl"]);
        assert_eq!(
            (&*me.broadcast, &*me.control, &*me.own),
            ("jp:all", "jp:ctl", "jp:n:a")
        );
    }

    #[test]
    fn spread_channels_fall_in_equal_slot_ranges_and_a_node_keeps_its_pick() {
        let c = Channels::new("jp", 16);
        assert_eq!((c.all().len(), c.control().len()), (16, 16));
        for (i, (all, ctl)) in c.all().iter().zip(c.control()).enumerate() {
            let s = slot::slot(all.as_bytes());
            assert!(slot::range(i, 16).contains(&s), "{all} in slot {s}");
            assert_eq!(slot::slot(ctl.as_bytes()), s, "{ctl} beside {all}");
            assert!(c.is_broadcast(all) && !c.is_broadcast(ctl));
            assert!(c.topic_of(all).is_none());
        }
        // Every node computes the same names; a node always picks the same pair.
        assert_eq!(Channels::new("jp", 16).all(), c.all());
        let (a1, a2) = (Me::new("a".into(), "jp", 16), Me::new("a".into(), "jp", 16));
        assert_eq!((&a1.broadcast, &a1.control), (&a2.broadcast, &a2.control));
        let picks: std::collections::HashSet<String> = (0..64)
            .map(|n| Me::new(format!("node-{n}"), "jp", 16).broadcast)
            .collect();
        assert!(
            picks.len() > 8,
            "64 nodes picked only {} of 16",
            picks.len()
        );
    }
}

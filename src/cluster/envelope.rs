//! What travels on the bus: one JSON header line, `\n`, then a body.
//!
//! For broadcasts, topics and notifies the body is the JSON-RPC frame exactly as the
//! origin serialized it (compact JSON has no raw newline), so a receiving node hands
//! the same bytes to every local peer: serialized once for the whole cluster. The
//! receiver parses only the header.

use std::borrow::Cow;

use bytes::{BufMut, Bytes, BytesMut};
use serde::{Deserialize, Serialize};

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
    /// Sequence number per (origin, incarnation, channel), from 1.
    pub s: u64,
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
    /// A heartbeat's connection count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n: Option<u64>,
    /// A heartbeat that asks every other node to announce itself at once.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hello: bool,
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
            c: None,
            p: None,
            t: None,
            e: None,
            n: None,
            hello: false,
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
    let mut buf = BytesMut::with_capacity(96 + body.len()).writer();
    // A header of plain integers and strings always serializes.
    let _ = serde_json::to_writer(&mut buf, header);
    let mut buf = buf.into_inner();
    buf.put_u8(b'\n');
    buf.put_slice(body);
    buf.freeze()
}

/// Splits an envelope into its header and body; `None` when it is not one of ours.
pub(crate) fn read(payload: &Bytes) -> Option<(Header<'_>, Bytes)> {
    let newline = payload.iter().position(|&b| b == b'\n')?;
    let header: Header<'_> = serde_json::from_slice(&payload[..newline]).ok()?;
    if header.v != 1 {
        return None;
    }
    Some((header, payload.slice(newline + 1..)))
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
}

impl Me {
    pub fn new(id: String, prefix: &str) -> Self {
        let channels = Channels::new(prefix);
        Me {
            own: channels.node(&id),
            incarnation: format!("{:012x}", fastrand::u64(..) >> 16),
            id,
            channels,
        }
    }

    /// A header of `kind` from this node.
    pub fn header(&self, kind: Kind) -> Header<'_> {
        Header::new(kind, &self.id, &self.incarnation)
    }
}

/// The channels of a cluster, under one prefix.
#[derive(Debug, Clone)]
pub(crate) struct Channels {
    prefix: String,
    all: String,
    control: String,
}

impl Channels {
    pub fn new(prefix: &str) -> Self {
        Channels {
            prefix: prefix.to_owned(),
            all: format!("{prefix}:all"),
            control: format!("{prefix}:ctl"),
        }
    }
    /// Broadcasts to every connection.
    pub fn all(&self) -> &str {
        &self.all
    }
    /// Heartbeats, hellos and goodbyes.
    pub fn control(&self) -> &str {
        &self.control
    }
    /// Calls, replies and notifies to one node.
    pub fn node(&self, node: &str) -> String {
        format!("{}:n:{node}", self.prefix)
    }
    /// One topic.
    pub fn topic(&self, topic: &str) -> String {
        format!("{}:t:{topic}", self.prefix)
    }
    /// The topic of a topic channel.
    pub fn topic_of<'c>(&self, channel: &'c str) -> Option<&'c str> {
        channel
            .strip_prefix(self.prefix.as_str())?
            .strip_prefix(":t:")
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
    fn foreign_bytes_are_not_an_envelope() {
        assert!(read(&Bytes::from_static(b"hello")).is_none());
        assert!(read(&Bytes::from_static(b"{\"v\":2}\n{}")).is_none());
    }

    #[test]
    fn topic_channels_name_their_topic() {
        let c = Channels::new("jp");
        assert_eq!(c.topic_of(&c.topic("a:b")), Some("a:b"));
        assert_eq!(c.topic_of(c.all()), None);
    }
}

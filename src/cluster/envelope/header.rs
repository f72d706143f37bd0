//! The header line written and read by hand, for the cross-node path's sake.
//!
//! serde's derive was a third of the receiving node's instructions per message (about
//! 3,100 to read a five-field header: every key and string through its visitor) and a
//! quarter of the publishing node's (1,600 to write one). The header is flat and its
//! values are integers, one-letter kinds and plain strings, so:
//!
//! - [`write()`] writes exactly what `serde_json::to_writer` writes (the same members in
//!   the same order, strings escaped by serde_json itself whenever they need it);
//! - [`read`] reads the shape [`write()`] makes (no whitespace, no escapes, known
//!   members) and says `None` for anything else, which [`super::read`] then hands to
//!   serde: a header written by another writer still reads, only more slowly.
//!
//! The unit tests hold both to serde on every kind of header.

use std::borrow::Cow;

use bytes::{BufMut, BytesMut};

use super::{Header, Kind, Outcome};

impl Kind {
    /// Its name on the wire (serde's `rename`).
    fn code(self) -> u8 {
        match self {
            Kind::Broadcast => b'b',
            Kind::Topic => b't',
            Kind::Call => b'c',
            Kind::Reply => b'r',
            Kind::Notify => b'n',
            Kind::Heartbeat => b'h',
            Kind::Goodbye => b'g',
            Kind::Recorded => b'x',
            Kind::Presence => b'p',
        }
    }

    fn from_code(code: &[u8]) -> Option<Kind> {
        Some(match code {
            b"b" => Kind::Broadcast,
            b"t" => Kind::Topic,
            b"c" => Kind::Call,
            b"r" => Kind::Reply,
            b"n" => Kind::Notify,
            b"h" => Kind::Heartbeat,
            b"g" => Kind::Goodbye,
            b"x" => Kind::Recorded,
            b"p" => Kind::Presence,
            _ => return None,
        })
    }
}

impl Outcome {
    /// Its name on the wire (serde's `snake_case`).
    fn name(self) -> &'static str {
        match self {
            Outcome::Rpc => "rpc",
            Outcome::Timeout => "timeout",
            Outcome::Closed => "closed",
            Outcome::NoPeer => "no_peer",
            Outcome::Failed => "failed",
        }
    }

    fn from_name(name: &[u8]) -> Option<Outcome> {
        Some(match name {
            b"rpc" => Outcome::Rpc,
            b"timeout" => Outcome::Timeout,
            b"closed" => Outcome::Closed,
            b"no_peer" => Outcome::NoPeer,
            b"failed" => Outcome::Failed,
            _ => return None,
        })
    }
}

/// Writes `header` as serde_json would.
pub(super) fn write(buf: &mut BytesMut, header: &Header<'_>) {
    buf.put_slice(b"{\"v\":");
    put_u64(buf, u64::from(header.v));
    buf.put_slice(b",\"k\":\"");
    buf.put_u8(header.k.code());
    buf.put_slice(b"\",\"o\":");
    put_str(buf, &header.o);
    buf.put_slice(b",\"i\":");
    put_str(buf, &header.i);
    buf.put_slice(b",\"s\":");
    put_u64(buf, header.s);
    if header.r {
        buf.put_slice(b",\"r\":true");
    }
    for (name, value) in [
        (&b",\"c\":"[..], header.c),
        (b",\"p\":", header.p),
        (b",\"t\":", header.t),
    ] {
        if let Some(value) = value {
            buf.put_slice(name);
            put_u64(buf, value);
        }
    }
    if let Some(e) = header.e {
        buf.put_slice(b",\"e\":\"");
        buf.put_slice(e.name().as_bytes());
        buf.put_u8(b'"');
    }
    if let Some(n) = header.n {
        buf.put_slice(b",\"n\":");
        put_u64(buf, n);
    }
    if header.hello {
        buf.put_slice(b",\"hello\":true");
    }
    if let Some(ep) = &header.ep {
        buf.put_slice(b",\"ep\":");
        put_str(buf, ep);
    }
    if let Some(off) = header.off {
        buf.put_slice(b",\"off\":");
        put_u64(buf, off);
    }
    buf.put_u8(b'}');
}

fn put_u64(buf: &mut BytesMut, n: u64) {
    buf.put_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// A byte serde_json writes as an escape: `"`, `\` and the controls.
fn escaped(b: u8) -> bool {
    b < 0x20 || b == b'"' || b == b'\\'
}

fn put_str(buf: &mut BytesMut, s: &str) {
    if s.bytes().any(escaped) {
        // Rare (node names are the application's): serde_json's own escapes.
        let mut w = buf.writer();
        let _ = serde_json::to_writer(&mut w, s);
    } else {
        buf.put_u8(b'"');
        buf.put_slice(s.as_bytes());
        buf.put_u8(b'"');
    }
}

/// Reads a header of the shape [`write()`] makes; `None` for any other (serde decides).
pub(super) fn read(line: &[u8]) -> Option<Header<'_>> {
    let mut r = Reader { line, at: 0 };
    r.byte(b'{')?;
    let (mut v, mut k, mut o, mut i, mut s) = (None, None, None, None, None);
    let mut h = Header::new(Kind::Broadcast, "", "");
    loop {
        r.byte(b'"')?;
        let key = r.plain_str()?;
        r.byte(b':')?;
        match key {
            b"v" => v = Some(u8::try_from(r.u64()?).ok()?),
            b"k" => k = Some(Kind::from_code(r.quoted()?)?),
            b"o" => o = Some(r.text()?),
            b"i" => i = Some(r.text()?),
            b"s" => s = Some(r.u64()?),
            b"r" => h.r = r.boolean()?,
            b"c" => h.c = Some(r.u64()?),
            b"p" => h.p = Some(r.u64()?),
            b"t" => h.t = Some(r.u64()?),
            b"e" => h.e = Some(Outcome::from_name(r.quoted()?)?),
            b"n" => h.n = Some(r.u64()?),
            b"hello" => h.hello = r.boolean()?,
            b"ep" => h.ep = Some(Cow::Borrowed(r.text()?)),
            b"off" => h.off = Some(r.u64()?),
            _ => return None,
        }
        match r.next()? {
            b',' => continue,
            b'}' if r.at == line.len() => break,
            _ => return None,
        }
    }
    h.v = v?;
    h.k = k?;
    h.o = Cow::Borrowed(o?);
    h.i = Cow::Borrowed(i?);
    h.s = s?;
    Some(h)
}

struct Reader<'a> {
    line: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn next(&mut self) -> Option<u8> {
        let b = *self.line.get(self.at)?;
        self.at += 1;
        Some(b)
    }

    fn byte(&mut self, want: u8) -> Option<()> {
        (self.next()? == want).then_some(())
    }

    /// The rest of a string whose opening quote was read, if it has no escape.
    fn plain_str(&mut self) -> Option<&'a [u8]> {
        let rest = &self.line[self.at..];
        let len = rest
            .iter()
            .position(|&b| b == b'"' || b == b'\\' || b < 0x20)?;
        if rest[len] != b'"' {
            return None;
        }
        self.at += len + 1;
        Some(&rest[..len])
    }

    fn quoted(&mut self) -> Option<&'a [u8]> {
        self.byte(b'"')?;
        self.plain_str()
    }

    fn text(&mut self) -> Option<&'a str> {
        std::str::from_utf8(self.quoted()?).ok()
    }

    /// Digits as serde_json writes an unsigned integer: no sign, no leading zero.
    fn u64(&mut self) -> Option<u64> {
        let rest = &self.line[self.at..];
        let len = rest.iter().take_while(|b| b.is_ascii_digit()).count();
        if len == 0 || (len > 1 && rest[0] == b'0') {
            return None;
        }
        let mut n: u64 = 0;
        for &d in &rest[..len] {
            n = n.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
        }
        self.at += len;
        Some(n)
    }

    fn boolean(&mut self) -> Option<bool> {
        let rest = &self.line[self.at..];
        let (value, len) = if rest.starts_with(b"true") {
            (true, 4)
        } else if rest.starts_with(b"false") {
            (false, 5)
        } else {
            return None;
        };
        self.at += len;
        Some(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers() -> Vec<Header<'static>> {
        let kinds = [
            Kind::Broadcast,
            Kind::Topic,
            Kind::Call,
            Kind::Reply,
            Kind::Notify,
            Kind::Heartbeat,
            Kind::Goodbye,
            Kind::Recorded,
            Kind::Presence,
        ];
        let mut all = Vec::new();
        for (n, k) in kinds.into_iter().enumerate() {
            let mut h = Header::new(k, "node-1", "0123456789ab");
            h.s = n as u64 * 1_000_003;
            all.push(h);
        }
        let mut full = Header::new(Kind::Reply, "a", "b");
        full.s = u64::MAX;
        full.r = true;
        full.c = Some(0);
        full.p = Some(42);
        full.t = Some(30_000);
        full.e = Some(Outcome::NoPeer);
        full.n = Some(7);
        full.hello = true;
        full.ep = Some(Cow::Borrowed("ep-1"));
        full.off = Some(99);
        all.push(full);
        for e in [
            Outcome::Rpc,
            Outcome::Timeout,
            Outcome::Closed,
            Outcome::Failed,
        ] {
            let mut h = Header::new(Kind::Reply, "a", "b");
            h.e = Some(e);
            all.push(h);
        }
        // Names a node may have: quotes, backslashes, controls, non-ASCII.
        for name in ["a\"b", "back\\slash", "tab\there", "nöde-✓", "", "{x}"] {
            let mut h = Header::new(Kind::Heartbeat, name, name);
            h.ep = Some(Cow::Borrowed(name));
            all.push(h);
        }
        all
    }

    #[test]
    fn writes_exactly_what_serde_writes() {
        for h in headers() {
            let mut buf = BytesMut::new();
            write(&mut buf, &h);
            let serde = serde_json::to_vec(&h).unwrap();
            assert_eq!(
                String::from_utf8_lossy(&buf),
                String::from_utf8_lossy(&serde)
            );
        }
    }

    #[test]
    fn reads_what_it_writes_as_serde_does_and_leaves_the_rest_to_serde() {
        for h in headers() {
            let line = serde_json::to_vec(&h).unwrap();
            let serde: Header<'_> = serde_json::from_slice(&line).unwrap();
            let fast = read(&line);
            let escapes = line.contains(&b'\\');
            match fast {
                Some(fast) => {
                    assert!(!escapes);
                    assert_eq!(format!("{fast:?}"), format!("{serde:?}"));
                }
                None => assert!(escapes, "{}", String::from_utf8_lossy(&line)),
            }
        }
        // Shapes it leaves to serde (which may still read them), and ones nobody reads.
        for line in [
            &br#"{ "v":1,"k":"t","o":"a","i":"b","s":1}"#[..],
            br#"{"v":1,"k":"t","o":"a","i":"b","s":1,"extra":2}"#,
            br#"{"v":1,"k":"t","o":"a","i":"b","s":01}"#,
            br#"{"v":1,"k":"t","o":"a","i":"b","s":-1}"#,
            br#"{"v":1,"k":"t","o":"a","i":"b","s":18446744073709551616}"#,
            br#"{"v":300,"k":"t","o":"a","i":"b","s":1}"#,
            br#"{"v":1,"k":"z","o":"a","i":"b","s":1}"#,
            br#"{"v":1,"k":"t","o":"a","i":"b"}"#,
            br#"{"v":1,"k":"t","o":"a","i":"b","s":1}x"#,
            br#"{"v":1,"k":"t","o":"a","i":"b","s":1"#,
            b"{",
            b"",
        ] {
            assert!(read(line).is_none(), "{}", String::from_utf8_lossy(line));
        }
    }
}

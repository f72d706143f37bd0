//! A fast path for reading a message object in the shape nearly every peer sends.
//!
//! serde's derive-free visitor in `message.rs` reads any message; this scanner reads
//! the common case by hand, about twice as fast: keys without escapes, `jsonrpc` and
//! `method` as strings without escapes, an `id` that is such a string, an integer or
//! null. Values that are arrays or objects (`params`, `result`, `error`) are skipped
//! by hand when they hold only such scalars (`[42,23]`), else by serde_json, which
//! checks their syntax. Anything else (an escape, a
//! fraction, a syntax error, trailing text) returns `None`, and the serde path decides:
//! the fast path never answers differently, it only answers sooner. The fuzz target
//! and the unit tests below compare the two.

use serde::Deserialize;
use serde_json::value::RawValue;

use super::{Envelope, Raw};

/// How nearly every message starts: read with one comparison.
const USUAL_START: &[u8] = br#"{"jsonrpc":"2.0","#;

/// Reads `text` as one message object, or gives up with `None`.
pub(super) fn envelope(text: &str) -> Option<Envelope<'_>> {
    let b = text.as_bytes();
    let mut env = Envelope::default();
    let mut i = if b.starts_with(USUAL_START) {
        // `{`, the member `"jsonrpc":"2.0"` and a comma: another member follows.
        env.jsonrpc = Some(Raw(text.get(11..16)?));
        ws(b, USUAL_START.len())
    } else {
        let i = ws(b, 0);
        if *b.get(i)? != b'{' {
            return None;
        }
        let i = ws(b, i + 1);
        if *b.get(i)? == b'}' {
            return (ws(b, i + 1) == b.len()).then_some(env);
        }
        i
    };
    loop {
        let (slot, after_colon) = match usual_key(&mut env, b, i) {
            Some(found) => found,
            None => {
                let (key, after_key) = plain_string(b, i)?;
                i = ws(b, after_key);
                if *b.get(i)? != b':' {
                    return None;
                }
                (env.slot(b.get(key.0 + 1..key.1 - 1)?), i + 1)
            }
        };
        i = ws(b, after_colon);
        let end = value_end(text, i)?;
        let value = Raw(text.get(i..end)?);
        // A member given twice is rare and serde's path says which one it was (an `id`
        // given once is still read for the answer).
        if slot.is_some_and(|slot| slot.replace(value).is_some()) {
            return None;
        }
        i = ws(b, end);
        match *b.get(i)? {
            b',' => i = ws(b, i + 1),
            b'}' => {
                i += 1;
                break;
            }
            _ => return None,
        }
    }
    (ws(b, i) == b.len()).then_some(env)
}

/// A member's key at `i` written the usual way, `"name":` (no escape, no space
/// before the colon), for the names JSON-RPC gives meaning to: where its value goes and
/// the index after the colon. Any other key goes through [`plain_string`]. Each name is
/// compared as a constant, which the compiler turns into a load or two.
fn usual_key<'e, 'a>(
    env: &'e mut Envelope<'a>,
    b: &[u8],
    i: usize,
) -> Option<(Option<&'e mut Option<Raw<'a>>>, usize)> {
    #[inline(always)]
    fn is<const N: usize>(rest: &[u8], key: &[u8; N]) -> bool {
        rest.get(..N).is_some_and(|k| k == key)
    }
    let rest = b.get(i..)?;
    let (slot, len) = match *rest.get(1)? {
        b'j' if is(rest, br#""jsonrpc":"#) => (&mut env.jsonrpc, 10),
        b'm' if is(rest, br#""method":"#) => (&mut env.method, 9),
        b'p' if is(rest, br#""params":"#) => (&mut env.params, 9),
        b'i' if is(rest, br#""id":"#) => (&mut env.id, 5),
        b'r' if is(rest, br#""result":"#) => (&mut env.result, 9),
        b'e' if is(rest, br#""error":"#) => (&mut env.error, 8),
        _ => return None,
    };
    Some((Some(slot), i + len))
}

impl<'a> Envelope<'a> {
    /// Where the member named `name` goes; `None` for a member JSON-RPC ignores.
    fn slot(&mut self, name: &[u8]) -> Option<&mut Option<Raw<'a>>> {
        match name {
            b"jsonrpc" => Some(&mut self.jsonrpc),
            b"method" => Some(&mut self.method),
            b"params" => Some(&mut self.params),
            b"id" => Some(&mut self.id),
            b"result" => Some(&mut self.result),
            b"error" => Some(&mut self.error),
            b"progressToken" => Some(&mut self.progress_token),
            _ => None,
        }
    }
}

/// Skips JSON whitespace from `i`.
fn ws(b: &[u8], mut i: usize) -> usize {
    while matches!(b.get(i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        i += 1;
    }
    i
}

/// The bytes that end or complicate a string: `"`, `\\` and control characters.
const STOPS: [bool; 256] = {
    let mut stops = [false; 256];
    let mut c = 0;
    while c < 0x20 {
        stops[c] = true;
        c += 1;
    }
    stops[b'"' as usize] = true;
    stops[b'\\' as usize] = true;
    stops
};

/// A string at `i` with no escapes and no control characters: its span, quotes
/// included, and the index after it.
fn plain_string(b: &[u8], i: usize) -> Option<((usize, usize), usize)> {
    if *b.get(i)? != b'"' {
        return None;
    }
    let rest = b.get(i + 1..)?;
    // One pass over the bytes, without a bounds check each: the first byte that ends
    // or complicates the string, one table lookup per byte.
    let at = rest.iter().position(|&c| STOPS[usize::from(c)])?;
    if rest[at] != b'"' {
        return None;
    }
    let end = i + 1 + at + 1;
    Some(((i, end), end))
}

/// Where the value starting at `i` ends, for the values the fast path takes.
fn value_end(text: &str, i: usize) -> Option<usize> {
    let b = text.as_bytes();
    match *b.get(i)? {
        b'[' | b'{' => flat_end(b, i).or_else(|| {
            // serde_json checks the value's syntax and skips it without recursing.
            let mut de = serde_json::Deserializer::from_str(&text[i..]);
            let raw = <&RawValue>::deserialize(&mut de).ok()?;
            Some(i + raw.get().len())
        }),
        _ => scalar_end(b, i),
    }
}

/// Where an array or object of scalars only (`[42,23]`, `{"a":1}`) ends, with the
/// scalars the fast path reads; `None` for anything else (nesting, a fraction, an
/// escape, bad syntax), which serde_json then skips or refuses. Most params are such
/// a flat list, and skipping them through serde_json cost about 230 instructions of
/// the 1,340 that reading a `tick [i]` notification took (callgrind, bench (d)).
fn flat_end(b: &[u8], i: usize) -> Option<usize> {
    let (object, close) = match b[i] {
        b'{' => (true, b'}'),
        _ => (false, b']'),
    };
    let mut j = ws(b, i + 1);
    if *b.get(j)? == close {
        return Some(j + 1);
    }
    loop {
        if object {
            let (_, after_key) = plain_string(b, j)?;
            j = ws(b, after_key);
            if *b.get(j)? != b':' {
                return None;
            }
            j = ws(b, j + 1);
        }
        j = ws(b, scalar_end(b, j)?);
        match *b.get(j)? {
            b',' => j = ws(b, j + 1),
            c if c == close => return Some(j + 1),
            _ => return None,
        }
    }
}

/// Where the string, integer or literal at `i` ends (`None` for an array or object).
fn scalar_end(b: &[u8], i: usize) -> Option<usize> {
    match *b.get(i)? {
        b'"' => plain_string(b, i).map(|(_, end)| end),
        b'-' | b'0'..=b'9' => integer_end(b, i),
        b'n' => literal(b, i, b"null"),
        b't' => literal(b, i, b"true"),
        b'f' => literal(b, i, b"false"),
        _ => None,
    }
}

/// `-?(0|[1-9][0-9]*)`, not followed by a fraction or an exponent (those go the
/// slow way).
fn integer_end(b: &[u8], i: usize) -> Option<usize> {
    let mut j = i + usize::from(b[i] == b'-');
    match *b.get(j)? {
        b'0' => j += 1,
        b'1'..=b'9' => {
            while b.get(j).is_some_and(u8::is_ascii_digit) {
                j += 1;
            }
        }
        _ => return None,
    }
    match b.get(j) {
        Some(b'.' | b'e' | b'E' | b'0'..=b'9') => None,
        _ => Some(j),
    }
}

fn literal(b: &[u8], i: usize, word: &[u8]) -> Option<usize> {
    b.get(i..i + word.len())
        .filter(|w| *w == word)
        .map(|_| i + word.len())
}

#[cfg(test)]
mod tests {
    use super::super::{parse_envelope, Envelope};
    use super::envelope;

    fn same(a: &Envelope<'_>, b: &Envelope<'_>) -> bool {
        (
            a.jsonrpc,
            a.method,
            a.params,
            a.id,
            a.result,
            a.error,
            a.progress_token,
            a.duplicate,
        ) == (
            b.jsonrpc,
            b.method,
            b.params,
            b.id,
            b.result,
            b.error,
            b.progress_token,
            b.duplicate,
        )
    }

    /// Whenever the fast path reads a text, serde reads it the same way.
    fn agrees(text: &str) {
        if let Some(fast) = envelope(text) {
            let slow = parse_envelope(text)
                .unwrap_or_else(|e| panic!("fast path took what serde refuses ({e}): {text}"));
            assert!(same(&fast, &slow), "fast and slow paths differ on {text}");
        }
    }

    // The generated cases (proptest) are in harness/tests/properties.rs, through
    // `fuzzing::fast_path_agrees`, so the root package needs no proptest.

    #[test]
    fn the_usual_shapes_take_the_fast_path() {
        for text in [
            r#"{"jsonrpc":"2.0","method":"subtract","params":[42,23],"id":1}"#,
            r#"{"jsonrpc": "2.0", "method": "update", "params": {"a": [1, {"b": "\"x\""}]}}"#,
            r#" { "jsonrpc" : "2.0" , "result" : 19 , "id" : "abc" } "#,
            r#"{"jsonrpc":"2.0","error":{"code":-32601,"message":"Method not found"},"id":null}"#,
            r#"{"jsonrpc":"2.0","result":false,"id":-7}"#,
            r#"{}"#,
            r#"{"foo":"boo"}"#,
            r#"{"jsonrpc":"2.0","method":"m","params":[ 1 , "x" , null , true , false , -0 ]}"#,
            r#"{"jsonrpc":"2.0","method":"m","params":{ "a" : 1 , "b" : "é" },"id":2}"#,
            r#"{"jsonrpc":"2.0","method":"m","params":[ ],"id":3}"#,
            r#"{"jsonrpc":"2.0","method":"m","params":[1.5,"a\"b",{"c":[]}],"id":4}"#,
            r#"{"jsonrpc":"2.0", "method":"m","id":5}"#,
            r#"{"jsonrpc":"2.0","method" :"m","id" : 6,"idx":7,"i":8,"e":9}"#,
            r#"{"id":7,"result":{"a":1},"jsonrpc":"2.0"}"#,
            r#"{"jsonrpc":"2.0","error":{"code":1,"message":"x"},"id":"e"}"#,
            r#"{"jsonrpc":"2.0","method":"m","progressToken":"t","id":9}"#,
            r#"{"jsonrpc":"2.1","method":"m","id":10}"#,
            r#"{"jsonrpc":2,"method":"m","id":11}"#,
        ] {
            assert!(envelope(text).is_some(), "{text}");
            agrees(text);
        }
    }

    #[test]
    fn anything_unusual_goes_the_slow_way() {
        for text in [
            r#"{"jsonrpc":"2\u002e0","method":"m","id":1}"#,
            r#"{"json\u0072pc":"2.0","method":"m","id":1}"#,
            r#"{"jsonrpc":"2.0","method":"m","id":1.5}"#,
            r#"{"jsonrpc":"2.0","method":"m","id":01}"#,
            r#"{"jsonrpc":"2.0","method":"m","id":1e3}"#,
            r#"{"jsonrpc":"2.0","method":"m","id":1} x"#,
            r#"{"jsonrpc":"2.0","method":"m","id":1,}"#,
            r#"{"jsonrpc":"2.0","method":"m","params":[1,],"id":1}"#,
            r#"{"jsonrpc":"2.0","method":"m","params":[1 2],"id":1}"#,
            r#"{"jsonrpc":"2.0","method":"m","params":{"a":1,},"id":1}"#,
            r#"{"jsonrpc":"2.0","method":"m","params":{"a" 1},"id":1}"#,
            r#"{"jsonrpc":"2.0","method":"m","params":{1:1},"id":1}"#,
            r#"{"jsonrpc":"2.0","method":"m","params":[01],"id":1}"#,
            r#"{"jsonrpc":"2.0","method":"m","params":[1],"id":1"#,
            "{\"jsonrpc\":\"2.0\",\"method\":\"a\tb\",\"id\":1}",
            r#"{"jsonrpc":"2.0","method":"m","id":nul}"#,
            r#"{"jsonrpc":"2.0""#,
            r#"{"jsonrpc":"2.0",}"#,
            r#"{"jsonrpc":"2.0","#,
            r#"{"jsonrpc":"2.0",,"id":1}"#,
            r#"{"jsonrpc":"2.0","method":"m","id"1}"#,
            r#"{"jsonrpc":"2.0","method":"m","id":1"#,
            r#"{"jsonrpc":"2.0","met\u0068od":"m","id":1}"#,
            r#"{"jsonrpc":"2.0","method":"m\n","id":1}"#,
        ] {
            assert!(envelope(text).is_none(), "{text}");
            agrees(text);
        }
    }

    #[test]
    fn duplicates_are_left_to_serde() {
        for text in [
            r#"{"jsonrpc":"2.0","method":"m","id":1,"id":2}"#,
            r#"{"jsonrpc":"2.0","jsonrpc":"2.0","method":"m"}"#,
            r#"{"jsonrpc":"2.0","method":"m","method" :"n"}"#,
            r#"{"jsonrpc":"2.0","result":1,"result":2,"id":1}"#,
        ] {
            assert!(envelope(text).is_none(), "{text}");
            assert!(
                super::super::parse_envelope(text).is_ok_and(|e| e.duplicate),
                "{text}"
            );
        }
    }
}

//! Writing outgoing frames: requests, notifications and responses, each serialized once
//! into a per-thread scratch string and copied out at its exact size.
//!
//! Frames are built as text, never as bytes: serde_json's compact output is written
//! through [`Compact`], a formatter that appends to a `String` what serde_json hands it
//! (every piece is a `&str`, a number or a fixed sign), so a frame we wrote needs no
//! UTF-8 check before it goes out as a text frame.

use std::cell::RefCell;
use std::io;
use std::ops::Range;

use serde::Serialize;
use serde_json::ser::{CharEscape, Formatter};

use crate::error::RpcError;

const VERSION: &str = r#"{"jsonrpc":"2.0","#;

/// Appends `value` as serde_json's compact JSON (what `serde_json::to_writer` writes)
/// to `out`. On an error (a `Serialize` impl's own: the writes cannot fail) `out` may
/// hold part of the value.
#[inline]
pub(crate) fn to_text<T: Serialize + ?Sized>(
    out: &mut String,
    value: &T,
) -> Result<(), serde_json::Error> {
    value.serialize(&mut serde_json::Serializer::with_formatter(
        io::sink(),
        Compact(out),
    ))
}

/// serde_json's `CompactFormatter`, appending to a `String` instead of its writer (a
/// sink): the same text, built without bytes that would need checking. serde_json
/// writes nothing to its writer but through its formatter.
struct Compact<'a>(&'a mut String);

impl Compact<'_> {
    #[inline]
    fn push(&mut self, s: &str) -> io::Result<()> {
        self.0.push_str(s);
        Ok(())
    }

    #[inline]
    fn int(&mut self, n: impl itoa::Integer) -> io::Result<()> {
        self.push(itoa::Buffer::new().format(n))
    }
}

/// Formatter methods that write a fixed sign (or nothing).
macro_rules! signs {
    ($($name:ident => $sign:expr),* $(,)?) => {$(
        #[inline]
        fn $name<W: ?Sized + io::Write>(&mut self, _: &mut W) -> io::Result<()> {
            self.push($sign)
        }
    )*};
}

/// Formatter methods that write an integer, or a string handed over as it is.
macro_rules! values {
    ($($name:ident: $ty:ty => $write:ident),* $(,)?) => {$(
        #[inline]
        fn $name<W: ?Sized + io::Write>(&mut self, _: &mut W, value: $ty) -> io::Result<()> {
            self.$write(value)
        }
    )*};
}

/// Formatter methods that write a comma before all but the first item.
macro_rules! commas {
    ($($name:ident),* $(,)?) => {$(
        #[inline]
        fn $name<W: ?Sized + io::Write>(&mut self, _: &mut W, first: bool) -> io::Result<()> {
            self.push(if first { "" } else { "," })
        }
    )*};
}

/// Each method writes what `CompactFormatter`'s does (serde_json 1.0.154, `ser.rs`).
impl Formatter for Compact<'_> {
    signs! {
        write_null => "null",
        begin_string => "\"",
        end_string => "\"",
        begin_array => "[",
        end_array => "]",
        end_array_value => "",
        begin_object => "{",
        end_object => "}",
        end_object_key => "",
        begin_object_value => ":",
        end_object_value => "",
    }
    values! {
        write_i8: i8 => int,
        write_i16: i16 => int,
        write_i32: i32 => int,
        write_i64: i64 => int,
        write_i128: i128 => int,
        write_u8: u8 => int,
        write_u16: u16 => int,
        write_u32: u32 => int,
        write_u64: u64 => int,
        write_u128: u128 => int,
        write_number_str: &str => push,
        write_string_fragment: &str => push,
        write_raw_fragment: &str => push,
    }
    commas!(begin_array_value, begin_object_key);

    #[inline]
    fn write_bool<W: ?Sized + io::Write>(&mut self, _: &mut W, value: bool) -> io::Result<()> {
        self.push(if value { "true" } else { "false" })
    }
    #[inline]
    fn write_f32<W: ?Sized + io::Write>(&mut self, _: &mut W, value: f32) -> io::Result<()> {
        // Finite: serde_json writes `null` for the others without asking.
        self.push(zmij::Buffer::new().format_finite(value))
    }
    #[inline]
    fn write_f64<W: ?Sized + io::Write>(&mut self, _: &mut W, value: f64) -> io::Result<()> {
        self.push(zmij::Buffer::new().format_finite(value))
    }
    fn write_char_escape<W: ?Sized + io::Write>(
        &mut self,
        _: &mut W,
        escape: CharEscape,
    ) -> io::Result<()> {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let letter = match escape {
            CharEscape::Quote => '"',
            CharEscape::ReverseSolidus => '\\',
            CharEscape::Solidus => '/',
            CharEscape::Backspace => 'b',
            CharEscape::FormFeed => 'f',
            CharEscape::LineFeed => 'n',
            CharEscape::CarriageReturn => 'r',
            CharEscape::Tab => 't',
            CharEscape::AsciiControl(byte) => {
                self.0.push_str("\\u00");
                self.0.push(char::from(HEX[usize::from(byte >> 4)]));
                self.0.push(char::from(HEX[usize::from(byte & 0xF)]));
                return Ok(());
            }
        };
        self.0.push('\\');
        self.0.push(letter);
        Ok(())
    }
}

/// Writes `{"jsonrpc":"2.0","result":RESULT,"id":ID}`. `id` is raw JSON as received.
pub(crate) fn response<T: Serialize + ?Sized>(
    id: &str,
    result: &T,
) -> Result<String, serde_json::Error> {
    with_scratch(|buf| {
        buf.push_str(VERSION);
        buf.push_str(r#""result":"#);
        to_text(buf, result)?;
        Ok(finish_with_id(buf, id))
    })
}

/// Writes `{"jsonrpc":"2.0","error":ERROR,"id":ID}`; `id` is raw JSON, `None` for null.
pub(crate) fn error_response(id: Option<&str>, error: &RpcError) -> String {
    with_scratch(|buf| {
        buf.push_str(VERSION);
        buf.push_str(r#""error":"#);
        // An RpcError is a struct of an integer, a string and a Value: it always
        // serializes.
        if to_text(buf, error).is_err() {
            buf.truncate(VERSION.len() + 8);
            buf.push_str(r#"{"code":-32603,"message":"Internal error"}"#);
        }
        finish_with_id(buf, id.unwrap_or("null"))
    })
}

/// The `result` member of a frame [`response`] wrote for `id`: its text sits between
/// the fixed head and `,"id":ID}`. For the call layers, which see the raw result.
pub(crate) fn result_in<'a>(frame: &'a str, id: &str) -> &'a str {
    let start = VERSION.len() + br#""result":"#.len();
    let end = frame
        .len()
        .saturating_sub(br#","id":"#.len() + id.len() + 1);
    frame.get(start..end).unwrap_or_default()
}

fn finish_with_id(buf: &mut String, id: &str) -> String {
    buf.push_str(r#","id":"#);
    buf.push_str(id);
    buf.push('}');
    buf.as_str().to_owned()
}

thread_local! {
    /// The thread's scratch for [`with_scratch`].
    static SCRATCH: RefCell<String> = RefCell::new(String::with_capacity(512));
}

/// The most a thread's scratch keeps once a frame is written.
const SCRATCH_KEPT: usize = 64 * 1024;

/// A frame is written into a string kept by the thread, then copied into a string of
/// exactly its length: one allocation per frame. (Handing over a grown buffer would
/// cost two: `Bytes` allocates a header for any buffer with spare capacity.)
fn with_scratch<R>(write: impl FnOnce(&mut String) -> R) -> R {
    SCRATCH.with(|scratch| match scratch.try_borrow_mut() {
        Ok(buf) => {
            let mut buf = Trim(buf);
            buf.0.clear();
            // The frame is the last expression: written where the caller wants it, not
            // held here while the buffer is trimmed and then copied out.
            write(&mut buf.0)
        }
        // Only if a Serialize impl writes a frame while we write one.
        Err(_) => write(&mut String::new()),
    })
}

/// The thread's scratch while a frame is written into it; trimmed once it is written.
struct Trim<'a>(std::cell::RefMut<'a, String>);

impl Drop for Trim<'_> {
    #[inline]
    fn drop(&mut self) {
        // One huge frame must not keep its memory for the thread's life.
        if self.0.capacity() > SCRATCH_KEPT {
            *self.0 = String::with_capacity(512);
        }
    }
}

/// Writes a request (with `id`) or a notification (without), leaving `params` out when
/// they serialize to `null` (as `()` and `None` do).
pub(crate) fn request<P: Serialize + ?Sized>(
    method: &str,
    params: &P,
    id: Option<u64>,
) -> Result<String, crate::Error> {
    with_scratch(|buf| {
        write_request(buf, method, params, id)?;
        Ok(buf.as_str().to_owned())
    })
}

/// Appends one request or notification object to `buf`.
pub(crate) fn write_request<P: Serialize + ?Sized>(
    buf: &mut String,
    method: &str,
    params: &P,
    id: Option<u64>,
) -> Result<(), crate::Error> {
    write_head(buf, method, params)?;
    if let Some(id) = id {
        buf.push_str(r#","id":"#);
        push_u64(buf, id);
    }
    buf.push('}');
    Ok(())
}

/// Appends `{"jsonrpc":"2.0","method":M` and `,"params":P` to `buf`, leaving `params`
/// out when they serialize to `null` (as `()` and `None` do). Returns where the params
/// are in `buf`.
#[inline]
fn write_head<P: Serialize + ?Sized>(
    buf: &mut String,
    method: &str,
    params: &P,
) -> Result<Option<Range<usize>>, crate::Error> {
    buf.push_str(VERSION);
    buf.push_str(r#""method":"#);
    to_text(buf, method)?;
    let before_params = buf.len();
    buf.push_str(r#","params":"#);
    let start = buf.len();
    to_text(buf, params)?;
    if params_present(buf.as_bytes().get(start).copied())? {
        Ok(Some(start..buf.len()))
    } else {
        buf.truncate(before_params);
        Ok(None)
    }
}

/// Whether params whose JSON text begins with `first` are sent (an array or an object)
/// or left out (`null`); any other value cannot be params.
/// `None`: a `Serialize` impl that wrote nothing and did not fail, which no JSON value
/// is.
fn params_present(first: Option<u8>) -> Result<bool, crate::Error> {
    match first {
        Some(b'[' | b'{') => Ok(true),
        Some(b'n') => Ok(false),
        other => Err(crate::Error::InvalidParams(match other {
            Some(b'"') => "a string",
            Some(b't' | b'f') => "a boolean",
            Some(_) => "a number",
            None => "nothing",
        })),
    }
}

/// Checks that `params` can be a notification's params, as [`request`] would, without
/// serializing them: the serializer is stopped after its first byte.
pub(crate) fn check_params<P: Serialize + ?Sized>(params: &P) -> Result<(), crate::Error> {
    /// Takes the first write, refuses the rest (which stops the serializer).
    struct First(Option<u8>);
    impl std::io::Write for First {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            match (self.0, bytes.first()) {
                (None, Some(&byte)) => {
                    self.0 = Some(byte);
                    Ok(bytes.len())
                }
                (_, None) => Ok(0),
                (Some(_), Some(_)) => Err(std::io::ErrorKind::WriteZero.into()),
            }
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut first = First(None);
    let written = serde_json::to_writer(&mut first, params);
    match first.0 {
        Some(byte) => params_present(Some(byte)).map(drop),
        None => {
            // The value failed before it wrote anything: its own error.
            written?;
            params_present(None).map(drop)
        }
    }
}

/// Room for a call's version, method key and params, besides its method and its tail:
/// the params of most calls fit.
const CALL_ROOM: usize = 128;

/// The start of a request, up to its params, with room for `tail` more bytes (what
/// [`finish_request`] adds) so finishing it does not grow it; where its params are.
#[inline]
pub(crate) fn request_head<P: Serialize + ?Sized>(
    method: &str,
    params: &P,
    tail: usize,
) -> Result<(String, Option<Range<usize>>), crate::Error> {
    // A call's text keeps room for its id, so its `Bytes` allocates a header of its
    // own whatever its length: it is written in place, with room for common params,
    // not in the thread's scratch and copied out (perf, the rpc bench's (b): the copy's
    // 72-byte result waited on its stores in `LocalKey::with`; callgrind, 75 fewer
    // instructions a call). Large params grow it; what it has left over beyond a few
    // hundred bytes is given back.
    if tail > 1 {
        let mut head = String::with_capacity(CALL_ROOM + method.len() + tail);
        let params = write_head(&mut head, method, params)?;
        if head.capacity() - head.len() > CALL_ROOM + tail {
            head.shrink_to(head.len() + tail);
        } else {
            head.reserve_exact(tail);
        }
        return Ok((head, params));
    }
    // What comes back through the thread-local is small: the text and an error are
    // written where they end up, not moved out of the closure (an 88-byte `Result`
    // handed back through `LocalKey::with` was loaded before its stores had landed).
    let mut head = String::new();
    let mut failed = None;
    let params = with_scratch(|buf| match write_head(buf, method, params) {
        Ok(params) => {
            head = String::with_capacity(buf.len() + tail);
            head.push_str(buf);
            params
        }
        Err(e) => {
            failed = Some(e);
            None
        }
    });
    match failed {
        None => Ok((head, params)),
        Some(e) => Err(e),
    }
}

/// Ends a request begun by [`request_head`]: `,"id":N` for a call, the progress token
/// (the id again) when asked, `}`.
#[inline]
pub(crate) fn finish_request(mut head: String, id: Option<u64>, progress: bool) -> String {
    if let Some(id) = id {
        head.push_str(r#","id":"#);
        push_u64(&mut head, id);
        if progress {
            head.push_str(r#","progressToken":"#);
            push_u64(&mut head, id);
        }
    }
    head.push('}');
    // A notification's head was made to its exact length. A call's keeps the room its
    // id did not use, and its `Bytes` allocates a header of its own for that: a small
    // allocation from the thread's cache, where shrinking the text in place cost about
    // 400 instructions a call (`realloc` splits the block and frees the rest, which
    // `malloc_consolidate` later walks; callgrind, the rpc bench's (b)).
    head
}

/// Appends `n` in decimal, without `fmt` (see `write_request`).
#[inline]
fn push_u64(out: &mut String, n: u64) {
    out.push_str(itoa::Buffer::new().format(n));
}

/// The raw `params` and `id` of a frame [`request`] wrote (`has_id` says whether it
/// wrote an id): `params` follows the first `,"params":` (the method before it is a
/// JSON string, where every quote is escaped, so it cannot hold that text), and `id` is
/// the number after the last `,"id":`, which only the progress token (the same number,
/// see [`finish_request`]) may follow. For the call layers, which see calls made as
/// they go out.
pub(crate) fn request_parts(frame: &str, has_id: bool) -> (Option<&str>, Option<&str>) {
    const PARAMS: &str = r#","params":"#;
    const ID: &str = r#","id":"#;
    let body = frame.strip_suffix('}').unwrap_or(frame);
    let (rest, id) = match has_id {
        true => match body.rfind(ID) {
            Some(at) => {
                let id = &body[at + ID.len()..];
                // `,"progressToken":N` after it, when the call asked for progress.
                let id = id.split_once(',').map_or(id, |(id, _)| id);
                (&body[..at], Some(id))
            }
            None => (body, None),
        },
        false => (body, None),
    };
    let params = rest.find(PARAMS).map(|at| &rest[at + PARAMS.len()..]);
    (params, id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_s_head_keeps_room_for_its_tail_and_gives_back_what_large_params_left() {
        for size in [1, 100, 1_000, 100_000] {
            let params = ["x".repeat(size)];
            let (head, range) = request_head("m", &params, 64).unwrap();
            assert_eq!(&head[range.unwrap()], format!(r#"["{}"]"#, params[0]));
            let spare = head.capacity() - head.len();
            assert!(spare >= 64, "{size}: room for the id");
            assert!(
                spare <= CALL_ROOM + 64 + 1,
                "{size}: {spare} bytes left over"
            );
        }
    }

    #[test]
    fn a_notification_is_written_to_its_length_and_a_huge_one_leaves_no_large_scratch() {
        for size in [1, 1_000, 100_000] {
            let params = ["x".repeat(size)];
            let (head, range) = request_head("m", &params, 1).unwrap();
            assert_eq!(&head[range.unwrap()], format!(r#"["{}"]"#, params[0]));
            assert!(
                head.capacity() - head.len() <= 1,
                "{size}: room for `}}` only"
            );
            let kept = SCRATCH.with(|scratch| scratch.borrow().capacity());
            assert!(
                kept <= SCRATCH_KEPT,
                "{size}: the scratch kept {kept} bytes"
            );
        }
    }

    #[test]
    fn a_notification_whose_params_fail_to_serialize_is_an_error() {
        struct Fails;
        impl Serialize for Fails {
            fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
                Err(serde::ser::Error::custom("no"))
            }
        }
        let written = request_head("m", &[Fails], 1);
        assert!(
            matches!(&written, Err(crate::Error::Serialization(e)) if e.to_string() == "no"),
            "{:?}",
            written.map(|(head, _)| head)
        );
        // The scratch is free again: the next frame is written.
        assert!(request_head("m", &[1], 1).is_ok());
    }

    #[test]
    fn checked_params_are_refused_as_a_request_refuses_them() {
        let values = [
            serde_json::json!([1, 2]),
            serde_json::json!({"a": [1]}),
            serde_json::json!(null),
            serde_json::json!(21.5),
            serde_json::json!("long string"),
            serde_json::json!(true),
        ];
        for value in values {
            let checked = check_params(&value).map_err(|e| e.to_string());
            let written = request("m", &value, None)
                .map(drop)
                .map_err(|e| e.to_string());
            assert_eq!(checked, written, "{value}");
        }
    }

    #[test]
    fn the_parts_of_a_request_are_found_in_the_frame_written() {
        let params = serde_json::json!([1, {"a": 0, "id": 2}]);
        let frame = request("a,\"params\":[9]", &params, Some(17)).unwrap();
        assert_eq!(
            request_parts(&frame, true),
            (Some(r#"[1,{"a":0,"id":2}]"#), Some("17"))
        );
        let frame = request("n", &serde_json::json!({"y": 1, "id": 3}), None).unwrap();
        assert_eq!(
            request_parts(&frame, false),
            (Some(r#"{"id":3,"y":1}"#), None)
        );
        let frame = request("n", &(), Some(4)).unwrap();
        assert_eq!(request_parts(&frame, true), (None, Some("4")));
        // A call that asked for progress: its token follows the id.
        let (head, _) = request_head("p", &[5], 0).unwrap();
        let frame = finish_request(head, Some(6), true);
        assert_eq!(request_parts(&frame, true), (Some("[5]"), Some("6")));
    }

    /// The same request object, each member as `serde_json` writes it, in our order.
    fn as_serde_writes(method: &str, params: &serde_json::Value, id: Option<u64>) -> String {
        let method = serde_json::to_string(method).unwrap();
        let params = match params {
            serde_json::Value::Null => String::new(),
            params => format!(r#","params":{}"#, serde_json::to_string(params).unwrap()),
        };
        let id = id.map(|id| format!(r#","id":{id}"#)).unwrap_or_default();
        format!(r#"{{"jsonrpc":"2.0","method":{method}{params}{id}}}"#)
    }

    #[test]
    fn requests_are_written_as_serde_json_writes_them_and_to_their_exact_length() {
        let methods = [
            "tick",
            "",
            "a\"b",
            "back\\slash",
            "new\nline\u{1}\u{1f}",
            "del\u{7f}",
            "ünïcode ✓",
            "rpc.on",
        ];
        let params = [
            serde_json::json!([1, "ü\"", null]),
            serde_json::json!({"k": "\u{0}"}),
            serde_json::json!(null),
        ];
        for method in methods {
            for params in &params {
                for id in [None, Some(0), Some(u64::MAX)] {
                    let frame = request(method, params, id).unwrap();
                    assert_eq!(frame, as_serde_writes(method, params, id), "{method:?}");
                    assert_eq!(frame.len(), frame.capacity(), "{frame}");
                }
                // A notification as `Request` makes it: room for its `}` only.
                let (head, range) = request_head(method, params, 1).unwrap();
                let note = finish_request(head, None, false);
                assert_eq!(note, as_serde_writes(method, params, None));
                assert_eq!(note.len(), note.capacity(), "{note}");
                let written = range.map(|range| note[range].to_owned());
                let expected = (!params.is_null()).then(|| params.to_string());
                assert_eq!(written, expected);
            }
        }
    }

    #[test]
    fn responses_are_written_to_their_exact_length() {
        for (id, result) in [
            ("1", serde_json::json!(19)),
            (r#""ab\"c""#, serde_json::json!({"s": "ü\n"})),
            ("null", serde_json::json!(null)),
        ] {
            let frame = response(id, &result).unwrap();
            assert_eq!(
                frame,
                format!(r#"{{"jsonrpc":"2.0","result":{result},"id":{id}}}"#)
            );
            assert_eq!(frame.len(), frame.capacity());
        }
    }

    /// `to_text` against `serde_json::to_string`, for a value that goes through every
    /// method of the formatter.
    #[test]
    fn values_are_written_as_serde_json_writes_them() {
        use serde::ser::{SerializeStructVariant, Serializer};
        use std::collections::BTreeMap;

        #[derive(Serialize)]
        enum Shape {
            Unit,
            New(i8),
            Pair(i16, u16),
            Named { a: i32, b: u32 },
        }
        #[derive(Serialize)]
        struct Unit;
        /// Bytes, a `Display` value and a struct variant, as serializers see them.
        struct Odd;
        impl Serialize for Odd {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let mut v = s.serialize_struct_variant("Odd", 0, "V", 3)?;
                v.serialize_field("bytes", &Bytes(&[0, 7, 255]))?;
                v.serialize_field("shown", &Shown)?;
                v.serialize_field("empty", &Bytes(&[]))?;
                v.end()
            }
        }
        struct Bytes<'a>(&'a [u8]);
        impl Serialize for Bytes<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_bytes(self.0)
            }
        }
        struct Shown;
        impl Serialize for Shown {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(&format_args!("a\"b\\c\u{1}/ü{}", 17))
            }
        }
        #[derive(Serialize)]
        struct All<'a> {
            ints: (i8, i16, i32, i64, i128, u8, u16, u32, u64, u128),
            mins: (i8, i16, i32, i64, i128),
            floats: (f32, f64, f64, f64, f64, f32, f64, f64),
            odd_floats: (f64, f64, f32),
            flags: (bool, bool, Option<u8>, Option<u8>, (), Unit),
            text: (char, char, char, &'a str),
            shapes: Vec<Shape>,
            odd: Odd,
            int_keys: BTreeMap<i64, &'a str>,
            bool_keys: BTreeMap<bool, u8>,
            nested: Vec<Vec<BTreeMap<&'a str, Vec<u8>>>>,
            raw: &'a serde_json::value::RawValue,
            value: serde_json::Value,
        }
        let controls: String = (0u8..0x20).map(char::from).collect();
        let raw = serde_json::value::RawValue::from_string(r#"{ "kept" : [1, 2] }"#.into());
        let raw = raw.unwrap();
        let all = All {
            ints: (
                i8::MAX,
                i16::MAX,
                i32::MAX,
                i64::MAX,
                i128::MAX,
                0,
                u16::MAX,
                7,
                u64::MAX,
                u128::MAX,
            ),
            mins: (i8::MIN, i16::MIN, i32::MIN, i64::MIN, i128::MIN),
            floats: (1.5, 0.1, -0.0, 1e300, 5e-324, f32::MAX, 123456789.125, 1.0),
            odd_floats: (f64::NAN, f64::NEG_INFINITY, f32::INFINITY),
            flags: (true, false, None, Some(3), (), Unit),
            text: (
                '"',
                '\n',
                '✓',
                &format!("{controls}\u{7f}/\\\"ünï✓\u{10ffff}"),
            ),
            shapes: vec![
                Shape::Unit,
                Shape::New(-1),
                Shape::Pair(-2, 2),
                Shape::Named { a: -3, b: 3 },
            ],
            odd: Odd,
            int_keys: [(-1, "m"), (0, ""), (i64::MAX, "x")].into(),
            bool_keys: [(false, 0), (true, 1)].into(),
            nested: vec![vec![], vec![BTreeMap::new(), [("k", vec![1, 2])].into()]],
            raw: &raw,
            value: serde_json::json!({"z": [null, 1.25, "s", {"": []}], "a": -7}),
        };
        let mut ours = String::from("kept|");
        to_text(&mut ours, &all).unwrap();
        assert_eq!(
            ours,
            format!("kept|{}", serde_json::to_string(&all).unwrap())
        );

        // Strings of every ASCII character and some others, in random order.
        let alphabet: Vec<char> = (0u8..0x80)
            .map(char::from)
            .chain(['é', '✓', '😀'])
            .collect();
        let mut rng = fastrand::Rng::with_seed(26);
        for _ in 0..500 {
            let len = rng.usize(0..40);
            let s: String = (0..len)
                .map(|_| alphabet[rng.usize(..alphabet.len())])
                .collect();
            let mut ours = String::new();
            to_text(&mut ours, &s).unwrap();
            assert_eq!(ours, serde_json::to_string(&s).unwrap());
        }
    }

    /// A `Serialize` impl can end without writing anything (an empty raw fragment):
    /// no JSON value, so no params. Before `write_head` read the first byte with
    /// `get`, this panicked.
    #[test]
    fn params_that_write_nothing_are_refused_not_a_panic() {
        struct Silent;
        impl Serialize for Silent {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                use serde::ser::SerializeStruct;
                // What serde_json's `RawValue` does, with nothing in it.
                const TOKEN: &str = "$serde_json::private::RawValue";
                let mut raw = s.serialize_struct(TOKEN, 1)?;
                raw.serialize_field(TOKEN, "")?;
                raw.end()
            }
        }
        let nothing = "params must serialize to a JSON array or object, not nothing";
        let refused = |r: Result<String, crate::Error>| r.map_err(|e| e.to_string());
        assert_eq!(refused(request("m", &Silent, None)), Err(nothing.into()));
        assert_eq!(refused(request("m", &Silent, Some(1))), Err(nothing.into()));
        assert_eq!(
            refused(request_head("m", &Silent, 1).map(|h| h.0)),
            Err(nothing.into())
        );
        assert_eq!(
            check_params(&Silent).map_err(|e| e.to_string()),
            Err(nothing.into())
        );
    }

    #[test]
    fn the_result_of_a_response_is_found_in_the_frame_written() {
        let frame = response("\"x\"", &serde_json::json!({"id": 1})).unwrap();
        assert_eq!(result_in(&frame, "\"x\""), r#"{"id":1}"#);
    }
}

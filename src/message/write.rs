//! Writing outgoing frames: requests, notifications and responses, each serialized once
//! into a per-thread scratch buffer and copied out at its exact size.

use std::cell::RefCell;
use std::ops::Range;

use serde::Serialize;

use crate::error::RpcError;

const VERSION: &[u8] = br#"{"jsonrpc":"2.0","#;

/// Writes `{"jsonrpc":"2.0","result":RESULT,"id":ID}`. `id` is raw JSON as received.
pub(crate) fn response<T: Serialize + ?Sized>(
    id: &str,
    result: &T,
) -> Result<String, serde_json::Error> {
    with_scratch(|buf| {
        buf.extend_from_slice(VERSION);
        buf.extend_from_slice(br#""result":"#);
        serde_json::to_writer(&mut *buf, result)?;
        finish_with_id(buf, id)
    })
}

/// Writes `{"jsonrpc":"2.0","error":ERROR,"id":ID}`; `id` is raw JSON, `None` for null.
pub(crate) fn error_response(id: Option<&str>, error: &RpcError) -> String {
    with_scratch(|buf| {
        buf.extend_from_slice(VERSION);
        buf.extend_from_slice(br#""error":"#);
        // An RpcError is a struct of an integer, a string and a Value: it always
        // serializes.
        if serde_json::to_writer(&mut *buf, error).is_err() {
            buf.truncate(VERSION.len() + 8);
            buf.extend_from_slice(br#"{"code":-32603,"message":"Internal error"}"#);
        }
        finish_with_id(buf, id.unwrap_or("null")).unwrap_or_default()
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

fn finish_with_id(buf: &mut Vec<u8>, id: &str) -> Result<String, serde_json::Error> {
    buf.extend_from_slice(br#","id":"#);
    buf.extend_from_slice(id.as_bytes());
    buf.push(b'}');
    exact_string(buf).ok_or_else(|| serde::de::Error::custom("serializer wrote invalid UTF-8"))
}

/// A frame is written into a buffer kept by the thread, then copied into a string of
/// exactly its length: one allocation per frame. (Handing over a grown buffer would
/// cost two: `Bytes` allocates a header for any buffer with spare capacity.)
fn with_scratch<R>(write: impl FnOnce(&mut Vec<u8>) -> R) -> R {
    thread_local! {
        static SCRATCH: RefCell<Vec<u8>> = RefCell::new(Vec::with_capacity(512));
    }
    SCRATCH.with(|scratch| match scratch.try_borrow_mut() {
        Ok(mut buf) => {
            buf.clear();
            let result = write(&mut buf);
            // One huge frame must not keep its memory for the thread's life.
            if buf.capacity() > 64 * 1024 {
                *buf = Vec::with_capacity(512);
            }
            result
        }
        // Only if a Serialize impl writes a frame while we write one.
        Err(_) => write(&mut Vec::new()),
    })
}

fn exact_string(buf: &[u8]) -> Option<String> {
    std::str::from_utf8(buf).ok().map(str::to_owned)
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
        exact_string(buf).ok_or_else(invalid_utf8)
    })
}

/// Our own serializer's failure: a serialization error, not the other side's fault.
pub(crate) fn invalid_utf8() -> crate::Error {
    crate::Error::Serialization(serde::ser::Error::custom("serializer wrote invalid UTF-8"))
}

/// Appends one request or notification object to `buf`.
pub(crate) fn write_request<P: Serialize + ?Sized>(
    buf: &mut Vec<u8>,
    method: &str,
    params: &P,
    id: Option<u64>,
) -> Result<(), crate::Error> {
    write_head(buf, method, params)?;
    if let Some(id) = id {
        buf.extend_from_slice(br#","id":"#);
        // serde_json writes integers with itoa: `write!` through `fmt` cost about 230
        // instructions a call (callgrind, bench (b)). Writing to a Vec cannot fail.
        let _ = serde_json::to_writer(&mut *buf, &id);
    }
    buf.push(b'}');
    Ok(())
}

/// Appends `{"jsonrpc":"2.0","method":M` and `,"params":P` to `buf`, leaving `params`
/// out when they serialize to `null` (as `()` and `None` do). Returns where the params
/// are in `buf`.
#[inline]
fn write_head<P: Serialize + ?Sized>(
    buf: &mut Vec<u8>,
    method: &str,
    params: &P,
) -> Result<Option<Range<usize>>, crate::Error> {
    buf.extend_from_slice(VERSION);
    buf.extend_from_slice(br#""method":"#);
    serde_json::to_writer(&mut *buf, method)?;
    let before_params = buf.len();
    buf.extend_from_slice(br#","params":"#);
    let start = buf.len();
    serde_json::to_writer(&mut *buf, params)?;
    if params_present(buf[start])? {
        Ok(Some(start..buf.len()))
    } else {
        buf.truncate(before_params);
        Ok(None)
    }
}

/// Whether params whose JSON text begins with `first` are sent (an array or an object)
/// or left out (`null`); any other value cannot be params.
fn params_present(first: u8) -> Result<bool, crate::Error> {
    match first {
        b'[' | b'{' => Ok(true),
        b'n' => Ok(false),
        other => Err(crate::Error::InvalidParams(match other {
            b'"' => "a string",
            b't' | b'f' => "a boolean",
            _ => "a number",
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
        Some(byte) => params_present(byte).map(drop),
        // The value failed before it wrote anything: its own error.
        None => written.map_err(crate::Error::from),
    }
}

/// The start of a request, up to its params, with room for `tail` more bytes (what
/// [`finish_request`] adds) so finishing it does not grow it; where its params are.
#[inline]
pub(crate) fn request_head<P: Serialize + ?Sized>(
    method: &str,
    params: &P,
    tail: usize,
) -> Result<(String, Option<Range<usize>>), crate::Error> {
    with_scratch(|buf| {
        let params = write_head(buf, method, params)?;
        let text = std::str::from_utf8(buf).map_err(|_| invalid_utf8())?;
        let mut head = String::with_capacity(text.len() + tail);
        head.push_str(text);
        Ok((head, params))
    })
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

    #[test]
    fn the_result_of_a_response_is_found_in_the_frame_written() {
        let frame = response("\"x\"", &serde_json::json!({"id": 1})).unwrap();
        assert_eq!(result_in(&frame, "\"x\""), r#"{"id":1}"#);
    }
}

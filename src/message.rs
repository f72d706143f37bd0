//! The wire: classifying one incoming text frame (here), and writing outgoing ones
//! (`write`). No I/O.
//!
//! An incoming frame is parsed once. The envelope's members are kept as slices of the
//! frame's text ([`Raw`]), so `params` and `result` are read only by the type that
//! wants them. Skipping a raw value in serde_json is iterative, so nesting depth costs memory
//! bounded by the frame's size, never stack.

use std::borrow::Cow;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::error::RpcError;

mod fast;
mod positional;
mod write;

pub(crate) use positional::{typed, Params};

pub(crate) use write::{
    check_params, error_response, finish_request, request, request_head, request_parts, response,
    result_in, write_request,
};

/// A JSON value as it appeared in the frame: a slice of the frame's text, checked to
/// be valid JSON but not read further.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Raw<'a>(&'a str);

impl<'a> Raw<'a> {
    /// The value's text.
    pub(crate) fn get(self) -> &'a str {
        self.0
    }
}

impl<'a> From<&'a RawValue> for Raw<'a> {
    fn from(raw: &'a RawValue) -> Self {
        Raw(raw.get())
    }
}

/// One incoming frame, classified.
#[derive(Debug)]
pub(crate) enum Incoming<'a> {
    /// A lone JSON object (or a lone non-object value, which is an invalid item).
    Single(Item<'a>),
    /// A non-empty array, each element classified on its own.
    Batch(Vec<Item<'a>>),
    /// The whole frame gets this one error with `id: null`: a parse error, `[]`, or a
    /// batch over the length limit.
    Reject(RpcError),
}

/// One message: a top-level object or one element of a batch.
#[derive(Debug)]
pub(crate) enum Item<'a> {
    /// A call that expects an answer. `id` is the raw id, echoed back as received.
    /// `progress` is the caller's `progressToken`, when it asked for progress.
    Request {
        id: Raw<'a>,
        method: Cow<'a, str>,
        params: Option<Raw<'a>>,
        progress: Option<Raw<'a>>,
    },
    /// A call without an `id` member: never answered.
    Notification {
        method: Cow<'a, str>,
        params: Option<Raw<'a>>,
    },
    /// An answer to one of our calls.
    Response {
        id: Raw<'a>,
        outcome: Outcome<Raw<'a>>,
    },
    /// Not a valid request: answered with `error` and the id if it could be read.
    Invalid {
        id: Option<Raw<'a>>,
        error: RpcError,
    },
    /// Shaped like a response (no `method`, a `result` or an `error`) but not a valid
    /// one. Never answered: answering responses could make two peers loop.
    BadResponse {
        id: Option<Raw<'a>>,
        reason: &'static str,
    },
}

impl Item<'_> {
    /// Whether it is (or tries to be) a response: an answer to one of our calls.
    pub(crate) fn is_answer(&self) -> bool {
        matches!(self, Item::Response { .. } | Item::BadResponse { .. })
    }
}

/// The `result` or the `error` member of a response, still raw: borrowed from the
/// frame while the reader classifies it (`Outcome<Raw>`), then owned on its way to the
/// waiting call (`Outcome<Reply>`, see `peer`).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Outcome<T> {
    Result(T),
    Error(T),
}

impl<T> Outcome<T> {
    /// The same outcome with its member made into `U`.
    pub(crate) fn map<U>(self, f: impl FnOnce(T) -> U) -> Outcome<U> {
        match self {
            Outcome::Result(t) => Outcome::Result(f(t)),
            Outcome::Error(t) => Outcome::Error(f(t)),
        }
    }
}

/// Where `part`, a slice of `whole`, lies in it: what keeps a member of a frame
/// without copying it.
pub(crate) fn span(whole: &str, part: &str) -> std::ops::Range<usize> {
    let start = part.as_ptr() as usize - whole.as_ptr() as usize;
    debug_assert!(start + part.len() <= whole.len());
    start..start + part.len()
}

/// Classifies one text frame. `max_batch` bounds the length of a batch: a longer one is
/// rejected whole with one error, before any handler runs.
pub(crate) fn classify(text: &str, max_batch: usize) -> Incoming<'_> {
    // Nearly every frame starts with its bracket: no trimming then.
    let first = match text.as_bytes().first() {
        Some(b' ' | b'\t' | b'\n' | b'\r') => text.trim_start().as_bytes().first(),
        first => first,
    };
    match first {
        Some(b'{') => match read_envelope(text) {
            Ok(env) => Incoming::Single(env.classify()),
            Err(_) => Incoming::Reject(RpcError::parse_error()),
        },
        Some(b'[') => classify_batch(text, max_batch),
        // Any other JSON value is valid JSON but not a request object.
        _ => match serde_json::from_str::<&RawValue>(text) {
            Ok(_) => Incoming::Single(Item::Invalid {
                id: None,
                error: RpcError::invalid_request(),
            }),
            Err(_) => Incoming::Reject(RpcError::parse_error()),
        },
    }
}

fn classify_batch(text: &str, max_batch: usize) -> Incoming<'_> {
    let mut de = serde_json::Deserializer::from_str(text);
    let seed = BatchSeed { max: max_batch };
    let parsed = seed.deserialize(&mut de).and_then(|b| de.end().map(|()| b));
    let (elements, len) = match parsed {
        Ok(batch) => batch,
        Err(_) => return Incoming::Reject(RpcError::parse_error()),
    };
    if len == 0 {
        return Incoming::Reject(RpcError::invalid_request());
    }
    if len > max_batch {
        return Incoming::Reject(
            RpcError::invalid_request()
                .with_data(format!("batch of {len} exceeds the limit of {max_batch}")),
        );
    }
    let items = elements
        .into_iter()
        .map(|raw| {
            if raw.get().starts_with('{') {
                // The element is already known to be valid JSON, so this cannot fail
                // on syntax; treat any failure as an invalid element all the same.
                match read_envelope(raw.get()) {
                    Ok(env) => env.classify(),
                    Err(_) => invalid(None),
                }
            } else {
                invalid(None)
            }
        })
        .collect();
    Incoming::Batch(items)
}

fn invalid(id: Option<Raw<'_>>) -> Item<'_> {
    Item::Invalid {
        id,
        error: RpcError::invalid_request(),
    }
}

/// Collects up to `max` elements of a top-level array as raw values, and counts the rest.
struct BatchSeed {
    max: usize,
}

impl<'de> DeserializeSeed<'de> for BatchSeed {
    type Value = (Vec<&'de RawValue>, usize);

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for BatchSeed {
    type Value = (Vec<&'de RawValue>, usize);

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut elements = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(self.max).min(64));
        let mut len = 0usize;
        while let Some(raw) = seq.next_element::<&'de RawValue>()? {
            if len < self.max {
                elements.push(raw);
            }
            len += 1;
        }
        Ok((elements, len))
    }
}

/// The members of one message object that JSON-RPC gives meaning to, all still raw.
/// `id` and `result` keep `null` as `Some("null")`: a null id is not an absent one.
#[derive(Default)]
struct Envelope<'a> {
    jsonrpc: Option<Raw<'a>>,
    method: Option<Raw<'a>>,
    params: Option<Raw<'a>>,
    id: Option<Raw<'a>>,
    result: Option<Raw<'a>>,
    error: Option<Raw<'a>>,
    /// Not a JSON-RPC member: this crate's way for a caller to ask for progress.
    progress_token: Option<Raw<'a>>,
    /// A member was given twice (only serde's path reads such a message).
    duplicate: bool,
    /// That member was `id`: no id can be read.
    id_twice: bool,
}

/// Reads one message object: the fast path for the usual shape, serde for the rest.
fn read_envelope(text: &str) -> Result<Envelope<'_>, serde_json::Error> {
    match fast::envelope(text) {
        Some(env) => Ok(env),
        None => parse_envelope(text),
    }
}

/// Whether the fast path, when it reads `text` at all, reads it as serde does (for the
/// fuzzer).
#[cfg(feature = "fuzzing")]
pub(crate) fn fast_path_agrees(text: &str) -> bool {
    let Some(fast) = fast::envelope(text) else {
        return true;
    };
    let Ok(slow) = parse_envelope(text) else {
        return false;
    };
    (
        fast.jsonrpc,
        fast.method,
        fast.params,
        fast.id,
        fast.result,
        fast.error,
        fast.progress_token,
        fast.duplicate,
    ) == (
        slow.jsonrpc,
        slow.method,
        slow.params,
        slow.id,
        slow.result,
        slow.error,
        slow.progress_token,
        slow.duplicate,
    )
}

fn parse_envelope(text: &str) -> Result<Envelope<'_>, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(text);
    let env = de.deserialize_map(EnvelopeVisitor)?;
    de.end()?;
    Ok(env)
}

#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "lowercase")]
enum Field {
    Jsonrpc,
    Method,
    Params,
    Id,
    Result,
    Error,
    #[serde(rename = "progressToken")]
    ProgressToken,
    #[serde(other)]
    Other,
}

struct EnvelopeVisitor;

impl<'de> Visitor<'de> for EnvelopeVisitor {
    type Value = Envelope<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON-RPC message object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut env = Envelope::default();
        while let Some(field) = map.next_key::<Field>()? {
            let is_id = matches!(field, Field::Id);
            let slot = match field {
                Field::Jsonrpc => &mut env.jsonrpc,
                Field::Method => &mut env.method,
                Field::Params => &mut env.params,
                Field::Id => &mut env.id,
                Field::Result => &mut env.result,
                Field::Error => &mut env.error,
                Field::ProgressToken => &mut env.progress_token,
                Field::Other => {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
            };
            let value = Raw::from(map.next_value::<&'de RawValue>()?);
            // A member given twice is ambiguous (JSON parsers disagree on which wins),
            // so the message is invalid rather than read one way or the other.
            if slot.replace(value).is_some() {
                env.duplicate = true;
                env.id_twice |= is_id;
            }
        }
        Ok(env)
    }
}

impl<'a> Envelope<'a> {
    fn classify(self) -> Item<'a> {
        let readable_id = self.id.filter(|id| !self.id_twice && is_valid_id(*id));
        if self.duplicate {
            // A response is never answered, even an invalid one: its call fails.
            if self.method.is_none() && (self.result.is_some() || self.error.is_some()) {
                return Item::BadResponse {
                    id: readable_id,
                    reason: "a member is given twice",
                };
            }
            return invalid(readable_id);
        }
        let Some(method) = self.method else {
            if self.result.is_some() || self.error.is_some() {
                return self.classify_response(readable_id);
            }
            return invalid(readable_id);
        };
        if !self.jsonrpc.is_some_and(is_version_2) {
            return invalid(readable_id);
        }
        let Some(method) = as_str(method) else {
            return invalid(readable_id);
        };
        if let Some(params) = self.params {
            if !matches!(params.get().as_bytes()[0], b'[' | b'{') {
                return invalid(readable_id);
            }
        }
        match self.id {
            None => Item::Notification {
                method,
                params: self.params,
            },
            Some(id) if is_valid_id(id) => Item::Request {
                id,
                method,
                params: self.params,
                progress: self.progress_token,
            },
            Some(_) => invalid(None),
        }
    }

    fn classify_response(self, readable_id: Option<Raw<'a>>) -> Item<'a> {
        let bad = |reason| Item::BadResponse {
            id: readable_id,
            reason,
        };
        if !self.jsonrpc.is_some_and(is_version_2) {
            return bad("`jsonrpc` is not \"2.0\"");
        }
        let outcome = match (self.result, self.error) {
            (Some(result), None) => Outcome::Result(result),
            (None, Some(error)) => Outcome::Error(error),
            _ => return bad("a response has exactly one of `result` and `error`"),
        };
        match readable_id {
            Some(id) if id.get() != "null" => Item::Response { id, outcome },
            // The specification's answer to a request whose id could not be read (a
            // parse error, an invalid request, a batch refused whole): valid, and
            // answering nothing of ours by its id (see `Dispatch::refused_whole`).
            Some(id) if matches!(outcome, Outcome::Error(_)) => Item::Response { id, outcome },
            _ => bad("a response without a usable id"),
        }
    }
}

/// Strings, numbers and null are ids; anything else is not.
fn is_valid_id(id: Raw<'_>) -> bool {
    matches!(id.get().as_bytes()[0], b'"' | b'-' | b'0'..=b'9') || id.get() == "null"
}

fn is_version_2(v: Raw<'_>) -> bool {
    // The fast path is the form every peer sends; the slow one handles escapes.
    v.get() == "\"2.0\"" || as_str(v).is_some_and(|s| s == "2.0")
}

/// The string a raw JSON string holds, borrowed when it has no escapes.
fn as_str(raw: Raw<'_>) -> Option<Cow<'_, str>> {
    let text = raw.get();
    if !text.starts_with('"') {
        return None;
    }
    let inner = &text[1..text.len() - 1];
    // A byte loop: method names are short, and `str::contains` costs a search's setup.
    if !inner.bytes().any(|c| c == b'\\') {
        return Some(Cow::Borrowed(inner));
    }
    serde_json::from_str::<String>(text).ok().map(Cow::Owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn single(text: &str) -> Item<'_> {
        match classify(text, 10) {
            Incoming::Single(item) => item,
            other => panic!("expected one item, got {other:?}"),
        }
    }

    #[test]
    fn null_id_is_a_request_not_a_notification() {
        let item = single(r#"{"jsonrpc":"2.0","method":"m","id":null}"#);
        assert!(matches!(item, Item::Request { id, .. } if id.get() == "null"));
        let item = single(r#"{"jsonrpc":"2.0","method":"m"}"#);
        assert!(matches!(item, Item::Notification { .. }));
    }

    #[test]
    fn escaped_members_are_read() {
        let item = single(r#"{"json\u0072pc":"2\u002e0","method":"a\/b","id":1}"#);
        assert!(matches!(item, Item::Request { method, .. } if method == "a/b"));
    }

    #[test]
    fn invalid_objects_keep_a_readable_id() {
        let item = single(r#"{"jsonrpc":"2.0","method":1,"id":"x"}"#);
        assert!(matches!(item, Item::Invalid { id: Some(id), .. } if id.get() == "\"x\""));
        let item = single(r#"{"jsonrpc":"2.0","method":"m","id":{}}"#);
        assert!(matches!(item, Item::Invalid { id: None, .. }));
        let item = single(r#"{"jsonrpc":"2.0","method":"m","params":3,"id":7}"#);
        assert!(matches!(item, Item::Invalid { id: Some(id), .. } if id.get() == "7"));
        let item = single(r#"{"jsonrpc":"1.0","method":"m","id":7}"#);
        assert!(matches!(item, Item::Invalid { id: Some(_), .. }));
        let item = single(r#"{"jsonrpc":"2.0","method":"m","id":1,"id":2}"#);
        assert!(matches!(item, Item::Invalid { id: None, .. }));
    }

    #[test]
    fn responses_are_told_apart() {
        let item = single(r#"{"jsonrpc":"2.0","result":null,"id":3}"#);
        assert!(
            matches!(item, Item::Response { outcome: Outcome::Result(r), .. } if r.get() == "null")
        );
        let item = single(r#"{"jsonrpc":"2.0","result":1,"error":{},"id":3}"#);
        assert!(matches!(item, Item::BadResponse { .. }));
        // An error may have a null id (the request's could not be read); a result not.
        let item = single(r#"{"jsonrpc":"2.0","error":{"code":1,"message":"x"},"id":null}"#);
        assert!(
            matches!(item, Item::Response { id, outcome: Outcome::Error(_) } if id.get() == "null")
        );
        let item = single(r#"{"jsonrpc":"2.0","result":1,"id":null}"#);
        assert!(matches!(item, Item::BadResponse { .. }));
    }

    #[test]
    fn frames_that_are_rejected_whole() {
        assert!(matches!(classify("[]", 10), Incoming::Reject(e) if e.code == -32600));
        assert!(matches!(classify(" [ ] ", 10), Incoming::Reject(e) if e.code == -32600));
        assert!(matches!(classify("[1,", 10), Incoming::Reject(e) if e.code == -32700));
        assert!(matches!(classify("", 10), Incoming::Reject(e) if e.code == -32700));
        assert!(matches!(classify("{} x", 10), Incoming::Reject(e) if e.code == -32700));
        let long = format!("[{}1]", "1,".repeat(10));
        assert!(
            matches!(classify(&long, 10), Incoming::Reject(e) if e.code == -32600 && e.data.is_some())
        );
        assert!(matches!(
            classify("\"x\"", 10),
            Incoming::Single(Item::Invalid { .. })
        ));
    }

    #[test]
    fn deep_nesting_is_not_a_stack_overflow() {
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(matches!(classify(&deep, 10), Incoming::Batch(items) if items.len() == 1));
        let params = format!(
            r#"{{"jsonrpc":"2.0","method":"m","params":{}{},"id":1}}"#,
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        assert!(matches!(single(&params), Item::Request { .. }));
    }

    #[test]
    fn requests_are_written_without_null_params() {
        let s = request("m", &(), Some(7)).unwrap();
        assert_eq!(s, r#"{"jsonrpc":"2.0","method":"m","id":7}"#);
        let s = request("m", &[1, 2], None).unwrap();
        assert_eq!(s, r#"{"jsonrpc":"2.0","method":"m","params":[1,2]}"#);
        assert!(matches!(
            request("m", &5, Some(1)),
            Err(crate::Error::InvalidParams(_))
        ));
    }

    #[test]
    fn responses_echo_the_raw_id() {
        let s = response(r#""abc""#, &19).unwrap();
        assert_eq!(s, r#"{"jsonrpc":"2.0","result":19,"id":"abc"}"#);
        let s = error_response(None, &RpcError::method_not_found());
        assert_eq!(
            s,
            r#"{"jsonrpc":"2.0","error":{"code":-32601,"message":"Method not found"},"id":null}"#
        );
    }
}

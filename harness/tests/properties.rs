//! Property tests of the wire rules (`jsonrpc_peer::fuzzing::answer`, the same
//! classification a connection uses): any input gets a specification-valid answer or
//! none, never a panic; a batch's answers match its requests one to one.

use std::collections::HashMap;

use jsonrpc_peer::fuzzing::{answer, fast_path_agrees};
use proptest::prelude::*;
use serde_json::{json, Value};

/// Checks one response object: `jsonrpc` is "2.0", exactly one of `result` and
/// `error`, an `id`, and a well-formed error. Returns its id.
fn check_response(r: &Value) -> Value {
    let obj = r
        .as_object()
        .unwrap_or_else(|| panic!("a response is an object: {r}"));
    assert_eq!(obj.get("jsonrpc"), Some(&json!("2.0")), "{r}");
    assert!(
        obj.contains_key("result") ^ obj.contains_key("error"),
        "exactly one of result/error: {r}"
    );
    if let Some(error) = obj.get("error") {
        assert!(error["code"].is_i64(), "{r}");
        assert!(error["message"].is_string(), "{r}");
    }
    let id = obj
        .get("id")
        .unwrap_or_else(|| panic!("a response has an id: {r}"))
        .clone();
    assert!(id.is_string() || id.is_number() || id.is_null(), "{r}");
    assert_eq!(obj.len(), 3, "no other members: {r}");
    id
}

/// Checks everything a peer sent back for `input`; returns the answers, flattened.
fn check_answers(input: &[u8], frames: &[String]) -> Vec<Value> {
    assert!(frames.len() <= 1, "one frame in, at most one out");
    let Some(frame) = frames.first() else {
        return Vec::new();
    };
    serde_json::from_str::<&serde_json::value::RawValue>(frame)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {frame}"));
    let Ok(value) = serde_json::from_str::<Value>(frame) else {
        // JSON allows a lone surrogate escape ("\ud800"); serde_json's Value does not.
        // An echoed id or params may carry one from the input, and only then.
        let input = std::str::from_utf8(input).expect("answered frames are text");
        assert!(serde_json::from_str::<Value>(input).is_err(), "{frame}");
        return Vec::new();
    };
    match value {
        Value::Array(items) => {
            assert!(!items.is_empty(), "never an empty array");
            items.iter().for_each(|r| {
                check_response(r);
            });
            items
        }
        other => {
            check_response(&other);
            vec![other]
        }
    }
}

/// Any JSON value, nested a few levels.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        ".{0,12}".prop_map(Value::String),
        prop_oneof![
            Just("2.0"),
            Just("jsonrpc"),
            Just("method"),
            Just("id"),
            Just("echo")
        ]
        .prop_map(|s| Value::String(s.to_owned())),
    ];
    leaf.prop_recursive(4, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    Just("jsonrpc".to_owned()),
                    Just("method".to_owned()),
                    Just("params".to_owned()),
                    Just("id".to_owned()),
                    Just("result".to_owned()),
                    Just("error".to_owned()),
                    "[a-z]{1,6}",
                ],
                inner,
                0..6
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// One batch element, and what it must produce: `Some(id)` answered with that id,
/// `None` never answered, `Some(null)` an Invalid Request.
fn element() -> impl Strategy<Value = (Value, Option<Value>)> {
    prop_oneof![
        // A call to a method that exists, or not: answered with its id.
        (
            prop_oneof![Just("echo"), Just("fail"), Just("nope")],
            any::<u32>()
        )
            .prop_map(|(m, n)| {
                (
                    json!({"jsonrpc": "2.0", "method": m, "params": [n], "id": n}),
                    Some(json!(n)),
                )
            }),
        // A notification: never answered.
        "[a-z]{1,8}".prop_map(|m| (json!({"jsonrpc": "2.0", "method": m, "params": {}}), None)),
        // Not a request: an Invalid Request with a null id.
        any_json()
            .prop_filter("not an object", |v| !v.is_object())
            .prop_map(|v| (v, Some(Value::Null))),
        // A response: routed, never answered.
        any::<u32>().prop_map(|n| (json!({"jsonrpc": "2.0", "result": n, "id": n}), None)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn a_lone_surrogate_is_echoed_as_received(n in 0xd800u32..0xdc00) {
        // Found by the fuzzer: valid JSON by the grammar, which serde_json's Value
        // refuses. The peer must neither choke on it nor alter it.
        let frame = format!(r#"{{"jsonrpc":"2.0","method":"echo","params":["\u{n:04x}"],"id":1}}"#);
        let frames = answer(frame.as_bytes());
        prop_assert_eq!(frames.len(), 1);
        let expected = format!(r#"{{"jsonrpc":"2.0","result":["\u{n:04x}"],"id":1}}"#);
        prop_assert_eq!(&frames[0], &expected);
    }

    #[test]
    fn any_bytes_get_a_valid_answer_or_none(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        check_answers(&bytes, &answer(&bytes));
    }

    #[test]
    fn any_text_gets_a_valid_answer_or_none(text in "\\PC{0,200}") {
        check_answers(text.as_bytes(), &answer(text.as_bytes()));
    }

    #[test]
    fn any_json_value_gets_a_valid_answer_or_none(value in any_json()) {
        let frame = value.to_string();
        let answers = check_answers(frame.as_bytes(), &answer(frame.as_bytes()));
        // A lone object with an id that is a valid request id is answered with that id.
        if let Some(id) = value.get("id").filter(|id| id.is_string() || id.is_number()) {
            if value.get("method").is_some_and(Value::is_string) && value.get("jsonrpc") == Some(&json!("2.0")) {
                prop_assert_eq!(answers.len(), 1);
                prop_assert_eq!(&answers[0]["id"], id);
            }
        }
    }

    #[test]
    fn a_batch_is_answered_one_to_one(elements in prop::collection::vec(element(), 1..40)) {
        // Ids must be unique for a one-to-one check; later duplicates become notifications.
        let mut seen = std::collections::HashSet::new();
        let elements: Vec<(Value, Option<Value>)> = elements
            .into_iter()
            .map(|(v, expect)| match &expect {
                Some(id) if !id.is_null() && !seen.insert(id.to_string()) => {
                    (json!({"jsonrpc": "2.0", "method": "echo"}), None)
                }
                _ => (v, expect),
            })
            .collect();
        let frame = Value::Array(elements.iter().map(|(v, _)| v.clone()).collect()).to_string();
        let answers = check_answers(frame.as_bytes(), &answer(frame.as_bytes()));

        let mut expected: HashMap<String, usize> = HashMap::new();
        for id in elements.iter().filter_map(|(_, e)| e.as_ref()) {
            *expected.entry(id.to_string()).or_default() += 1;
        }
        let mut got: HashMap<String, usize> = HashMap::new();
        for a in &answers {
            *got.entry(a["id"].to_string()).or_default() += 1;
        }
        prop_assert_eq!(got, expected, "answers by id for {}", frame);
        // Calls to `echo` get their params back.
        for a in answers.iter().filter(|a| a.get("result").is_some()) {
            prop_assert_eq!(&a["result"], &json!([a["id"].clone()]));
        }
    }
}

// The fast path for message objects (a scanner that skips serde for the usual shape)
// reads every text it accepts exactly as the serde path does.
proptest! {
    #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

    #[test]
    fn fast_and_slow_paths_agree_on_generated_messages(
        members in prop::collection::vec(
            (
                prop_oneof![Just("jsonrpc"), Just("method"), Just("params"), Just("id"),
                            Just("result"), Just("error"), Just("x"), Just("j\\u0073on")],
                prop_oneof![
                    Just("\"2.0\"".to_owned()), Just("null".to_owned()), Just("true".to_owned()),
                    Just("[1,{\"a\":[]}]".to_owned()), Just("{}".to_owned()), Just("\"m\\n\"".to_owned()),
                    any::<i64>().prop_map(|n| n.to_string()),
                    any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(|f| f.to_string()),
                    "[a-z]{0,6}".prop_map(|s| format!("\"{s}\"")),
                    "[ -~]{0,8}",
                ],
                prop_oneof![Just(""), Just(" "), Just("\n\t")],
            ),
            0..7,
        )
    ) {
        let body: Vec<String> = members
            .iter()
            .map(|(k, v, space)| format!("{space}\"{k}\"{space}:{space}{v}{space}"))
            .collect();
        let text = format!("{{{}}}", body.join(","));
        prop_assert!(fast_path_agrees(text.as_bytes()), "fast and slow paths differ on {text}");
    }

    #[test]
    fn fast_and_slow_paths_agree_on_any_text(text in "\\PC{0,80}") {
        prop_assert!(fast_path_agrees(text.as_bytes()), "fast and slow paths differ on {text}");
        let object = format!("{{\"jsonrpc\":\"2.0\",{text}");
        prop_assert!(fast_path_agrees(object.as_bytes()), "fast and slow paths differ on {object}");
    }
}

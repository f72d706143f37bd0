//! One incoming frame, any bytes: the peer must answer with nothing or with valid
//! JSON-RPC responses, and never panic. Run with
//! `cargo fuzz run -s none frame /tmp/corpus fuzz/seeds/frame -- -max_total_time=60`
//! (stable Rust, no sanitizer).
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::value::RawValue;
use serde_json::Value;

fuzz_target!(|frame: &[u8]| {
    assert!(jsonrpc_peer::fuzzing::fast_path_agrees(frame), "fast and slow paths differ");
    for out in jsonrpc_peer::fuzzing::answer(frame) {
        // Always JSON by the grammar.
        serde_json::from_str::<&RawValue>(&out).expect("answers are JSON");
        let Ok(value) = serde_json::from_str::<Value>(&out) else {
            // JSON allows a lone surrogate escape ("\ud800"); serde_json's Value does
            // not. An echoed id or params may carry one from the frame, and only then.
            let input = std::str::from_utf8(frame).expect("answered frames are text");
            assert!(serde_json::from_str::<Value>(input).is_err(), "{out}");
            continue;
        };
        let responses = match value {
            Value::Array(items) => {
                assert!(!items.is_empty(), "never an empty array");
                items
            }
            other => vec![other],
        };
        for r in responses {
            assert_eq!(r["jsonrpc"], "2.0");
            assert!(r.get("result").is_some() != r.get("error").is_some());
            assert!(r.get("id").is_some());
        }
    }
});

//! Every example of the JSON-RPC 2.0 specification, sent as raw text frames over a real
//! WebSocket, gets exactly the answer the specification shows.
//!
//! The examples live once, in `tests/fixtures/spec-examples.json` (also read by the
//! Python interop client and the JS peer's conformance tests); each test here runs the
//! fixture case of its own name.

mod common;

use common::{as_set, serve, RawClient};
use serde::Deserialize;
use serde_json::Value;

/// The fixture's text, built into the test binary.
const FIXTURE: &str = include_str!("fixtures/spec-examples.json");

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Fixture {
    #[allow(dead_code)]
    about: String,
    cases: Vec<Case>,
}

/// One code block of seed-examples.md.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    name: String,
    section: String,
    exchanges: Vec<Exchange>,
}

/// One frame sent, and what must come back.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Exchange {
    send: String,
    expect: Expect,
    answer: Option<Value>,
}

#[derive(Deserialize, PartialEq, Debug)]
#[serde(rename_all = "lowercase")]
enum Expect {
    /// The next answer equals `answer` as a JSON value.
    Exact,
    /// The next answer is a batch equal to `answer` as a multiset: any order.
    Set,
    /// Nothing is answered.
    None,
}

fn fixture() -> Fixture {
    serde_json::from_str(FIXTURE).expect("tests/fixtures/spec-examples.json is valid")
}

/// Runs the fixture case `name` against a server with the specification's methods, on
/// one connection.
async fn run(name: &str) {
    let case = fixture()
        .cases
        .into_iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no case {name:?} in tests/fixtures/spec-examples.json"));
    let (url, _server) = serve(common::spec_methods::spec_router()).await;
    let mut c = RawClient::connect(&url).await;
    for (i, ex) in case.exchanges.iter().enumerate() {
        let what = format!("{name} ({}), frame {}: {}", case.section, i + 1, ex.send);
        match ex.expect {
            Expect::Exact => {
                let expected = ex.answer.as_ref().expect("an exact case has an answer");
                let a = c.ask(&ex.send).await;
                assert_eq!(&a, expected, "{what}");
            }
            Expect::Set => {
                let expected = ex.answer.as_ref().expect("a set case has an answer");
                let a = c.ask(&ex.send).await;
                assert_eq!(as_set(&a), as_set(expected), "{what}");
            }
            Expect::None => {
                assert!(ex.answer.is_none(), "{what}: a none case has no answer");
                c.send(&ex.send).await;
                c.assert_nothing_before_marker().await;
            }
        }
    }
}

/// One `#[tokio::test]` per fixture case, named as the case, and the list of the names.
macro_rules! spec_examples {
    ($($name:ident),* $(,)?) => {
        /// The cases there is a test for, in the fixture's order (seed-examples.md's).
        const TESTED: &[&str] = &[$(stringify!($name)),*];
        $(
            #[tokio::test]
            async fn $name() {
                run(stringify!($name)).await;
            }
        )*
    };
}

spec_examples!(
    named_parameters,
    non_existent_method,
    positional_parameters,
    empty_batch,
    batch_of_notifications_gets_nothing,
    batch_of_calls_valid_and_invalid,
    notifications_get_no_answer,
    invalid_json,
    invalid_request_object,
    invalid_batch_of_one,
    invalid_batch_of_three,
    batch_invalid_json,
);

/// The fixture holds every example of seed-examples.md, and nothing else: its 11 example
/// sections (the 12th, "JSON-RPC Syntax Legend", has none), in 12 code blocks, sending 15
/// frames; and every case has a test above.
#[test]
fn fixture_holds_every_example() {
    let cases = fixture().cases;
    let names: Vec<&str> = cases.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, TESTED, "every case has a test, every test a case");
    let sections: Vec<&str> = cases.iter().map(|c| c.section.as_str()).collect();
    assert_eq!(
        sections,
        [
            "Named Parameters RPC Call",
            "Non-existent Method Error",
            "Positional Parameters RPC Call",
            "Empty Batch Request",
            "Batch Notification Request",
            "Batch Request Processing",
            "Notification RPC Call",
            "Invalid JSON Error",
            "Invalid Request Object Error",
            "Invalid Batch Request",
            "Invalid Batch Request",
            "Batch Request Invalid JSON",
        ]
    );
    let frames: Vec<usize> = cases.iter().map(|c| c.exchanges.len()).collect();
    assert_eq!(frames, [2, 1, 2, 1, 1, 1, 2, 1, 1, 1, 1, 1]);
    for case in &cases {
        for ex in &case.exchanges {
            match ex.expect {
                Expect::None => assert!(ex.answer.is_none(), "{}", case.name),
                // The specification lets any batch answer come in any order.
                Expect::Set => assert!(ex.answer.as_ref().is_some_and(Value::is_array)),
                Expect::Exact => assert!(ex.answer.as_ref().is_some_and(Value::is_object)),
            }
        }
    }
}

/// The fixture against the specification's examples as the project keeps them
/// (`tests/fixtures/seed-examples.md`, a copy of the shared `seed-examples.md`): the same
/// code blocks under the same headings, each frame byte for byte, each answer as a JSON
/// value.
#[test]
fn fixture_matches_seed_examples_md() {
    let md = include_str!("fixtures/seed-examples.md");
    let from_md = parse_seed_examples(md);
    let from_fixture: Blocks = fixture()
        .cases
        .into_iter()
        .map(|c| {
            let exchanges = c.exchanges.into_iter().map(|e| (e.send, e.answer));
            (c.section, exchanges.collect())
        })
        .collect();
    assert_eq!(from_fixture.len(), from_md.len(), "code blocks");
    for (i, (fixture, md)) in from_fixture.iter().zip(&from_md).enumerate() {
        assert_eq!(fixture, md, "code block {} of seed-examples.md", i + 1);
    }
}

/// Code blocks, each as its heading and its frames, each frame with its answer if any.
type Blocks = Vec<(String, Vec<(String, Option<Value>)>)>;

/// The ```json code blocks of seed-examples.md, each with the heading above it: every
/// `--> ` frame (its lines up to the next `--> ` or `<-- ` or a blank line), with the
/// `<-- ` answer after it parsed, or `None` when there is no answer or it is a `//`
/// comment.
fn parse_seed_examples(md: &str) -> Blocks {
    enum Part {
        Send,
        Answer,
    }
    let mut blocks = Vec::new();
    let mut section = String::new();
    let mut block: Option<Vec<(Part, Vec<&str>)>> = None;
    let mut in_text_block = false;
    let mut open = false;
    for line in md.lines() {
        if let Some(heading) = line.strip_prefix("### ") {
            section = heading.trim().to_owned();
        } else if let Some(lang) = line.strip_prefix("```") {
            if in_text_block {
                in_text_block = false;
            } else if let Some(parts) = block.take() {
                let mut exchanges: Vec<(String, Option<Value>)> = Vec::new();
                for (part, lines) in parts {
                    let text = lines.join("\n");
                    match part {
                        Part::Send => exchanges.push((text, None)),
                        Part::Answer if text.starts_with("//") => {}
                        Part::Answer => {
                            let last = exchanges.last_mut().expect("an answer follows a frame");
                            last.1 = Some(serde_json::from_str(&text).expect("answer is JSON"));
                        }
                    }
                }
                blocks.push((section.clone(), exchanges));
            } else if lang == "json" {
                block = Some(Vec::new());
            } else {
                in_text_block = true;
            }
            open = false;
        } else if let Some(parts) = block.as_mut() {
            if let Some(rest) = line.strip_prefix("--> ") {
                parts.push((Part::Send, vec![rest]));
                open = true;
            } else if let Some(rest) = line.strip_prefix("<-- ") {
                parts.push((Part::Answer, vec![rest]));
                open = true;
            } else if line.trim().is_empty() {
                open = false;
            } else {
                assert!(open, "a line outside any frame: {line:?}");
                parts.last_mut().expect("open part").1.push(line);
            }
        }
    }
    blocks
}

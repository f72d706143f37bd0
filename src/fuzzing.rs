//! (feature `fuzzing`, not a stable API) The wire rules as one pure function, for the
//! fuzzer and the property tests: one incoming frame in, the frames a peer sends back
//! out. It classifies exactly as a connection does and answers with a fixed method
//! table (`echo` returns its params, `fail` answers an error, anything else is not
//! found), so every rule of the specification is exercised without sockets or tasks.

pub use crate::echo::serve_echo;
use crate::error::RpcError;
use crate::message::{self, Incoming, Item};

/// The longest batch the fuzzing peer accepts (the default limit).
pub const MAX_BATCH: usize = 1000;

/// Whether the fast path for message objects reads `frame` exactly as the serde path
/// does, whenever it reads it at all.
pub fn fast_path_agrees(frame: &[u8]) -> bool {
    std::str::from_utf8(frame).map_or(true, message::fast_path_agrees)
}

/// The frames a peer answers `frame` with: none, or one (an object or an array).
/// Bytes that are not UTF-8 never reach the peer (the WebSocket layer refuses them), so
/// they are answered with nothing.
pub fn answer(frame: &[u8]) -> Vec<String> {
    let Ok(text) = std::str::from_utf8(frame) else {
        return Vec::new();
    };
    match message::classify(text, MAX_BATCH) {
        Incoming::Reject(error) => vec![message::error_response(None, &error)],
        Incoming::Single(item) => answer_item(item).into_iter().collect(),
        Incoming::Batch(items) => {
            let answers: Vec<String> = items.into_iter().filter_map(answer_item).collect();
            if answers.is_empty() {
                Vec::new()
            } else {
                vec![format!("[{}]", answers.join(","))]
            }
        }
    }
}

fn answer_item(item: Item<'_>) -> Option<String> {
    match item {
        Item::Request {
            id, method, params, ..
        } => Some(match &*method {
            // The params as received, unparsed, as a handler's raw result would be.
            "echo" => format!(
                r#"{{"jsonrpc":"2.0","result":{},"id":{}}}"#,
                params.map_or("null", |p| p.get()),
                id.get()
            ),
            "fail" => {
                message::error_response(Some(id.get()), &RpcError::new(7, "failed on purpose"))
            }
            _ => message::error_response(Some(id.get()), &RpcError::method_not_found()),
        }),
        Item::Invalid { id, error } => Some(message::error_response(id.map(|id| id.get()), &error)),
        Item::Notification { .. } | Item::Response { .. } | Item::BadResponse { .. } => None,
    }
}

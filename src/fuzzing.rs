//! (feature `fuzzing`, not a stable API) The wire rules as one pure function, for the
//! fuzzer and the property tests: one incoming frame in, the frames a peer sends back
//! out. It classifies exactly as a connection does and answers with a fixed method
//! table (`echo` returns its params, `fail` answers an error, anything else is not
//! found), so every rule of the specification is exercised without sockets or tasks.

use crate::error::RpcError;
use crate::message::{self, Incoming, Item};

/// The longest batch the fuzzing peer accepts (the default limit).
pub const MAX_BATCH: usize = 1000;

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
        Item::Request { id, method, params } => Some(match &*method {
            "echo" => match params {
                Some(params) => message::response(id.get(), params).unwrap_or_else(|e| {
                    message::error_response(Some(id.get()), &RpcError::invalid_params(e))
                }),
                None => message::response(id.get(), &()).unwrap_or_default(),
            },
            "fail" => {
                message::error_response(Some(id.get()), &RpcError::new(7, "failed on purpose"))
            }
            _ => message::error_response(Some(id.get()), &RpcError::method_not_found()),
        }),
        Item::Invalid { id, error } => Some(message::error_response(id.map(|id| id.get()), &error)),
        Item::Notification { .. } | Item::Response { .. } | Item::BadResponse { .. } => None,
    }
}

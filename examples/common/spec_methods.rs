//! The methods the JSON-RPC 2.0 specification's examples call, shared by the
//! `spec_server` example and the conformance tests.

use jsonrpc_peer::{Context, ErrorCode, Router, RpcError};
use serde::Deserialize;

/// `subtract`'s params: named (`{"minuend": 42, "subtrahend": 23}`) or positional
/// (`[42, 23]`, in field order); serde's derive reads both.
#[derive(Deserialize)]
pub struct Subtract {
    pub minuend: i64,
    pub subtrahend: i64,
}

fn overflow() -> RpcError {
    RpcError::new(ErrorCode::INVALID_PARAMS, "Invalid params").with_data("integer overflow")
}

/// A router serving `subtract`, `sum` and `get_data`, and accepting the notifications
/// `update`, `notify_hello` and `notify_sum`.
pub fn spec_router() -> Router {
    Router::new()
        .method("subtract", |_cx: Context, p: Subtract| async move {
            p.minuend.checked_sub(p.subtrahend).ok_or_else(overflow)
        })
        .method("sum", |_cx: Context, terms: Vec<i64>| async move {
            terms
                .into_iter()
                .try_fold(0i64, i64::checked_add)
                .ok_or_else(overflow)
        })
        .method("get_data", |_cx: Context, (): ()| async {
            Ok::<_, RpcError>(("hello", 5))
        })
        .notification(
            "update",
            |_cx: Context, _values: Vec<serde_json::Value>| async {},
        )
        .notification(
            "notify_hello",
            |_cx: Context, _values: Vec<serde_json::Value>| async {},
        )
        .notification(
            "notify_sum",
            |_cx: Context, _values: Vec<serde_json::Value>| async {},
        )
}

//! The methods the JSON-RPC 2.0 specification's examples call, shared by the
//! `spec_server` and `web_demo` examples and the conformance tests.

use jsonrpc_peer::{Context, Router, RpcError};
use serde::Deserialize;

/// `subtract`'s params: named (`{"minuend": 42, "subtrahend": 23}`) or positional
/// (`[42, 23]`, in field order); serde's derive reads both.
#[derive(Deserialize)]
pub struct Subtract {
    pub minuend: i64,
    pub subtrahend: i64,
}

fn overflow() -> RpcError {
    RpcError::invalid_params("integer overflow")
}

/// A router serving `subtract`, `sum` and `get_data`, and accepting the notifications
/// `update`, `notify_hello` and `notify_sum`.
#[allow(dead_code)]
pub fn spec_router() -> Router {
    with_spec_methods(Router::new())
}

/// Adds the specification's methods and notifications to `router`.
pub fn with_spec_methods<S: Send + Sync + 'static>(router: Router<S>) -> Router<S> {
    router
        .method("subtract", |_cx: Context<S>, p: Subtract| async move {
            p.minuend.checked_sub(p.subtrahend).ok_or_else(overflow)
        })
        .method("sum", |_cx: Context<S>, terms: Vec<i64>| async move {
            terms
                .into_iter()
                .try_fold(0i64, i64::checked_add)
                .ok_or_else(overflow)
        })
        .method("get_data", |_cx: Context<S>, (): ()| async {
            Ok::<_, RpcError>(("hello", 5))
        })
        .notification(
            "update",
            |_cx: Context<S>, _values: Vec<serde_json::Value>| async {},
        )
        .notification(
            "notify_hello",
            |_cx: Context<S>, _values: Vec<serde_json::Value>| async {},
        )
        .notification(
            "notify_sum",
            |_cx: Context<S>, _values: Vec<serde_json::Value>| async {},
        )
}

//! The methods the JSON-RPC 2.0 specification's examples call, shared by the
//! `spec_server` and `web_demo` examples and the conformance tests.

use jsonrpc_peer::schemars::JsonSchema;
use jsonrpc_peer::{Api, Router, RpcError};
use serde::{Deserialize, Serialize};

/// `subtract`'s params: named (`{"minuend": 42, "subtrahend": 23}`) or positional
/// (`[42, 23]`, in field order); serde's derive reads both.
#[derive(Serialize, Deserialize, JsonSchema)]
pub struct SubtractParams {
    /// The number to subtract from.
    pub minuend: i64,
    /// The number subtracted.
    pub subtrahend: i64,
}

jsonrpc_peer::method!(
    /// The minuend less the subtrahend.
    pub Subtract = "subtract", SubtractParams => i64
);
jsonrpc_peer::method!(
    /// The sum of the numbers given as positional params.
    pub Sum = "sum", Vec<i64> => i64
);
jsonrpc_peer::method!(
    /// `["hello", 5]`.
    pub GetData = "get_data", () => (String, u32)
);
jsonrpc_peer::notification!(pub Update = "update", Vec<serde_json::Value>);
jsonrpc_peer::notification!(pub NotifyHello = "notify_hello", Vec<serde_json::Value>);
jsonrpc_peer::notification!(pub NotifySum = "notify_sum", Vec<serde_json::Value>);

/// The description of what [`with_spec_methods`] serves, for `rpc.discover`.
#[allow(dead_code)]
pub fn spec_api(name: &str) -> Api {
    with_spec_api(Api::new(name, env!("CARGO_PKG_VERSION")))
}

/// Adds the specification's methods and notifications to a description.
pub fn with_spec_api(api: Api) -> Api {
    api.serves(Subtract)
        .serves(Sum)
        .serves(GetData)
        .receives(Update)
        .receives(NotifyHello)
        .receives(NotifySum)
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
        .handle(Subtract, |_cx, p| async move {
            p.minuend.checked_sub(p.subtrahend).ok_or_else(overflow)
        })
        .handle(Sum, |_cx, terms| async move {
            terms
                .into_iter()
                .try_fold(0i64, i64::checked_add)
                .ok_or_else(overflow)
        })
        .handle(GetData, |_cx, ()| async { Ok(("hello".to_string(), 5)) })
        .on(Update, |_cx, _values| async {})
        .on(NotifyHello, |_cx, _values| async {})
        .on(NotifySum, |_cx, _values| async {})
}

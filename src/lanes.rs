//! How a method runs: its options at registration, above all its lane.
//!
//! Lanes, after rust-analyzer's per-method dispatch and async-lsp's "requests
//! concurrently, notifications in order":
//! - **concurrent** (the default for methods): every call starts at once;
//! - **ordered**: the connection's one FIFO, the one notifications run in, so a
//!   "change" notification and a "query" call that follows it keep their order;
//! - **keyed**: a FIFO per key computed from the params, keys running concurrently
//!   (edits to one document in order, different documents at once). A key's queue
//!   exists only while it holds calls.
//!
//! Answers to our own calls and cancels never wait in a lane: the connection handles
//! them as they are read.

use std::future::Future;
use std::hash::{BuildHasher, Hash};
use std::ops::Range;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::RpcError;
use crate::router::{Context, Router};

/// How a method's calls run, given at registration with [`Router::method_with`].
///
/// The default is what [`Router::method`] does: calls run concurrently, and a call
/// its caller cancels is stopped (its future dropped) and answered with `-32800`.
///
/// ```
/// use jsonrpc_peer::{Context, MethodOptions, Router, RpcError};
/// use serde::Deserialize;
///
/// #[derive(Deserialize)]
/// struct Edit {
///     doc: String,
///     text: String,
/// }
///
/// let router = Router::new()
///     // Edits of one document run one after another, in the order they came;
///     // edits of different documents run at once.
///     .method_with(
///         "edit",
///         MethodOptions::new().keyed(|e: &Edit| e.doc.clone()),
///         |_cx: Context, e: Edit| async move { Ok::<_, RpcError>(e.text.len()) },
///     )
///     // Runs after every notification and ordered call that came before it.
///     .method_with("query", MethodOptions::new().ordered(), |_cx: Context, (): ()| async {
///         Ok::<_, RpcError>("state")
///     });
/// assert!(router.has_method("edit"));
/// ```
pub struct MethodOptions<P> {
    cooperative: bool,
    lane: Lane,
    _params: std::marker::PhantomData<fn(&P)>,
}

impl<P> std::fmt::Debug for MethodOptions<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MethodOptions")
            .field("cooperative", &self.cooperative)
            .field(
                "lane",
                &match self.lane {
                    Lane::Concurrent => "concurrent",
                    Lane::Ordered => "ordered",
                    Lane::Keyed(_) => "keyed",
                },
            )
            .finish()
    }
}

impl<P> Default for MethodOptions<P> {
    fn default() -> Self {
        MethodOptions {
            cooperative: false,
            lane: Lane::Concurrent,
            _params: std::marker::PhantomData,
        }
    }
}

impl<P> MethodOptions<P> {
    /// The defaults: concurrent, stopped when cancelled.
    pub fn new() -> Self {
        Self::default()
    }

    /// The handler is told of a cancel instead of being stopped: it sees it through
    /// [`Context::cancelled`] and [`Context::is_cancelled`], and what it returns
    /// (a partial result, say) is the call's answer.
    pub fn cooperative(mut self) -> Self {
        self.cooperative = true;
        self
    }

    /// Calls run in the connection's ordered lane: one at a time, after every
    /// notification and ordered call that arrived before them, and before those that
    /// arrive after. They count toward
    /// [`PeerConfig::notification_queue`](crate::PeerConfig::notification_queue).
    ///
    /// An ordered handler may call the other side: the answer is routed as it is
    /// read, not through the lane. What arrives meanwhile waits behind it, and past the
    /// queue's bound the connection stops reading (answers included) until it moves.
    pub fn ordered(mut self) -> Self {
        self.lane = Lane::Ordered;
        self
    }

    /// Calls with the same key (computed from their params) run one at a time in the
    /// order they arrived; calls with different keys run at once. Each waiting call
    /// counts toward [`PeerConfig::max_in_flight`](crate::PeerConfig::max_in_flight).
    /// Params that do not fit `P` have no key: the call runs at once and is answered
    /// `-32602`.
    ///
    /// Keys are told apart by a 64-bit hash (randomly seeded): two keys that share one
    /// run in one queue, still in order, only not at once.
    pub fn keyed<K: Hash>(mut self, key: impl Fn(&P) -> K + Send + Sync + 'static) -> Self
    where
        P: DeserializeOwned,
    {
        let seed = std::collections::hash_map::RandomState::new();
        // The params are read once more for the key: only keyed methods pay for it.
        self.lane = Lane::Keyed(Arc::new(move |frame: &str, params| {
            crate::router::decode_params::<P>(frame, params)
                .ok()
                .map(|p| seed.hash_one(key(&p)))
        }));
        self
    }
}

/// A keyed lane's key function: the key of a call's params, if they fit.
pub(crate) type KeyFn = dyn Fn(&str, Option<Range<usize>>) -> Option<u64> + Send + Sync;

/// Which lane a method's calls run in.
#[derive(Clone, Default)]
pub(crate) enum Lane {
    #[default]
    Concurrent,
    Ordered,
    Keyed(Arc<KeyFn>),
}

impl<S: Send + Sync + 'static> Router<S> {
    /// Adds a method that runs as `options` say; otherwise as [`Router::method`].
    ///
    /// # Panics
    ///
    /// As for [`Router::method`].
    pub fn method_with<P, T, F, Fut>(
        self,
        name: &str,
        options: MethodOptions<P>,
        handler: F,
    ) -> Self
    where
        F: Fn(Context<S>, P) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, RpcError>> + Send + 'static,
        P: DeserializeOwned + Send + 'static,
        T: Serialize + Send + 'static,
    {
        self.method(name, handler)
            .run_as(name, options.lane, options.cooperative)
    }
}

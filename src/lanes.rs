//! How a method runs: its options at registration.

use std::future::Future;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::RpcError;
use crate::router::{Context, Router};

/// How a method's calls run, given at registration with [`Router::method_with`].
///
/// The default is what [`Router::method`] does: calls run concurrently, and a call
/// its caller cancels is stopped (its future dropped) and answered with `-32800`.
pub struct MethodOptions<P> {
    cooperative: bool,
    _params: std::marker::PhantomData<fn(&P)>,
}

impl<P> Default for MethodOptions<P> {
    fn default() -> Self {
        MethodOptions {
            cooperative: false,
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
}

/// A registration's options, with the params type erased.
#[derive(Default)]
pub(crate) struct Registration {
    pub(crate) cooperative: bool,
}

impl<S: Send + Sync + 'static> Router<S> {
    /// Adds a method that runs as `options` say; otherwise as [`Router::method`].
    ///
    /// # Panics
    ///
    /// As for [`Router::method`].
    pub fn method_with<P, T, F, Fut>(
        mut self,
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
        self = self.method(name, handler);
        self.options.insert(
            name.into(),
            Registration {
                cooperative: options.cooperative,
            },
        );
        self
    }
}

//! The method table: method name to async handler, typed params in, typed result out.
//! Knows nothing of sockets.

use std::future::Future;
use std::ops::Range;
use std::pin::Pin;
use std::sync::Arc;

use rustc_hash::FxHashMap;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::value::RawValue;

use crate::error::RpcError;
use crate::lanes::Lane;
use crate::message;
use crate::peer::Peer;
use crate::transport::Text;

/// A handler's future, boxed: what the erased handlers return, and what the connection
/// polls once and then moves to a task of its own.
pub(crate) type HandlerFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// What a handler gets besides its params: the peer that called it and the shared state.
///
/// A handler may call the other side through [`Context::peer`] while it runs: a
/// handler that waits is never waited for by the task that reads the connection, so
/// this cannot deadlock.
pub struct Context<S = ()> {
    scope: Arc<Scope<S>>,
    /// Set for a cooperative handler's call: its caller's cancel sets it.
    pub(crate) cancel: Option<Arc<crate::cancel::CancelToken>>,
    /// The caller's progress token, when it asked for progress.
    pub(crate) progress: Option<Arc<crate::progress::Token>>,
}

/// What every handler's context on one connection shares: the connection and its
/// router (with the state), made once when the connection starts. A context then costs
/// one reference count, not one for the peer and one for the state: each is an atomic
/// read-modify-write when it is made and another when it is dropped, some 5 ns apiece,
/// for every call served and every notification handled (PERF-NOTES.md).
pub(crate) struct Scope<S> {
    pub(crate) peer: Peer,
    pub(crate) router: Arc<Router<S>>,
}

impl<S> Scope<S> {
    pub(crate) fn new(peer: Peer, router: Arc<Router<S>>) -> Arc<Self> {
        Arc::new(Scope { peer, router })
    }
}

impl<S> std::fmt::Debug for Context<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("peer", self.peer())
            .field("cancellable", &self.cancel.is_some())
            .field("wants_progress", &self.progress.is_some())
            .finish_non_exhaustive()
    }
}

impl<S> Context<S> {
    /// A handler's context on the connection of `scope`.
    pub(crate) fn new(scope: &Arc<Scope<S>>) -> Self {
        Context {
            scope: scope.clone(),
            cancel: None,
            progress: None,
        }
    }

    /// The connection the call or notification came from.
    pub fn peer(&self) -> &Peer {
        &self.scope.peer
    }

    /// The state given to [`Router::with_state`].
    pub fn state(&self) -> &S {
        &self.scope.router.state
    }
}

impl<S> Clone for Context<S> {
    fn clone(&self) -> Self {
        Context {
            scope: self.scope.clone(),
            cancel: self.cancel.clone(),
            progress: self.progress.clone(),
        }
    }
}

/// An incoming call's raw `id` and `params`, as spans of the frame they arrived in.
pub(crate) struct Call {
    pub(crate) frame: Text,
    pub(crate) id: Range<usize>,
    pub(crate) params: Option<Range<usize>>,
    /// A notification run by a method: the handler runs, no answer is made (the
    /// erased method returns an empty string) and failures are logged instead.
    pub(crate) notification: bool,
    /// The method's name, for the fallback, which serves names the router does not
    /// know (`None` for the others: they know theirs).
    pub(crate) unrouted: Option<Arc<str>>,
}

impl Call {
    /// The call whose `id` and `params` are slices of `frame`; without an id, a
    /// notification run by a method.
    pub(crate) fn new(frame: &Text, id: Option<&str>, params: Option<&str>) -> Self {
        Call {
            frame: frame.clone(),
            id: id.map_or(0..0, |id| message::span(frame, id)),
            params: params.map(|params| message::span(frame, params)),
            notification: id.is_none(),
            unrouted: None,
        }
    }

    pub(crate) fn id(&self) -> &str {
        &self.frame[self.id.clone()]
    }

    fn decode<P: DeserializeOwned>(&self) -> Result<P, serde_json::Error> {
        decode_params(&self.frame, self.params.clone())
    }

    /// The call as the fallback gets it: its name and raw params.
    fn unrouted(&self) -> Result<Unrouted, serde_json::Error> {
        let params = self
            .params
            .clone()
            .map(|range| self.frame[range].to_owned());
        Ok(Unrouted {
            method: self.unrouted.clone().unwrap_or_else(|| "".into()),
            params: params.map(RawValue::from_string).transpose()?,
            notification: self.notification,
        })
    }
}

/// A call or notification of a method the router does not name, as
/// [`Router::fallback`] gets it: the name and the raw params, to forward as they are.
#[derive(Debug)]
pub struct Unrouted {
    method: Arc<str>,
    params: Option<Box<RawValue>>,
    notification: bool,
}

impl Unrouted {
    /// The method's name, as sent.
    pub fn method(&self) -> &str {
        &self.method
    }

    /// The params, raw, if any.
    pub fn params(&self) -> Option<&RawValue> {
        self.params.as_deref()
    }

    /// The params, raw and owned: pass them on with [`Caller::call`](crate::Caller::call)
    /// (a `Box<RawValue>` serializes as the text it holds).
    pub fn into_params(self) -> Option<Box<RawValue>> {
        self.params
    }

    /// Whether it is a notification: nothing is answered, whatever the fallback
    /// returns.
    pub fn is_notification(&self) -> bool {
        self.notification
    }
}

/// Runs a call of `method` to its answer frame: `start` reads the params and makes
/// the handler's future. Through the layers when the connection has them
/// (`layer/serve.rs`); else the plain path, which is every call's path without them.
fn run_call<S, T, Fut>(
    cx: Context<S>,
    call: Call,
    method: &Arc<str>,
    known: bool,
    start: impl FnOnce(Context<S>, &Call) -> Result<Fut, serde_json::Error>,
) -> HandlerFuture<String>
where
    Fut: Future<Output = Result<T, RpcError>> + Send + 'static,
    T: Serialize + Send + 'static,
{
    if cx.peer().shared.layers().is_some() {
        return crate::layer::run_method(cx, call, method.clone(), known, start);
    }
    let ends = crate::progress::Ends::of(&cx);
    let fut = match start(cx, &call) {
        Ok(fut) => fut,
        Err(e) if call.notification => {
            crate::logs::throttled!(warn, method = %method, error = %e, "notification params do not fit the method; dropped");
            return Box::pin(std::future::ready(String::new()));
        }
        Err(e) => {
            tracing::debug!(method = %method, id = call.id(), error = %e, "params do not fit; answered -32602");
            let frame = message::error_response(Some(call.id()), &RpcError::invalid_params(e));
            return Box::pin(std::future::ready(frame));
        }
    };
    // The name is kept only to log a failed run of a notification: a clone of the `Arc`
    // and its drop are two atomic read-modify-writes on every call served.
    let method = call.notification.then(|| method.clone());
    Box::pin(async move {
        let outcome = fut.await;
        drop(ends);
        if let Some(method) = method {
            if let Err(error) = outcome {
                tracing::debug!(method = %method, %error, "a method run by a notification failed; nothing is answered");
            }
            return String::new();
        }
        let id = call.id();
        match outcome {
            Ok(result) => message::response(id, &result).unwrap_or_else(|e| {
                message::error_response(
                    Some(id),
                    &RpcError::internal_error(format_args!(
                        "the result could not be serialized: {e}"
                    )),
                )
            }),
            Err(error) => message::error_response(Some(id), &error),
        }
    })
}

/// Reads params as `P`. Absent params read as `null` (for `()` and `Option`), then as
/// `[]` (for sequences), then as `{}` (for structs whose fields are all optional).
/// Params that do not read as `P` are tried once more: `[]`/`{}` as absent params; a
/// one-element array as its element (for `P` that reads no sequence: `i64`, `String`);
/// positional params short of a struct's or tuple's length with `null`s after them
/// (for trailing `Option` fields).
pub(crate) fn decode_params<P: DeserializeOwned>(
    frame: &str,
    params: Option<Range<usize>>,
) -> Result<P, serde_json::Error> {
    let Some(range) = params else {
        return absent_params();
    };
    let text = &frame[range];
    serde_json::from_str(text).or_else(|e| {
        // Many clients send `[]` or `{}` to mean "no params": a handler that takes
        // none reads them as it reads absent params.
        if is_empty_container(text) {
            return absent_params().map_err(|_| e);
        }
        if !text.starts_with('[') {
            return Err(e);
        }
        // Positional params are always an array, so a handler of one scalar would
        // never match them: `[5]` is its `5`. Only for a type that reads no sequence
        // at all (an empty one is refused as one: "invalid type: sequence", or an
        // enum's "expected value"), so a type that reads arrays itself, and fails on
        // one inside, is never second-guessed.
        if let Ok([only]) = serde_json::from_str::<[&serde_json::value::RawValue; 1]>(text) {
            if reads_no_sequence::<P>() || untagged_of_no_sequence::<P>() {
                return serde_json::from_str(only.get());
            }
        }
        let message = e.to_string();
        // A struct's (or tuple's) trailing `Option` fields may be left out by
        // position, as by name (`rpc.discover` calls them not required): they read
        // `null`.
        match short_by(&message) {
            Some(missing) => {
                let inner = text[1..text.len() - 1].trim();
                let mut padded = String::with_capacity(text.len() + 5 * missing);
                padded.push('[');
                padded.push_str(inner);
                for n in 0..missing {
                    padded.push_str(if n == 0 && inner.is_empty() {
                        "null"
                    } else {
                        ",null"
                    });
                }
                padded.push(']');
                serde_json::from_str(&padded).map_err(|_| e)
            }
            None => Err(e),
        }
    })
}

/// Whether `P` reads no sequence at all (an empty one is refused as one: "invalid
/// type: sequence", or an enum's "expected value"): then positional params `[x]` are
/// its `x` (see [`decode_params`]).
pub(crate) fn reads_no_sequence<P: DeserializeOwned>() -> bool {
    serde_json::from_str::<P>("[]").is_err_and(|e| {
        let m = e.to_string();
        m.starts_with("invalid type: sequence") || m.starts_with("expected value")
    })
}

/// Whether `P` is an untagged enum none of whose variants reads an empty sequence (a
/// number or a name: `enum Key { Id(u64), Name(String) }`): its typed calls send a
/// variant of one value as `[x]` too, and serde's own message for it names no type.
pub(crate) fn untagged_of_no_sequence<P: DeserializeOwned>() -> bool {
    serde_json::from_str::<P>("[]").is_err_and(|e| {
        e.to_string()
            .starts_with("data did not match any variant of untagged enum")
    })
}

/// Whether `P` reads absent params (see [`decode_params`]).
#[cfg_attr(not(feature = "schemars"), allow(dead_code))]
pub(crate) fn reads_absent_params<P: DeserializeOwned>() -> bool {
    absent_params::<P>().is_ok()
}

/// Absent params: `null`, else `[]`, else `{}`.
fn absent_params<P: DeserializeOwned>() -> Result<P, serde_json::Error> {
    serde_json::from_str("null")
        .or_else(|e| serde_json::from_str("[]").map_err(|_| e))
        .or_else(|e| serde_json::from_str("{}").map_err(|_| e))
}

/// How many elements positional params lack, from serde's error for a sequence too
/// short for a derived struct (`invalid length 1, expected struct S with 2 elements`)
/// or a tuple (`... expected a tuple of size 2`). At most [`MAX_PADDED`].
fn short_by(message: &str) -> Option<usize> {
    let rest = message.strip_prefix("invalid length ")?;
    let (given, rest) = rest.split_once(", expected ")?;
    let given: usize = given.parse().ok()?;
    let wanted = if let Some(struct_) = rest.strip_prefix("struct ") {
        let (_, count) = struct_.split_once(" with ")?;
        count.split(' ').next()?.parse::<usize>().ok()?
    } else {
        let size = rest.strip_prefix("a tuple of size ")?;
        size.split(|c: char| !c.is_ascii_digit())
            .next()?
            .parse::<usize>()
            .ok()?
    };
    Some(wanted.checked_sub(given)?).filter(|&n| n > 0 && n <= MAX_PADDED)
}

/// The most `null`s positional params are padded with (a struct's trailing optional
/// fields): bounds the work a short array can ask for.
const MAX_PADDED: usize = 64;

fn is_empty_container(text: &str) -> bool {
    let inner = text.get(1..text.len().saturating_sub(1)).unwrap_or("x");
    inner.bytes().all(|b| b.is_ascii_whitespace())
}

/// A method handler with its types erased. It returns the whole response frame.
pub(crate) type MethodFn<S> = dyn Fn(Context<S>, Call) -> HandlerFuture<String> + Send + Sync;
/// A notification handler with its types erased. It reads its params from the frame
/// before it returns, so it borrows the frame: cloning and dropping it (two atomic
/// operations) was a visible part of a notification's cost.
pub(crate) type NotificationFn<S> =
    dyn Fn(Context<S>, &Text, Option<Range<usize>>) -> HandlerFuture<()> + Send + Sync;

/// The method table a peer serves: incoming calls and notifications by method name.
///
/// A handler is an async function of a [`Context`] and its params, which may be any
/// `Deserialize` type. A method returns `Result<T, RpcError>` for any `Serialize` `T`
/// (a failed call back made with `?` becomes one, see [`RpcError`]'s `From<Error>`);
/// params that do not fit the type are answered with `-32602 Invalid params` before it
/// runs.
///
/// Which params each kind of type reads:
///
/// | params type | reads |
/// | --- | --- |
/// | a derived struct | named params `{"a": 1, "b": 2}` and positional `[1, 2]` (in field order; trailing `Option` fields may be left out) |
/// | a tuple `(A, B)`, `Vec<T>`, `[T; N]` | positional params `[1, 2]` (a tuple's trailing `Option`s may be left out) |
/// | a map (`HashMap`, `serde_json::Map`) | named params |
/// | a single value that is not a sequence (`i64`, `String`, an enum, `Option<T>`) | a one-element array `[5]` (also the bare value, which the specification's params never are) |
/// | `()` | no params, `[]` or `{}` |
/// | `serde_json::Value` | whatever was sent (`null` when absent) |
///
/// A struct whose fields are all optional also reads absent params, `[]` and `{}`.
///
/// ```
/// use jsonrpc_peer::{Context, Router, RpcError};
/// use serde::Deserialize;
///
/// #[derive(Deserialize)]
/// struct Subtract {
///     minuend: i64,
///     subtrahend: i64,
/// }
///
/// let router = Router::new()
///     .method("subtract", |_cx: Context, p: Subtract| async move {
///         Ok::<_, RpcError>(p.minuend - p.subtrahend)
///     })
///     .notification("update", |_cx: Context, values: Vec<i64>| async move {
///         println!("update: {values:?}");
///     });
/// assert!(router.has_method("subtract"));
/// ```
// The maps on every message's path (this method table, the pending and running calls)
// hash with rustc-hash's Fx hasher: SipHash was a visible part of each lookup. The
// method table's and the pending map's keys are chosen by this program (names
// registered at start, ids from a counter), so a crafted name can only miss; the
// running calls are keyed by the other side's ids, but that map holds at most
// `max_in_flight` entries, which bounds any probe sequence a crafted id could make.
pub struct Router<S = ()> {
    state: Arc<S>,
    /// Each method with how its calls run: one lookup per incoming call.
    methods: FxHashMap<Box<str>, Route<S>>,
    notifications: FxHashMap<Box<str>, Arc<NotificationFn<S>>>,
    /// What serves the names neither map has, if anything.
    fallback: Option<Route<S>>,
}

/// Where a method's calls go: its handler, and how they run (see `lanes.rs`).
pub(crate) struct Route<S> {
    handler: Arc<MethodFn<S>>,
    lane: Lane,
    /// Told of a cancel instead of stopped by it.
    cooperative: bool,
}

impl<S> Route<S> {
    pub(crate) fn handler(&self) -> &Arc<MethodFn<S>> {
        &self.handler
    }

    pub(crate) fn lane(&self) -> &Lane {
        &self.lane
    }

    pub(crate) fn cooperative(&self) -> bool {
        self.cooperative
    }
}

impl Router<()> {
    /// An empty router without state.
    pub fn new() -> Self {
        Router::with_state(())
    }
}

impl Default for Router<()> {
    fn default() -> Self {
        Router::new()
    }
}

impl<S: Send + Sync + 'static> Router<S> {
    /// An empty router whose handlers see `state` through [`Context::state`].
    pub fn with_state(state: S) -> Self {
        Router {
            state: Arc::new(state),
            methods: FxHashMap::default(),
            notifications: FxHashMap::default(),
            fallback: None,
        }
    }

    /// Makes the calls of method `name` run in `lane`, and, if `cooperative`, tells
    /// its handler of a cancel instead of stopping it.
    pub(crate) fn run_as(mut self, name: &str, lane: Lane, cooperative: bool) -> Self {
        if let Some(route) = self.methods.get_mut(name) {
            route.lane = lane;
            route.cooperative = cooperative;
        }
        self
    }

    /// Adds a method: `handler` answers each call of `name`.
    ///
    /// A notification of `name` runs it too, as a call whose answer is dropped (the
    /// specification calls a notification a request without an id), unless a
    /// [`notification`](Self::notification) handler of that name exists: that one
    /// takes precedence. Such a run is concurrent, like a call, not in the
    /// notifications' order; for a method added with
    /// [`method_with`](Self::method_with), it runs in the method's lane, as its calls do.
    ///
    /// # Panics
    ///
    /// If `name` is already a method, or begins with `rpc.` (the specification
    /// reserves those names). Both are mistakes in the program, found when it starts.
    pub fn method<P, T, F, Fut>(self, name: &str, handler: F) -> Self
    where
        F: Fn(Context<S>, P) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, RpcError>> + Send + 'static,
        P: DeserializeOwned + Send + 'static,
        T: Serialize + Send + 'static,
    {
        check_name(name);
        self.serve(name, handler)
    }

    /// [`method`](Self::method) without the check of the name: for the names this
    /// crate itself serves in the reserved `rpc.` space (`rpc.discover`).
    ///
    /// # Panics
    ///
    /// If `name` is already a method.
    pub(crate) fn serve<P, T, F, Fut>(mut self, name: &str, handler: F) -> Self
    where
        F: Fn(Context<S>, P) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, RpcError>> + Send + 'static,
        P: DeserializeOwned + Send + 'static,
        T: Serialize + Send + 'static,
    {
        let method: Arc<str> = name.into();
        let erased = move |cx: Context<S>, call: Call| -> HandlerFuture<String> {
            let start = |cx, call: &Call| call.decode::<P>().map(|p| handler(cx, p));
            run_call(cx, call, &method, true, start)
        };
        let route = Route {
            handler: Arc::new(erased),
            lane: Lane::Concurrent,
            cooperative: false,
        };
        let previous = self.methods.insert(name.into(), route);
        assert!(previous.is_none(), "method `{name}` is registered twice");
        self
    }

    /// Adds a notification handler for `name`. Notifications from one connection reach
    /// their handlers one at a time, in the order they were sent. For notifications it
    /// takes precedence over a [`method`](Self::method) of the same name.
    ///
    /// A notification is never answered: params that do not fit `P` are logged and the
    /// notification is dropped. A handler that wants to call the other side should do it
    /// from a spawned task, so later notifications are not held up waiting for the answer.
    ///
    /// # Panics
    ///
    /// If `name` is already a notification, or begins with `rpc.`.
    pub fn notification<P, F, Fut>(mut self, name: &str, handler: F) -> Self
    where
        F: Fn(Context<S>, P) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
        P: DeserializeOwned + Send + 'static,
    {
        check_name(name);
        let method: Arc<str> = name.into();
        let erased = move |cx: Context<S>, frame: &Text, params: Option<Range<usize>>| {
            if cx.peer().shared.layers().is_some() {
                let start = |cx| decode_params::<P>(frame, params.clone()).map(|p| handler(cx, p));
                return crate::layer::run_notification(
                    cx,
                    frame,
                    params.clone(),
                    method.clone(),
                    start,
                );
            }
            match decode_params::<P>(frame, params) {
                Ok(p) => Box::pin(handler(cx, p)) as HandlerFuture<()>,
                Err(e) => {
                    crate::logs::throttled!(warn, method = %method, error = %e, "notification params do not fit; dropped");
                    Box::pin(std::future::ready(()))
                }
            }
        };
        let previous = self.notifications.insert(name.into(), Arc::new(erased));
        assert!(
            previous.is_none(),
            "notification `{name}` is registered twice"
        );
        self
    }
}

impl<S: Send + Sync + 'static> Router<S> {
    /// Serves every call and notification of a name the router does not know (no
    /// method, and for a notification no notification handler, of that name), with the
    /// name and the raw params: a proxy, a gateway, a bridge that forwards to another
    /// peer. Without it such a call is answered `-32601`.
    ///
    /// A call is answered with what `handler` returns. A notification runs it too (its
    /// answer is dropped), in the order notifications arrived, one at a time, as
    /// notification handlers run ([`Unrouted::is_notification`] tells them apart).
    /// Layers see these calls with [`is_known`](crate::layer::CallInfo::is_known)
    /// false, so metrics count them under `other`.
    ///
    /// ```
    /// use jsonrpc_peer::{Caller, Context, Peer, Reply, Router, RpcError, Unrouted};
    ///
    /// /// Forwards what it does not serve itself to `upstream`.
    /// fn proxy(upstream: Peer) -> Router<Peer> {
    ///     Router::with_state(upstream).fallback(|cx: Context<Peer>, call: Unrouted| async move {
    ///         let method = call.method().to_owned();
    ///         let reply: Reply = cx.state().call(&method, call.into_params()).await?;
    ///         Ok::<_, RpcError>(reply.decode::<Box<serde_json::value::RawValue>>()?)
    ///     })
    /// }
    /// ```
    ///
    /// # Panics
    ///
    /// If a fallback is already set.
    pub fn fallback<T, F, Fut>(mut self, handler: F) -> Self
    where
        F: Fn(Context<S>, Unrouted) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, RpcError>> + Send + 'static,
        T: Serialize + Send + 'static,
    {
        assert!(self.fallback.is_none(), "the fallback is set twice");
        let erased = move |cx: Context<S>, call: Call| -> HandlerFuture<String> {
            let method = call.unrouted.clone().unwrap_or_else(|| "".into());
            let start = |cx, call: &Call| call.unrouted().map(|call| handler(cx, call));
            run_call(cx, call, &method, false, start)
        };
        self.fallback = Some(Route {
            handler: Arc::new(erased),
            lane: Lane::Concurrent,
            cooperative: false,
        });
        self
    }
}

/// What the connection asks of the table: lookups, with no bounds on `S`.
impl<S> Router<S> {
    /// Whether a method of this name is registered.
    pub fn has_method(&self, name: &str) -> bool {
        self.methods.contains_key(name)
    }

    /// Whether a notification handler of this name is registered.
    pub fn has_notification(&self, name: &str) -> bool {
        self.notifications.contains_key(name)
    }

    /// The method `name` and how its calls run, if it is served.
    #[inline]
    pub(crate) fn route(&self, name: &str) -> Option<&Route<S>> {
        self.methods.get(name)
    }

    /// What serves the names the router does not know, if anything.
    #[inline]
    pub(crate) fn fallback_route(&self) -> Option<&Route<S>> {
        self.fallback.as_ref()
    }

    /// The notification handler of `name`, if there is one.
    pub(crate) fn notification_handler(&self, name: &str) -> Option<&Arc<NotificationFn<S>>> {
        self.notifications.get(name)
    }

    /// The names of the methods served.
    pub(crate) fn method_names(&self) -> impl Iterator<Item = &str> {
        self.methods.keys().map(|name| &**name)
    }

    /// The names of the notifications handled.
    pub(crate) fn notification_names(&self) -> impl Iterator<Item = &str> {
        self.notifications.keys().map(|name| &**name)
    }
}

fn check_name(name: &str) {
    assert!(
        !name.starts_with("rpc."),
        "method names beginning with `rpc.` are reserved by JSON-RPC 2.0: `{name}`"
    );
}

impl<S> std::fmt::Debug for Router<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut methods: Vec<_> = self.methods.keys().collect();
        methods.sort();
        let mut notifications: Vec<_> = self.notifications.keys().collect();
        notifications.sort();
        f.debug_struct("Router")
            .field("methods", &methods)
            .field("notifications", &notifications)
            .field("fallback", &self.fallback.is_some())
            .finish()
    }
}

//! Call layers: the application's own code around every call and notification a peer
//! serves and every one it makes (metrics, rate limits, authorization per call, a
//! cache). A [`Layer`] is told of each one before it runs ([`Layer::on_call`], where
//! it may answer instead) and of its end ([`Layer::on_outcome`]: the result, the
//! error, a timeout, a cancel, the connection's end, and how long it took).
//!
//! ```
//! use std::time::Duration;
//! use jsonrpc_peer::layer::{CallInfo, CallOutcome, Decision, Layer};
//! use jsonrpc_peer::{PeerConfig, RpcError};
//!
//! /// Refuses `admin.*` to connections that did not authenticate as an admin.
//! struct AdminOnly;
//!
//! struct Admin;
//!
//! impl Layer for AdminOnly {
//!     fn on_call(&self, call: &CallInfo<'_>) -> Decision {
//!         if call.is_served() && call.method().starts_with("admin.") && call.peer().auth::<Admin>().is_none() {
//!             return Decision::Error(RpcError::new(-32001, "Forbidden"));
//!         }
//!         Decision::Continue
//!     }
//!
//!     fn on_outcome(&self, call: &CallInfo<'_>, outcome: &CallOutcome<'_>, took: Duration) {
//!         if took > Duration::from_secs(1) {
//!             eprintln!("slow: {} {outcome:?} after {took:?}", call.method());
//!         }
//!     }
//! }
//!
//! let config = PeerConfig::default().layer(AdminOnly);
//! # let _ = config;
//! ```
//!
//! # The order
//!
//! Layers run in the order they were added, like tower's `ServiceBuilder`: the first
//! added is the outermost. [`on_call`](Layer::on_call) runs from the first layer to
//! the last; the first that answers ([`Decision::Error`] or [`Decision::Result`])
//! stops the call there: the layers after it and the handler (or, for a call made,
//! the other side) never see it. [`on_outcome`](Layer::on_outcome) then runs for
//! every layer whose `on_call` ran, the one that answered included, from the last to
//! the first. A layer whose `on_call` panics stops the call there too (a call served
//! is answered `-32603`; a call made panics in its caller's task): the layers before
//! it are told [`CallOutcome::Panicked`], the one that panicked is not. A panic in
//! `on_outcome` is caught and logged: the answer stays, the other layers are told. The rate limit ([`PeerConfig::rate_limit`](crate::PeerConfig::rate_limit))
//! is the innermost step of calls served, after every layer: the layers see the calls
//! it refuses, with their `-32005` error.
//!
//! # What is seen, and what is not
//!
//! Served: every call and notification that arrives, as the router is asked about
//! it: methods, notification handlers, the [fallback](crate::Router::fallback), and
//! methods the router does not know (answered `-32601`, or dropped for a
//! notification). Made: every [`Caller::call`](crate::Caller::call) (and the calls built
//! on it: contracts, progress) and every [`Caller::notify`](crate::Caller::notify); a
//! [`Batch`](crate::Batch) that this side sends is seen as a batch
//! ([`Layer::on_batch`]), its items are not seen one by one. Not seen: cancels and
//! progress notifications (the engine's own), calls refused while the connection
//! drains, answers to our calls (they are the outcome of the call made), and frames
//! pushed as they are (broadcasts, topics).
//!
//! # Why not tower's `Service`
//!
//! tower's `Layer`/`Service` is the ecosystem's convention for wrapping a call, and
//! this trait keeps its order and its power to answer instead, but it is not a
//! `Service`, because this engine would pay for one on every call and still not give it
//! what a layer is asked to see:
//!
//! - A call served is polled once on the connection's task, and most finish there
//!   (see `driver/dispatch.rs`). A `Service` returns a future of its own per layer,
//!   boxed to be stored: an allocation per layer per call. `on_call` and `on_outcome`
//!   run in the handler's own future, which is allocated already.
//! - `poll_ready` asks the caller to wait for the service. Here nothing waits on the
//!   connection's task: back-pressure is the in-flight bound, which pauses reading.
//!   A layer that limits answers at once (`-32005` with a retry-after) instead.
//! - `Service::call` takes `&mut self`: a layer shared by every connection would be
//!   cloned per call (tower's idiom) or locked. A `Layer` here is shared, `&self`.
//! - A call stopped by the other side's cancel, or by the connection's end, is a
//!   future dropped: a `Service` wrapping it never learns how it ended. Here the
//!   engine reports [`CallOutcome::Cancelled`] and [`CallOutcome::Closed`].
//! - Served and made calls end in different types (a response frame, a
//!   `Result<Reply>`); one `Layer` sees both directions through one [`CallOutcome`].
//!
//! What is given up: a layer cannot run code *around* the handler's future (hold a
//! tracing span entered while it runs, retry a call made, wait before it starts). The
//! engine already makes a tracing span per call, served and made.
//!
//! # Cost
//!
//! Without layers (and without a rate limit), a call pays one check of an `Option`
//! per direction. With layers, each call pays the layers' own work and a reference
//! count on the connection, and one clock reading at each end if a layer wants its
//! duration ([`Layer::wants`]). Nothing is allocated, unless a layer wants the params
//! and id of a call made at its outcome: its frame is then shared (one allocation).

mod made;
mod serve;

use std::cell::Cell;
use std::sync::Arc;
use std::time::Duration;

use serde_json::value::RawValue;
use tokio::time::Instant;

use crate::error::{Error, RpcError};
use crate::limit::{Limiter, RateLimit};
use crate::peer::Peer;

pub(crate) use made::{made_call, made_notification};
pub(crate) use serve::{not_found, run_method, run_notification};

/// Which way a call goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    /// The other side called (or notified) this one: its handler runs here.
    Served,
    /// This side called (or notified) the other.
    Made,
}

/// One call or notification, as a layer sees it: borrowed for the length of the
/// hook.
#[derive(Clone, Copy)]
pub struct CallInfo<'a> {
    direction: Direction,
    method: &'a str,
    parts: Parts<'a>,
    peer: &'a Peer,
    known: bool,
}

/// Where a call's `params` and `id` are.
#[derive(Clone, Copy)]
enum Parts<'a> {
    /// Found by the reader (calls served).
    Found {
        params: Option<&'a str>,
        id: Option<&'a str>,
    },
    /// In a request frame this side wrote (calls made): looked for only when a layer
    /// asks, so a layer that reads neither (`Metrics`) does not pay the search.
    Written { frame: &'a str, has_id: bool },
}

impl<'a> CallInfo<'a> {
    /// Which way it goes.
    pub fn direction(&self) -> Direction {
        self.direction
    }

    /// Whether the other side called this one.
    pub fn is_served(&self) -> bool {
        self.direction == Direction::Served
    }

    /// The method's name.
    pub fn method(&self) -> &'a str {
        self.method
    }

    /// The `params` member as raw JSON text, if there is one. In
    /// [`on_outcome`](Layer::on_outcome) of a call made, only if a layer of the
    /// connection [wants](Wants::outcome_parts) it.
    pub fn params(&self) -> Option<&'a str> {
        match self.parts {
            Parts::Found { params, .. } => params,
            Parts::Written { frame, has_id } => crate::message::request_parts(frame, has_id).0,
        }
    }

    /// The `id` member as raw JSON text, exactly as written on the wire: the other
    /// side's for a call served, this side's number for a call made. `None` for a
    /// notification, and in [`on_outcome`](Layer::on_outcome) of a call made unless a
    /// layer of the connection [wants](Wants::outcome_parts) it.
    pub fn id(&self) -> Option<&'a str> {
        match self.parts {
            Parts::Found { id, .. } => id,
            Parts::Written { frame, has_id } => crate::message::request_parts(frame, has_id).1,
        }
    }

    /// Whether it is a notification (no answer comes, or goes).
    pub fn is_notification(&self) -> bool {
        match self.parts {
            Parts::Found { id, .. } => id.is_none(),
            Parts::Written { has_id, .. } => !has_id,
        }
    }

    /// The connection: its [`id`](Peer::id), [`info`](Peer::info) (the remote
    /// address, the handshake's path) and what authentication
    /// [attached](Peer::auth).
    pub fn peer(&self) -> &'a Peer {
        self.peer
    }

    /// Whether the router names the method (a method or a notification handler of
    /// that name). False for what the [fallback](crate::Router::fallback) serves and
    /// for names the router does not know: a label for metrics should not take such
    /// a name, which the other side chooses. Always true for calls made.
    pub fn is_known(&self) -> bool {
        self.known
    }
}

impl std::fmt::Debug for CallInfo<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallInfo")
            .field("direction", &self.direction)
            .field("method", &self.method)
            .field("id", &self.id())
            .field("peer", &self.peer.id())
            .field("known", &self.known)
            .finish_non_exhaustive()
    }
}

/// What [`Layer::on_call`] decides.
#[derive(Debug)]
#[non_exhaustive]
pub enum Decision {
    /// Go on: to the next layer, then the handler (or the other side).
    Continue,
    /// Answer with this error instead. A call served is answered with it (a
    /// notification is dropped); a call made is not sent, and returns
    /// [`Error::Rpc`] with it (a notification made returns it too).
    Error(RpcError),
    /// Answer with this result (raw JSON) instead: a cache. A call served is answered
    /// with it (a notification is dropped); a call made is not sent and returns it.
    Result(Box<RawValue>),
}

/// How a call or notification ended, as [`Layer::on_outcome`] sees it.
#[derive(Debug)]
#[non_exhaustive]
pub enum CallOutcome<'a> {
    /// Answered with this result (raw JSON text): the handler's, or the other
    /// side's.
    Result(&'a str),
    /// Answered with this error: the handler's (or the engine's: `-32601`, `-32602`,
    /// a layer's), or the other side's.
    Error(&'a RpcError),
    /// A notification ran to its end (served), or was queued to be sent (made).
    Notified,
    /// A call made got no answer within its timeout.
    Timeout,
    /// Served: stopped by the other side's cancel. Made: given up by its caller (its
    /// future dropped before the answer came).
    Cancelled,
    /// The connection ended first.
    Closed,
    /// Served: the handler, or the `on_call` of a layer after this one, panicked (the
    /// caller was answered `-32603`). Made: the task making the call panicked while it
    /// ran (a layer's `on_call` after this one, or code beside the call in that task).
    Panicked,
    /// A call made failed here after its `on_call`: an answer that is not a valid
    /// response. (Params that do not serialize fail before any layer sees the call:
    /// the caller gets the error, no layer is told.)
    Failed(&'a Error),
}

/// What a layer wants the engine to measure and keep for it, beyond the call itself:
/// asked once per connection ([`Layer::wants`]). Reading the clock at both ends of
/// every message, and keeping the frame of a call made until its end, are a good part
/// of what a light layer costs; the engine does them only when a layer of the
/// connection wants them.
///
/// ```
/// use jsonrpc_peer::layer::Wants;
///
/// // Durations of calls only; a notification's `took` is zero.
/// let wants = Wants::NOTHING.call_durations();
/// # let _ = wants;
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wants {
    call_durations: bool,
    notification_durations: bool,
    outcome_parts: bool,
}

impl Wants {
    /// Everything (the default): every duration, and the params and id of a call
    /// made in [`Layer::on_outcome`].
    pub const ALL: Wants = Wants {
        call_durations: true,
        notification_durations: true,
        outcome_parts: true,
    };
    /// Nothing: every `took` is [`Duration::ZERO`], and a call made shows no params
    /// or id in [`Layer::on_outcome`] ([`Layer::on_call`] always sees them).
    pub const NOTHING: Wants = Wants {
        call_durations: false,
        notification_durations: false,
        outcome_parts: false,
    };

    /// And the duration of every call, served and made: from its arrival (served)
    /// or its start (made) to its end.
    pub const fn call_durations(mut self) -> Wants {
        self.call_durations = true;
        self
    }

    /// And the duration of every notification: served, until its handler returns;
    /// made, until it is queued.
    pub const fn notification_durations(mut self) -> Wants {
        self.notification_durations = true;
        self
    }

    /// And the params and id of a call made, in [`Layer::on_outcome`]: its frame is
    /// kept until then (a reference count, and an allocation the first time).
    pub const fn outcome_parts(mut self) -> Wants {
        self.outcome_parts = true;
        self
    }

    /// What either wants.
    fn or(self, other: Wants) -> Wants {
        Wants {
            call_durations: self.call_durations || other.call_durations,
            notification_durations: self.notification_durations || other.notification_durations,
            outcome_parts: self.outcome_parts || other.outcome_parts,
        }
    }
}

/// Code of the application's own around every call and notification, in both
/// directions; see the [module](self) for the order and what is seen.
///
/// Set with [`PeerConfig::layer`](crate::PeerConfig::layer); one layer serves every
/// connection of that config, so it is `Send + Sync` and keeps what it counts per
/// connection keyed by [`Peer::id`] (or in the connection's [`Peer::on_close`]).
/// The hooks run on the task that runs the call (often the connection's own): they
/// should be quick, and must not block.
pub trait Layer: Send + Sync + 'static {
    /// Before the call runs (served) or is sent (made). Returning anything but
    /// [`Decision::Continue`] answers it instead.
    fn on_call(&self, call: &CallInfo<'_>) -> Decision {
        let _ = call;
        Decision::Continue
    }

    /// Once it has ended, with how long it took since `on_call`. A panic here is
    /// caught and logged: the call's answer stays as it was, and the other layers are
    /// still told.
    fn on_outcome(&self, call: &CallInfo<'_>, outcome: &CallOutcome<'_>, took: Duration) {
        let _ = (call, outcome, took);
    }

    /// What this layer wants measured and kept ([`Wants::ALL`] unless it says
    /// otherwise); asked once per connection. What no layer of a connection wants is
    /// not done: a call's `took` is then [`Duration::ZERO`] and no clock is read for
    /// it.
    fn wants(&self) -> Wants {
        Wants::ALL
    }

    /// A batch of `len` items arrived (served, before its items are seen one by
    /// one), or is being sent (made).
    fn on_batch(&self, direction: Direction, len: usize) {
        let _ = (direction, len);
    }
}

/// The layers of a [`PeerConfig`](crate::PeerConfig), in the order added.
#[derive(Clone, Default)]
pub(crate) struct Layers(Arc<[Named]>);

#[derive(Clone)]
struct Named {
    layer: Arc<dyn Layer>,
    name: &'static str,
}

impl Layers {
    /// These layers and `layer` after them.
    pub(crate) fn with<L: Layer>(&self, layer: L) -> Layers {
        let mut all = self.0.to_vec();
        all.push(Named {
            layer: Arc::new(layer),
            name: std::any::type_name::<L>(),
        });
        Layers(all.into())
    }
}

impl std::fmt::Debug for Layers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|named| named.name))
            .finish()
    }
}

/// What one connection runs its calls through: the config's layers, then its own
/// rate limit. `None` (and a connection pays nothing) when there is neither.
pub(crate) struct Stack {
    layers: Arc<[Named]>,
    limit: Option<Limiter>,
    /// What any of the layers wants.
    wants: Wants,
}

impl Stack {
    pub(crate) fn new(layers: &Layers, limit: Option<RateLimit>) -> Option<Box<Stack>> {
        if layers.0.is_empty() && limit.is_none() {
            return None;
        }
        let wants = layers
            .0
            .iter()
            .fold(Wants::NOTHING, |wants, named| wants.or(named.layer.wants()));
        Some(Box::new(Stack {
            layers: layers.0.clone(),
            limit: limit.map(Limiter::new),
            wants,
        }))
    }

    /// The clock's reading at a call's (or notification's) start, if a layer wants
    /// its duration.
    pub(crate) fn start_clock(&self, notification: bool) -> Option<Instant> {
        let wanted = match notification {
            true => self.wants.notification_durations,
            false => self.wants.call_durations,
        };
        wanted.then(Instant::now)
    }

    /// Whether a layer wants the params and id of a call made at its outcome.
    pub(crate) fn keeps_parts(&self) -> bool {
        self.wants.outcome_parts
    }

    /// Runs `on_call` of each layer in order, then (for calls served) the rate limit.
    /// Returns what was decided; `seen` counts the layers whose `on_call` returned, as
    /// each does: if one panics, those before it still see the outcome (`Panicked`).
    pub(crate) fn on_call(&self, call: &CallInfo<'_>, seen: &Cell<usize>) -> Decision {
        for (at, named) in self.layers.iter().enumerate() {
            let decision = named.layer.on_call(call);
            seen.set(at + 1);
            if !matches!(decision, Decision::Continue) {
                return decision;
            }
        }
        if let (Some(limit), Direction::Served) = (&self.limit, call.direction) {
            if let Err(refusal) = limit.admit(call.peer) {
                return Decision::Error(refusal);
            }
        }
        Decision::Continue
    }

    /// Takes a token of the rate limit, if there is one, for what is not a call but
    /// costs an answer as one does (a request that is not valid, a frame that is not
    /// JSON): the error to answer instead when past the limit.
    pub(crate) fn admit(&self, peer: &Peer) -> Result<(), RpcError> {
        match &self.limit {
            Some(limit) => limit.admit(peer),
            None => Ok(()),
        }
    }

    /// Runs `on_outcome` of the first `seen` layers, from the last to the first;
    /// `started` is [`start_clock`](Self::start_clock)'s reading.
    ///
    /// A layer's panic here is caught and logged: the layers before it are still told,
    /// the call's answer stays what it was, and a panic while a handler's panic unwinds
    /// (this runs from the drop of its future) does not abort the process.
    pub(crate) fn on_outcome(
        &self,
        seen: usize,
        call: &CallInfo<'_>,
        outcome: &CallOutcome<'_>,
        started: Option<Instant>,
    ) {
        let took = started.map_or(Duration::ZERO, |started| started.elapsed());
        for named in self.layers[..seen.min(self.layers.len())].iter().rev() {
            let told = std::panic::AssertUnwindSafe(|| named.layer.on_outcome(call, outcome, took));
            if std::panic::catch_unwind(told).is_err() {
                tracing::error!(
                    layer = named.name,
                    method = call.method,
                    "a call layer's on_outcome panicked"
                );
            }
        }
    }

    /// Tells every layer of a batch.
    pub(crate) fn on_batch(&self, direction: Direction, len: usize) {
        for named in self.layers.iter() {
            named.layer.on_batch(direction, len);
        }
    }
}

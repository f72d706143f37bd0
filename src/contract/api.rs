//! A service's description: what each side serves and sends, checked against a
//! `Router` when the program starts.

use std::fmt;

use super::{Method, Notification};
use crate::router::Router;

/// The bound a contract's types need to be described. Without the `schemars` feature
/// every type meets it; with it, a type must implement `schemars::JsonSchema`, so the
/// `rpc.discover` (`Router::discover`) document can give its schema.
#[cfg(not(feature = "schemars"))]
pub trait Describe {}
#[cfg(not(feature = "schemars"))]
impl<T: ?Sized> Describe for T {}

/// The bound a contract's types need to be described: with the `schemars` feature a
/// type must implement `schemars::JsonSchema`, so the
/// `rpc.discover` (`Router::discover`) document can give its schema.
#[cfg(feature = "schemars")]
pub trait Describe: schemars::JsonSchema {}
#[cfg(feature = "schemars")]
impl<T: schemars::JsonSchema + ?Sized> Describe for T {}

/// Which side of the connection an entry belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The side this description is for (the one that serves it with a `Router`).
    This,
    /// The other side of the connection.
    Other,
}

/// What an entry of an [`Api`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A method, answered by the side that serves it.
    Method,
    /// A notification, sent by the side it belongs to.
    Notification,
}

/// One method or notification of an [`Api`].
#[derive(Clone, Debug)]
pub struct Entry {
    /// Its name on the wire.
    pub name: &'static str,
    /// A method or a notification.
    pub kind: Kind,
    /// For a method, the side that serves it; for a notification, the side that sends it.
    pub side: Side,
    #[cfg(feature = "schemars")]
    pub(crate) schema: crate::discover::SchemaFn,
}

/// A description of a service: its name and version, the methods each side serves and
/// the notifications each side sends.
///
/// Direction is data here, not types: the same contract types are served by one side
/// and called by the other. The description is used to check a [`Router`] when the
/// program starts ([`check`](Self::check)) and, with the `schemars` feature, to serve
/// `rpc.discover` (`Router::discover`).
///
/// ```
/// use jsonrpc_peer::{Api, Router};
/// jsonrpc_peer::method!(Subtract = "subtract", (i64, i64) => i64);
/// jsonrpc_peer::method!(UiDescribe = "ui.describe", () => String);
/// jsonrpc_peer::notification!(Tick = "tick", (u64,));
///
/// let api = Api::new("demo", "1.0.0")
///     .serves(Subtract)    // this side answers it
///     .expects(UiDescribe) // the other side answers it
///     .sends(Tick);        // this side sends it
/// let router = Router::new().handle(Subtract, |_cx, (a, b)| async move { Ok(a - b) });
/// api.check(&router).unwrap();
///
/// let err = api.check(&Router::new()).unwrap_err();
/// assert_eq!(err.to_string(), "the router does not match the API `demo`: \
///     method `subtract` is described but has no handler");
/// ```
#[derive(Clone, Debug)]
pub struct Api {
    pub(crate) name: String,
    pub(crate) version: String,
    pub(crate) description: Option<String>,
    pub(crate) entries: Vec<Entry>,
}

impl Api {
    /// A description with a name and a version and nothing in it yet.
    pub fn new(name: impl Into<String>, version: impl Into<String>) -> Self {
        Api {
            name: name.into(),
            version: version.into(),
            description: None,
            entries: Vec::new(),
        }
    }

    /// A sentence or two on what the service does.
    pub fn description(mut self, text: impl Into<String>) -> Self {
        self.description = Some(text.into());
        self
    }

    /// This side serves the method `M`.
    pub fn serves<M: Method>(self, _method: M) -> Self
    where
        M::Params: Describe,
        M::Result: Describe,
    {
        self.add_method::<M>(Side::This)
    }

    /// The other side serves the method `M`: this side may call it.
    pub fn expects<M: Method>(self, _method: M) -> Self
    where
        M::Params: Describe,
        M::Result: Describe,
    {
        self.add_method::<M>(Side::Other)
    }

    /// This side sends the notification `N`.
    pub fn sends<N: Notification>(self, _notification: N) -> Self
    where
        N::Params: Describe,
    {
        self.add_notification::<N>(Side::This)
    }

    /// The other side sends the notification `N`: this side handles it.
    pub fn receives<N: Notification>(self, _notification: N) -> Self
    where
        N::Params: Describe,
    {
        self.add_notification::<N>(Side::Other)
    }

    fn add_method<M: Method>(self, side: Side) -> Self
    where
        M::Params: Describe,
        M::Result: Describe,
    {
        self.push(Entry {
            name: M::NAME,
            kind: Kind::Method,
            side,
            #[cfg(feature = "schemars")]
            schema: crate::discover::method_schema::<M>,
        })
    }

    fn add_notification<N: Notification>(self, side: Side) -> Self
    where
        N::Params: Describe,
    {
        self.push(Entry {
            name: N::NAME,
            kind: Kind::Notification,
            side,
            #[cfg(feature = "schemars")]
            schema: crate::discover::notification_schema::<N>,
        })
    }

    fn push(mut self, entry: Entry) -> Self {
        // Described twice the same way is harmless; a name is one thing on the wire.
        self.entries
            .retain(|e| !(e.name == entry.name && e.kind == entry.kind && e.side == entry.side));
        self.entries.push(entry);
        self
    }

    /// The service's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The service's version.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// Every method and notification, in the order they were described.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// Checks that `router` serves what this side is described to: a handler for every
    /// method it serves and for every notification the other side sends.
    ///
    /// Meant for the start of the program, next to the router's own checks: a
    /// described method without a handler is a mistake in the program, better found
    /// before the other side calls it.
    ///
    /// # Errors
    ///
    /// [`ApiMismatch`], listing every handler that is missing.
    pub fn check<S>(&self, router: &Router<S>) -> Result<(), ApiMismatch> {
        self.mismatch(self.missing(router))
    }

    /// [`check`](Self::check), and also that `router` has no handler the description
    /// leaves out (names beginning with `rpc.` aside): for a service whose
    /// `rpc.discover` document must list exactly what it serves.
    ///
    /// # Errors
    ///
    /// [`ApiMismatch`], listing every difference.
    pub fn check_exact<S>(&self, router: &Router<S>) -> Result<(), ApiMismatch> {
        let mut problems = self.missing(router);
        let described = |name: &str, kind: Kind, side: Side| {
            self.entries
                .iter()
                .any(|e| e.name == name && e.kind == kind && e.side == side)
        };
        let mut extra: Vec<String> = router
            .method_names()
            .filter(|name| !name.starts_with("rpc.") && !described(name, Kind::Method, Side::This))
            .map(|name| format!("method `{name}` has a handler but is not described"))
            .chain(
                router
                    .notification_names()
                    .filter(|name| !described(name, Kind::Notification, Side::Other))
                    .map(|name| {
                        format!("notification `{name}` has a handler but is not described")
                    }),
            )
            .collect();
        extra.sort();
        problems.extend(extra);
        self.mismatch(problems)
    }

    fn missing<S>(&self, router: &Router<S>) -> Vec<String> {
        let mut problems = Vec::new();
        for entry in &self.entries {
            match (entry.kind, entry.side) {
                (Kind::Method, Side::This) if !router.has_method(entry.name) => {
                    problems.push(format!(
                        "method `{}` is described but has no handler",
                        entry.name
                    ));
                }
                (Kind::Notification, Side::Other) if !router.has_notification(entry.name) => {
                    problems.push(format!(
                        "notification `{}` is described as sent by the other side but has no handler",
                        entry.name
                    ));
                }
                _ => {}
            }
        }
        problems
    }

    fn mismatch(&self, problems: Vec<String>) -> Result<(), ApiMismatch> {
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ApiMismatch {
                api: self.name.clone(),
                problems,
            })
        }
    }
}

/// What [`Api::check`] or [`Api::check_exact`] found: the differences between a
/// description and a router.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiMismatch {
    api: String,
    problems: Vec<String>,
}

impl ApiMismatch {
    /// One line per difference.
    pub fn problems(&self) -> &[String] {
        &self.problems
    }
}

impl fmt::Display for ApiMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the router does not match the API `{}`: {}",
            self.api,
            self.problems.join("; ")
        )
    }
}

impl std::error::Error for ApiMismatch {}

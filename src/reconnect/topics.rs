//! Topics a [`Reconnecting`](super::Reconnecting) client follows across reconnects: it
//! remembers the last position of each, subscribes again from it after every connect,
//! and hands the application the data alone, in offset order, each once, or tells it
//! when something could not be recovered.
//!
//! Notifications that arrive between a connect and the answer to its `subscribe` are
//! held (the server queues its replay before it answers): only the answer says whether
//! they continue the last position (`recovered: true`) or start after a new one.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex as SyncMutex};
use std::task::{Context as TaskContext, Poll};

use futures_util::future::BoxFuture;
use futures_util::Stream;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;
use tokio::sync::{mpsc, Mutex};

use super::ReconnectingBuilder;
use crate::call::Caller;
use crate::contract::Topic;
use crate::error::Error;
use crate::history::{Position, Subscribed};
use crate::peer::Peer;
use crate::router::Context;
use crate::sync::lock;

type Params = Arc<dyn Fn(&str, Option<&Position>) -> Value + Send + Sync>;

/// How a [`Reconnecting`](super::Reconnecting) client follows one topic
/// ([`ReconnectingBuilder::topic_with`]).
#[derive(Clone)]
#[non_exhaustive]
pub struct TopicOptions {
    /// The method that subscribes (default `subscribe`).
    pub method: String,
    /// Where to start the first time: a position the application kept (from
    /// [`TopicEvents::position`]), say from before its process restarted. Default none:
    /// from the first subscription on.
    pub from: Option<Position>,
    /// Events waiting for the application (default 1,024). When it is full the client
    /// stops reading the connection until there is room, so the server's slow-peer
    /// policy applies to a client that does not keep up.
    pub capacity: usize,
    /// Notifications and gap reports held while the answer to a `subscribe` is awaited
    /// (default 65,536). Past it the client gives the position up, reconnects, and reports
    /// [`TopicEvent::Missed`]: the server sent more than it was willing to hold.
    pub max_held: usize,
    /// The bytes of the held notifications' params, likewise (default 64 MiB): a few
    /// large notifications are bounded as many small ones are.
    pub max_held_bytes: usize,
    params: Option<Params>,
}

impl Default for TopicOptions {
    fn default() -> Self {
        TopicOptions {
            method: "subscribe".to_owned(),
            from: None,
            capacity: 1024,
            max_held: 65_536,
            max_held_bytes: 64 << 20,
            params: None,
        }
    }
}

impl std::fmt::Debug for TopicOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TopicOptions")
            .field("method", &self.method)
            .field("from", &self.from)
            .field("capacity", &self.capacity)
            .field("max_held", &self.max_held)
            .field("max_held_bytes", &self.max_held_bytes)
            .field("custom_params", &self.params.is_some())
            .finish()
    }
}

impl TopicOptions {
    /// Sets [`method`](Self::method).
    pub fn method(mut self, value: &str) -> Self {
        self.method = value.to_owned();
        self
    }

    /// Sets [`from`](Self::from).
    pub fn from(mut self, value: Position) -> Self {
        self.from = Some(value);
        self
    }

    /// Sets [`capacity`](Self::capacity).
    pub fn capacity(mut self, value: usize) -> Self {
        self.capacity = value;
        self
    }

    /// Sets [`max_held`](Self::max_held).
    pub fn max_held(mut self, value: usize) -> Self {
        self.max_held = value;
        self
    }

    /// Sets [`max_held_bytes`](Self::max_held_bytes).
    pub fn max_held_bytes(mut self, value: usize) -> Self {
        self.max_held_bytes = value;
        self
    }

    /// The params of the subscribe call, made from the topic and the position (if
    /// any). Default: `[topic]` or `[topic, {"epoch":E,"offset":K}]`, the form of
    /// [`TopicMethods`](crate::TopicMethods). The answer must be theirs too.
    pub fn params(
        mut self,
        make: impl Fn(&str, Option<&Position>) -> Value + Send + Sync + 'static,
    ) -> Self {
        self.params = Some(Arc::new(make));
        self
    }
}

/// What a followed topic gives the application ([`TopicEvents`]).
#[derive(Debug)]
#[non_exhaustive]
pub enum TopicEvent<T> {
    /// One publication's data: in offset order, each once, across reconnects.
    Data(T),
    /// Publications were lost: the position could not be resumed (outside the
    /// server's history, or of an epoch the server no longer has), or the offsets
    /// jumped. The application should fetch its state afresh; data continues after
    /// `offset` in `epoch`. On a topic without history (the server answered
    /// `subscribe` with a boolean) every reconnect may lose some: the client says so
    /// with an empty `epoch` and offset 0.
    Missed {
        /// The epoch data continues in.
        epoch: String,
        /// The newest offset not received; data continues from the next.
        offset: u64,
    },
    /// Subscribing failed (the server answered with an error, or not with a
    /// subscription), or a publication's data did not read as `T` (it is skipped). The
    /// client subscribes again after the next reconnect.
    Failed(Arc<Error>),
}

/// The events of one followed topic, in order: a [`Stream`], or [`recv`](Self::recv).
///
/// Dropping it stops delivery to the application (the client goes on).
#[derive(Debug)]
pub struct TopicEvents<T> {
    rx: mpsc::Receiver<(TopicEvent<T>, Option<Position>)>,
    position: Option<Position>,
}

impl<T> TopicEvents<T> {
    /// The next event, or `None` once the client has stopped.
    pub async fn recv(&mut self) -> Option<TopicEvent<T>> {
        let (event, position) = self.rx.recv().await?;
        self.position = position;
        Some(event)
    }

    /// Where the application stands: the position of the last event received (the
    /// offset of the last [`TopicEvent::Data`], or of a [`TopicEvent::Missed`]). Keep it
    /// to resume in another process ([`TopicOptions::from`]).
    pub fn position(&self) -> Option<Position> {
        self.position.clone()
    }
}

impl<T> Stream for TopicEvents<T> {
    type Item = TopicEvent<T>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Option<Self::Item>> {
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some((event, position))) => {
                self.position = position;
                Poll::Ready(Some(event))
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// A notification's params on a topic with history.
#[derive(Deserialize)]
struct Item {
    offset: u64,
    data: Box<RawValue>,
}

/// What arrived before the subscribe answer, in order.
enum Held {
    /// A notification of the topic.
    Item(Box<RawValue>),
    /// A gap report (`$/gap`) naming the topic.
    Gap(Gap),
}

/// What arrived before the subscribe answer, bounded by
/// [`TopicOptions::max_held`] and [`TopicOptions::max_held_bytes`].
#[derive(Default)]
struct Holding {
    items: Vec<Held>,
    /// The held notifications' params, and the gap reports' names, in bytes.
    bytes: usize,
}

impl Holding {
    /// Holds `held`, of `bytes`, unless that passes a bound: false then, nothing held.
    fn hold(&mut self, held: Held, bytes: usize, options: &TopicOptions) -> bool {
        let bytes = self.bytes.saturating_add(bytes);
        if self.items.len() >= options.max_held || bytes > options.max_held_bytes {
            return false;
        }
        self.items.push(held);
        self.bytes = bytes;
        true
    }

    /// What is held, in order; nothing is after.
    fn take(&mut self) -> Vec<Held> {
        self.bytes = 0;
        std::mem::take(&mut self.items)
    }
}

/// A gap report's params: `{"topic":T}` on a topic without history, or
/// `{"topic":T,"epoch":E,"offset":K}` when the server's history of `T` was lost and
/// starts again in `E` (the next notification carries `K + 1`).
#[derive(Deserialize)]
struct Gap {
    topic: String,
    #[serde(flatten)]
    position: Option<Position>,
}

/// The method of gap reports that a followed topic's client serves.
pub(crate) const GAP_METHOD: &str = "$/gap";

/// The followed topics of one client, by name, for the one `$/gap` handler.
#[derive(Default)]
pub(crate) struct Gaps {
    topics: SyncMutex<HashMap<String, Arc<dyn OnGap>>>,
}

/// A followed topic, as the `$/gap` handler sees it.
trait OnGap: Send + Sync {
    fn on_gap<'a>(&'a self, peer: &'a Peer, gap: Gap) -> BoxFuture<'a, ()>;
}

impl Gaps {
    async fn on_gap(&self, peer: &Peer, params: &RawValue) {
        let Ok(gap) = serde_json::from_str::<Gap>(params.get()) else {
            tracing::debug!(params = %params.get(), "a $/gap that names no topic");
            return;
        };
        let follow = lock(&self.topics).get(&gap.topic).cloned();
        if let Some(follow) = follow {
            follow.on_gap(peer, gap).await;
        }
    }
}

/// How notifications are read now.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Held until the subscribe answer says which.
    Waiting,
    /// `{"offset":N,"data":...}`, continuing `position`.
    History,
    /// The params are the data (a topic without history).
    Plain,
}

struct State {
    /// The last position delivered to the application's channel.
    position: Option<Position>,
    /// The connection whose notifications count (its peer id); 0 for none.
    link: u64,
    mode: Mode,
    held: Holding,
    /// The position was given up: the next answer is reported as [`TopicEvent::Missed`].
    lost: bool,
    /// A subscribe was answered with a subscription before (a reconnect, not the first
    /// connect); a refusal does not count: nothing was delivered, so nothing was missed.
    subscribed_before: bool,
}

/// What one followed topic's notification handler and connect hook share.
struct Follow<T> {
    topic: String,
    options: TopicOptions,
    tx: mpsc::Sender<(TopicEvent<T>, Option<Position>)>,
    state: Mutex<State>,
}

impl<S: Send + Sync + 'static> ReconnectingBuilder<S> {
    /// Follows `topic` across reconnects with [`TopicOptions::default`]: see
    /// [`topic_with`](Self::topic_with).
    ///
    /// # Panics
    ///
    /// If the router already has a notification handler of the topic's method, or of
    /// `$/gap` when this is the first topic followed.
    pub fn topic<T>(self, topic: impl Topic<T>) -> (Self, TopicEvents<T>)
    where
        T: DeserializeOwned + Send + 'static,
    {
        self.topic_with(topic, TopicOptions::default())
    }

    /// Follows `topic`: after every (re)connect the client subscribes to it (with the
    /// last position it has, once it has one: `subscribe [topic, {"epoch":E,"offset":K}]`),
    /// and the events go to the returned [`TopicEvents`]: the data of each publication,
    /// read as `T`, once and in offset order across reconnects, or
    /// [`TopicEvent::Missed`] when the server could not replay what was missed.
    ///
    /// `topic` is a [`Notification`](crate::Notification) contract (`T` is its params
    /// type: the server publishes it with `topics.publish(PriceTick, &price)`), the same
    /// on a topic of another name (`PriceTick.on_topic("prices/BTC")`), or a name, with
    /// `T` given (`topic::<Price>("prices")`): see [`Topic`].
    ///
    /// A gap report, `$/gap` with `{"topic":T,"epoch":E,"offset":K}` (what a cluster node
    /// sends when the bus lost the topic's history; see the README's "Across a
    /// cluster"), is [`TopicEvent::Missed`] with that position, and data continues after
    /// it; `{"topic":T}` alone (a topic without history) is `Missed` with an empty epoch.
    ///
    /// It serves the notifications of the topic's method and `$/gap` (so the router must
    /// not, and two topics followed need two methods) and adds an `on_connect` hook, which runs
    /// in the order hooks were added. Read the events: while
    /// [`TopicOptions::capacity`] of them wait, the client stops reading the connection,
    /// and a reconnect is not complete until what arrived before the subscribe answer
    /// has been handed over.
    ///
    /// ```no_run
    /// use jsonrpc_peer::{Reconnecting, Router, TopicEvent};
    ///
    /// #[derive(Debug, serde::Serialize, serde::Deserialize)]
    /// pub struct Price { symbol: String, cents: u64 }
    /// jsonrpc_peer::notification!(pub PriceTick = "price", Price);
    ///
    /// # async fn run() -> jsonrpc_peer::Result<()> {
    /// let (builder, mut prices) =
    ///     Reconnecting::builder("ws://127.0.0.1:9000", Router::new()).topic(PriceTick);
    /// let client = builder.start();
    /// while let Some(event) = prices.recv().await {
    ///     match event {
    ///         TopicEvent::Data(price) => println!("{price:?} at {:?}", prices.position()),
    ///         TopicEvent::Missed { .. } => println!("missed some: reload the state"),
    ///         other => println!("{other:?}"),
    ///     }
    /// }
    /// # drop(client);
    /// # Ok(()) }
    /// ```
    ///
    /// # Panics
    ///
    /// If the router already has a notification handler of the topic's method, or of
    /// `$/gap` when this is the first topic followed.
    pub fn topic_with<T>(
        mut self,
        topic: impl Topic<T>,
        options: TopicOptions,
    ) -> (Self, TopicEvents<T>)
    where
        T: DeserializeOwned + Send + 'static,
    {
        let method = topic.method().to_owned();
        let topic = topic.name();
        let (tx, rx) = mpsc::channel(options.capacity.max(1));
        let events = TopicEvents {
            rx,
            position: options.from.clone(),
        };
        let follow = Arc::new(Follow {
            topic: topic.to_owned(),
            state: Mutex::new(State {
                position: options.from.clone(),
                link: 0,
                mode: Mode::Waiting,
                held: Holding::default(),
                lost: false,
                subscribed_before: false,
            }),
            options,
            tx,
        });
        let on_item = follow.clone();
        self.router =
            self.router
                .notification(&method, move |cx: Context<S>, params: Box<RawValue>| {
                    let follow = on_item.clone();
                    async move { follow.on_notification(cx.peer(), params).await }
                });
        let gaps = match &self.gaps {
            Some(gaps) => gaps.clone(),
            None => {
                let gaps = Arc::new(Gaps::default());
                let on_gap = gaps.clone();
                self.router = self.router.notification(
                    GAP_METHOD,
                    move |cx: Context<S>, params: Box<RawValue>| {
                        let gaps = on_gap.clone();
                        async move { gaps.on_gap(cx.peer(), &params).await }
                    },
                );
                self.gaps = Some(gaps.clone());
                gaps
            }
        };
        lock(&gaps.topics).insert(topic.to_owned(), follow.clone());
        let on_connect = follow;
        self = self.on_connect(move |peer| {
            let follow = on_connect.clone();
            async move { follow.subscribe(peer).await }
        });
        (self, events)
    }
}

impl<T: DeserializeOwned + Send + 'static> OnGap for Follow<T> {
    fn on_gap<'a>(&'a self, peer: &'a Peer, gap: Gap) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let mut state = self.state.lock().await;
            if state.link != peer.id() {
                return; // an older connection's, or one whose subscribe failed
            }
            match state.mode {
                // Dropping it would lose the change of epoch: give the position up.
                Mode::Waiting => {
                    let bytes =
                        gap.topic.len() + gap.position.as_ref().map_or(0, |p| p.epoch.len());
                    if !state.held.hold(Held::Gap(gap), bytes, &self.options) {
                        self.give_up(&mut state, peer);
                    }
                }
                Mode::History | Mode::Plain => self.gap(&mut state, gap).await,
            }
        })
    }
}

impl<T: DeserializeOwned + Send + 'static> Follow<T> {
    /// Sends an event to the application, waiting for room; gone if it dropped them.
    async fn emit(&self, event: TopicEvent<T>, position: &Option<Position>) {
        let _ = self.tx.send((event, position.clone())).await;
    }

    async fn on_notification(&self, peer: &Peer, params: Box<RawValue>) {
        let mut state = self.state.lock().await;
        if state.link != peer.id() {
            return; // an older connection's, or one whose subscribe failed
        }
        match state.mode {
            Mode::Waiting => {
                let bytes = params.get().len();
                if !state.held.hold(Held::Item(params), bytes, &self.options) {
                    self.give_up(&mut state, peer);
                }
            }
            Mode::History => self.deliver(&mut state, &params).await,
            Mode::Plain => self.deliver_plain(&state, &params).await,
        }
    }

    /// More arrived before the subscribe answer than `max_held` (or `max_held_bytes`): gives the position up
    /// and reconnects (the next subscribe is answered `recovered: false`).
    fn give_up(&self, state: &mut State, peer: &Peer) {
        tracing::warn!(topic = %self.topic, "more notifications before the subscribe answer than max_held or max_held_bytes; giving the position up and reconnecting");
        state.held = Holding::default();
        state.lost = true;
        state.link = 0;
        let peer = peer.clone();
        tokio::spawn(async move {
            peer.close_with(1008, "resume backlog over the limit").await;
        });
    }

    /// Delivers a `{"offset":N,"data":...}` notification that follows `state.position`.
    async fn deliver(&self, state: &mut State, params: &RawValue) {
        let item = match serde_json::from_str::<Item>(params.get()) {
            Ok(item) => item,
            Err(e) => {
                let error = Arc::new(Error::Serialization(e));
                return self.emit(TopicEvent::Failed(error), &state.position).await;
            }
        };
        let Some(position) = state.position.as_mut() else {
            return;
        };
        if item.offset <= position.offset {
            return; // already delivered
        }
        if item.offset > position.offset + 1 {
            // A jump: the server dropped some for this subscriber (SlowPeer::Drop).
            position.offset = item.offset - 1;
            let missed = TopicEvent::Missed {
                epoch: position.epoch.clone(),
                offset: position.offset,
            };
            self.emit(missed, &state.position).await;
        }
        if let Some(position) = state.position.as_mut() {
            position.offset = item.offset;
        }
        let event = match serde_json::from_str::<T>(item.data.get()) {
            Ok(data) => TopicEvent::Data(data),
            Err(e) => TopicEvent::Failed(Arc::new(Error::Serialization(e))),
        };
        self.emit(event, &state.position).await;
    }

    /// A gap report: the server lost publications of the topic. With a position (a
    /// topic with history whose history was lost), data continues after it; without
    /// one (a topic without history), what was lost cannot be known.
    async fn gap(&self, state: &mut State, gap: Gap) {
        let missed = match gap.position {
            Some(position) => {
                let missed = TopicEvent::Missed {
                    epoch: position.epoch.clone(),
                    offset: position.offset,
                };
                state.position = Some(position);
                missed
            }
            None => TopicEvent::Missed {
                epoch: String::new(),
                offset: 0,
            },
        };
        self.emit(missed, &state.position).await;
    }

    async fn deliver_plain(&self, state: &State, params: &RawValue) {
        // The params as the router reads them for a handler of `T`: a contract of one
        // value is published as `[value]` (params are an array or an object).
        let text = params.get();
        let event = match crate::router::decode_params::<T>(text, Some(0..text.len())) {
            Ok(data) => TopicEvent::Data(data),
            Err(e) => TopicEvent::Failed(Arc::new(Error::Serialization(e))),
        };
        self.emit(event, &state.position).await;
    }

    /// The `on_connect` hook: subscribes from the last position, then delivers what
    /// arrived before the answer as the answer says.
    async fn subscribe(&self, peer: Peer) {
        let from = {
            let mut state = self.state.lock().await;
            state.link = peer.id();
            state.mode = Mode::Waiting;
            state.held.take();
            if state.lost {
                None
            } else {
                state.position.clone()
            }
        };
        let params = match &self.options.params {
            Some(make) => make(&self.topic, from.as_ref()),
            None => match &from {
                Some(from) => serde_json::json!([self.topic, from]),
                None => serde_json::json!([self.topic]),
            },
        };
        let answer = peer.call::<Value>(&self.options.method, params).await;
        let mut state = self.state.lock().await;
        if state.link != peer.id() {
            return; // gave up on this connection meanwhile
        }
        let answer = answer.and_then(|answer| match answer {
            Value::Bool(_) => Ok(None),
            other => serde_json::from_value::<Subscribed>(other)
                .map(Some)
                .map_err(Error::from),
        });
        let held = state.held.take();
        match answer {
            Ok(Some(subscribed)) => {
                let resumed = subscribed.recovered == Some(true) && from.is_some();
                match (&from, resumed) {
                    (Some(from), true) => {
                        state.position = Some(Position {
                            epoch: subscribed.epoch,
                            offset: from.offset,
                        });
                    }
                    _ => {
                        state.position = Some(subscribed.position());
                        if from.is_some() || state.lost || state.subscribed_before {
                            let missed = TopicEvent::Missed {
                                epoch: subscribed.epoch,
                                offset: subscribed.offset,
                            };
                            self.emit(missed, &state.position).await;
                        }
                    }
                }
                state.lost = false;
                state.subscribed_before = true;
                state.mode = Mode::History;
                for held in held {
                    match held {
                        Held::Item(params) => self.deliver(&mut state, &params).await,
                        Held::Gap(gap) => self.gap(&mut state, gap).await,
                    }
                }
            }
            Ok(None) => {
                // A topic without history: what a reconnect lost cannot be known.
                state.position = None;
                // `lost`: what the last link held before its answer was given up.
                if state.subscribed_before || from.is_some() || state.lost {
                    let missed = TopicEvent::Missed {
                        epoch: String::new(),
                        offset: 0,
                    };
                    self.emit(missed, &None).await;
                }
                state.lost = false;
                state.subscribed_before = true;
                state.mode = Mode::Plain;
                for held in held {
                    match held {
                        Held::Item(params) => self.deliver_plain(&state, &params).await,
                        Held::Gap(gap) => self.gap(&mut state, gap).await,
                    }
                }
            }
            Err(Error::Closed(_)) => {
                // The link went: nothing was refused; the next link resumes.
                state.link = 0;
            }
            Err(error) => {
                tracing::warn!(topic = %self.topic, %error, "subscribing failed");
                state.link = 0;
                let retry = matches!(error, Error::Timeout { .. });
                self.emit(TopicEvent::Failed(Arc::new(error)), &state.position)
                    .await;
                if retry {
                    // No answer in time: this link is no use for the topic; the next
                    // one subscribes again.
                    drop(state);
                    peer.close_with(1000, "subscribing timed out; reconnecting")
                        .await;
                }
            }
        }
    }
}

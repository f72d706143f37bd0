//! Ready-made `subscribe` and `unsubscribe` methods for a [`Topics`], with the wire
//! forms the examples and the clients of this crate use.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::Topics;
use crate::error::{Error, RpcError};
use crate::history::{Position, Subscribed};
use crate::peer::Peer;
use crate::router::{Context, Router};

type Allow = Arc<dyn Fn(&str) -> Result<(), RpcError> + Send + Sync>;

/// The `subscribe` and `unsubscribe` methods of a [`Topics`], added to a router with
/// [`Router::topics`]:
///
/// | call | answer |
/// | --- | --- |
/// | `subscribe [topic]` on a topic without history | `true`, or `false` if already subscribed |
/// | `subscribe [topic]` on a topic with history | `{"epoch":E,"offset":K}`: live publications follow from K + 1 |
/// | `subscribe [topic, {"epoch":E,"offset":K0}]` on a topic with history | `{"epoch":E,"offset":K,"recovered":true}` after K0 + 1 ..= K were queued, or `"recovered":false` with nothing replayed ([`Topics::subscribe_from`]) |
/// | `unsubscribe [topic]` | `true`, or `false` if it was not subscribed |
///
/// A position may also be `null`, and params may be named: `{"topic": T, "from": P}`.
/// A position given for a topic without history is ignored (the answer, a boolean,
/// says the topic has none). A topic refused by [`allow`](Self::allow) is answered with
/// the error the hook returns.
///
/// What one connection may take is bounded: a topic's name at most
/// [`max_topic_bytes`](Self::max_topic_bytes) (default 256; a longer one is answered
/// `-32602`, by `presence` and `presence_count` too), and at most [`max_topics_per_peer`](Self::max_topics_per_peer) topics
/// (default 1,000; one more is answered `-32000` with the limit in the message,
/// subscribing again to one it has is not refused). These bound what a client can make
/// the server keep; the application's own [`Topics::subscribe`] has no such bound.
///
/// With [`presence`](Self::presence), subscribers may join the topic's presence (see
/// [`Topics::join_presence`]) and ask about it, the wire forms of the `cluster_node`
/// example:
///
/// | call | answer |
/// | --- | --- |
/// | `subscribe [topic, position_or_null, info]` (named: `"info"`) | as above, and the caller is a member with `info` (any JSON but `null`); with `"presence": true` in an info object it also gets `presence.join` / `presence.leave` for the topic, and that member is taken out of the info the others see. Called again with another info, the member has the new one: watchers hear a `presence.leave` with the old info, then a `presence.join` with the new; with `"presence": false` it no longer gets them (without the member, it goes on as it was) |
/// | `presence [topic]` | `[{"addr":"b/7","info":{"user":"ana"}}, ...]`, every node's members |
/// | `presence_count [topic]` | their number |
///
/// A refused join (a limit of [`PresenceLimits`](crate::PresenceLimits)) answers
/// `-32000` with the limit in the message, and changes nothing: the limits are checked
/// before the call subscribes, so it is sent nothing of the topic (no replay), and a
/// subscription there before stays as it was (a join refused by what changed meanwhile
/// undoes the subscription the call made; a malformed info, `-32602`, subscribes
/// nothing).
///
/// ```
/// use jsonrpc_peer::{HistoryConfig, Router, TopicMethods, Topics};
///
/// let topics = Topics::new();
/// topics.keep_history_for_all(HistoryConfig::default());
/// let router = Router::new().topics(TopicMethods::new(&topics).only(["prices", "news"]));
/// assert!(router.has_method("subscribe") && router.has_method("unsubscribe"));
/// ```
#[derive(Clone)]
pub struct TopicMethods {
    topics: Topics,
    subscribe: String,
    unsubscribe: String,
    allow: Option<Allow>,
    presence: bool,
    max_topics_per_peer: usize,
    max_topic_bytes: usize,
}

impl std::fmt::Debug for TopicMethods {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TopicMethods")
            .field("subscribe", &self.subscribe)
            .field("unsubscribe", &self.unsubscribe)
            .field("allow", &self.allow.is_some())
            .field("presence", &self.presence)
            .field("max_topics_per_peer", &self.max_topics_per_peer)
            .field("max_topic_bytes", &self.max_topic_bytes)
            .finish_non_exhaustive()
    }
}

/// `subscribe`'s params: `[topic]`, `[topic, position]`, `[topic, null]`,
/// `[topic, position_or_null, info]`, or named.
#[derive(Deserialize)]
struct SubscribeParams {
    topic: String,
    #[serde(default)]
    from: Option<Position>,
    #[serde(default)]
    info: Option<Value>,
}

/// `subscribe`'s answer: a boolean without history, a [`Subscribed`] with.
#[derive(Serialize)]
#[serde(untagged)]
enum Answer {
    Plain(bool),
    History(Subscribed),
}

impl TopicMethods {
    /// `subscribe` and `unsubscribe` for `topics`, any topic allowed.
    pub fn new(topics: &Topics) -> Self {
        TopicMethods {
            topics: topics.clone(),
            subscribe: "subscribe".to_owned(),
            unsubscribe: "unsubscribe".to_owned(),
            allow: None,
            presence: false,
            max_topics_per_peer: 1_000,
            max_topic_bytes: 256,
        }
    }

    /// Topics one connection may be subscribed to through these methods (default
    /// 1,000). Checked when a `subscribe` starts: subscribes of one connection running
    /// at once (on topics with history in a cluster, each waits for the bus) may pass
    /// it by as many as run.
    pub fn max_topics_per_peer(mut self, value: usize) -> Self {
        self.max_topics_per_peer = value;
        self
    }

    /// The longest topic name these methods take, in bytes (default 256).
    pub fn max_topic_bytes(mut self, value: usize) -> Self {
        self.max_topic_bytes = value;
        self
    }

    /// Other method names than `subscribe` and `unsubscribe`.
    pub fn names(mut self, subscribe: &str, unsubscribe: &str) -> Self {
        self.subscribe = subscribe.to_owned();
        self.unsubscribe = unsubscribe.to_owned();
        self
    }

    /// Subscribers may join a topic's presence (`subscribe [topic, position_or_null,
    /// info]`), and the methods `presence [topic]` and `presence_count [topic]` are
    /// added (see the table above). The topics [`allow`](Self::allow) refuses are refused
    /// there too.
    pub fn presence(mut self) -> Self {
        self.presence = true;
        self
    }

    /// Which topics may be subscribed to: `allow` returns the error a refused one is
    /// answered with. Unsubscribing is always allowed.
    pub fn allow(
        mut self,
        allow: impl Fn(&str) -> Result<(), RpcError> + Send + Sync + 'static,
    ) -> Self {
        self.allow = Some(Arc::new(allow));
        self
    }

    /// Only these topics may be subscribed to; another is answered `-32602` (`Invalid
    /// params`) with ``no topic `NAME`; topics: ["a", "b"]`` as its `data`.
    pub fn only<I>(self, topics: I) -> Self
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        let names: Vec<String> = topics.into_iter().map(Into::into).collect();
        self.allow(move |topic| {
            if names.iter().any(|name| name == topic) {
                Ok(())
            } else {
                Err(RpcError::invalid_params(format!(
                    "no topic `{topic}`; topics: {names:?}"
                )))
            }
        })
    }
}

impl<S: Send + Sync + 'static> Router<S> {
    /// Adds the methods `methods` describes (`subscribe` and `unsubscribe`, see
    /// [`TopicMethods`]).
    ///
    /// # Panics
    ///
    /// As [`Router::method`] does: if a method of either name is already registered,
    /// or a name given to [`names`](TopicMethods::names) begins with `rpc.`; with
    /// [`presence`](TopicMethods::presence), if `presence` or `presence_count` is.
    pub fn topics(self, methods: TopicMethods) -> Self {
        let TopicMethods {
            topics,
            subscribe,
            unsubscribe,
            allow,
            presence,
            max_topics_per_peer,
            max_topic_bytes,
        } = methods;
        let bounds = (max_topics_per_peer, max_topic_bytes);
        let leave = topics.clone();
        let (list, count) = (topics.clone(), topics.clone());
        let (allow_list, allow_count) = (allow.clone(), allow.clone());
        let router = self
            .method(&subscribe, move |cx: Context<S>, p: SubscribeParams| {
                let topics = topics.clone();
                let allowed = within_bounds(&topics, cx.peer(), &p.topic, bounds)
                    .and_then(|()| allow.as_ref().map_or(Ok(()), |allow| allow(&p.topic)));
                async move {
                    allowed?;
                    let join = match p.info.filter(|info| !info.is_null()) {
                        Some(_) if !presence => {
                            return Err(RpcError::invalid_params(
                                "subscribe takes [topic, position_or_null]: no presence here",
                            ))
                        }
                        Some(info) => Some(watching(info)?),
                        None => None,
                    };
                    if let Some((info, _)) = &join {
                        // Refused by a limit before anything is done: a refused
                        // subscribe sends nothing (no replay) and changes nothing.
                        topics
                            .presence_admits(cx.peer(), &p.topic, info)
                            .map_err(refused)?;
                    }
                    let was = join.is_some() && topics.topics_of(cx.peer()).contains(&p.topic);
                    let answer = if topics.keeps_history(&p.topic) {
                        let from = p.from;
                        Answer::History(topics.subscribe_from(cx.peer(), &p.topic, from).await?)
                    } else {
                        Answer::Plain(topics.subscribe(cx.peer(), &p.topic))
                    };
                    if let Some((info, watch)) = join {
                        if let Err(e) = enter(&topics, cx.peer(), &p.topic, info, watch).await {
                            // Refused: as if this call had not been made.
                            if !was {
                                topics.unsubscribe(cx.peer(), &p.topic);
                            }
                            return Err(e);
                        }
                    }
                    Ok::<_, RpcError>(answer)
                }
            })
            .method(&unsubscribe, move |cx: Context<S>, (topic,): (String,)| {
                let topics = leave.clone();
                async move { Ok::<_, RpcError>(topics.unsubscribe(cx.peer(), &topic)) }
            });
        if !presence {
            return router;
        }
        router
            .method("presence", move |_cx: Context<S>, (topic,): (String,)| {
                let topics = list.clone();
                let allowed = named_within(&topic, max_topic_bytes)
                    .and_then(|()| allow_list.as_ref().map_or(Ok(()), |allow| allow(&topic)));
                async move {
                    allowed?;
                    topics.presence(&topic).await.map_err(refused)
                }
            })
            .method(
                "presence_count",
                move |_cx: Context<S>, (topic,): (String,)| {
                    let topics = count.clone();
                    let allowed = named_within(&topic, max_topic_bytes)
                        .and_then(|()| allow_count.as_ref().map_or(Ok(()), |allow| allow(&topic)));
                    async move {
                        allowed?;
                        topics.presence_count(&topic).await.map_err(refused)
                    }
                },
            )
    }
}

/// Whether `peer` may subscribe to `topic` within `(max_topics_per_peer,
/// max_topic_bytes)`.
fn within_bounds(
    topics: &Topics,
    peer: &Peer,
    topic: &str,
    (max_topics, max_bytes): (usize, usize),
) -> Result<(), RpcError> {
    named_within(topic, max_bytes)?;
    match topics.subscribed(peer, topic) {
        (count, false) if count >= max_topics => Err(RpcError::new(
            -32000,
            format!("a connection may be subscribed to at most {max_topics} topics"),
        )),
        _ => Ok(()),
    }
}

/// Whether `topic`'s name is within `max_topic_bytes` (`-32602` if not): for every
/// method that names a topic, so that none looks up a name no one could subscribe to.
fn named_within(topic: &str, max_bytes: usize) -> Result<(), RpcError> {
    if topic.len() > max_bytes {
        return Err(RpcError::invalid_params(format!(
            "a topic's name may have at most {max_bytes} bytes, not {}",
            topic.len()
        )));
    }
    Ok(())
}

/// `info` without its `presence` member, and what that member asks: `Some(true)` to
/// watch, `Some(false)` not to (any more), `None` (no member) to leave it as it is.
fn watching(mut info: Value) -> Result<(Value, Option<bool>), RpcError> {
    match info.as_object_mut().and_then(|o| o.remove("presence")) {
        Some(Value::Bool(watch)) => Ok((info, Some(watch))),
        Some(_) => Err(RpcError::invalid_params("`presence` must be true or false")),
        None => Ok((info, None)),
    }
}

/// `peer` joins `topic`'s presence with `info`, and watches it, or no longer does, as
/// `watch` says.
async fn enter(
    topics: &Topics,
    peer: &Peer,
    topic: &str,
    info: Value,
    watch: Option<bool>,
) -> Result<(), RpcError> {
    // The info given is the member's: one there already with another takes it.
    topics
        .join_presence_with(peer, topic, info, true)
        .await
        .map_err(refused)?;
    match watch {
        Some(true) => {
            topics.watch_presence(peer, topic).await.map_err(refused)?;
        }
        Some(false) => {
            topics.unwatch_presence(peer, topic);
        }
        None => {}
    }
    Ok(())
}

/// A presence operation's error as an answer: `-32000` with the reason as the message.
fn refused(e: Error) -> RpcError {
    match e {
        Error::Rpc { error, .. } => error,
        other => RpcError::new(-32000, other.to_string()),
    }
}

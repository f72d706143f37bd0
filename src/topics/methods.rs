//! Ready-made `subscribe` and `unsubscribe` methods for a [`Topics`], with the wire
//! forms the examples and the clients of this crate use.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::Topics;
use crate::error::RpcError;
use crate::history::{Position, Subscribed};
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
}

impl std::fmt::Debug for TopicMethods {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TopicMethods")
            .field("subscribe", &self.subscribe)
            .field("unsubscribe", &self.unsubscribe)
            .field("allow", &self.allow.is_some())
            .finish_non_exhaustive()
    }
}

/// `subscribe`'s params: `[topic]`, `[topic, position]`, `[topic, null]`, or named.
#[derive(Deserialize)]
struct SubscribeParams {
    topic: String,
    #[serde(default)]
    from: Option<Position>,
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
        }
    }

    /// Other method names than `subscribe` and `unsubscribe`.
    pub fn names(mut self, subscribe: &str, unsubscribe: &str) -> Self {
        self.subscribe = subscribe.to_owned();
        self.unsubscribe = unsubscribe.to_owned();
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

    /// Only these topics may be subscribed to; another is answered `-32602` with the
    /// message ``no topic `NAME`; topics: ["a", "b"]``.
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
    /// If a method of either name is already registered.
    pub fn topics(self, methods: TopicMethods) -> Self {
        let TopicMethods {
            topics,
            subscribe,
            unsubscribe,
            allow,
        } = methods;
        let leave = topics.clone();
        self.method(&subscribe, move |cx: Context<S>, p: SubscribeParams| {
            let topics = topics.clone();
            let allowed = allow.as_ref().map_or(Ok(()), |allow| allow(&p.topic));
            async move {
                allowed?;
                if !topics.keeps_history(&p.topic) {
                    return Ok(Answer::Plain(topics.subscribe(cx.peer(), &p.topic)));
                }
                let subscribed = topics.subscribe_from(cx.peer(), &p.topic, p.from).await?;
                Ok::<_, RpcError>(Answer::History(subscribed))
            }
        })
        .method(&unsubscribe, move |cx: Context<S>, (topic,): (String,)| {
            let topics = leave.clone();
            async move { Ok::<_, RpcError>(topics.unsubscribe(cx.peer(), &topic)) }
        })
    }
}

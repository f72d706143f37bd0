//! The web demo's contract: what the server serves, what it calls on the page, and the
//! notifications it pushes. The server uses these types to serve and call; its
//! `rpc.discover` document (and from it `web-demo/demo-api.d.ts`) is made from them.

use jsonrpc_peer::schemars::JsonSchema;
use jsonrpc_peer::Api;
use serde::{Deserialize, Serialize};

use super::spec_methods;

/// A chat line as the page sends it.
#[derive(Serialize, Deserialize, JsonSchema)]
pub struct ChatLine {
    /// 1 to 40 characters.
    pub name: String,
    /// 1 to 500 characters.
    pub text: String,
}

/// How many pages of this server a chat line reached.
#[derive(Serialize, Deserialize, JsonSchema)]
pub struct Delivered {
    /// Pages of this server the line was queued for (across servers, the other servers'
    /// pages get it too and are not counted).
    pub delivered: usize,
}

/// The page's window, as `ui.describe` reports it.
#[derive(Serialize, Deserialize, JsonSchema)]
pub struct Viewport {
    /// CSS pixels.
    pub width: u32,
    /// CSS pixels.
    pub height: u32,
}

/// What the page says about itself when the server asks.
#[derive(Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UiDescription {
    /// The window's size.
    pub viewport: Viewport,
    /// `navigator.language`.
    pub language: String,
    /// The page's clock, ISO 8601.
    pub time: String,
    /// `navigator.userAgent`.
    pub user_agent: String,
}

/// `demo.ask_browser`'s answer: the page's own description and the round trip's time.
#[derive(Serialize, Deserialize, JsonSchema)]
pub struct AskAnswer {
    /// The method the server called on the page.
    pub asked: String,
    /// What the page answered.
    pub answer: UiDescription,
    /// From the server's call to the page's answer.
    pub elapsed_ms: f64,
}

/// One `metrics` push.
#[derive(Clone, Serialize, Deserialize, JsonSchema)]
pub struct Metrics {
    /// Counts pushes since the server started.
    pub seq: u64,
    /// The server's clock, milliseconds since 1970.
    pub time_ms: u64,
    /// Pages connected now.
    pub connections: usize,
    /// A wave with some noise.
    pub value: f64,
}

/// One chat line, as the chat topic (`chat.message`) publishes it.
#[derive(Clone, Serialize, Deserialize, JsonSchema)]
pub struct ChatMessage {
    /// Who wrote it.
    pub name: String,
    /// What they wrote.
    pub text: String,
    /// The server's clock when it arrived, milliseconds since 1970.
    pub at_ms: u64,
}

/// One `chat.message` notification: a chat line on the chat topic. Where the topic keeps
/// history (by default, on one server and across servers) it is
/// `{"offset":N,"data":LINE}`; where it keeps none (`--chat-history 0`) it is the line.
#[derive(Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum ChatPush {
    /// The line and its place in the topic's history.
    Recorded(ChatItem),
    /// The line alone.
    Plain(ChatMessage),
}

/// A chat line and its offset in the chat topic's history.
#[derive(Serialize, Deserialize, JsonSchema)]
pub struct ChatItem {
    /// From 1, each line the previous + 1 (within one epoch of the history).
    pub offset: u64,
    /// The line.
    pub data: ChatMessage,
}

/// A place in a topic's history: `subscribe`'s position to resume from.
#[derive(Serialize, Deserialize, JsonSchema)]
pub struct TopicPosition {
    /// Names one history of the topic; changes when it is lost (a server restart).
    pub epoch: String,
    /// The offset of the last publication received.
    pub offset: u64,
}

/// `subscribe`'s params: `[topic]`, or `[topic, {"epoch":E,"offset":K}]` to resume, and
/// `[topic, position_or_null, info]` to be in the chat's presence.
#[derive(Serialize, Deserialize, JsonSchema)]
pub struct SubscribeParams {
    /// The topic: `chat.message`.
    pub topic: String,
    /// Where to resume from: everything published after it is sent first.
    #[serde(default)]
    pub from: Option<TopicPosition>,
    /// Join the topic's presence with this info (at most 1 KiB as JSON); with
    /// `"presence": true` in it, also get `presence.join` and `presence.leave`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub info: Option<ChatPresenceInfo>,
}

/// What a page joins the chat's presence with.
#[derive(Serialize, Deserialize, JsonSchema)]
pub struct ChatPresenceInfo {
    /// The name the page chats under.
    pub name: String,
    /// Ask for `presence.join` / `presence.leave` (taken out of what the others see).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub presence: Option<bool>,
}

/// One member of the chat: a connected page (a person in two tabs is two members).
#[derive(Serialize, Deserialize, JsonSchema)]
pub struct ChatMember {
    /// The page's connection, `NODE/ID` (`local/ID` without a cluster).
    pub addr: String,
    /// What it joined with: `{"name": ...}`.
    pub info: ChatMemberInfo,
}

/// What the other pages see of a member.
#[derive(Serialize, Deserialize, JsonSchema)]
pub struct ChatMemberInfo {
    /// The name it chats under.
    pub name: String,
}

/// A page joined or left the chat (its link ended, or its server went).
#[derive(Serialize, Deserialize, JsonSchema)]
pub struct ChatPresenceChange {
    /// The topic: `chat.message`.
    pub topic: String,
    /// The page's connection.
    pub addr: String,
    /// What it joined with.
    pub info: ChatMemberInfo,
}

/// `subscribe`'s answer: a position on a topic with history, a boolean on one without.
#[derive(Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum SubscribeAnswer {
    /// Live publications follow from `offset + 1`.
    History(Subscribed),
    /// A topic without history: whether this subscribed (false: it already was).
    Plain(bool),
}

/// Where a subscription to a topic with history starts.
#[derive(Serialize, Deserialize, JsonSchema)]
pub struct Subscribed {
    /// The topic's epoch.
    pub epoch: String,
    /// The newest offset when the subscription took effect.
    pub offset: u64,
    /// Given a position: whether everything after it was sent (false: nothing was, the
    /// position is no longer kept; fetch the state afresh).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovered: Option<bool>,
}

/// A line of `chat.recent`, with its offset.
#[derive(Clone, Serialize, Deserialize, JsonSchema)]
pub struct RecentLine {
    /// Its offset in the chat topic's history; null where the topic keeps none.
    pub offset: Option<u64>,
    /// Who wrote it.
    pub name: String,
    /// What they wrote.
    pub text: String,
    /// The server's clock when it arrived, milliseconds since 1970.
    pub at_ms: u64,
}

/// `chat.recent`'s answer.
#[derive(Serialize, Deserialize, JsonSchema)]
pub struct RecentChat {
    /// The epoch the offsets are in; null before the first line, or without history.
    pub epoch: Option<String>,
    /// The last lines (at most 50), oldest first.
    pub lines: Vec<RecentLine>,
}

/// `demo.long_task`'s params.
#[derive(Serialize, Deserialize, JsonSchema)]
pub struct LongTaskParams {
    /// How long the task runs: more than 0, at most 600.
    pub seconds: f64,
}

jsonrpc_peer::method!(
    /// Runs for `seconds`, reporting progress; stops when its caller cancels it.
    pub LongTaskCall = "demo.long_task", LongTaskParams => String
);
jsonrpc_peer::method!(
    /// How many long tasks run now.
    pub TasksRunning = "demo.tasks_running", () => usize
);
jsonrpc_peer::method!(
    /// The server calls the page's `ui.describe` before it answers: a nested round trip.
    pub AskBrowser = "demo.ask_browser", () => AskAnswer
);
jsonrpc_peer::method!(
    /// Publishes a chat line on the chat topic, to every page subscribed.
    pub ChatSend = "chat.send", ChatLine => Delivered
);
jsonrpc_peer::method!(
    /// The chat's last lines: what a page that missed some shows again.
    pub ChatRecent = "chat.recent", () => RecentChat
);
jsonrpc_peer::method!(
    /// Subscribes to a topic (`chat.message`), from a position to resume from if given.
    pub Subscribe = "subscribe", SubscribeParams => SubscribeAnswer
);
jsonrpc_peer::method!(
    /// Unsubscribes from a topic: true if it was subscribed.
    pub Unsubscribe = "unsubscribe", (String,) => bool
);
jsonrpc_peer::method!(
    /// The members of a topic's presence (`chat.message`), on every server.
    pub PresenceList = "presence", (String,) => Vec<ChatMember>
);
jsonrpc_peer::method!(
    /// How many members a topic's presence has, on every server.
    pub PresenceCount = "presence_count", (String,) => usize
);
jsonrpc_peer::method!(
    /// Served by the page: its viewport, language, clock and user agent.
    pub UiDescribe = "ui.describe", () => UiDescription
);
jsonrpc_peer::notification!(
    /// Pushed to every page four times a second.
    pub MetricsPush = "metrics", Metrics
);
jsonrpc_peer::notification!(
    /// Each chat line, to every page subscribed to the chat topic.
    pub ChatBroadcast = "chat.message", ChatPush
);

jsonrpc_peer::notification!(
    /// A page joined the chat, to the pages that asked (`"presence": true`).
    pub PresenceJoinPush = "presence.join", ChatPresenceChange
);
jsonrpc_peer::notification!(
    /// A page left the chat, to the pages that asked (`"presence": true`).
    pub PresenceLeavePush = "presence.leave", ChatPresenceChange
);

/// The demo server's description: the specification's methods and the demo's own (the
/// chat topic's `subscribe`, `unsubscribe`, `presence` and `presence_count` among them),
/// the page's `ui.describe`, and the pushes.
pub fn web_api() -> Api {
    spec_methods::with_spec_api(Api::new("jsonrpc-peer web demo", env!("CARGO_PKG_VERSION")))
        .description("The demo page's server; ui.describe is served by the page.")
        .serves(LongTaskCall)
        .serves(TasksRunning)
        .serves(AskBrowser)
        .serves(ChatSend)
        .serves(ChatRecent)
        .serves(Subscribe)
        .serves(Unsubscribe)
        .serves(PresenceList)
        .serves(PresenceCount)
        .expects(UiDescribe)
        .sends(MetricsPush)
        .sends(ChatBroadcast)
        .sends(PresenceJoinPush)
        .sends(PresenceLeavePush)
}

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

/// How many pages a chat line reached.
#[derive(Serialize, Deserialize, JsonSchema)]
pub struct Delivered {
    /// Pages the line was queued for.
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

/// One `chat.message` broadcast.
#[derive(Serialize, Deserialize, JsonSchema)]
pub struct ChatMessage {
    /// Who wrote it.
    pub name: String,
    /// What they wrote.
    pub text: String,
    /// The server's clock when it arrived, milliseconds since 1970.
    pub at_ms: u64,
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
    /// Broadcasts a chat line to every page.
    pub ChatSend = "chat.send", ChatLine => Delivered
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
    /// Broadcast to every page for each chat line.
    pub ChatBroadcast = "chat.message", ChatMessage
);

/// The demo server's description: the specification's methods and the demo's own,
/// the page's `ui.describe`, and the two pushes.
pub fn web_api() -> Api {
    spec_methods::with_spec_api(Api::new("jsonrpc-peer web demo", env!("CARGO_PKG_VERSION")))
        .description("The demo page's server; ui.describe is served by the page.")
        .serves(LongTaskCall)
        .serves(TasksRunning)
        .serves(AskBrowser)
        .serves(ChatSend)
        .expects(UiDescribe)
        .sends(MetricsPush)
        .sends(ChatBroadcast)
}

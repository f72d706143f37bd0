//! Per-connection settings. Every bound has a default and a setter.
//!
//! The fields are public to read; each is set by the method of the same name (the
//! struct is `#[non_exhaustive]`, so a new setting breaks nobody), as in
//! [`HandshakePolicy`](crate::HandshakePolicy) and [`Backoff`](crate::Backoff).

use std::time::Duration;

use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;

use crate::layer::{Layer, Layers};
use crate::limit::RateLimit;

/// Settings of one connection, for clients and servers alike.
///
/// ```
/// use std::time::Duration;
/// use jsonrpc_peer::PeerConfig;
///
/// let config = PeerConfig::default()
///     .call_timeout(Duration::from_secs(5))
///     .max_message_size(64 * 1024);
/// assert_eq!(config.call_timeout, Duration::from_secs(5));
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct PeerConfig {
    /// How long a call waits for its answer (default 30 s).
    /// A call's [`.timeout(d)`](crate::Call::timeout) overrides it per call. This
    /// timeout counts from when the connection's task takes the call up, within
    /// microseconds of the call unless the runtime is busy: no clock is read for each
    /// call. A call's own timeout, when it differs, counts from the call.
    pub call_timeout: Duration,
    /// The largest incoming message, in bytes (default 1 MiB). A larger one closes
    /// the connection with 1009, before it is buffered whole.
    pub max_message_size: usize,
    /// The longest incoming batch (default 1,000). A longer one is answered with one
    /// -32600 error and none of its calls runs.
    pub max_batch_len: usize,
    /// How many incoming calls (or batches) may run at once on one connection
    /// (default 256). Past it the peer stops starting calls until some finish;
    /// answers to its own calls are still read (a handler may be waiting on one), and
    /// so are cancels (the call a cancel stops may be what holds reading up), also
    /// behind calls waiting for their turn, up to [`read_ahead`](Self::read_ahead)
    /// of them. A cancel for a call still waiting takes it: it never starts, and is
    /// answered `-32800` (none in the MCP form). A call of a batch still waiting is
    /// stopped as its batch starts (a batch runs whole), and the batch's array
    /// answers it so. 0 counts as 1 (0 would never read a call).
    pub max_in_flight: usize,
    /// While calls wait for their turn (past [`max_in_flight`](Self::max_in_flight),
    /// or behind notifications), how many messages that start something are read
    /// ahead and kept (default 64), so that cancels and answers behind them are acted
    /// on; their bytes are bounded by [`max_message_size`](Self::max_message_size)
    /// too (one message is always kept, whatever its size). Past either, reading stops
    /// until they have had their turn: the other side feels the back-pressure. 0
    /// counts as 1.
    pub read_ahead: usize,
    /// How many outgoing frames may wait for the socket (default 1,024). Calls and
    /// answers wait for room; a broadcast to a full queue applies the slow-peer policy.
    /// 0 counts as 1 (0 would never send).
    pub outgoing_queue: usize,
    /// How many bytes of outgoing frames may wait for the socket (default 1 MiB),
    /// beside the frame bound. A frame goes in while the queue holds less, so one
    /// frame larger than this still goes; calls and answers wait for room, and a
    /// broadcast applies the slow-peer policy, as with the frame bound. Answers
    /// that wait for room count too: past this many bytes of them, the connection
    /// stops reading until they are queued. With the defaults, a peer that never
    /// reads costs the queue at most 1 MiB plus one frame, and its answers waiting
    /// at most as much again (plus the answers of calls still running and one
    /// incoming message read ahead). 0 counts as 1.
    pub outgoing_queue_bytes: usize,
    /// How many incoming notifications may wait for their ordered handler
    /// (default 256). Past it the peer stops reading until the handler catches up.
    /// 0 counts as 1.
    pub notification_queue: usize,
    /// How often to ping the other side (default every 30 s); `None` sends no pings.
    pub ping_interval: Option<Duration>,
    /// How long a ping may go unanswered (nothing at all heard from the other side
    /// since it was sent) before the connection is closed (default 30 s). A peer
    /// that goes silent is caught within the ping interval plus this timeout. While
    /// the outgoing queue is full (no ping fits), the other side taking frames from
    /// it counts as hearing from it.
    pub keepalive_timeout: Duration,
    /// How long a closing handshake may take before the connection is dropped
    /// (default 2 s), whatever is still queued. A close frame from the other side is
    /// seen even while reading is paused (too many calls running, or that side reads
    /// nothing and its answers wait for room): the connection reads on then, up to
    /// one message that would start something. Counted in whole milliseconds, rounded
    /// up, and at most `u32::MAX` of them (49 days).
    pub close_timeout: Duration,
    /// The WebSocket read buffer, in bytes (default 2 KiB). It is allocated for
    /// every connection, idle ones too; larger messages still arrive whole. JSON-RPC
    /// frames are small: the benchmark reads as fast with 2 KiB as with 4 KiB, and 1 KiB
    /// takes an idle connection from about 4.6 to 3.6 KiB for 2% to 4% of the pipelined
    /// call and push rates (a server whose connections mostly wait may prefer it).
    pub read_buffer_size: usize,
    /// What a broadcast or topic notification does when this peer's outgoing
    /// queue is full (default: close it with 1008).
    pub slow_peer: SlowPeer,
    /// How long a client may take to connect: TCP, TLS and the WebSocket handshake
    /// together (default 10 s). Read by the client side only
    /// ([`connect_with_config`](crate::connect_with_config), [`Reconnecting`](crate::Reconnecting)
    /// at every attempt); a server bounds its side of the handshake with
    /// [`HandshakePolicy::handshake_timeout`](crate::HandshakePolicy::handshake_timeout).
    /// It lives here, not in a client-only type, because a client's `PeerConfig` is
    /// already the one value it passes for everything about its connection.
    pub connect_timeout: Duration,
    /// Whether a call given up after its request was sent (its future dropped, or
    /// its timeout passed) tells the other side with a cancel notification
    /// (default on). The cancel never waits: when the outgoing queue is full it is
    /// skipped and counted in [`Peer::cancels_skipped`](crate::Peer::cancels_skipped).
    pub cancel_on_drop: bool,
    /// Which cancel notification is sent (default [`CancelStyle::Lsp`]). Incoming
    /// cancels are understood in either form.
    pub cancel_style: CancelStyle,
    /// How many calls and notifications per second the other side may send
    /// (default `None`: no limit). Each item of a batch counts. Past it a call is
    /// answered `-32005` with a retry-after and a notification is dropped; a
    /// connection that keeps on is closed with 4029. See [`RateLimit`].
    pub rate_limit: Option<RateLimit>,
    /// The call layers, in the order added ([`layer`](Self::layer)).
    pub(crate) layers: Layers,
}

/// Which cancel notification this side sends when it gives up on a call.
///
/// Both are understood when they arrive, whatever this setting says.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum CancelStyle {
    /// The Language Server Protocol's `{"method":"$/cancelRequest","params":{"id":ID}}`.
    /// The other side still answers the call: with `-32800 Request cancelled`, or with
    /// what a cooperative handler returned. The default.
    #[default]
    Lsp,
    /// The Model Context Protocol's
    /// `{"method":"notifications/cancelled","params":{"requestId":ID}}`. The other side
    /// sends no answer at all.
    Mcp,
}

/// What a notification pushed without waiting (a broadcast, a topic) does when the
/// peer's outgoing queue is full: the peer does not read fast enough.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum SlowPeer {
    /// Close that peer with 1008 ("outgoing queue full"): it would lose messages
    /// otherwise, and a client that reconnects gets a fresh start. The default.
    #[default]
    Close,
    /// Drop the notification for that peer and keep the connection.
    Drop,
}

impl Default for PeerConfig {
    fn default() -> Self {
        PeerConfig {
            call_timeout: Duration::from_secs(30),
            max_message_size: 1 << 20,
            max_batch_len: 1000,
            max_in_flight: 256,
            read_ahead: 64,
            outgoing_queue: 1024,
            outgoing_queue_bytes: 1 << 20,
            notification_queue: 256,
            ping_interval: Some(Duration::from_secs(30)),
            keepalive_timeout: Duration::from_secs(30),
            close_timeout: Duration::from_secs(2),
            read_buffer_size: 2 * 1024,
            slow_peer: SlowPeer::Close,
            connect_timeout: Duration::from_secs(10),
            cancel_on_drop: true,
            cancel_style: CancelStyle::Lsp,
            rate_limit: None,
            layers: Layers::default(),
        }
    }
}

macro_rules! setting {
    ($name:ident: $ty:ty) => {
        #[doc = concat!("Sets [`", stringify!($name), "`](Self::", stringify!($name), ").")]
        pub fn $name(mut self, value: $ty) -> Self {
            self.$name = value;
            self
        }
    };
}

impl PeerConfig {
    setting!(call_timeout: Duration);
    setting!(max_message_size: usize);
    setting!(max_batch_len: usize);
    setting!(max_in_flight: usize);
    setting!(read_ahead: usize);
    setting!(outgoing_queue: usize);
    setting!(outgoing_queue_bytes: usize);
    setting!(notification_queue: usize);
    setting!(ping_interval: Option<Duration>);
    setting!(keepalive_timeout: Duration);
    setting!(close_timeout: Duration);
    setting!(read_buffer_size: usize);
    setting!(slow_peer: SlowPeer);
    setting!(connect_timeout: Duration);
    setting!(cancel_on_drop: bool);
    setting!(cancel_style: CancelStyle);
    setting!(rate_limit: Option<RateLimit>);

    /// Adds a call layer after those added before: it sees every call and
    /// notification of the connections made with this config, in both directions
    /// (see [`layer`](crate::layer) for the order).
    pub fn layer(mut self, layer: impl Layer) -> Self {
        self.layers = self.layers.with(layer);
        self
    }

    /// The tungstenite settings these limits translate to.
    pub(crate) fn websocket(&self) -> WebSocketConfig {
        WebSocketConfig::default()
            .read_buffer_size(self.read_buffer_size)
            // Frames are flushed by the connection's task when its queue runs dry, so the
            // buffer only needs to hold what accumulates between flushes.
            .write_buffer_size(64 * 1024)
            // Bounded, or a peer that sends pings and never reads grows it by a pong
            // each; past it tungstenite keeps only the latest pong. The adapter sends
            // frames of at most 64 KiB (larger messages in fragments), so any one fits.
            .max_write_buffer_size(2 * crate::transport::FRAGMENT)
            .max_message_size(Some(self.max_message_size))
            .max_frame_size(Some(self.max_message_size))
    }
}

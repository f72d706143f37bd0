//! The subscribing side of a [`RedisBackplane`](super::RedisBackplane): one connection
//! it owns and redials itself, the subscription set it issues again on every new
//! connection before reporting [`BusEvent::Up`], and the probe that tells a silent link
//! from a quiet one.

use std::collections::{BTreeSet, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, PushInfo, PushKind, Value};
use tokio::sync::{mpsc, oneshot};

use super::RedisOptions;
use crate::cluster::backplane::{BackplaneError, BusEvent};

/// What the subscribing side reports to the backplane's handle.
#[derive(Default)]
pub(super) struct Shared {
    /// The link is up: every subscription issued.
    pub up: AtomicBool,
    /// Messages dropped because the event stream was full.
    pub dropped: AtomicU64,
    /// Times the link was dialed again after a loss.
    pub reconnects: AtomicU64,
}

/// Room kept in the event stream for the events that are not messages (`Subscribed`,
/// `Interrupted`, `Down`, `Up`): a consumer that has fallen behind loses messages,
/// counted, but still learns where a subscription took effect.
pub(super) const RESERVED: usize = 64;

/// Hands a message to the consumer if the stream has room for it beside the reserve;
/// else counts it dropped. (Each stream has one sender, its subscribing task: the room
/// seen is not taken meanwhile.)
pub(super) fn deliver(events: &mpsc::Sender<BusEvent>, message: BusEvent, shared: &Shared) {
    if events.capacity() <= RESERVED || events.try_send(message).is_err() {
        shared.dropped.fetch_add(1, Ordering::Relaxed);
    }
}

/// A subscribe or unsubscribe, for the subscribing side to issue.
pub(super) enum Control {
    Subscribe(String, oneshot::Sender<Result<(), BackplaneError>>),
    Unsubscribe(String, oneshot::Sender<Result<(), BackplaneError>>),
}

/// One live subscribing connection and the pushes it delivers.
pub(super) struct Link {
    conn: MultiplexedConnection,
    pushes: mpsc::Receiver<PushInfo>,
}

/// The subscribing side: owns the channel set and the connection, redials on loss.
pub(super) struct Subscriber {
    client: Client,
    options: RedisOptions,
    /// This link's own channel, for the probe.
    probe: String,
    channels: BTreeSet<String>,
    /// Channels subscribed on the live connection whose `subscribe` push has not come
    /// yet: that push is where [`BusEvent::Subscribed`] goes in the stream. Not the
    /// channels subscribed again on a redial.
    fresh: HashSet<String>,
    events: mpsc::Sender<BusEvent>,
    shared: Arc<Shared>,
}

/// Why a connected session ended.
enum End {
    /// The backplane was dropped.
    Shutdown,
    /// The link is gone (or silent): dial again.
    Lost(String),
}

impl Subscriber {
    /// Subscribed to nothing yet; reports on `events` and in `shared`.
    pub fn new(
        client: Client,
        options: RedisOptions,
        events: mpsc::Sender<BusEvent>,
        shared: Arc<Shared>,
    ) -> Self {
        Subscriber {
            probe: format!("{}:probe:{:016x}", options.prefix, fastrand::u64(..)),
            client,
            options,
            channels: BTreeSet::new(),
            fresh: HashSet::new(),
            events,
            shared,
        }
    }

    /// Dials and issues the probe channel and the whole subscription set.
    pub async fn dial(&self) -> redis::RedisResult<Link> {
        let (tx, pushes) = mpsc::channel(self.options.event_capacity);
        let shared = self.shared.clone();
        // Called by the connection's reader, which must not wait: a full queue drops
        // (counted) rather than letting Redis' output buffer for us grow here instead.
        let sender = move |info: PushInfo| -> Result<(), ()> {
            let disconnect = info.kind == PushKind::Disconnection;
            match tx.try_send(info) {
                Ok(()) => Ok(()),
                Err(mpsc::error::TrySendError::Full(_)) if !disconnect => {
                    shared.dropped.fetch_add(1, Ordering::Relaxed);
                    Err(())
                }
                Err(_) => Err(()),
            }
        };
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(self.options.connect_timeout)
            .set_response_timeout(self.options.response_timeout)
            .set_push_sender(sender);
        let mut conn = self
            .client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        let all: Vec<&String> = std::iter::once(&self.probe)
            .chain(self.channels.iter())
            .collect();
        // One channel per SUBSCRIBE: each command then has exactly one reply.
        for chunk in all.chunks(100) {
            let mut pipe = redis::pipe();
            for channel in chunk {
                pipe.cmd("SUBSCRIBE").arg(channel.as_str());
            }
            pipe.exec_async(&mut conn).await?;
        }
        Ok(Link { conn, pushes })
    }

    pub async fn run(mut self, mut link: Link, mut control: mpsc::Receiver<Control>) {
        loop {
            let why = match self.session(&mut link, &mut control).await {
                End::Shutdown => return,
                End::Lost(why) => why,
            };
            tracing::warn!(reason = %why, "redis backplane: subscription link lost, dialing again");
            self.shared.up.store(false, Ordering::Release);
            // Dropping the connection closes it (its reader task is aborted with it).
            drop(link);
            self.fresh.clear();
            if self.events.send(BusEvent::Down).await.is_err() {
                tracing::debug!("redis backplane: nobody reads the events");
            }
            link = match self.redial(&mut control).await {
                Some(link) => link,
                None => return,
            };
            self.shared.reconnects.fetch_add(1, Ordering::Relaxed);
            self.shared.up.store(true, Ordering::Release);
            let _ = self.events.send(BusEvent::Up).await;
        }
    }

    /// Dials with backoff until it works; meanwhile subscribe calls join the set and
    /// fail as unavailable. `None` when the backplane was dropped.
    async fn redial(&mut self, control: &mut mpsc::Receiver<Control>) -> Option<Link> {
        let mut attempt = 0u32;
        loop {
            let wait = tokio::time::sleep(self.options.backoff.delay(attempt));
            tokio::pin!(wait);
            loop {
                tokio::select! {
                    () = &mut wait => break,
                    cmd = control.recv() => match cmd? {
                        Control::Subscribe(channel, done) => {
                            self.channels.insert(channel);
                            let _ = done.send(Err(BackplaneError::Unavailable(
                                "redis link is down; subscribed again once it is back".into(),
                            )));
                        }
                        Control::Unsubscribe(channel, done) => {
                            self.channels.remove(&channel);
                            let _ = done.send(Ok(()));
                        }
                    },
                }
            }
            match self.dial().await {
                Ok(link) => return Some(link),
                Err(e) => {
                    tracing::debug!(error = %e, attempt, "redis backplane: dial failed");
                    attempt = attempt.saturating_add(1);
                }
            }
        }
    }

    /// Serves one connected link until it ends.
    ///
    /// Liveness counts silence only over probe intervals this loop itself saw on time:
    /// a tick that comes more than half an interval late means this process was too busy
    /// to read (a node delivering one message to thousands of peers queues this task
    /// behind theirs), so whether Redis answered meanwhile is unknown, not "no". The link
    /// is dropped after [`RedisOptions::probe_misses`] such on-time intervals in a row with
    /// no probe back, read after whatever already waits in the push queue.
    async fn session(&mut self, link: &mut Link, control: &mut mpsc::Receiver<Control>) -> End {
        let interval = self.options.probe_interval;
        let mut ticks = tokio::time::interval(interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // A probe came back since the last tick; on-time ticks in a row without one.
        let (mut heard, mut misses) = (true, 0u32);
        loop {
            tokio::select! {
                push = link.pushes.recv() => {
                    let Some(push) = push else { return End::Lost("push stream ended".into()) };
                    if let Some(end) = self.on_push(push, &mut heard) {
                        return end;
                    }
                }
                cmd = control.recv() => {
                    let Some(cmd) = cmd else { return End::Shutdown };
                    if let Err(why) = self.apply(&mut link.conn, cmd).await {
                        return End::Lost(why);
                    }
                }
                scheduled = ticks.tick() => {
                    // What is already queued was heard before this tick.
                    while let Ok(push) = link.pushes.try_recv() {
                        if let Some(end) = self.on_push(push, &mut heard) {
                            return end;
                        }
                    }
                    let on_time = scheduled.elapsed() <= interval / 2;
                    if std::mem::take(&mut heard) {
                        misses = 0;
                    } else if on_time {
                        misses += 1;
                        if misses >= self.options.probe_misses {
                            return End::Lost(format!(
                                "no probe back for {misses} intervals of {interval:?}"
                            ));
                        }
                    }
                    let mut conn = link.conn.clone();
                    let probe = self.probe.clone();
                    // Not awaited here: a frozen Redis must not stop this loop from
                    // noticing the silence.
                    tokio::spawn(async move {
                        let _ = redis::cmd("PUBLISH").arg(&probe).arg("p").exec_async(&mut conn).await;
                    });
                }
            }
        }
    }

    /// One push from the link: a message goes to the events (a probe sets `heard`), a
    /// disconnection ends the session.
    fn on_push(&mut self, push: PushInfo, heard: &mut bool) -> Option<End> {
        match push.kind {
            PushKind::Disconnection => return Some(End::Lost("connection closed".into())),
            PushKind::Message => {
                let (channel, payload) = message_parts(push.data)?;
                if channel == self.probe {
                    *heard = true;
                } else {
                    deliver(
                        &self.events,
                        BusEvent::Message { channel, payload },
                        &self.shared,
                    );
                }
            }
            // In the stream after every message of an earlier subscription to the
            // channel, before every message of this one.
            PushKind::Subscribe => {
                if let Some(channel) = first_text(push.data) {
                    if self.fresh.remove(&channel) {
                        let _ = self.events.try_send(BusEvent::Subscribed { channel });
                    }
                }
            }
            _ => {}
        }
        None
    }

    /// Runs one subscribe or unsubscribe on the live connection. An error that means
    /// the link is gone ends the session (the set already holds the change); Redis
    /// refusing the command (an ACL that does not allow the channel) fails it alone: a
    /// refused subscribe leaves the set, and the link goes on.
    async fn apply(
        &mut self,
        conn: &mut MultiplexedConnection,
        cmd: Control,
    ) -> Result<(), String> {
        // `added`: the channel, when this subscribe put it in the set (one subscribed
        // before stays there if Redis refuses it now: its subscription stands).
        let (result, done, unsubscribing, added) = match cmd {
            Control::Subscribe(channel, done) => {
                let new = self.channels.insert(channel.clone());
                if new {
                    self.fresh.insert(channel.clone());
                }
                let result = conn.subscribe(&channel).await;
                (result, done, false, new.then_some(channel))
            }
            Control::Unsubscribe(channel, done) => {
                self.channels.remove(&channel);
                (conn.unsubscribe(&channel).await, done, true, None)
            }
        };
        match result {
            Ok(()) => {
                let _ = done.send(Ok(()));
                Ok(())
            }
            Err(e) if !(e.is_io_error() || e.is_unrecoverable_error() || e.is_timeout()) => {
                // Redis answered, with a refusal: the link is fine. Kept in the set, the
                // channel would fail every redial, and the link would stay down.
                if let Some(channel) = &added {
                    self.channels.remove(channel);
                    self.fresh.remove(channel);
                }
                let _ = done.send(if unsubscribing {
                    Ok(())
                } else {
                    Err(BackplaneError::Refused(e.to_string()))
                });
                Ok(())
            }
            Err(e) => {
                let why = e.to_string();
                // The session ends and the link is dialed again from the set: a
                // subscribe is issued then (the caller retries after `Up`), an
                // unsubscribe has taken effect.
                let _ = done.send(if unsubscribing {
                    Ok(())
                } else {
                    Err(BackplaneError::Unavailable(why.clone()))
                });
                Err(why)
            }
        }
    }
}

/// The channel of a `subscribe`, `ssubscribe` or `sunsubscribe` push (`[channel, count]`).
pub(super) fn first_text(data: Vec<Value>) -> Option<String> {
    match data.into_iter().next()? {
        Value::BulkString(b) => String::from_utf8(b).ok(),
        Value::SimpleString(s) => Some(s),
        _ => None,
    }
}

/// `[channel, payload]` of a RESP3 `message` push.
pub(super) fn message_parts(data: Vec<Value>) -> Option<(String, Bytes)> {
    let mut parts = data.into_iter();
    let channel = match parts.next()? {
        Value::BulkString(b) => String::from_utf8(b).ok()?,
        Value::SimpleString(s) => s,
        _ => return None,
    };
    let payload = match parts.next()? {
        Value::BulkString(b) => Bytes::from(b),
        Value::SimpleString(s) => Bytes::from(s),
        _ => return None,
    };
    Some((channel, payload))
}

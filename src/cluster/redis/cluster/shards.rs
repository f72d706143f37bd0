//! The subscribing side of a [`RedisClusterBackplane`](super::RedisClusterBackplane):
//! one RESP3 connection per master (a *link*), holding the shard channels whose slots
//! that master serves, and one task that owns them all.
//!
//! The task keeps the channel set and the slot map, and makes the links match them:
//! a channel is subscribed on its slot's master, a master without a link is dialed
//! (with backoff), a link lost takes its channels with it until they are subscribed
//! again wherever the map now puts them. What Redis confirms is what counts: a channel
//! is held once its `ssubscribe` push came back on that link, not when a command
//! returned (a `sunsubscribe` Redis sends by itself, when a slot leaves a master, can
//! arrive while a command waits and be taken for its reply).
//!
//! What it reports: `Down` when no link is left, `Up` once every master has a link and
//! every channel is held again, and, while up, [`BusEvent::Interrupted`] for the
//! channels of one lost link (a master killed, its replica promoted) or of one moved
//! slot, once they are held again elsewhere. Each link sends itself a probe on a
//! channel of its master's slots every `probe_interval`; a link with no probe back for
//! `probe_misses` intervals in a row is dropped and dialed again, as one that closed.
//! Only intervals this task saw on time count, judged after reading what already waits
//! in the push queue: a process too busy to read has not heard, which is not "no".

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, IntoConnectionInfo, ProtocolVersion};
use redis::{PushInfo, PushKind};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::topology::{Map, Topology};
use crate::cluster::backplane::{BackplaneError, BusEvent};
use crate::cluster::redis::subscriber::{deliver, first_text, message_parts, Control, Shared};
use crate::cluster::redis::RedisOptions;
use crate::cluster::slot::{slot, tag_where};

type Done = oneshot::Sender<Result<(), BackplaneError>>;

/// How often the task looks at its timers (dials to retry, answers overdue, probes).
const TICK: Duration = Duration::from_millis(50);

/// One master's subscribing connection.
struct Link {
    id: u64,
    conn: MultiplexedConnection,
    /// Its subscribes and unsubscribes, sent in order by one writer (`write_in_order`):
    /// each spawned on its own, an unsubscribe and the subscribe right after it could
    /// reach Redis the other way round, and the late unsubscribe undid a subscribe
    /// already answered Ok.
    out: mpsc::UnboundedSender<Outgoing>,
    /// Channels Redis confirmed on this link.
    have: HashSet<String>,
    /// Channels asked for and not confirmed yet, with when they were asked.
    asked: HashMap<String, Instant>,
    /// This link's probe channel, in one of its master's slots.
    probe: String,
    /// A probe came back since the last probe tick; on-time ticks in a row without one.
    heard: bool,
    misses: u32,
}

/// A link's subscribe commands, in the order they are to reach Redis.
enum Outgoing {
    /// `SSUBSCRIBE`, one channel per command, in one pipeline.
    Subscribe(Vec<String>),
    Unsubscribe(String),
}

/// Sends a link's commands one after the other; a refused subscribe is told back.
async fn write_in_order(
    mut conn: MultiplexedConnection,
    id: u64,
    mut out: mpsc::UnboundedReceiver<Outgoing>,
    internal: mpsc::UnboundedSender<Internal>,
) {
    while let Some(command) = out.recv().await {
        match command {
            Outgoing::Subscribe(channels) => {
                let mut pipe = redis::pipe();
                for channel in &channels {
                    pipe.cmd("SSUBSCRIBE").arg(channel);
                }
                if let Err(e) = pipe.exec_async(&mut conn).await {
                    let why = e.to_string();
                    let _ = internal.send(Internal::Refused { id, channels, why });
                }
            }
            Outgoing::Unsubscribe(channel) => {
                let _ = redis::cmd("SUNSUBSCRIBE")
                    .arg(&channel)
                    .exec_async(&mut conn)
                    .await;
            }
        }
    }
}

/// What the link's connections and the task's own helpers report back.
pub(super) enum Internal {
    Dialed {
        addr: String,
        id: u64,
        result: Result<MultiplexedConnection, String>,
    },
    /// The link's connection closed.
    Lost { id: u64 },
    /// A subscribe command failed.
    Refused {
        id: u64,
        channels: Vec<String>,
        why: String,
    },
    /// A fetch of the slot map ended.
    Refreshed(Option<String>),
}

/// Where the task's inputs come from, made before the first dial.
pub(super) struct Inputs {
    pub pushes: mpsc::Receiver<(u64, PushInfo)>,
    pub internal: mpsc::UnboundedReceiver<Internal>,
    pub control: mpsc::Receiver<Control>,
}

/// The task's state.
pub(super) struct Shards {
    map: Arc<Map>,
    options: RedisOptions,
    /// The prefix of this backplane's probe channels.
    probe_base: String,
    want: HashSet<String>,
    links: HashMap<String, Link>,
    dialing: HashSet<String>,
    /// Masters whose last dial failed: not before then, and how many failures.
    dial_after: HashMap<String, (Instant, u32)>,
    /// Channels Redis refused to subscribe (a slot between masters, the cluster down):
    /// asked again only after a backoff, and refusals in a row.
    refused: HashMap<String, (Instant, u32)>,
    /// Channels Redis unsubscribed by itself (their slot left that master), with that
    /// master and when: not asked of it again while the slot map still names it, for
    /// up to a `topology_interval` (a map fetched right after a failover may still be
    /// the old one). Asked again there, a demoted master (a replica now, which still
    /// takes `SSUBSCRIBE` for its master's slots) held them, and the channels were
    /// reported interrupted twice: there, and on the promoted one.
    moved: HashMap<String, (String, Instant)>,
    waiters: HashMap<String, Vec<Done>>,
    /// Channels asked for while their slot's master had no link (a failover or a moved
    /// slot under way): their waiters wait for the link until then.
    unlinked: HashMap<String, Instant>,
    /// Channels interrupted while up, reported once held again.
    lost: BTreeSet<String>,
    up: bool,
    next_id: u64,
    refreshing: bool,
    last_refresh: Instant,
    repair_attempt: u32,
    next_repair: Instant,
    dirty: bool,
    events: mpsc::Sender<BusEvent>,
    shared: Arc<Shared>,
    internal: mpsc::UnboundedSender<Internal>,
    pushes: mpsc::Sender<(u64, PushInfo)>,
}

impl Shards {
    /// A task with no link yet, and the inputs its links and handle feed.
    pub fn new(
        map: Arc<Map>,
        options: RedisOptions,
        events: mpsc::Sender<BusEvent>,
        shared: Arc<Shared>,
        control: mpsc::Receiver<Control>,
    ) -> (Shards, Inputs) {
        let (pushes_tx, pushes) = mpsc::channel(options.event_capacity);
        let (internal_tx, internal) = mpsc::unbounded_channel();
        let now = Instant::now();
        let shards = Shards {
            probe_base: format!("{}:probe:{:016x}", options.prefix, fastrand::u64(..)),
            map,
            options,
            want: HashSet::new(),
            links: HashMap::new(),
            dialing: HashSet::new(),
            dial_after: HashMap::new(),
            refused: HashMap::new(),
            moved: HashMap::new(),
            waiters: HashMap::new(),
            unlinked: HashMap::new(),
            lost: BTreeSet::new(),
            up: true,
            next_id: 0,
            refreshing: false,
            last_refresh: now,
            repair_attempt: 0,
            next_repair: now,
            dirty: true,
            events,
            shared,
            internal: internal_tx,
            pushes: pushes_tx,
        };
        let inputs = Inputs {
            pushes,
            internal,
            control,
        };
        (shards, inputs)
    }

    /// Dials every master now (the backplane's start): fails if one cannot be reached.
    pub async fn dial_all(&mut self) -> Result<(), String> {
        let topology = self.map.get();
        for addr in topology.masters() {
            let id = self.take_id();
            let conn = self.dial(addr, id).await?;
            self.add_link(&topology, addr.clone(), id, conn);
        }
        Ok(())
    }

    pub async fn run(mut self, mut inputs: Inputs) {
        let mut topology = self.map.watch();
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let interval = self.options.probe_interval;
        let mut probes = tokio::time::interval(interval);
        probes.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                Some((id, push)) = inputs.pushes.recv() => self.on_push(id, push),
                scheduled = probes.tick() => {
                    // What is already queued was heard before this tick.
                    while let Ok((id, push)) = inputs.pushes.try_recv() {
                        self.on_push(id, push);
                    }
                    self.on_probe_tick(scheduled.elapsed() <= interval / 2);
                }
                Some(internal) = inputs.internal.recv() => self.on_internal(internal),
                cmd = inputs.control.recv() => match cmd {
                    Some(cmd) => self.on_control(cmd),
                    None => return, // the backplane was dropped
                },
                Ok(()) = topology.changed() => self.dirty = true,
                _ = tick.tick() => self.on_tick(),
            }
            if std::mem::take(&mut self.dirty) {
                self.reconcile().await;
            }
        }
    }

    fn take_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// A RESP3 connection to `addr` whose pushes come to this task tagged with `id`.
    fn dial(
        &self,
        addr: &str,
        id: u64,
    ) -> impl std::future::Future<Output = Result<MultiplexedConnection, String>> + 'static {
        let pushes = self.pushes.clone();
        let internal = self.internal.clone();
        let shared = self.shared.clone();
        // Called by the connection's reader, which must not wait: a full queue drops
        // messages (counted) rather than letting Redis' output buffer grow here instead.
        let sender = move |info: PushInfo| -> Result<(), ()> {
            if info.kind == PushKind::Disconnection {
                let _ = internal.send(Internal::Lost { id });
                return Ok(());
            }
            match pushes.try_send((id, info)) {
                Ok(()) => Ok(()),
                Err(mpsc::error::TrySendError::Full((_, info))) => {
                    if info.kind == PushKind::SMessage {
                        shared.dropped.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(())
                }
                Err(mpsc::error::TrySendError::Closed(_)) => Err(()),
            }
        };
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(self.options.connect_timeout)
            .set_response_timeout(self.options.response_timeout)
            .set_push_sender(sender);
        let url = format!("redis://{addr}");
        async move {
            let mut info = url.into_connection_info().map_err(|e| e.to_string())?;
            info.redis.protocol = ProtocolVersion::RESP3;
            let client = Client::open(info).map_err(|e| e.to_string())?;
            client
                .get_multiplexed_async_connection_with_config(&config)
                .await
                .map_err(|e| e.to_string())
        }
    }

    fn add_link(
        &mut self,
        topology: &Topology,
        addr: String,
        id: u64,
        conn: MultiplexedConnection,
    ) {
        let probe = self.probe_for(topology, &addr, id);
        let (out, commands) = mpsc::unbounded_channel();
        tokio::spawn(write_in_order(
            conn.clone(),
            id,
            commands,
            self.internal.clone(),
        ));
        self.links.insert(
            addr,
            Link {
                id,
                conn,
                out,
                have: HashSet::new(),
                asked: HashMap::new(),
                probe,
                heard: true,
                misses: 0,
            },
        );
        self.dirty = true;
    }

    /// A probe channel of this backplane in one of `addr`'s slots.
    fn probe_for(&self, topology: &Topology, addr: &str, id: u64) -> String {
        let tag = tag_where(&format!("{id}."), |s| topology.master_of(s) == Some(addr))
            .unwrap_or_else(|| id.to_string());
        format!("{}:{{{tag}}}", self.probe_base)
    }

    fn link_by_id(&mut self, id: u64) -> Option<&mut Link> {
        self.links.values_mut().find(|l| l.id == id)
    }

    fn on_push(&mut self, id: u64, push: PushInfo) {
        match push.kind {
            PushKind::SMessage | PushKind::Message => {
                let Some((channel, payload)) = message_parts(push.data) else {
                    return;
                };
                if channel.starts_with(&self.probe_base) {
                    if let Some(link) = self.link_by_id(id) {
                        if link.probe == channel {
                            link.heard = true;
                        }
                    }
                } else if self.want.contains(&channel) {
                    // From a link replaced meanwhile too: it arrived before that link
                    // closed, so before anything on the channel's new link.
                    deliver(
                        &self.events,
                        BusEvent::Message { channel, payload },
                        &self.shared,
                    );
                }
            }
            PushKind::SSubscribe => {
                let Some(channel) = first_text(push.data) else {
                    return;
                };
                let Some(link) = self.link_by_id(id) else {
                    return;
                };
                if link.asked.remove(&channel).is_some() {
                    link.have.insert(channel.clone());
                    self.refused.remove(&channel);
                    if let Some(waiters) = self.waiters.remove(&channel) {
                        // A subscribe asked for (not one made again after a redial or a
                        // slot's move): in the stream after what came on the channel
                        // before, before what comes on this subscription.
                        let _ = self.events.try_send(BusEvent::Subscribed {
                            channel: channel.clone(),
                        });
                        for done in waiters {
                            let _ = done.send(Ok(()));
                        }
                    }
                    self.dirty = true;
                }
            }
            PushKind::SUnsubscribe => {
                let Some(channel) = first_text(push.data) else {
                    return;
                };
                let Some(from) = self
                    .links
                    .iter()
                    .find(|(_, l)| l.id == id)
                    .map(|(a, _)| a.clone())
                else {
                    return;
                };
                let Some(link) = self.link_by_id(id) else {
                    return;
                };
                // Ours are taken out of `have` before they are sent: this one is Redis's
                // own, its slot has left this master.
                if link.have.remove(&channel) {
                    tracing::info!(
                        channel,
                        "redis cluster: a slot moved; subscribing where it went"
                    );
                    if channel == link.probe {
                        link.heard = true; // it moved: a new one is picked
                    } else if self.up && self.want.contains(&channel) {
                        self.lost.insert(channel.clone());
                    }
                    self.moved.insert(channel, (from, Instant::now()));
                    self.start_refresh();
                    self.dirty = true;
                }
            }
            _ => {}
        }
    }

    fn on_internal(&mut self, internal: Internal) {
        match internal {
            Internal::Dialed { addr, id, result } => {
                self.dialing.remove(&addr);
                let topology = self.map.get();
                match result {
                    Ok(conn)
                        if !self.links.contains_key(&addr)
                            && topology.masters().contains(&addr) =>
                    {
                        self.dial_after.remove(&addr);
                        self.shared.reconnects.fetch_add(1, Ordering::Relaxed);
                        self.add_link(&topology, addr, id, conn);
                    }
                    Ok(_) => {} // no longer wanted: dropped, and closed
                    Err(why) => {
                        tracing::debug!(addr, why, "redis cluster: dial failed");
                        let failures = self.dial_after.get(&addr).map_or(0, |(_, n)| n + 1);
                        let wait = self.options.backoff.delay(failures);
                        self.dial_after
                            .insert(addr, (Instant::now() + wait, failures));
                        self.start_refresh();
                    }
                }
            }
            Internal::Lost { id } => {
                if let Some(addr) = self
                    .links
                    .iter()
                    .find(|(_, l)| l.id == id)
                    .map(|(a, _)| a.clone())
                {
                    self.drop_link(&addr, "connection closed");
                }
            }
            Internal::Refused { id, channels, why } => {
                tracing::debug!(?channels, why, "redis cluster: subscribe refused");
                if let Some(link) = self.link_by_id(id) {
                    for channel in &channels {
                        link.asked.remove(channel);
                    }
                }
                // Asked again after a backoff: at once, a refusal that lasts (masters
                // that disagree about a slot) made thousands of MOVED answers and slot
                // map fetches a second.
                let now = Instant::now();
                for channel in &channels {
                    self.fail_waiters(channel, &why);
                    let failures = self.refused.get(channel).map_or(0, |(_, n)| n + 1);
                    let wait = self.options.backoff.delay(failures);
                    self.refused.insert(channel.clone(), (now + wait, failures));
                }
                self.start_refresh();
                self.dirty = true;
            }
            Internal::Refreshed(error) => {
                self.refreshing = false;
                if let Some(e) = error {
                    tracing::debug!(error = %e, "redis cluster: no slot map");
                }
                self.dirty = true;
            }
        }
    }

    fn on_control(&mut self, cmd: Control) {
        match cmd {
            Control::Subscribe(channel, done) => {
                self.want.insert(channel.clone());
                if self
                    .refused
                    .get(&channel)
                    .is_some_and(|(at, _)| Instant::now() < *at)
                {
                    // Refused a moment ago: asked again after its backoff, told now.
                    let _ = done.send(Err(BackplaneError::Unavailable(
                        "redis refused this channel a moment ago; asked again shortly".into(),
                    )));
                    self.dirty = true;
                    return;
                }
                let topology = self.map.get();
                let link = topology
                    .master_of(slot(channel.as_bytes()))
                    .and_then(|addr| self.links.get(addr));
                match link {
                    Some(link) if link.have.contains(&channel) => {
                        let _ = done.send(Ok(()));
                    }
                    Some(_) if self.up => self.waiters.entry(channel).or_default().push(done),
                    // The slot's master is not linked (yet): one shard is between masters
                    // while the rest of the cluster is up. Wait for its link (the slot map
                    // is fetched again now) up to the response timeout.
                    None if self.up => {
                        let deadline = crate::deadline::after(self.options.response_timeout);
                        self.unlinked.entry(channel.clone()).or_insert(deadline);
                        self.waiters.entry(channel).or_default().push(done);
                        self.start_refresh();
                        self.dirty = true;
                    }
                    _ => {
                        let _ = done.send(Err(BackplaneError::Unavailable(
                            "redis cluster is down; subscribed once it is back".into(),
                        )));
                    }
                }
            }
            Control::Unsubscribe(channel, done) => {
                self.want.remove(&channel);
                self.lost.remove(&channel);
                self.refused.remove(&channel);
                self.fail_waiters(&channel, "unsubscribed meanwhile");
                for link in self.links.values_mut() {
                    let had = link.have.remove(&channel) | link.asked.remove(&channel).is_some();
                    if had {
                        let _ = link.out.send(Outgoing::Unsubscribe(channel.clone()));
                    }
                }
                let _ = done.send(Ok(()));
            }
        }
        self.dirty = true;
    }

    /// Counts the probe intervals without a probe back (only an interval this task saw
    /// on time counts), drops the links silent too long, and sends the next probes.
    fn on_probe_tick(&mut self, on_time: bool) {
        let misses = self.options.probe_misses;
        let mut silent = Vec::new();
        for (addr, link) in &mut self.links {
            if std::mem::take(&mut link.heard) {
                link.misses = 0;
            } else if on_time {
                link.misses += 1;
                if link.misses >= misses {
                    silent.push(addr.clone());
                }
            }
        }
        for addr in silent {
            self.drop_link(&addr, "no probe back");
        }
        for link in self.links.values_mut() {
            if !link.have.contains(&link.probe) {
                // Not subscribed yet: nothing to expect.
                link.heard = true;
                continue;
            }
            let mut conn = link.conn.clone();
            let probe = link.probe.clone();
            // Not awaited: a frozen master must not stop this task from noticing the
            // silence.
            tokio::spawn(async move {
                let _ = redis::cmd("SPUBLISH")
                    .arg(&probe)
                    .arg("p")
                    .exec_async(&mut conn)
                    .await;
            });
        }
    }

    fn on_tick(&mut self) {
        let now = Instant::now();
        if !self.unlinked.is_empty() {
            let topology = self.map.get();
            let expired: Vec<String> = self
                .unlinked
                .iter()
                .filter(|(_, deadline)| now >= **deadline)
                .map(|(channel, _)| channel.clone())
                .collect();
            for channel in expired {
                self.unlinked.remove(&channel);
                if !self.held(&topology, &channel) && self.waiters.contains_key(&channel) {
                    self.fail_waiters(
                        &channel,
                        "no link to the master of this channel's slot in time; subscribed once there is",
                    );
                    if self.up && self.want.contains(&channel) {
                        self.lost.insert(channel);
                    }
                }
            }
        }
        let overdue = self.options.response_timeout;
        let mut late = Vec::new();
        for link in self.links.values_mut() {
            link.asked.retain(|channel, asked| {
                let keep = now.duration_since(*asked) <= overdue;
                if !keep {
                    late.push(channel.clone());
                }
                keep
            });
        }
        if !late.is_empty() {
            for channel in &late {
                self.fail_waiters(channel, "no confirmation from redis in time");
            }
            self.start_refresh();
            self.dirty = true;
        }
        let complete = self.complete(&self.map.get());
        if complete {
            self.repair_attempt = 0;
        }
        let due = now.duration_since(self.last_refresh) >= self.options.topology_interval;
        if due || (!complete && now >= self.next_repair) {
            if !complete {
                self.next_repair = now + self.options.backoff.delay(self.repair_attempt);
                self.repair_attempt = self.repair_attempt.saturating_add(1);
            }
            self.start_refresh();
        }
        if self.dial_after.values().any(|(at, _)| now >= *at) {
            self.dirty = true;
        }
        // A moved channel's hold is over.
        let hold = self.options.topology_interval;
        if self
            .moved
            .values()
            .any(|(_, at)| now.duration_since(*at) >= hold)
        {
            self.dirty = true;
        }
        // A refused channel's wait is over: ask again (its entry stays, with its count,
        // until Redis confirms it or it is not wanted any more).
        if self
            .refused
            .iter()
            .any(|(c, (at, _))| now >= *at && self.want.contains(c) && !self.is_asked_or_held(c))
        {
            self.dirty = true;
        }
    }

    /// The link to `addr` is gone: its channels are lost until held again elsewhere;
    /// with no link left the bus is down.
    fn drop_link(&mut self, addr: &str, why: &str) {
        let Some(link) = self.links.remove(addr) else {
            return;
        };
        tracing::warn!(addr, why, "redis cluster: subscribing link lost");
        let channels: Vec<String> = link
            .have
            .into_iter()
            .chain(link.asked.into_keys())
            .collect();
        for channel in channels {
            self.fail_waiters(&channel, why);
            if self.up && self.want.contains(&channel) {
                self.lost.insert(channel);
            }
        }
        self.start_refresh();
        self.dirty = true;
    }

    fn is_asked_or_held(&self, channel: &str) -> bool {
        self.links
            .values()
            .any(|l| l.have.contains(channel) || l.asked.contains_key(channel))
    }

    fn fail_waiters(&mut self, channel: &str, why: &str) {
        for done in self.waiters.remove(channel).into_iter().flatten() {
            let _ = done.send(Err(BackplaneError::Unavailable(why.to_owned())));
        }
    }

    fn start_refresh(&mut self) {
        if self.refreshing {
            return;
        }
        self.refreshing = true;
        self.last_refresh = Instant::now();
        let map = self.map.clone();
        let seen = map.fetched();
        let internal = self.internal.clone();
        tokio::spawn(async move {
            let result = map.refresh(seen).await;
            let _ = internal.send(Internal::Refreshed(result.err()));
        });
    }

    /// Every master has a link and every channel is held on its slot's master.
    fn complete(&self, topology: &Topology) -> bool {
        topology
            .masters()
            .iter()
            .all(|a| self.links.contains_key(a))
            && self.want.iter().all(|channel| self.held(topology, channel))
    }

    fn held(&self, topology: &Topology, channel: &str) -> bool {
        topology
            .master_of(slot(channel.as_bytes()))
            .and_then(|addr| self.links.get(addr))
            .is_some_and(|l| l.have.contains(channel))
    }

    /// Makes the links match the slot map and the channel set, then says what changed.
    async fn reconcile(&mut self) {
        let topology = self.map.get();
        // Links to nodes that are no longer masters, and channels whose slot left.
        let gone: Vec<String> = self
            .links
            .keys()
            .filter(|a| !topology.masters().contains(a))
            .cloned()
            .collect();
        for addr in gone {
            self.drop_link(&addr, "no longer a master");
        }
        // A master that failed to dial and is a master no more (replaced in a
        // failover): its backoff would linger, past due, and mark every tick dirty.
        self.dial_after
            .retain(|addr, _| topology.masters().contains(addr));
        let mut moved = Vec::new();
        for (addr, link) in &mut self.links {
            let elsewhere =
                |c: &String| topology.master_of(slot(c.as_bytes())) != Some(addr.as_str());
            let away: Vec<String> = link.have.iter().filter(|c| elsewhere(c)).cloned().collect();
            for channel in away {
                link.have.remove(&channel);
                moved.push(channel);
            }
            link.asked.retain(|c, _| !elsewhere(c));
        }
        for channel in moved {
            if self.up && self.want.contains(&channel) {
                self.lost.insert(channel);
            }
        }
        // Masters without a link.
        let now = Instant::now();
        for addr in topology.masters() {
            let waiting = self.dial_after.get(addr).is_some_and(|(at, _)| now < *at);
            if !self.links.contains_key(addr) && !self.dialing.contains(addr) && !waiting {
                self.dialing.insert(addr.clone());
                let id = self.take_id();
                let dial = self.dial(addr, id);
                let internal = self.internal.clone();
                let addr = addr.clone();
                tokio::spawn(async move {
                    let result = dial.await;
                    let _ = internal.send(Internal::Dialed { addr, id, result });
                });
            }
        }
        // Probes whose slot left their master.
        let stale: Vec<(String, u64)> = self
            .links
            .iter()
            .filter(|(addr, l)| topology.master_of(slot(l.probe.as_bytes())) != Some(addr.as_str()))
            .map(|(a, l)| (a.clone(), l.id))
            .collect();
        for (addr, id) in stale {
            let probe = self.probe_for(&topology, &addr, id);
            if let Some(link) = self.links.get_mut(&addr) {
                link.have.remove(&link.probe);
                link.probe = probe;
                link.heard = true;
            }
        }
        // Ask each link for what it should hold and neither holds nor awaits.
        let hold = self.options.topology_interval;
        self.moved.retain(|channel, (from, at)| {
            now.duration_since(*at) < hold
                && topology.master_of(slot(channel.as_bytes())) == Some(from.as_str())
        });
        let mut ask: HashMap<String, Vec<String>> = HashMap::new();
        let wanted = self
            .want
            .iter()
            .chain(self.links.values().map(|l| &l.probe));
        let wanted: Vec<String> = wanted.cloned().collect();
        for channel in wanted {
            let Some(addr) = topology.master_of(slot(channel.as_bytes())) else {
                continue;
            };
            let Some(link) = self.links.get_mut(addr) else {
                continue;
            };
            if self.refused.get(&channel).is_some_and(|(at, _)| now < *at) {
                continue; // `on_tick` marks the task dirty once the wait is over
            }
            if self.moved.contains_key(&channel) {
                continue; // `on_tick` marks the task dirty once the hold is over
            }
            if !link.have.contains(&channel) && !link.asked.contains_key(&channel) {
                link.asked.insert(channel.clone(), now);
                ask.entry(addr.to_owned()).or_default().push(channel);
            }
        }
        for (addr, channels) in ask {
            if let Some(link) = self.links.get(&addr) {
                self.subscribe(link, channels);
            }
        }
        self.report(&topology).await;
    }

    /// Sends SSUBSCRIBE for `channels` on `link`, one channel per command (each then
    /// has one reply), in pipelines of 100, after what the link was asked before.
    fn subscribe(&self, link: &Link, channels: Vec<String>) {
        for chunk in channels.chunks(100) {
            let _ = link.out.send(Outgoing::Subscribe(chunk.to_vec()));
        }
    }

    /// Up, Down, or the channels held again.
    async fn report(&mut self, topology: &Topology) {
        if self.up && self.links.is_empty() {
            self.up = false;
            self.shared.up.store(false, Ordering::Release);
            self.lost.clear();
            tracing::warn!("redis cluster: no master reachable");
            let _ = self.events.send(BusEvent::Down).await;
            return;
        }
        if !self.up {
            if self.complete(topology) {
                self.up = true;
                self.shared.up.store(true, Ordering::Release);
                tracing::info!("redis cluster: every master reachable again");
                let _ = self.events.send(BusEvent::Up).await;
            }
            return;
        }
        // Reported together once none is still awaiting Redis's confirmation: one event
        // for one lost master or moved slot, not one per reply.
        let asked = |c: &String| self.links.values().any(|l| l.asked.contains_key(c));
        if self.lost.iter().any(asked) {
            return;
        }
        let back: Vec<String> = self
            .lost
            .iter()
            .filter(|c| !self.want.contains(*c) || self.held(topology, c))
            .cloned()
            .collect();
        for channel in &back {
            self.lost.remove(channel);
        }
        let channels: Vec<String> = back.into_iter().filter(|c| self.want.contains(c)).collect();
        if !channels.is_empty() {
            let _ = self.events.send(BusEvent::Interrupted { channels }).await;
        }
    }
}

//! Who else is in the cluster: heartbeats with connection counts, hellos (answered at
//! once, so a new node sees the others without waiting an interval), goodbyes, and
//! the expiry of nodes gone silent.
//!
//! One task owns the table of live nodes. The receive loop hands it what it heard
//! ([`Heard`]); it publishes what the others read ([`Roster`]) and tells the rooms that
//! care when a node goes: the calls waiting on it fail, and, long after, the receive
//! loop forgets its sequence numbers.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::calls::Calls;
use super::envelope::{Kind, Me};
use super::outbox::Outbox;
use super::sequence::Forget;
use crate::addr::ClusterError;
use crate::registry::ServerHandle;

/// Heartbeat intervals after which a gone node's sequence numbers are forgotten.
const FORGET_AFTER: u32 = 100;

/// What the receive loop heard on the control channel, for the nodes task.
#[derive(Debug)]
pub(super) enum Heard {
    Heartbeat {
        node: String,
        incarnation: String,
        connections: u64,
        /// It asks every other node to announce itself at once.
        hello: bool,
    },
    /// A node's goodbye, from one incarnation: a later incarnation of the same name,
    /// already heard, stays.
    Goodbye { node: String, incarnation: String },
    /// The bus is back: say hello, so the others see this node again at once.
    BusBack,
}

/// The live nodes as the nodes task last saw them; it alone writes them.
pub(super) struct Roster {
    /// Their names, this node's included, sorted.
    names: watch::Sender<Vec<String>>,
    /// Connections on the other nodes, from their last heartbeats.
    connections: AtomicU64,
    /// The other live nodes and their incarnations (presence tells restarts apart).
    live: watch::Sender<Arc<HashMap<String, String>>>,
}

impl Roster {
    pub fn new(me: &str) -> Self {
        Roster {
            names: watch::Sender::new(vec![me.to_owned()]),
            connections: AtomicU64::new(0),
            live: watch::Sender::new(Arc::default()),
        }
    }

    /// Watches the other live nodes and their incarnations.
    pub fn watch_live(&self) -> watch::Receiver<Arc<HashMap<String, String>>> {
        self.live.subscribe()
    }

    pub fn names(&self) -> Vec<String> {
        self.names.borrow().clone()
    }

    pub fn watch(&self) -> watch::Receiver<Vec<String>> {
        self.names.subscribe()
    }

    pub fn remote_connections(&self) -> u64 {
        self.connections.load(Ordering::Relaxed)
    }
}

struct Remote {
    incarnation: String,
    connections: u64,
    last_seen: Instant,
}

/// The nodes task: the table it owns and the rooms it tells.
pub(super) struct Nodes {
    pub me: Arc<Me>,
    pub table: Table,
    /// What the other rooms read of the table.
    pub roster: Arc<Roster>,
    /// Where this node's heartbeats go. (Who was heard from, which the outbox's flush
    /// after an outage waits for, the receive loop tells it, in the bus's order.)
    pub outbox: Arc<Outbox>,
    /// Told when a node goes: the calls waiting on it fail.
    pub calls: Arc<Calls>,
    /// This node's peers, counted in its heartbeats.
    pub handle: ServerHandle,
    pub interval: Duration,
    /// Silent intervals after which a node is dropped.
    pub missed: u32,
}

/// The other nodes, as the nodes task alone knows them.
#[derive(Default)]
pub(super) struct Table {
    /// Live, by name.
    live: HashMap<String, Remote>,
    /// Gone, with their incarnation and when: their sequence numbers are forgotten
    /// [`FORGET_AFTER`] heartbeat intervals later.
    departed: Vec<(String, String, Instant)>,
}

impl Nodes {
    /// Announces this node and its connection count. Silent while the bus is down (the
    /// outbox refuses it): a heartbeat flushed before our subscriptions are issued again
    /// would tell the others we can hear them when we cannot yet.
    pub fn heartbeat(&self, hello: bool) {
        let mut header = self.me.header(Kind::Heartbeat);
        header.n = Some(self.handle.connection_count() as u64);
        header.hello = hello;
        let _ = self.outbox.push(&self.me.control, header, b"", false);
    }

    /// Runs until `stop`: takes what the receive loop heard from `inbox`, and sends
    /// `forget` the nodes gone long enough.
    pub async fn run(
        mut self,
        mut inbox: mpsc::Receiver<Heard>,
        forget: mpsc::UnboundedSender<Forget>,
        mut stop: watch::Receiver<bool>,
    ) {
        let window = crate::deadline::times(self.interval, self.missed);
        let mut tick = tokio::time::interval(self.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        // Silence is looked for four times an interval, so a node is dropped within a
        // quarter interval of its window (its members with it, for presence).
        let mut expire = tokio::time::interval((self.interval / 4).max(Duration::from_millis(1)));
        expire.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            // What was heard is taken before silence is timed: a heartbeat that waits
            // here while the window ends (this task was slow to run, not the node) must
            // keep its node, not drop it and bring it back an instant later (its members
            // would leave and join again everywhere).
            tokio::select! {
                biased;
                _ = stop.wait_for(|s| *s) => return,
                heard = inbox.recv() => match heard {
                    Some(heard) => self.on(heard),
                    None => return,
                },
                _ = tick.tick() => self.beat(window, &forget),
                _ = expire.tick() => self.drop_silent(window),
            }
        }
    }

    fn on(&mut self, heard: Heard) {
        match heard {
            Heard::Heartbeat {
                node,
                incarnation,
                connections,
                hello,
            } => self.on_heartbeat(node, incarnation, connections, hello),
            Heard::Goodbye { node, incarnation } => {
                let this_one = self
                    .table
                    .live
                    .get(&node)
                    .is_some_and(|r| r.incarnation == incarnation);
                if this_one {
                    self.forget_node(&node, "said goodbye");
                }
            }
            Heard::BusBack => self.heartbeat(true),
        }
    }

    fn on_heartbeat(&mut self, node: String, incarnation: String, connections: u64, hello: bool) {
        let now = Instant::now();
        let restarted = match self.table.live.get_mut(&node) {
            Some(r) if r.incarnation == incarnation => {
                r.last_seen = now;
                r.connections = connections;
                None
            }
            other => {
                let restarted = other.is_some();
                // Back after it was dropped (cut off, not gone): its sequence numbers
                // must stay, or copies it re-sends would be taken as new.
                self.table
                    .departed
                    .retain(|(n, i, _)| *n != node || *i != incarnation);
                self.table.live.insert(
                    node.clone(),
                    Remote {
                        incarnation,
                        connections,
                        last_seen: now,
                    },
                );
                Some(restarted)
            }
        };
        self.publish(restarted.is_some());
        if restarted == Some(true) {
            // Calls to its earlier run will never be answered.
            self.calls
                .fail_node(&node, &ClusterError::NodeDown(node.clone()));
        }
        if hello {
            self.heartbeat(false);
        }
    }

    fn forget_node(&mut self, node: &str, why: &str) {
        let Some(remote) = self.table.live.remove(node) else {
            return;
        };
        self.publish(true);
        tracing::info!(other = node, why, "node left the cluster");
        self.calls
            .fail_node(node, &ClusterError::NodeDown(node.to_owned()));
        // A silent node may be cut off rather than gone: its sequence numbers stay
        // a while, so that copies it re-sends when it is back are still dropped.
        self.table
            .departed
            .push((node.to_owned(), remote.incarnation, Instant::now()));
    }

    /// Every interval: announce this node, drop the silent ones, forget the long gone.
    fn beat(&mut self, window: Duration, forget: &mpsc::UnboundedSender<Forget>) {
        self.heartbeat(false);
        self.drop_silent(window);
        let now = Instant::now();
        let after = crate::deadline::times(self.interval, FORGET_AFTER);
        self.table.departed.retain(|(node, incarnation, when)| {
            let keep = now.duration_since(*when) <= after;
            if !keep {
                let _ = forget.send(Forget::Origin {
                    node: node.clone(),
                    incarnation: incarnation.clone(),
                });
            }
            keep
        });
    }

    /// Drops the nodes silent for longer than `window`.
    fn drop_silent(&mut self, window: Duration) {
        let now = Instant::now();
        let silent: Vec<String> = self
            .table
            .live
            .iter()
            .filter(|(_, r)| now.duration_since(r.last_seen) > window)
            .map(|(name, _)| name.clone())
            .collect();
        for name in silent {
            self.forget_node(&name, "silent for the heartbeat window");
        }
    }

    /// Publishes the roster: the connection count always, the names when they changed.
    fn publish(&self, names_changed: bool) {
        let connections =
            (self.table.live.values()).fold(0u64, |sum, r| sum.saturating_add(r.connections));
        self.roster
            .connections
            .store(connections, Ordering::Relaxed);
        if names_changed {
            crate::metrics::cluster_nodes(self.table.live.len() + 1);
            let mut names: Vec<String> = self.table.live.keys().cloned().collect();
            names.push(self.me.id.clone());
            names.sort();
            // Before the names: whoever sees a name live finds its incarnation.
            let live = self
                .table
                .live
                .iter()
                .map(|(name, r)| (name.clone(), r.incarnation.clone()))
                .collect();
            self.roster.live.send_replace(Arc::new(live));
            self.roster.names.send_replace(names);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::status::ClusterState;

    /// The nodes task of node `me`, heartbeats every `interval`, dropping a node after
    /// three silent ones; its roster.
    fn nodes(interval: Duration) -> (Nodes, Arc<Roster>) {
        let me = Arc::new(Me::new("me".into(), "test", 1));
        let (_state_tx, state) = watch::channel(ClusterState::Up);
        let outbox = Arc::new(Outbox::new(1024, interval * 3, state.clone()));
        let roster = Arc::new(Roster::new("me"));
        let handle = ServerHandle::new();
        let calls = Arc::new(Calls::new(
            me.clone(),
            outbox.clone(),
            state,
            roster.watch(),
            handle.clone(),
            Duration::from_secs(5),
            16,
        ));
        let nodes = Nodes {
            me,
            table: Table::default(),
            roster: roster.clone(),
            outbox,
            calls,
            handle,
            interval,
            missed: 3,
        };
        (nodes, roster)
    }

    fn heartbeat_of_c() -> Heard {
        Heard::Heartbeat {
            node: "c".into(),
            incarnation: "1".into(),
            connections: 0,
            hello: false,
        }
    }

    /// Polls the task once: it takes everything that is ready (it loops while
    /// something is), then waits.
    async fn poll_once<F: std::future::Future<Output = ()>>(run: &mut std::pin::Pin<&mut F>) {
        std::future::poll_fn(|cx| {
            assert!(run.as_mut().poll(cx).is_pending(), "the task ended");
            std::task::Poll::Ready(())
        })
        .await;
    }

    /// The task ran late: a heartbeat was heard within the window, and the window
    /// ended before the task took it. The node must stay, not leave and come back.
    #[tokio::test(start_paused = true)]
    async fn a_heartbeat_waiting_for_the_task_as_the_window_ends_keeps_its_node() {
        let interval = Duration::from_millis(100);
        let (nodes, roster) = nodes(interval);
        let (inbox, inbox_rx) = mpsc::channel(16);
        let (forget, _forget_rx) = mpsc::unbounded_channel();
        let (_stop, stop) = watch::channel(false);
        // Driven by hand, so that the heartbeat and the timers are ready at its next
        // poll together, as when its thread was busy elsewhere.
        let run = nodes.run(inbox_rx, forget, stop);
        let mut run = std::pin::pin!(run);
        poll_once(&mut run).await;
        let mut names = roster.watch();
        inbox.send(heartbeat_of_c()).await.unwrap();
        poll_once(&mut run).await;
        assert_eq!(roster.names(), ["c", "me"]);
        drop(names.borrow_and_update());
        // Unordered, the task would time c's silence first about half of the times:
        // 20 tries leave it one chance in a million to pass.
        for round in 0..20 {
            inbox.send(heartbeat_of_c()).await.unwrap();
            // Fires the task's timers (the window's end) without polling it.
            tokio::time::advance(interval * 3 + Duration::from_millis(1)).await;
            poll_once(&mut run).await;
            assert!(
                !names.has_changed().unwrap(),
                "round {round}: c left and came back: {:?}",
                roster.names()
            );
        }
        // Silent for real, it goes.
        tokio::time::advance(interval * 4).await;
        poll_once(&mut run).await;
        assert_eq!(roster.names(), ["me"]);
    }
}

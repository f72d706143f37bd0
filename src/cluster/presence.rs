//! Who else is in the cluster: heartbeats with connection counts, hellos (answered at
//! once, so a new node sees the others without waiting an interval), goodbyes, and
//! the expiry of nodes gone silent.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::envelope::{Header, Kind};
use super::node::{lock, Node};
use super::sequence::RemoveIfIncarnation;
use super::ClusterError;

/// Heartbeat intervals after which a gone node's sequence numbers are forgotten.
const FORGET_AFTER: u32 = 100;

pub(super) struct Remote {
    pub(super) incarnation: String,
    pub(super) connections: u64,
    pub(super) last_seen: Instant,
}

impl Node {
    pub(super) fn heartbeat(&self, hello: bool) {
        // Silent while the bus is down: a heartbeat flushed before our subscriptions are
        // issued again would tell the others we can hear them when we cannot yet.
        if !self.is_up() {
            return;
        }
        let mut header = Header::new(Kind::Heartbeat, &self.id, &self.incarnation);
        header.n = Some(self.handle.connection_count() as u64);
        header.hello = hello;
        self.enqueue(&self.ch_control, header, b"", false);
    }

    pub(crate) fn connection_count(&self) -> usize {
        let remote: u64 = lock(&self.nodes).values().map(|r| r.connections).sum();
        self.handle.connection_count() + usize::try_from(remote).unwrap_or(usize::MAX)
    }

    /// Whether `node` is live (this node included).
    pub(crate) fn is_live(&self, node: &str) -> bool {
        node == self.id || lock(&self.nodes).contains_key(node)
    }

    pub(super) fn on_heartbeat(&self, header: &Header<'_>) {
        self.heard_from(&header.o);
        let restarted = {
            let mut nodes = lock(&self.nodes);
            let now = Instant::now();
            let connections = header.n.unwrap_or(0);
            match nodes.get_mut(&*header.o) {
                Some(r) if r.incarnation == header.i => {
                    r.last_seen = now;
                    r.connections = connections;
                    false
                }
                other => {
                    let restarted = other.is_some();
                    nodes.insert(
                        header.o.to_string(),
                        Remote {
                            incarnation: header.i.to_string(),
                            connections,
                            last_seen: now,
                        },
                    );
                    self.publish_nodes(&nodes);
                    restarted
                }
            }
        };
        if restarted {
            // Calls to its earlier run will never be answered.
            self.calls
                .fail_node(&header.o, &ClusterError::NodeDown(header.o.to_string()));
        }
        if header.hello {
            self.heartbeat(false);
        }
    }

    pub(super) fn forget_node(&self, node: &str, why: &str) {
        let removed = {
            let mut nodes = lock(&self.nodes);
            let removed = nodes.remove(node);
            if removed.is_some() {
                self.publish_nodes(&nodes);
            }
            removed
        };
        if let Some(remote) = removed {
            tracing::info!(node = %self.id, other = node, why, "node left the cluster");
            self.calls
                .fail_node(node, &ClusterError::NodeDown(node.to_owned()));
            // A silent node may be cut off rather than gone: its sequence numbers stay
            // a while, so that copies it re-sends when it is back are still dropped.
            lock(&self.departed).push((node.to_owned(), remote.incarnation, Instant::now()));
        }
    }

    pub(super) fn forget_departed(&self, now: Instant, after: Duration) {
        let old: Vec<(String, String, Instant)> = {
            let mut departed = lock(&self.departed);
            let (old, keep) = departed
                .drain(..)
                .partition(|(_, _, when)| now.duration_since(*when) > after);
            *departed = keep;
            old
        };
        if old.is_empty() {
            return;
        }
        let mut marks = lock(&self.marks);
        for per_origin in marks.values_mut() {
            for (node, incarnation, _) in &old {
                per_origin.remove_if_incarnation(node, incarnation);
            }
        }
        marks.retain(|_, per_origin| !per_origin.is_empty());
    }

    pub(super) fn publish_nodes(&self, nodes: &HashMap<String, Remote>) {
        let mut names: Vec<String> = nodes.keys().cloned().collect();
        names.push(self.id.clone());
        names.sort();
        self.nodes_watch.send_replace(names);
    }
}

pub(super) async fn beat(node: Arc<Node>) {
    let mut stop = node.stopping();
    let interval = node.options.heartbeat;
    let window = interval * node.options.missed;
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            _ = tick.tick() => {}
        }
        node.heartbeat(false);
        let now = Instant::now();
        let silent: Vec<String> = lock(&node.nodes)
            .iter()
            .filter(|(_, r)| now.duration_since(r.last_seen) > window)
            .map(|(name, _)| name.clone())
            .collect();
        for name in silent {
            node.forget_node(&name, "silent for the heartbeat window");
        }
        node.forget_departed(now, interval * FORGET_AFTER);
    }
}

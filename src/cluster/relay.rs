//! The cluster's side of the seam ([`crate::relay`]): what this node's registry and
//! topics hand on goes to the other nodes through here.

use std::sync::Weak;

use futures_util::future::BoxFuture;

use super::node::Node;
use crate::error::Result;
use crate::relay::Relay;

/// Attached to the node's [`ServerHandle`](crate::ServerHandle) and [`Topics`](crate::Topics). It holds
/// the node weakly: the registry and topics never keep a stopped node alive.
pub(super) struct ClusterRelay(pub(super) Weak<Node>);

impl Relay for ClusterRelay {
    fn broadcast(&self, frame: &str) {
        if let Some(node) = self.0.upgrade() {
            node.send_broadcast(frame);
        }
    }

    fn publish(&self, topic: &str, frame: &str) {
        if let Some(node) = self.0.upgrade() {
            node.send_topic(topic, frame);
        }
    }

    fn changed(&self, topic: &str) {
        if let Some(node) = self.0.upgrade() {
            node.subscriptions.changed(topic);
        }
    }

    fn ready<'a>(&'a self, topic: &'a str) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            match self.0.upgrade() {
                Some(node) => node.ready(topic).await,
                None => Ok(()),
            }
        })
    }
}

//! A peer anywhere in the cluster, by its address, as a [`Caller`]: on this node its
//! [`Peer`](crate::Peer) is called, on another the call travels over the bus
//! (`calls.rs`).

use std::sync::Arc;

use super::node::Node;
use crate::addr::{ClusterError, PeerAddr};
use crate::call::{CallOptions, Caller, Reply, Request};
use crate::error::{Error, Result};

/// The peer at a [`PeerAddr`], wherever it is connected; from [`Cluster::peer`](super::Cluster::peer).
/// Cheap to clone. Calls and notifications go through [`Caller`], as for a
/// [`Peer`](crate::Peer).
///
/// On this node it is the local [`Peer`](crate::Peer), with every option. On another
/// node a call waits at most its timeout (the cluster's
/// [`call_timeout`](super::ClusterBuilder::call_timeout) by default) and a
/// notification returns once it is handed to the bus: nothing says whether it
/// arrived. Progress and a [cancel grace](CallOptions::cancel_grace) are not carried
/// across nodes: such a call runs without them (no progress values come).
///
/// # Errors
///
/// Those of a call to a [`Peer`](crate::Peer) ([`Error::Rpc`] with the peer's error
/// object, [`Error::Timeout`], [`Error::Closed`]), plus [`Error::Cluster`]:
/// [`ClusterError::NoSuchPeer`], [`ClusterError::NodeDown`] (at once for a node not
/// live, or when it goes silent mid-call), [`ClusterError::Unavailable`] (at once
/// while the bus is down).
#[derive(Clone)]
pub struct RemotePeer {
    node: Arc<Node>,
    addr: PeerAddr,
}

impl RemotePeer {
    pub(super) fn new(node: Arc<Node>, addr: PeerAddr) -> Self {
        RemotePeer { node, addr }
    }

    /// Its address.
    pub fn addr(&self) -> &PeerAddr {
        &self.addr
    }
}

impl Caller for RemotePeer {
    async fn send_request(
        &self,
        request: Request<'_>,
        options: CallOptions,
    ) -> Result<Option<Reply>> {
        let to = &self.addr;
        if to.node == self.node.me.id {
            let peer = self
                .node
                .handle
                .peer(to.peer)
                .ok_or_else(|| Error::Cluster(ClusterError::NoSuchPeer(to.clone())))?;
            return peer.send_request(request, options).await;
        }
        let method = request.method();
        // Written as a notification: the target node gives the call an id of its own.
        let notification = request.is_notification();
        let frame = request.into_frame(None, false);
        if notification {
            self.node.calls.notify(to, frame.as_bytes())?;
            return Ok(None);
        }
        let timeout = options.timeout.unwrap_or(self.node.call_timeout);
        let reply = self.node.calls.call(to, method, &frame, timeout).await?;
        Ok(Some(reply))
    }
}

impl std::fmt::Debug for RemotePeer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("RemotePeer").field(&self.addr).finish()
    }
}

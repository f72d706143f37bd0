//! Calls and notifies to one peer on another node, over that node's own channel; the
//! answer comes back on the asking node's channel only.
//!
//! [`Calls`] owns the pending map. A waiting call leaves it in exactly one way each: its
//! answer arrives, its caller gives up (the guard's drop, on timeout or cancellation),
//! the target node goes (goodbye or silence), or the bus goes down.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::sync::{oneshot, watch, Semaphore};

use super::envelope::{Closed, Header, Kind, Me, Outcome};
use super::outbox::{Outbox, Refused};
use super::status::ClusterState;
use super::sync::lock;
use crate::addr::{ClusterError, PeerAddr};
use crate::call::{Caller, Reply};
use crate::error::{CloseReason, Error, Result, RpcError};
use crate::registry::ServerHandle;
use crate::transport::Text;

type Slot = oneshot::Sender<Result<Reply>>;

/// Calls this node makes to peers on other nodes, and serves for them.
pub(super) struct Calls {
    pending: Mutex<HashMap<u64, (PeerAddr, Slot)>>,
    next: AtomicU64,
    me: Arc<Me>,
    outbox: Arc<Outbox>,
    state: watch::Receiver<ClusterState>,
    /// The live nodes' names, sorted, as the nodes task publishes them.
    live: watch::Receiver<Vec<String>>,
    /// This node's peers, for calls from other nodes.
    handle: ServerHandle,
    /// Calls from other nodes in flight.
    serving: Arc<Semaphore>,
    /// The timeout of a call from another node that names none.
    timeout: Duration,
}

/// Removes a call's entry when its caller stops waiting.
struct Guard<'a> {
    calls: &'a Calls,
    corr: u64,
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        lock(&self.calls.pending).remove(&self.corr);
    }
}

impl Calls {
    pub fn new(
        me: Arc<Me>,
        outbox: Arc<Outbox>,
        state: watch::Receiver<ClusterState>,
        live: watch::Receiver<Vec<String>>,
        handle: ServerHandle,
        timeout: Duration,
        max_serving: usize,
    ) -> Self {
        Calls {
            pending: Mutex::new(HashMap::new()),
            // From a random point: an earlier incarnation's late answers (correlated
            // by number alone) do not meet this one's calls.
            next: AtomicU64::new(fastrand::u64(..) >> 1),
            me,
            outbox,
            state,
            live,
            handle,
            serving: Arc::new(Semaphore::new(max_serving)),
            timeout,
        }
    }

    /// Delivers a reply to the call waiting for it (if it still is).
    pub fn answer(&self, header: &Header<'_>, body: Bytes) {
        let Some(corr) = header.c else { return };
        let taken = {
            let mut pending = lock(&self.pending);
            // Only the node called answers: a reply from another (to a call of this
            // node's earlier incarnation, whose numbers this one may reuse) is not it.
            match pending.get(&corr) {
                Some((to, _)) if to.node == header.o => pending.remove(&corr),
                _ => None,
            }
        };
        let Some((to, slot)) = taken else {
            return; // the caller gave up, or not an answer to this incarnation's call
        };
        let _ = slot.send(outcome(header, to, body));
    }

    /// Fails every call waiting on `node`.
    pub fn fail_node(&self, node: &str, error: &ClusterError) {
        let failed: Vec<Slot> = {
            let mut pending = lock(&self.pending);
            let corrs: Vec<u64> = pending
                .iter()
                .filter(|(_, (to, _))| to.node == node)
                .map(|(c, _)| *c)
                .collect();
            corrs
                .iter()
                .filter_map(|c| pending.remove(c))
                .map(|(_, s)| s)
                .collect()
        };
        for slot in failed {
            let _ = slot.send(Err(Error::Cluster(error.clone())));
        }
    }

    /// Fails every waiting call.
    pub fn fail_all(&self, error: &ClusterError) {
        let failed: Vec<_> = lock(&self.pending).drain().collect();
        for (_, (_, slot)) in failed {
            let _ = slot.send(Err(Error::Cluster(error.clone())));
        }
    }
}

/// What a reply says, as the caller's result.
fn outcome(header: &Header<'_>, to: PeerAddr, body: Bytes) -> Result<Reply> {
    let text = || {
        Text::from_utf8(body.clone())
            .ok_or_else(|| Error::InvalidResponse("a reply that is not UTF-8".into()))
    };
    match header.e {
        None => {
            let text = text()?;
            let len = text.len();
            Ok(Reply::new(text, 0..len))
        }
        Some(Outcome::Rpc) => match serde_json::from_slice::<RpcError>(&body) {
            // `call_remote` names the method.
            Ok(error) => Err(Error::Rpc {
                method: "".into(),
                error,
            }),
            Err(e) => Err(Error::InvalidResponse(format!(
                "malformed error object: {e}"
            ))),
        },
        Some(Outcome::Timeout) => Err(Error::timeout(
            None,
            Duration::from_millis(header.t.unwrap_or(0)),
        )),
        Some(Outcome::Closed) => {
            let closed: Closed = serde_json::from_slice(&body)
                .map_err(|e| Error::InvalidResponse(format!("malformed close reason: {e}")))?;
            Err(Error::Closed(close_reason(closed)))
        }
        Some(Outcome::NoPeer) => Err(Error::Cluster(ClusterError::NoSuchPeer(to))),
        Some(Outcome::Failed) => Err(Error::Cluster(ClusterError::Remote(
            String::from_utf8_lossy(&body).into_owned(),
        ))),
    }
}

fn close_reason(c: Closed) -> CloseReason {
    match c.kind.as_str() {
        "local" => CloseReason::Local {
            code: c.code,
            reason: c.reason,
        },
        "remote" => CloseReason::Remote {
            code: c.code,
            reason: c.reason,
        },
        "eof" => CloseReason::Eof,
        "keepalive" => CloseReason::KeepaliveTimeout,
        _ => CloseReason::Transport(Arc::new(std::io::Error::other(c.reason))),
    }
}

fn closed(reason: &CloseReason) -> Closed {
    let (kind, code, text) = match reason {
        CloseReason::Local { code, reason } => ("local", *code, reason.clone()),
        CloseReason::Remote { code, reason } => ("remote", *code, reason.clone()),
        CloseReason::Eof => ("eof", 0, String::new()),
        CloseReason::KeepaliveTimeout => ("keepalive", 0, String::new()),
        other => ("transport", 0, other.to_string()),
    };
    Closed {
        kind: kind.into(),
        code,
        reason: text,
    }
}

fn unavailable() -> Error {
    Error::Cluster(ClusterError::Unavailable("the bus is down".into()))
}

/// What a call or notify the outbox refused fails with.
fn refused(why: Refused) -> Error {
    match why {
        Refused::Down => unavailable(),
        Refused::Stopped => Error::Cluster(ClusterError::Stopped),
        Refused::Full => Error::Cluster(ClusterError::Overloaded(
            "the outbox is full: more is waiting for the bus than it may hold".into(),
        )),
        Refused::Unreachable => Error::Cluster(ClusterError::Unavailable(
            "the bus cannot reach the channel for now".into(),
        )),
    }
}

impl Calls {
    /// Checks that a call or notify to `to` can go out now: fails at once, rather than
    /// waiting out a timeout, when it cannot.
    fn reachable(&self, to: &PeerAddr) -> Result<()> {
        if *self.state.borrow() != ClusterState::Up {
            return Err(unavailable());
        }
        let live = to.node == self.me.id || self.live.borrow().contains(&to.node);
        if !live {
            return Err(Error::Cluster(ClusterError::NodeDown(to.node.clone())));
        }
        Ok(())
    }

    /// Calls the peer at `to` on another node; `frame` is the call written as a
    /// notification (the target node adds its own id).
    pub async fn call(
        &self,
        to: &PeerAddr,
        method: &str,
        frame: &str,
        timeout: Duration,
    ) -> Result<Reply> {
        let corr = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        lock(&self.pending).insert(corr, (to.clone(), tx));
        let _guard = Guard { calls: self, corr };
        // Checked once the call waits: a node dropped from the roster in between has its
        // waiting calls failed after the roster changed, so this call sees either the
        // node gone here or its failure then, never a wait for its whole timeout.
        self.reachable(to)?;
        let mut header = self.me.header(Kind::Call);
        header.c = Some(corr);
        header.p = Some(to.peer);
        header.t = Some(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX));
        let channel = self.me.channels.node(&to.node);
        self.outbox
            .push(&channel, header, frame.as_bytes(), false)
            .map_err(refused)?;
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(answer)) => answer.map_err(|e| e.in_call(method)),
            Ok(Err(_)) => Err(Error::Cluster(ClusterError::Stopped)),
            Err(_) => Err(Error::timeout(Some(method), timeout)),
        }
    }

    /// Notifies the peer at `to` on another node.
    pub fn notify(&self, to: &PeerAddr, frame: &[u8]) -> Result<()> {
        self.reachable(to)?;
        let mut header = self.me.header(Kind::Notify);
        header.p = Some(to.peer);
        self.outbox
            .push(&self.me.channels.node(&to.node), header, frame, false)
            .map_err(refused)
    }
}

#[derive(Deserialize)]
struct CallBody<'a> {
    #[serde(borrow)]
    method: std::borrow::Cow<'a, str>,
    #[serde(borrow, default)]
    params: Option<&'a RawValue>,
}

impl Calls {
    /// Runs a call from another node on the local peer, and answers it.
    pub fn serve(self: &Arc<Self>, header: &Header<'_>, body: Bytes) {
        let (Some(corr), Some(peer_id)) = (header.c, header.p) else {
            return;
        };
        let origin = header.o.to_string();
        let timeout = header.t.map_or(self.timeout, Duration::from_millis);
        let reply = move |calls: &Calls, outcome: Option<Outcome>, t: Option<u64>, body: &[u8]| {
            let mut header = calls.me.header(Kind::Reply);
            header.c = Some(corr);
            header.e = outcome;
            header.t = t;
            // Refused only while the bus is down or the node stopped: the caller's own
            // timeout (or its bus outage) ends its call.
            let _ = calls
                .outbox
                .push(&calls.me.channels.node(&origin), header, body, false);
        };
        let Some(peer) = self.handle.peer(peer_id) else {
            reply(self, Some(Outcome::NoPeer), None, b"");
            return;
        };
        let Ok(permit) = self.serving.clone().try_acquire_owned() else {
            reply(
                self,
                Some(Outcome::Failed),
                None,
                b"too many calls from other nodes in flight",
            );
            return;
        };
        let calls = self.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let call = match serde_json::from_slice::<CallBody<'_>>(&body) {
                Ok(call) => call,
                Err(e) => {
                    reply(
                        &calls,
                        Some(Outcome::Failed),
                        None,
                        format!("malformed call: {e}").as_bytes(),
                    );
                    return;
                }
            };
            let result = peer
                .call::<Reply>(&call.method, call.params)
                .timeout(timeout)
                .await;
            match result {
                Ok(result) => reply(&calls, None, None, result.get().as_bytes()),
                Err(e) => {
                    let (outcome, t, body) = failure(e);
                    reply(&calls, Some(outcome), t, &body);
                }
            }
        });
    }
}

/// A served call's error as a reply: its outcome, its timeout, its body.
fn failure(error: Error) -> (Outcome, Option<u64>, Vec<u8>) {
    match error {
        Error::Rpc { error: e, .. } => {
            let body = serde_json::to_vec(&e).unwrap_or_default();
            (Outcome::Rpc, None, body)
        }
        Error::Timeout { after: d, .. } => {
            let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
            (Outcome::Timeout, Some(ms), Vec::new())
        }
        Error::Closed(reason) => {
            let body = serde_json::to_vec(&closed(&reason)).unwrap_or_default();
            (Outcome::Closed, None, body)
        }
        other => (Outcome::Failed, None, other.to_string().into_bytes()),
    }
}

//! The relay the topics hold ([`MemberRelay`]): their changes go to the members task,
//! and presence queries are answered from the views, or read from the store for a topic
//! this node does not follow.

use std::collections::HashSet;
use std::sync::{Arc, Weak};

use futures_util::future::BoxFuture;
use serde_json::value::RawValue;
use tokio::sync::oneshot;

use super::{Control, Members};
use crate::addr::PeerAddr;
use crate::cluster::sync::lock;
use crate::error::Result;
use crate::presence::Member;
use crate::relay::MemberRelay;

/// The relay the topics hold; it reaches the room weakly.
pub(crate) struct MembersRelay {
    members: Weak<Members>,
    node: String,
}

impl MembersRelay {
    pub fn new(members: &Arc<Members>) -> Self {
        MembersRelay {
            members: Arc::downgrade(members),
            node: members.me.id.clone(),
        }
    }
}

impl MemberRelay for MembersRelay {
    fn node(&self) -> &str {
        &self.node
    }

    fn changed(&self, topic: &str, id: u64) {
        if let Some(members) = self.members.upgrade() {
            let mut dirty = lock(&members.dirty);
            match dirty.get_mut(topic) {
                Some(ids) => {
                    ids.insert(id);
                }
                None => {
                    dirty.insert(topic.into(), HashSet::from([id]));
                }
            }
            drop(dirty);
            members.wake.notify_one();
        }
    }

    fn follow<'a>(&'a self, topic: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let Some(members) = self.members.upgrade() else {
                return;
            };
            if members.views.get(topic).is_some_and(|v| v.is_loaded()) {
                return;
            }
            let (done, loaded) = oneshot::channel();
            if members
                .control
                .send(Control::Follow(topic.into(), done))
                .is_err()
                || !members.is_up()
            {
                return; // it loads when the bus is back
            }
            let _ = tokio::time::timeout(members.call_timeout, loaded).await;
        })
    }

    fn unfollow(&self, topic: &str) {
        if let Some(members) = self.members.upgrade() {
            lock(&members.unfollowed).insert(topic.into());
            members.wake.notify_one();
        }
    }

    fn members<'a>(&'a self, topic: &'a str) -> BoxFuture<'a, Result<Vec<Member>>> {
        Box::pin(async move {
            let Some(members) = self.members.upgrade().filter(|m| !m.is_stopped()) else {
                return Ok(Vec::new());
            };
            if let Some(view) = members.views.get(topic).filter(|v| v.is_loaded()) {
                return Ok(view.members());
            }
            let stored = members.read(topic, None, true).await?;
            let mut out = Vec::new();
            for part in stored.parts {
                if !members.is_live(&part.node, &part.incarnation) {
                    continue;
                }
                for (id, info) in part.members.into_iter().flatten() {
                    let Ok(text) = String::from_utf8(info.to_vec()) else {
                        continue;
                    };
                    if let Ok(info) = RawValue::from_string(text) {
                        let addr = PeerAddr {
                            node: part.node.clone(),
                            peer: id,
                        };
                        out.push(Member::new(addr, info));
                    }
                }
            }
            Ok(out)
        })
    }

    fn count<'a>(&'a self, topic: &'a str) -> BoxFuture<'a, Result<usize>> {
        Box::pin(async move {
            let Some(members) = self.members.upgrade().filter(|m| !m.is_stopped()) else {
                return Ok(0);
            };
            if let Some(view) = members.views.get(topic).filter(|v| v.is_loaded()) {
                return Ok(view.count());
            }
            let stored = members.read(topic, None, false).await?;
            Ok(stored
                .parts
                .iter()
                .filter(|p| members.is_live(&p.node, &p.incarnation))
                .map(|p| p.len)
                .sum())
        })
    }

    fn known(&self, topic: &str) -> usize {
        self.members
            .upgrade()
            .filter(|m| !m.is_stopped())
            .and_then(|m| m.views.get(topic).map(|v| v.count()))
            .unwrap_or(0)
    }
}

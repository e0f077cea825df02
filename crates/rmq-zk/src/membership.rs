//! One member of one group: an ephemeral sequential znode
//! `<root>/<prefix>/<topic>/<group>/members/<member>-<sequence>`, and a
//! watch on the children of `members` so that a join or a leave (a
//! graceful delete, or a session that expired) starts a rebalance at once
//! instead of at the next tick.
//!
//! A heartbeat costs nothing on the wire while the session is connected
//! and the watch has not fired: the children are cached. While the
//! session is disconnected, or ended (expired, or given up by the client
//! after 1.4 timeouts without a server) and a new one is being opened,
//! the heartbeat fails: the consumer keeps the slots whose leases it still
//! holds in Redis and takes nothing new. Once a new session exists the
//! member joins again with a new znode (its id stays the same, so a znode
//! of the old session that the server has not yet expired counts once).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use rmq::{CoordinatorError, CoordinatorFuture, GroupRef, Membership};
use tokio::sync::{Mutex, Notify};
use zookeeper_client::{Acls, Client, CreateMode, SessionId};

use crate::address::component;
use crate::session::{liveness, Liveness, Session};
use crate::ZkError;

pub(crate) struct ZkMembership {
    session: Arc<Session>,
    /// `<root>/<prefix>/<topic>/<group>/members`.
    dir: String,
    member: String,
    state: Mutex<State>,
    /// Set by the watch: the cached children are out of date.
    stale: Arc<AtomicBool>,
    changed: Arc<Notify>,
}

#[derive(Default)]
struct State {
    /// This member's znode, and the session that created it.
    joined: Option<(SessionId, String)>,
    /// The members as last read, while the watch has not fired.
    members: Option<Vec<String>>,
}

impl ZkMembership {
    pub(crate) fn new(session: Arc<Session>, group: &GroupRef, member: &str) -> ZkMembership {
        let dir = format!(
            "{}/{}/{}/{}/members",
            session.address().root(),
            component(group.prefix()),
            component(group.topic()),
            component(group.group())
        );
        ZkMembership {
            session,
            dir,
            member: member.to_string(),
            state: Mutex::new(State::default()),
            stale: Arc::new(AtomicBool::new(true)),
            changed: Arc::new(Notify::new()),
        }
    }

    async fn beat(&self, leaving: bool) -> Result<Vec<String>, ZkError> {
        let mut state = self.state.lock().await;
        let client = self.session.current();
        if leaving {
            state.joined = None;
            state.members = None;
            if liveness(&client) == Liveness::Connected {
                self.delete_mine(&client).await?;
            }
            return Ok(Vec::new());
        }
        match liveness(&client) {
            Liveness::Connected => {}
            Liveness::Disconnected => return Err(ZkError::Disconnected),
            Liveness::Ended => {
                if state.joined.take().is_some() {
                    tracing::warn!(group = %self.dir, member = %self.member,
                        "ZooKeeper session expired: keeping the slots whose leases are held, \
                         taking no new one until joined again with a new session");
                    state.members = None;
                }
                self.session.renew(&client);
                return Err(ZkError::SessionEnded);
            }
        }
        let session = client.session_id();
        if state.joined.as_ref().is_none_or(|(s, _)| *s != session) {
            let path = self.create(&client).await?;
            tracing::info!(group = %self.dir, member = %self.member, znode = %path, "joined");
            state.joined = Some((session, path));
            state.members = None;
        }
        if self.stale.swap(false, Ordering::SeqCst) {
            state.members = None;
        }
        if let Some(members) = &state.members {
            return Ok(members.clone());
        }
        let members = match self.read_and_watch(&client).await {
            Ok(m) => m,
            Err(e) => {
                self.stale.store(true, Ordering::SeqCst);
                if matches!(e, ZkError::ZooKeeper(zookeeper_client::Error::NoNode)) {
                    // The group's directory was deleted: join again.
                    state.joined = None;
                }
                return Err(e);
            }
        };
        state.members = Some(members.clone());
        Ok(members)
    }

    /// Deletes every znode of this member in the group: the recorded one,
    /// and any that a create whose answer was lost (a timeout, a dropped
    /// connection) made meanwhile.
    async fn delete_mine(&self, client: &Client) -> Result<(), ZkError> {
        let children = match client.list_children(&self.dir).await {
            Ok(c) => c,
            Err(zookeeper_client::Error::NoNode) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        for child in children {
            if member_of(&child) == Some(self.member.as_str()) {
                match client.delete(&format!("{}/{child}", self.dir), None).await {
                    Ok(()) | Err(zookeeper_client::Error::NoNode) => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        Ok(())
    }

    /// Creates the group's directories if needed, then this member's znode.
    async fn create(&self, client: &Client) -> Result<String, ZkError> {
        let dir_options = CreateMode::Persistent.with_acls(Acls::anyone_all());
        client.mkdir(&self.dir, &dir_options).await?;
        let prefix = format!("{}/{}-", self.dir, self.member);
        let node_options = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
        let (_, sequence) = client
            .create(&prefix, self.member.as_bytes(), &node_options)
            .await?;
        Ok(format!("{prefix}{sequence}"))
    }

    /// Reads the members and sets a watch that marks them stale and wakes
    /// the lease keeper when they change (or the session ends).
    async fn read_and_watch(&self, client: &Client) -> Result<Vec<String>, ZkError> {
        let (children, _, watcher) = client.get_and_watch_children(&self.dir).await?;
        let (stale, changed) = (self.stale.clone(), self.changed.clone());
        tokio::spawn(async move {
            let _event = watcher.changed().await;
            stale.store(true, Ordering::SeqCst);
            changed.notify_one();
        });
        Ok(members(&children))
    }
}

/// Member ids from child names `<member>-<sequence>`, sorted and without
/// repeats (a create whose answer was lost may leave a second znode of the
/// same member in the same session).
fn members(children: &[String]) -> Vec<String> {
    let mut ids: Vec<String> = children
        .iter()
        .filter_map(|c| member_of(c))
        .map(str::to_string)
        .collect();
    ids.sort();
    ids.dedup();
    ids
}

/// The member id of a child `<member>-<sequence>` (None for anything else).
fn member_of(child: &str) -> Option<&str> {
    let (id, seq) = child.rsplit_once('-')?;
    (!id.is_empty() && !seq.is_empty() && seq.bytes().all(|b| b.is_ascii_digit())).then_some(id)
}

impl Membership for ZkMembership {
    fn heartbeat(
        &self,
        leaving: bool,
    ) -> CoordinatorFuture<'_, Result<Vec<String>, CoordinatorError>> {
        Box::pin(async move { self.beat(leaving).await.map_err(Into::into) })
    }

    fn changed(&self) -> CoordinatorFuture<'_, ()> {
        Box::pin(self.changed.notified())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_ids_come_from_sequential_child_names() {
        let children: Vec<String> = [
            "b-0000000003",
            "a-0000000001",
            "a-0000000007",
            "junk",
            "-0000000002",
            "c-x",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(members(&children), vec!["a", "b"]);
    }
}

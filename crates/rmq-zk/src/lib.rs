//! ZooKeeper membership for rmq's serial consumer groups, as the original
//! system ran it: each member is an ephemeral sequential znode under
//! `<root>/<prefix>/<topic>/<group>/members`, every member watches that
//! directory, and each computes the same rendezvous assignment of slots
//! from the members it sees. A member whose process dies leaves the group
//! when ZooKeeper expires its session; a member that leaves gracefully
//! deletes its znode, and the watch rebalances the others at once.
//!
//! Safety never depends on ZooKeeper. A slot is used only under its fenced
//! lease in Redis: ZooKeeper decides which member *tries* to own a slot,
//! Redis decides who does. When ZooKeeper's view and Redis's disagree for a
//! moment (a session expired while its leases still run, a partition), the
//! newcomer's acquire is refused until the old lease ends; two handlers of
//! one slot never overlap.
//!
//! When ZooKeeper becomes unreachable, consumers keep handling the slots
//! whose leases they hold (renewed in Redis as usual) and acquire nothing
//! new until it is back.
//!
//! ```no_run
//! # async fn demo(client: rmq::Client) -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! let zk = rmq_zk::ZooKeeper::connect("zk://127.0.0.1:2181/rmq", Duration::from_secs(6)).await?;
//! let topic = client.topic("orders").await?;
//! let consumer = topic.consumer().serial("workers").coordinator(Arc::new(zk));
//! # let _ = consumer;
//! # Ok(()) }
//! ```

mod address;
mod membership;
mod session;

use std::sync::Arc;
use std::time::Duration;

use rmq::{Coordinator, GroupRef, Membership};

pub use address::ZkAddress;

use membership::ZkMembership;
use session::Session;

/// What can go wrong with the ZooKeeper coordinator.
#[derive(Debug, thiserror::Error)]
pub enum ZkError {
    /// The address does not parse.
    #[error("bad ZooKeeper address {0}")]
    BadAddress(String),
    /// No session could be established.
    #[error("ZooKeeper at {hosts} is unreachable: {reason}")]
    Unreachable {
        /// The connect string.
        hosts: String,
        /// What the client said.
        reason: String,
    },
    /// The session is between servers: membership is unknown for now.
    #[error("disconnected from ZooKeeper")]
    Disconnected,
    /// The session ended (expired, or no server for 1.4 session timeouts)
    /// and a new one is not open yet.
    #[error("the ZooKeeper session ended; opening a new one")]
    SessionEnded,
    /// ZooKeeper refused or failed a call.
    #[error("ZooKeeper: {0}")]
    ZooKeeper(#[from] zookeeper_client::Error),
}

/// A ZooKeeper ensemble as the coordinator of serial consumer groups
/// (see [`rmq::ConsumerBuilder::coordinator`]). One session serves every
/// consumer that shares it.
#[derive(Clone)]
pub struct ZooKeeper {
    session: Arc<Session>,
}

impl ZooKeeper {
    /// Connects to `address` (`zk://host:port[,host:port…]/root`) with a
    /// session that expires after `session_timeout` without contact (the
    /// member timeout: ZooKeeper bounds it to its own minimum and maximum,
    /// by default 2 and 20 ticks, 4 s to 40 s).
    ///
    /// # Errors
    ///
    /// [`ZkError::BadAddress`], or [`ZkError::Unreachable`] when no server
    /// answers within about the session timeout (tried again meanwhile:
    /// see [`ZooKeeper::connect_within`]).
    pub async fn connect(address: &str, session_timeout: Duration) -> Result<ZooKeeper, ZkError> {
        Self::connect_within(address, session_timeout, session_timeout).await
    }

    /// Like [`ZooKeeper::connect`], trying again for `wait` while no server
    /// answers: a process started together with ZooKeeper (a whole-cluster
    /// reboot) waits for it instead of failing.
    ///
    /// # Errors
    ///
    /// [`ZkError::BadAddress`] at once, or [`ZkError::Unreachable`] when no
    /// server answered within `wait`.
    pub async fn connect_within(
        address: &str,
        session_timeout: Duration,
        wait: Duration,
    ) -> Result<ZooKeeper, ZkError> {
        let address = ZkAddress::parse(address)?;
        let session = Session::open(address, session_timeout, wait).await?;
        Ok(ZooKeeper {
            session: Arc::new(session),
        })
    }

    /// The address, as parsed.
    pub fn address(&self) -> &ZkAddress {
        self.session.address()
    }
}

impl std::fmt::Debug for ZooKeeper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZooKeeper")
            .field("address", &self.address().to_string())
            .finish()
    }
}

impl Coordinator for ZooKeeper {
    fn join(&self, group: &GroupRef, member: &str) -> Arc<dyn Membership> {
        Arc::new(ZkMembership::new(self.session.clone(), group, member))
    }
}

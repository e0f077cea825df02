//! The process's one ZooKeeper session, shared by every member it runs.
//!
//! A session that expired (ZooKeeper heard nothing from it for its
//! timeout, so it deleted its ephemeral znodes: every member of this
//! process left its groups) cannot be revived; the next member that needs
//! one opens a new session, once, for all of them.

use std::time::Duration;

use tokio::sync::Mutex;
use zookeeper_client::{Client, SessionState};

use crate::{ZkAddress, ZkError};

/// Where the session is in its life, as the members see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Liveness {
    /// Connected: calls go through.
    Connected,
    /// Between servers, or none reachable: the session may still be alive.
    Disconnected,
    /// Ended (expired, closed or refused): a new one is needed.
    Ended,
}

pub(crate) fn liveness(client: &Client) -> Liveness {
    match client.state() {
        SessionState::SyncConnected | SessionState::ConnectedReadOnly => Liveness::Connected,
        SessionState::Disconnected => Liveness::Disconnected,
        SessionState::Expired | SessionState::Closed | SessionState::AuthFailed => Liveness::Ended,
    }
}

pub(crate) struct Session {
    address: ZkAddress,
    timeout: Duration,
    client: Mutex<Client>,
}

impl Session {
    /// Opens the first session: an unreachable ensemble is an error here.
    pub(crate) async fn open(address: ZkAddress, timeout: Duration) -> Result<Session, ZkError> {
        let client = connect(&address, timeout).await?;
        Ok(Session {
            address,
            timeout,
            client: Mutex::new(client),
        })
    }

    pub(crate) fn address(&self) -> &ZkAddress {
        &self.address
    }

    /// The current session's client (maybe ended: see [`liveness`]).
    pub(crate) async fn current(&self) -> Client {
        self.client.lock().await.clone()
    }

    /// A new session in place of `ended`, unless another member already
    /// replaced it.
    pub(crate) async fn renew(&self, ended: &Client) -> Result<Client, ZkError> {
        let mut current = self.client.lock().await;
        if current.session_id() != ended.session_id() {
            return Ok(current.clone());
        }
        let fresh = connect(&self.address, self.timeout).await?;
        tracing::info!(
            zookeeper = %self.address,
            session = %fresh.session_id(),
            "new ZooKeeper session"
        );
        *current = fresh.clone();
        Ok(fresh)
    }
}

/// Connects within about the session timeout (every host tried once).
async fn connect(address: &ZkAddress, timeout: Duration) -> Result<Client, ZkError> {
    let unreachable = |reason: String| ZkError::Unreachable {
        hosts: address.hosts().to_string(),
        reason,
    };
    let connecting = Client::connector()
        .with_session_timeout(timeout)
        .with_connection_timeout(timeout.min(Duration::from_secs(5)))
        .with_fail_eagerly()
        .connect(address.hosts());
    match tokio::time::timeout(timeout + Duration::from_secs(5), connecting).await {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(e)) => Err(unreachable(e.to_string())),
        Err(_) => Err(unreachable(format!("no session within {timeout:?}"))),
    }
}

//! The process's one ZooKeeper session, shared by every member it runs.
//!
//! A session that ended (expired: ZooKeeper heard nothing from it for its
//! timeout and deleted its ephemeral znodes; or given up by the client
//! after 1.4 timeouts without a server) cannot be revived. A new one is
//! opened in the background, one attempt at a time, so that no member's
//! heartbeat waits for it (a heartbeat has a fraction of a lease to run).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

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

/// Pause between two failed attempts at a new session.
const RENEW_PAUSE: Duration = Duration::from_millis(500);

pub(crate) struct Session {
    address: ZkAddress,
    timeout: Duration,
    client: Mutex<Client>,
    /// A new session is being opened.
    renewing: AtomicBool,
}

impl Session {
    /// Opens the first session, trying again for `wait` while no server
    /// answers (a whole-cluster reboot starts consumers and ZooKeeper
    /// together): an ensemble still unreachable then is an error.
    pub(crate) async fn open(
        address: ZkAddress,
        timeout: Duration,
        wait: Duration,
    ) -> Result<Session, ZkError> {
        let until = tokio::time::Instant::now() + wait;
        let client = loop {
            match connect(&address, timeout).await {
                Ok(client) => break client,
                Err(e) => {
                    let now = tokio::time::Instant::now();
                    if now >= until {
                        return Err(e);
                    }
                    tracing::info!(zookeeper = %address, "waiting for ZooKeeper: {e}");
                    // A last try once the wait is over.
                    tokio::time::sleep(RENEW_PAUSE.min(until - now)).await;
                }
            }
        };
        Ok(Session {
            address,
            timeout,
            client: Mutex::new(client),
            renewing: AtomicBool::new(false),
        })
    }

    pub(crate) fn address(&self) -> &ZkAddress {
        &self.address
    }

    /// The current session's client (maybe ended: see [`liveness`]).
    pub(crate) fn current(&self) -> Client {
        self.client
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Starts opening a new session in place of `ended` in the background,
    /// unless one is being opened or `ended` was already replaced.
    pub(crate) fn renew(self: &Arc<Self>, ended: &Client) {
        if self.current().session_id() != ended.session_id()
            || self.renewing.swap(true, Ordering::SeqCst)
        {
            return;
        }
        let session = self.clone();
        tokio::spawn(async move {
            loop {
                match connect(&session.address, session.timeout).await {
                    Ok(fresh) => {
                        tracing::warn!(
                            zookeeper = %session.address,
                            session = %fresh.session_id(),
                            "new ZooKeeper session"
                        );
                        *session
                            .client
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner) = fresh;
                        break;
                    }
                    Err(e) => {
                        tracing::debug!("no new ZooKeeper session yet: {e}");
                        // Nobody needs one any more: the consumers ended.
                        if Arc::strong_count(&session) == 1 {
                            break;
                        }
                        tokio::time::sleep(RENEW_PAUSE).await;
                    }
                }
            }
            session.renewing.store(false, Ordering::SeqCst);
        });
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

//! A cluster connection that stopped answering is replaced.
//!
//! redis-rs 1.8's cluster client can stop sending anything, for good:
//! after a resharding, a burst of concurrent calls answered MOVED starts a
//! slot refresh that never finishes, and while it runs the client sends
//! nothing else. Every later call times out; the nodes are fine and a new
//! client works at once. rmq cannot mend that inside the client, so a call
//! that timed out on a cluster makes it check (one check at a time, at
//! most one a second): a `PING` to one node through the connection, and if
//! that times out too while a new connection to the seeds answers, the new
//! one replaces it for every user of this [`Redis`]. A call retried after a
//! time-out first waits for the check, so that its next try goes out on
//! the new connection. The old client is dropped once the calls in flight
//! on it end (redis-rs stops its task with its last handle). A consumer's
//! pub/sub client is not watched, and script calls do not use this
//! connection at all: rmq routes them itself (`routing.rs`), so this
//! watches reads and script loading.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use tokio::sync::Notify;
use tokio::time::Instant;

use super::{Conn, Redis, Target};

/// One connection check at a time, at most one a second.
#[derive(Debug, Default)]
pub(super) struct Reviving {
    checking: AtomicBool,
    /// When the last check started.
    checked_at: Mutex<Option<Instant>>,
    /// Told when a check ends.
    ended: Notify,
}

/// The least time between two checks (a cluster that is slow, not stuck,
/// is not probed at every time-out).
const CHECK_AT_MOST_EVERY: Duration = Duration::from_secs(1);

/// The longest wait for a `PING`'s answer: a connection that works
/// answers at once, however busy.
const PING_LIMIT: Duration = Duration::from_secs(1);

/// How long a new connection may take to connect and answer.
const CONNECT_LIMIT: Duration = Duration::from_secs(15);

/// How long a call retried after a time-out waits for a running check.
const RETRY_WAITS_AT_MOST: Duration = Duration::from_secs(3);

/// Ends a check however its task ends (finished, cancelled at shutdown,
/// or panicked): the next time-out may start another.
struct CheckEnds<'a>(&'a Reviving);

impl Drop for CheckEnds<'_> {
    fn drop(&mut self) {
        self.0.checking.store(false, Ordering::Release);
        self.0.ended.notify_waiters();
    }
}

impl Redis {
    /// A call on this connection timed out (or its caller gave up on it):
    /// on a cluster, check in the background whether the connection is
    /// stuck, and replace it if so.
    pub(crate) fn call_timed_out(&self) {
        if !self.is_cluster() {
            return;
        }
        {
            let mut at = self
                .reviving
                .checked_at
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if at.is_some_and(|t| t.elapsed() < CHECK_AT_MOST_EVERY)
                || self.reviving.checking.swap(true, Ordering::AcqRel)
            {
                return;
            }
            *at = Some(Instant::now());
        }
        let redis = self.clone();
        tokio::spawn(async move {
            let _ends = CheckEnds(&redis.reviving);
            redis.check_and_replace().await;
        });
    }

    /// Before a call that timed out is tried again: waits (a few seconds
    /// at most) for a running check, so that the try uses its outcome.
    pub(crate) async fn after_time_out(&self) {
        let ended = self.reviving.ended.notified();
        if self.reviving.checking.load(Ordering::Acquire) {
            let _ = tokio::time::timeout(RETRY_WAITS_AT_MOST, ended).await;
        }
    }

    async fn check_and_replace(&self) {
        let Target::Cluster(seeds) = &self.target else {
            return;
        };
        // Only a PING that goes unanswered tells of a stuck client: an
        // error reply (a node down in a failover) is the client working.
        if ping(self.conn()).await != Ping::Unanswered {
            return;
        }
        let connect = async {
            let client = seeds.builder().build()?;
            client.get_async_connection().await
        };
        let new = match tokio::time::timeout(CONNECT_LIMIT, connect).await {
            Ok(Ok(c)) => Conn::Cluster(c),
            Ok(Err(e)) => {
                tracing::debug!("the cluster connection does not answer; nor does a new one: {e}");
                return;
            }
            Err(_) => {
                tracing::debug!("the cluster connection does not answer; a new one timed out");
                return;
            }
        };
        if ping(new.clone()).await != Ping::Answered {
            return;
        }
        *self.conn.write().unwrap_or_else(|p| p.into_inner()) = new;
        tracing::warn!(
            "the cluster connection stopped answering while a new one answers (the cluster \
             client's slot refresh is stuck): replaced it"
        );
    }
}

/// What became of a `PING`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ping {
    Answered,
    /// An error reply, or a connection refused: the client works.
    Refused,
    /// No answer in time.
    Unanswered,
}

/// A `PING` to one node through `conn`.
async fn ping(conn: Conn) -> Ping {
    let ping = redis::cmd("PING");
    let reply = match conn {
        Conn::Cluster(mut c) => {
            let one_node = RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random);
            tokio::time::timeout(PING_LIMIT, c.route_command(ping, one_node)).await
        }
        Conn::Single(mut c) => {
            tokio::time::timeout(PING_LIMIT, ping.query_async::<redis::Value>(&mut c)).await
        }
    };
    match reply {
        Ok(Ok(_)) => Ping::Answered,
        Ok(Err(e)) if e.is_timeout() => Ping::Unanswered,
        Ok(Err(_)) => Ping::Refused,
        Err(_) => Ping::Unanswered,
    }
}

//! A cluster connection that stopped answering is replaced.
//!
//! redis-rs 1.8's cluster client can stop sending anything, for good:
//! after a resharding, a burst of concurrent calls answered MOVED starts a
//! slot refresh that never finishes, and while it runs the client sends
//! nothing else (its recovery waits on the lock of its connections, and
//! it polls no other request meanwhile). Every later call times out; the
//! nodes are fine and a new client works at once. rmq cannot mend that
//! inside the client, so a call that timed out on a cluster makes it
//! check (one check at a time): a `PING` through the connection, and if
//! that times out too while a new connection to the seeds answers, the
//! new one replaces it for every user of this [`Redis`]. Calls in flight
//! on the old one time out and are retried or reported as any time-out.
//! The stuck client's task and sockets are not reclaimed (redis-rs offers
//! no way to): one per replacement. A durable send's own connection and a
//! consumer's pub/sub client are not watched.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use super::{Conn, Redis, Target};

/// At most one connection check at a time, and a pause between two
/// replacements (a cluster that is slow, not stuck, is not churned).
#[derive(Debug, Default)]
pub(super) struct Reviving {
    checking: AtomicBool,
    replaced_at: Mutex<Option<Instant>>,
}

/// The least time between two replacements.
const REPLACE_AT_MOST_EVERY: Duration = Duration::from_secs(1);

/// The longest wait for a `PING`'s answer.
const PING_LIMIT: Duration = Duration::from_secs(1);

/// How long a new connection may take to connect and answer.
const CONNECT_LIMIT: Duration = Duration::from_secs(15);

impl Redis {
    /// A call on this connection timed out (or its caller gave up on it):
    /// on a cluster, check in the background whether the connection is
    /// stuck, and replace it if so.
    pub(crate) fn call_timed_out(&self) {
        if !self.is_cluster() || self.reviving.checking.swap(true, Ordering::AcqRel) {
            return;
        }
        let redis = self.clone();
        tokio::spawn(async move {
            redis.check_and_replace().await;
            redis.reviving.checking.store(false, Ordering::Release);
        });
    }

    async fn check_and_replace(&self) {
        let Target::Cluster(seeds) = &self.target else {
            return;
        };
        let recently =
            |at: &Option<Instant>| at.is_some_and(|t| t.elapsed() < REPLACE_AT_MOST_EVERY);
        if recently(
            &self
                .reviving
                .replaced_at
                .lock()
                .unwrap_or_else(|p| p.into_inner()),
        ) {
            return;
        }
        // A PING is answered at once by a connection that works, however
        // busy: a few seconds at most, whatever the calls' own time-out.
        let limit = self.response_timeout.min(PING_LIMIT);
        let old = self.conn();
        if answers(old, limit).await {
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
        if !answers(new.clone(), limit).await {
            return;
        }
        *self.conn.write().unwrap_or_else(|p| p.into_inner()) = new;
        *self
            .reviving
            .replaced_at
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
        tracing::warn!(
            "the cluster connection stopped answering while a new one answers (the cluster \
             client's slot refresh is stuck): replaced it"
        );
    }
}

/// Whether a `PING` through `conn` is answered within `limit`.
async fn answers(mut conn: Conn, limit: Duration) -> bool {
    let ping = redis::cmd("PING");
    matches!(
        tokio::time::timeout(limit, ping.query_async::<redis::Value>(&mut conn)).await,
        Ok(Ok(_))
    )
}

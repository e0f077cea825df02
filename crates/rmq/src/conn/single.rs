//! One Redis node's connection, which recovers from a refused reconnect.
//!
//! redis-rs 1.8's `ConnectionManager` reconnects after an I/O error only
//! (`reconnect_if_io_error!` in `aio/connection_manager.rs`): when its
//! reconnect is refused by the server itself (AUTH refused because the
//! password changed meanwhile, an ACL user disabled for a moment), it keeps
//! that failed connection and answers every later call with the same
//! error, for good, even once the server accepts the credentials again. A
//! long-running process (`rmq serve`, a consumer, a forwarder, a relay)
//! would need a restart. So a call that fails that way replaces the
//! manager with a fresh one (at most once a second): the process recovers
//! as soon as Redis accepts it again.

use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Cmd, Pipeline, RedisError, RedisFuture, RedisResult, Value};
use tokio::time::Instant;

/// The least time between two replacements.
const REPLACE_AT_MOST_EVERY: Duration = Duration::from_secs(1);

/// A single node's shared connection (clones share it and its replacement).
#[derive(Clone)]
pub(crate) struct Single {
    shared: Arc<Shared>,
}

struct Shared {
    client: redis::Client,
    config: ConnectionManagerConfig,
    current: RwLock<ConnectionManager>,
    replaced_at: Mutex<Option<Instant>>,
}

impl Single {
    /// Connects now (an unreachable server or refused credentials are an
    /// error here, at start).
    pub(crate) async fn connect(
        client: redis::Client,
        config: ConnectionManagerConfig,
    ) -> RedisResult<Single> {
        let manager = ConnectionManager::new_with_config(client.clone(), config.clone()).await?;
        Ok(Single {
            shared: Arc::new(Shared {
                client,
                config,
                current: RwLock::new(manager),
                replaced_at: Mutex::new(None),
            }),
        })
    }

    fn current(&self) -> ConnectionManager {
        self.shared
            .current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// After a failed call: a connection the server refused is replaced by
    /// a new one, which connects at its first call.
    fn after(&self, e: &RedisError) {
        if !refused_connection(e) {
            return;
        }
        {
            let mut at = self
                .shared
                .replaced_at
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if at.is_some_and(|t| t.elapsed() < REPLACE_AT_MOST_EVERY) {
                return;
            }
            *at = Some(Instant::now());
        }
        match ConnectionManager::new_lazy_with_config(
            self.shared.client.clone(),
            self.shared.config.clone(),
        ) {
            Ok(fresh) => {
                *self
                    .shared
                    .current
                    .write()
                    .unwrap_or_else(|p| p.into_inner()) = fresh;
                tracing::warn!("Redis refused the connection ({e}): connecting again");
            }
            Err(err) => tracing::warn!("cannot make a new Redis connection: {err}"),
        }
    }
}

/// Whether `e` says the connection itself was refused by the server (its
/// AUTH or the user's rights), not that a command failed.
fn refused_connection(e: &RedisError) -> bool {
    e.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(e.code(), Some("WRONGPASS" | "NOAUTH"))
}

impl redis::aio::ConnectionLike for Single {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let r = self.current().send_packed_command(cmd).await;
            if let Err(e) = &r {
                self.after(e);
            }
            r
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let r = self
                .current()
                .send_packed_commands(pipeline, offset, count)
                .await;
            if let Err(e) = &r {
                self.after(e);
            }
            r
        })
    }

    fn get_db(&self) -> i64 {
        redis::aio::ConnectionLike::get_db(&self.current())
    }
}

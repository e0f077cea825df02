//! Connecting to Redis: one [`Client`] handle per application, cheap to clone.
//!
//! The client keeps one auto-reconnecting multiplexed connection (commands
//! from all tasks are pipelined on it), checks the server at connect
//! (version, eviction policy) and runs scripts with NOSCRIPT recovery.
//!
//! One file per duty: the settings (`options.rs`), the checks of the server
//! at connect (`preflight.rs`) and the topic registry (`registry.rs`); this
//! file connects (one node or a cluster) and holds the handle.

mod lifecycle;
mod options;
mod preflight;
mod registry;

use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionManagerConfig;
use redis::Value;

use crate::conn::Redis;
use crate::conn::{ClusterSeeds, Conn, Target};
use crate::context::Context;
use crate::error::{Error, ErrorKind, Result};
use crate::topic::validate_prefix;
pub use lifecycle::Deleted;
pub use options::{redact, ClientOptions, Password, TlsOptions};
pub use preflight::ServerWarning;
use preflight::{
    check_functions_loaded, first_time_in_this_process, preflight, supports_waitaof, Preflight,
};

/// A handle on one Redis for one prefix. Clone it freely.
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    /// The connection and the prefix, shared with every topic.
    pub(crate) ctx: Arc<Context>,
    pub(crate) url: String,
    pub(crate) warnings: Vec<ServerWarning>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("url", &self.inner.url)
            .field("prefix", &self.inner.ctx.prefix)
            .finish()
    }
}

impl Client {
    /// Connects with the default options (prefix `rmq`).
    pub async fn connect(url: &str) -> Result<Client> {
        Self::connect_with(url, ClientOptions::default()).await
    }

    /// Connects, checks the server (Redis 7.0 or newer; `maxmemory-policy
    /// noeviction` unless [`ClientOptions::allow_eviction`]) and loads the scripts.
    pub async fn connect_with(url: &str, options: ClientOptions) -> Result<Client> {
        validate_prefix(&options.prefix)?;
        let shown = redact(url);
        let info = options.connection_info(url)?;
        let opened = match &options.tls {
            Some(tls) => redis::Client::build_with_tls(info, tls.certificates()?),
            None => redis::Client::open(info),
        };
        let client = opened.map_err(|e| {
            Error::new(
                ErrorKind::InvalidArgument,
                format!("invalid Redis URL {shown}: {e}; use redis://host:port"),
            )
        })?;
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(options.response_timeout))
            .set_connection_timeout(Some(Duration::from_secs(5)))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_secs(2));
        let conn = tokio::time::timeout(
            Duration::from_secs(15),
            crate::conn::Single::connect(client.clone(), config),
        )
        .await
        .map_err(|_| {
            Error::new(
                ErrorKind::Connection,
                format!("timed out connecting to Redis at {shown}"),
            )
        })?
        .map_err(|e| {
            Error::new(
                ErrorKind::Connection,
                format!("cannot connect to Redis at {shown}: {e}; is redis-server running there?"),
            )
        })?;
        let redis = Redis::new(
            Target::Single(client),
            Conn::Single(conn),
            options.response_timeout,
        );
        Self::finish(redis, options, shown).await
    }

    /// Connects to a Redis Cluster through one or more seed nodes (the
    /// others are discovered), with the same checks on every master, and
    /// loads the scripts on every node. The API is the same as on a
    /// single node.
    pub async fn connect_cluster(seeds: &[&str], options: ClientOptions) -> Result<Client> {
        validate_prefix(&options.prefix)?;
        let shown = seeds
            .iter()
            .map(|s| redact(s))
            .collect::<Vec<_>>()
            .join(",");
        if seeds.is_empty() {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "no cluster seed node given; pass one or more redis://host:port URLs",
            ));
        }
        let mut nodes = Vec::with_capacity(seeds.len());
        for seed in seeds {
            nodes.push(options.connection_info(seed)?);
        }
        let seeds = ClusterSeeds {
            nodes,
            response_timeout: options.response_timeout,
            certs: options
                .tls
                .as_ref()
                .map(TlsOptions::certificates)
                .transpose()?,
        };
        let client = seeds.builder().build().map_err(|e| {
            Error::new(
                ErrorKind::InvalidArgument,
                format!("invalid cluster seeds {shown}: {e}"),
            )
        })?;
        let conn = tokio::time::timeout(Duration::from_secs(15), client.get_async_connection())
            .await
            .map_err(|_| {
                Error::new(
                    ErrorKind::Connection,
                    format!("timed out connecting to the Redis Cluster at {shown}"),
                )
            })?
            .map_err(|e| {
                Error::new(
                    ErrorKind::Connection,
                    format!(
                        "cannot connect to a Redis Cluster at {shown}: {e}; \
                         is it a cluster (cluster-enabled yes) and is it up?"
                    ),
                )
            })?;
        let redis = Redis::new(
            Target::Cluster(seeds),
            Conn::Cluster(conn),
            options.response_timeout,
        );
        Self::finish(redis, options, shown).await
    }

    async fn finish(mut redis: Redis, options: ClientOptions, shown: String) -> Result<Client> {
        redis.functions = options.functions;
        redis.failover_window = options.failover_window;
        let Preflight {
            warnings,
            standalone,
        } = preflight(&redis, &options).await?;
        for w in &warnings {
            if !first_time_in_this_process(&format!("{shown} {w}")) {
                continue;
            }
            match w {
                // Common on development servers: not worth a warning line.
                ServerWarning::NoPersistence => tracing::info!("{w}"),
                _ => tracing::warn!("{w}"),
            }
        }
        redis.waitaof = supports_waitaof(&redis).await;
        // One index key needs a server not in cluster mode; a cluster
        // client keeps one per hash tag. A server in cluster mode reached
        // as one node keeps none (a script there keeps to one hash slot).
        redis.head_index = options.head_index && (standalone || redis.is_cluster());
        if redis.functions {
            check_functions_loaded(&redis).await?;
        } else {
            redis.load_scripts().await?;
        }
        Ok(Client {
            inner: Arc::new(Inner {
                ctx: Arc::new(Context {
                    redis,
                    prefix: options.prefix,
                }),
                url: shown,
                warnings,
            }),
        })
    }

    /// What the checks at connect found that weakens a guarantee (each was
    /// also logged). Empty on a well-configured server.
    pub fn warnings(&self) -> &[ServerWarning] {
        &self.inner.warnings
    }

    /// Loads (or replaces) rmq's Function library on the server, on every
    /// master of a cluster: an admin's step for the locked-down mode
    /// ([`ClientOptions::functions`]). Functions are replicated and
    /// persisted like data. Needs the `FUNCTION LOAD` right.
    pub async fn load_functions(&self) -> Result<String> {
        let lib = crate::scripts::functions::library();
        let mut conn = self.inner.ctx.redis.conn();
        let _: Value = redis::cmd("FUNCTION")
            .arg("LOAD")
            .arg("REPLACE")
            .arg(&lib.code)
            .query_async(&mut conn)
            .await?;
        Ok(lib.name.clone())
    }

    /// The Function library's name and source (what `load_functions` loads).
    pub fn functions_library() -> (&'static str, &'static str) {
        let lib = crate::scripts::functions::library();
        (&lib.name, &lib.code)
    }

    /// Whether this client talks to a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        self.inner.ctx.redis.is_cluster()
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.inner.ctx.prefix
    }

    /// The server's clock (Unix ms): the clock of due times, of
    /// [`Received::taken_ms`](crate::Received::taken_ms) and of dead
    /// letters. On a cluster, any master's (their clocks are assumed in
    /// step).
    pub async fn server_time_ms(&self) -> Result<i64> {
        let (secs, micros): (i64, i64) = self.inner.ctx.redis.query(&redis::cmd("TIME")).await?;
        Ok(secs * 1_000 + micros / 1_000)
    }
}

//! The checks at connect: Redis 7.0 or newer, an eviction policy that cannot
//! drop messages, and what weakens a guarantee (no persistence, replicas
//! without persistence, a configuration that cannot be read), on every
//! master of a cluster, riding out a failover. Each warning is logged once
//! per process however often it connects.

use std::time::Duration;

use redis::Value;

use super::options::ClientOptions;
use crate::conn::{Conn, Redis};
use crate::error::{Error, ErrorKind, Result};

/// Something about the server found at connect that does not stop rmq but
/// weakens a guarantee. Each is also logged (tracing: warn; info for
/// [`ServerWarning::NoPersistence`], common on development servers).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ServerWarning {
    /// `CONFIG GET` is not allowed (ACL, renamed command): the eviction
    /// policy could not be checked. Make sure it is `noeviction`.
    ConfigUnreadable,
    /// A master with replicas keeps nothing on disk (no AOF, no RDB
    /// snapshots): if it restarts, it comes back empty and its replicas
    /// copy the empty data set: every message is lost.
    ReplicatedWithoutPersistence {
        /// Connected replicas.
        replicas: u32,
    },
    /// No persistence at all (no AOF, no snapshots): a restart loses
    /// every message. Fine for a cache, not for a queue.
    NoPersistence,
}

impl std::fmt::Display for ServerWarning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServerWarning::ConfigUnreadable => write!(
                f,
                "CONFIG GET is not allowed: cannot check maxmemory-policy; make sure it is noeviction"
            ),
            ServerWarning::ReplicatedWithoutPersistence { replicas } => write!(
                f,
                "this master has {replicas} replica(s) but no persistence (no AOF, no RDB): \
                 a restart comes back empty and the replicas copy the empty data set"
            ),
            ServerWarning::NoPersistence => write!(
                f,
                "Redis keeps nothing on disk (no AOF, no RDB): a restart loses every message; \
                 enable appendonly"
            ),
        }
    }
}

/// Whether `what` is said for the first time by this process: a warning
/// about a server is logged once, however often a process connects.
pub(super) fn first_time_in_this_process(what: &str) -> bool {
    static SAID: std::sync::OnceLock<std::sync::Mutex<std::collections::HashSet<String>>> =
        std::sync::OnceLock::new();
    SAID.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(what.to_string())
}

/// Refuses servers older than 7.0 (script flags, ZMSCORE, ZRANGE REV).
fn check_version(info_server: &str) -> Result<()> {
    let version = info_server
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap_or("0")
        .trim();
    let major: u32 = version
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or(0);
    if major < 7 {
        return Err(Error::new(
            ErrorKind::UnsupportedServer,
            format!("Redis {version} is too old: rmq needs Redis 7.0 or newer (script flags, ZMSCORE, ZRANGE REV)"),
        ));
    }
    Ok(())
}

/// Whether every master is Redis 7.2+ (WAITAOF) with the AOF enabled.
pub(super) async fn supports_waitaof(redis: &Redis) -> bool {
    let mut info = redis::cmd("INFO");
    info.arg("server").arg("persistence");
    let Ok(replies) = on_every_master(redis, info).await else {
        return false;
    };
    !replies.is_empty()
        && replies.into_iter().all(|v| {
            let text: String = redis::from_redis_value(v).unwrap_or_default();
            let version = text
                .lines()
                .find_map(|l| l.strip_prefix("redis_version:"))
                .unwrap_or("0.0")
                .trim()
                .to_string();
            let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
            let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
            (major, minor) >= (7, 2) && text.lines().any(|l| l.trim() == "aof_enabled:1")
        })
}

/// Locked-down mode: the library must be there (`FUNCTION LIST`; when the
/// user may not list functions, the first call reports it instead).
pub(super) async fn check_functions_loaded(redis: &Redis) -> Result<()> {
    let name = &crate::scripts::functions::library().name;
    let mut list = redis::cmd("FUNCTION");
    list.arg("LIST").arg("LIBRARYNAME").arg(name);
    match on_every_master(redis, list).await {
        Ok(replies) => {
            for v in replies {
                let empty = matches!(&v, Value::Array(a) if a.is_empty());
                if empty {
                    return Err(crate::conn::functions_missing());
                }
            }
            Ok(())
        }
        Err(e) => {
            tracing::debug!("FUNCTION LIST: {e}");
            Ok(())
        }
    }
}

/// The text replies of a command sent to every master (a single node: its
/// one reply).
pub(super) async fn on_every_master(
    redis: &Redis,
    cmd: redis::Cmd,
) -> redis::RedisResult<Vec<Value>> {
    match redis.conn() {
        Conn::Single(mut conn) => Ok(vec![cmd.query_async::<Value>(&mut conn).await?]),
        Conn::Cluster(c) => {
            use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};
            // Reads only: ride out a failover as `Redis::query` does.
            let deadline = tokio::time::Instant::now() + redis.failover_window;
            let mut pause = Duration::from_millis(50);
            let v = loop {
                let mut c = c.clone();
                let r = c
                    .route_command(
                        cmd.clone(),
                        RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None)),
                    )
                    .await;
                match r {
                    Err(e)
                        if crate::conn::retry_through_failover(&e, true)
                            && tokio::time::Instant::now() + pause < deadline =>
                    {
                        tokio::time::sleep(pause).await;
                        pause = (pause * 2).min(Duration::from_millis(500));
                    }
                    r => break r?,
                }
            };
            Ok(match v {
                Value::Map(pairs) => pairs.into_iter().map(|(_, v)| v).collect(),
                other => vec![other],
            })
        }
    }
}

/// What the checks at connect found.
pub(super) struct Preflight {
    /// What weakens a guarantee.
    pub(super) warnings: Vec<ServerWarning>,
    /// One server, not in cluster mode (`redis_mode:standalone`): a script
    /// may touch keys of any hash slot there, so slot scripts can keep each
    /// topic's head index. A server in cluster mode refuses that
    /// (CROSSSLOT) even when reached as one node.
    pub(super) standalone: bool,
}

pub(super) async fn preflight(redis: &Redis, options: &ClientOptions) -> Result<Preflight> {
    let mut warnings = Vec::new();
    let mut info = redis::cmd("INFO");
    info.arg("server");
    let servers = on_every_master(redis, info).await?;
    let mut standalone = !redis.is_cluster() && servers.len() == 1;
    for v in servers {
        let text: String = redis::from_redis_value(v)
            .map_err(|e| Error::new(ErrorKind::Redis, format!("unexpected INFO reply: {e}")))?;
        check_version(&text)?;
        standalone &= text.lines().any(|l| l.trim() == "redis_mode:standalone");
    }
    let mut get = redis::cmd("CONFIG");
    get.arg("GET").arg("maxmemory-policy");
    match on_every_master(redis, get).await {
        Ok(replies) => {
            for v in replies {
                let pair: Vec<String> = redis::from_redis_value(v).unwrap_or_default();
                let p = pair.get(1).cloned().unwrap_or_default();
                if p != "noeviction" && !p.is_empty() && !options.allow_eviction {
                    return Err(Error::new(
                        ErrorKind::UnsafeServerConfig,
                        format!(
                            "Redis maxmemory-policy is {p}: it may evict queued messages. \
                             Set `CONFIG SET maxmemory-policy noeviction`, or allow eviction explicitly"
                        ),
                    ));
                }
            }
        }
        Err(e) => {
            tracing::debug!("CONFIG GET maxmemory-policy: {e}");
            warnings.push(ServerWarning::ConfigUnreadable);
        }
    }
    let mut info = redis::cmd("INFO");
    info.arg("persistence").arg("replication");
    let mut get_save = redis::cmd("CONFIG");
    get_save.arg("GET").arg("save");
    let saves = on_every_master(redis, get_save).await.ok();
    let infos = on_every_master(redis, info).await.unwrap_or_default();
    for (i, v) in infos.into_iter().enumerate() {
        let text: String = redis::from_redis_value(v).unwrap_or_default();
        let field = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(':')))
                .map(|v| v.trim().to_string())
        };
        let aof = field("aof_enabled").as_deref() == Some("1");
        // RDB snapshots are configured when `save` is not empty; unknown
        // (CONFIG denied) counts as configured, to warn only when sure.
        let rdb = match saves.as_ref().and_then(|s| s.get(i)) {
            Some(v) => {
                let pair: Vec<String> = redis::from_redis_value(v.clone()).unwrap_or_default();
                pair.get(1).is_some_and(|s| !s.trim().is_empty())
            }
            None => true,
        };
        let replicas: u32 = field("connected_slaves")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        if !aof && !rdb {
            let w = if replicas > 0 {
                ServerWarning::ReplicatedWithoutPersistence { replicas }
            } else {
                ServerWarning::NoPersistence
            };
            if !warnings.contains(&w) {
                warnings.push(w);
            }
        }
    }
    Ok(Preflight {
        warnings,
        standalone,
    })
}

#[cfg(test)]
mod tests {
    use super::check_version;
    use crate::ErrorKind;

    #[test]
    fn servers_older_than_7_are_refused() {
        let e = check_version("# Server\r\nredis_version:6.2.14\r\n").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::UnsupportedServer);
        assert!(e.to_string().contains("7.0 or newer"));
        assert!(check_version("redis_version:7.0.15\r\n").is_ok());
        assert!(check_version("redis_version:9.1.2\r\n").is_ok());
        assert!(check_version("no version here").is_err());
    }
}

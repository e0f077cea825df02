//! Connecting to Redis: one [`Client`] handle per application, cheap to clone.
//!
//! The client keeps one auto-reconnecting multiplexed connection (commands
//! from all tasks are pipelined on it), checks the server at connect
//! (version, eviction policy) and runs scripts with NOSCRIPT recovery.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::Value;

use crate::error::{Error, ErrorKind, Result};
use crate::keys;
use crate::scripts::{self, ScriptId};
use crate::topic::{validate_prefix, validate_topic_name, TopicSpec};
use crate::Topic;

/// Connection settings.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// Key prefix (namespace): every key and channel starts with `<prefix>:`.
    pub prefix: String,
    /// Accept a server whose `maxmemory-policy` may evict keys (and so lose
    /// messages). Off by default.
    pub allow_eviction: bool,
    /// How long to wait for any one reply.
    pub response_timeout: Duration,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            prefix: "rmq".into(),
            allow_eviction: false,
            response_timeout: Duration::from_secs(10),
        }
    }
}

impl ClientOptions {
    /// Sets the key prefix.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }
}

/// A handle on one Redis for one prefix. Clone it freely.
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) redis: Redis,
    pub(crate) prefix: String,
    pub(crate) url: String,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("url", &self.inner.url)
            .field("prefix", &self.inner.prefix)
            .finish()
    }
}

/// The connection and the script runner.
#[derive(Clone)]
pub(crate) struct Redis {
    pub(crate) client: redis::Client,
    pub(crate) conn: ConnectionManager,
}

impl Redis {
    /// Runs script calls in one pipeline and returns one result per call.
    /// Calls that hit NOSCRIPT (they did nothing) are retried once after
    /// loading the scripts. An error of the whole pipeline (connection)
    /// is returned as such: those calls may or may not have run.
    pub(crate) async fn run(
        &self,
        calls: Vec<(ScriptId, redis::Cmd)>,
    ) -> Result<Vec<Result<Value>>> {
        let mut out: Vec<Option<Result<Value>>> = (0..calls.len()).map(|_| None).collect();
        let mut pending: Vec<usize> = (0..calls.len()).collect();
        for round in 0..2 {
            let mut pipe = redis::pipe();
            pipe.ignore_errors();
            for &i in &pending {
                pipe.add_command(calls[i].1.clone());
            }
            let mut conn = self.conn.clone();
            let results: Vec<redis::RedisResult<Value>> = pipe.query_async(&mut conn).await?;
            let mut missing = Vec::new();
            for (&i, r) in pending.iter().zip(results) {
                match r {
                    Err(e)
                        if round == 0
                            && e.kind()
                                == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
                    {
                        missing.push(i)
                    }
                    Err(e) => out[i] = Some(Err(Error::from(e))),
                    Ok(v) => out[i] = Some(Ok(v)),
                }
            }
            if missing.is_empty() {
                break;
            }
            self.load_scripts().await?;
            pending = missing;
        }
        Ok(out
            .into_iter()
            .map(|o| {
                o.unwrap_or_else(|| Err(Error::new(ErrorKind::Redis, "script result missing")))
            })
            .collect())
    }

    /// Runs one script call.
    pub(crate) async fn run_one(&self, id: ScriptId, cmd: redis::Cmd) -> Result<Value> {
        self.run(vec![(id, cmd)])
            .await?
            .pop()
            .unwrap_or_else(|| Err(Error::new(ErrorKind::Redis, "script result missing")))
    }

    /// Loads every script (SCRIPT LOAD is idempotent).
    pub(crate) async fn load_scripts(&self) -> Result<()> {
        let mut pipe = redis::pipe();
        for id in ScriptId::ALL {
            pipe.cmd("SCRIPT").arg("LOAD").arg(&scripts::get(id).code);
        }
        let mut conn = self.conn.clone();
        let _: Vec<String> = pipe.query_async(&mut conn).await?;
        Ok(())
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
        let client = redis::Client::open(url).map_err(|e| {
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
            ConnectionManager::new_with_config(client.clone(), config),
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
        let redis = Redis { client, conn };
        preflight(&redis, &options).await?;
        redis.load_scripts().await?;
        Ok(Client {
            inner: Arc::new(Inner {
                redis,
                prefix: options.prefix,
                url: shown,
            }),
        })
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.inner.prefix
    }

    /// Defines a topic, or checks that it is already defined exactly so.
    /// A different definition under the same name is refused
    /// ([`ErrorKind::TopicConflict`]) and changes nothing.
    pub async fn define_topic(&self, spec: TopicSpec) -> Result<Topic> {
        spec.validate()?;
        let json = spec.to_json();
        let cmd = scripts::call(
            ScriptId::DefineTopic,
            &[keys::topic_index(self.prefix())],
            &[spec.name.as_bytes(), json.as_bytes()],
        );
        let v = self.inner.redis.run_one(ScriptId::DefineTopic, cmd).await?;
        let (code, existing): (i64, String) = redis::from_redis_value(v)
            .map_err(|e| Error::new(ErrorKind::Redis, format!("unexpected reply: {e}")))?;
        if code == 2 {
            let old = serde_json::from_str::<TopicSpec>(&existing)
                .map(|o| describe_difference(&o, &spec))
                .unwrap_or_else(|_| existing.clone());
            return Err(Error::new(
                ErrorKind::TopicConflict,
                format!(
                    "topic {:?} already exists with another definition ({old}); \
                     use the existing definition or another name",
                    spec.name
                ),
            ));
        }
        Ok(Topic::new(self.clone(), spec))
    }

    /// Opens a defined topic.
    pub async fn topic(&self, name: &str) -> Result<Topic> {
        validate_topic_name(name)?;
        let mut conn = self.inner.redis.conn.clone();
        let json: Option<String> = redis::cmd("HGET")
            .arg(keys::topic_index(self.prefix()))
            .arg(name)
            .query_async(&mut conn)
            .await?;
        let Some(json) = json else {
            return Err(Error::new(
                ErrorKind::UnknownTopic,
                format!(
                    "topic {name:?} does not exist under prefix {:?}: define it first (rmq topic create)",
                    self.prefix()
                ),
            ));
        };
        let spec: TopicSpec = serde_json::from_str(&json).map_err(|e| {
            Error::new(
                ErrorKind::Redis,
                format!("the stored definition of topic {name:?} is unreadable: {e}"),
            )
        })?;
        Ok(Topic::new(self.clone(), spec))
    }

    /// Every topic defined under this prefix, by name.
    pub async fn topics(&self) -> Result<Vec<TopicSpec>> {
        let mut conn = self.inner.redis.conn.clone();
        let all: Vec<(String, String)> = redis::cmd("HGETALL")
            .arg(keys::topic_index(self.prefix()))
            .query_async(&mut conn)
            .await?;
        let mut out: Vec<TopicSpec> = all
            .into_iter()
            .filter_map(|(_, json)| serde_json::from_str(&json).ok())
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }
}

fn describe_difference(old: &TopicSpec, new: &TopicSpec) -> String {
    let mut d = Vec::new();
    if old.kind != new.kind {
        d.push(format!("kind {} vs {}", old.kind, new.kind));
    }
    if old.slots != new.slots {
        d.push(format!("slots {} vs {}", old.slots, new.slots));
    }
    if d.is_empty() {
        d.push(format!("settings differ: existing {}", old.to_json()));
    }
    format!("existing vs requested: {}", d.join(", "))
}

/// The URL with any password replaced by `***`.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let userinfo = &url[s + 3..at];
            match userinfo.find(':') {
                Some(c) => format!("{}{}:***{}", &url[..s + 3], &userinfo[..c], &url[at..]),
                None => format!("{}***{}", &url[..s + 3], &url[at..]),
            }
        }
        _ => url.to_string(),
    }
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

async fn preflight(redis: &Redis, options: &ClientOptions) -> Result<()> {
    let mut conn = redis.conn.clone();
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut conn)
        .await?;
    check_version(&info)?;
    let policy: redis::RedisResult<Vec<String>> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory-policy")
        .query_async(&mut conn)
        .await;
    match policy {
        Ok(v) => {
            let p = v.get(1).cloned().unwrap_or_default();
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
        Err(e) => tracing::warn!("cannot read maxmemory-policy ({e}); make sure it is noeviction"),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{check_version, redact};
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

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(redact("redis://u:secret@h:1"), "redis://u:***@h:1");
        assert_eq!(redact("redis://secret@h:1"), "redis://***@h:1");
        assert_eq!(redact("redis://h:1"), "redis://h:1");
    }
}

//! Connecting to Redis: one [`Client`] handle per application, cheap to clone.
//!
//! The client keeps one auto-reconnecting multiplexed connection (commands
//! from all tasks are pipelined on it), checks the server at connect
//! (version, eviction policy) and runs scripts with NOSCRIPT recovery.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::Value;

pub(crate) use crate::conn::Redis;
use crate::conn::{ClusterSeeds, Conn, Target};
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
    /// ACL user name; overrides one in the URL.
    pub username: Option<String>,
    /// Password; overrides one in the URL. Never shown by `Debug`.
    pub password: Option<Password>,
    /// TLS settings for `rediss://` URLs (a CA to trust instead of the
    /// system roots, a client certificate for mTLS).
    pub tls: Option<TlsOptions>,
    /// Locked-down mode: never load or send Lua; call the Function library
    /// an admin loaded ([`Client::load_functions`]) with `FCALL`, so the
    /// user needs no `EVAL`, `EVALSHA` or `SCRIPT` rights.
    pub functions: bool,
    /// Redis Cluster: how long a call (connecting included) keeps trying
    /// while a master fails over, before it fails with a retryable error.
    /// Default 15 s: more than a node time-out of a few seconds plus the
    /// election; raise it with the cluster's `cluster-node-timeout`.
    pub failover_window: Duration,
}

/// TLS for `rediss://` URLs (rustls). The server's certificate and host
/// name are always verified: against the system roots, or against `ca`.
/// There is no fall-back to plaintext: TLS options with a `redis://` URL
/// are refused.
#[derive(Clone, Default)]
pub struct TlsOptions {
    /// PEM of the CA(s) to trust instead of the system roots.
    pub ca_pem: Option<Vec<u8>>,
    /// mTLS: the client certificate chain, PEM.
    pub client_cert_pem: Option<Vec<u8>>,
    /// mTLS: the client certificate's private key, PEM.
    pub client_key_pem: Option<Vec<u8>>,
}

impl std::fmt::Debug for TlsOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsOptions")
            .field("ca", &self.ca_pem.as_ref().map(|_| "<pem>"))
            .field(
                "client_cert",
                &self.client_cert_pem.as_ref().map(|_| "<pem>"),
            )
            .field("client_key", &self.client_key_pem.as_ref().map(|_| "***"))
            .finish()
    }
}

impl TlsOptions {
    fn certificates(&self) -> Result<redis::TlsCertificates> {
        let client_tls = match (&self.client_cert_pem, &self.client_key_pem) {
            (Some(cert), Some(key)) => Some(redis::ClientTlsConfig {
                client_cert: cert.clone(),
                client_key: key.clone(),
            }),
            (None, None) => None,
            _ => {
                return Err(Error::new(
                    ErrorKind::InvalidArgument,
                    "mTLS needs both a client certificate and its key",
                ))
            }
        };
        Ok(redis::TlsCertificates {
            client_tls,
            root_cert: self.ca_pem.clone(),
        })
    }
}

/// rustls needs one process-wide crypto provider; install ring's unless
/// the application installed one (then that one is used).
fn ensure_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

fn is_tls_url(url: &str) -> bool {
    url.trim_start()
        .to_ascii_lowercase()
        .starts_with("rediss://")
}

/// A password: `Debug` and `Display` print `***`, never the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct Password(String);

impl Password {
    /// Wraps a secret.
    pub fn new(secret: impl Into<String>) -> Password {
        Password(secret.into())
    }

    /// The secret itself (to hand to a connection, nowhere else).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Password {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Password(***)")
    }
}

impl std::fmt::Display for Password {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            prefix: "rmq".into(),
            allow_eviction: false,
            response_timeout: Duration::from_secs(10),
            username: None,
            password: None,
            tls: None,
            functions: false,
            failover_window: crate::conn::DEFAULT_FAILOVER_WINDOW,
        }
    }
}

impl ClientOptions {
    /// Sets the key prefix.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Sets the ACL user and password (instead of putting them in the URL).
    pub fn credentials(mut self, username: Option<String>, password: Password) -> Self {
        self.username = username;
        self.password = Some(password);
        self
    }

    /// Locked-down mode (see [`ClientOptions::functions`]).
    pub fn functions(mut self, on: bool) -> Self {
        self.functions = on;
        self
    }

    /// Redis Cluster: how long calls ride out a failover (see the field).
    pub fn failover_window(mut self, window: Duration) -> Self {
        self.failover_window = window;
        self
    }

    /// Sets the TLS settings (for `rediss://` URLs).
    pub fn tls(mut self, tls: TlsOptions) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Refuses TLS settings with a plaintext URL (never a silent fall-back).
    fn check_tls(&self, url: &str) -> Result<()> {
        if self.tls.is_some() && !is_tls_url(url) {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "TLS settings were given but {} is not a rediss:// URL; \
                     rmq never falls back to plaintext",
                    redact(url)
                ),
            ));
        }
        if is_tls_url(url) {
            ensure_crypto_provider();
        }
        Ok(())
    }

    /// The URL's connection settings with these credentials applied.
    fn connection_info(&self, url: &str) -> Result<redis::ConnectionInfo> {
        self.check_tls(url)?;
        let info = redis::IntoConnectionInfo::into_connection_info(url).map_err(|e| {
            Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "invalid Redis URL {}: {e}; use redis://host:port or rediss://host:port",
                    redact(url)
                ),
            )
        })?;
        let mut settings = info.redis_settings().clone();
        if let Some(user) = &self.username {
            settings = settings.set_username(user);
        }
        if let Some(pw) = &self.password {
            settings = settings.set_password(pw.expose());
        }
        Ok(info.set_redis_settings(settings))
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
    pub(crate) warnings: Vec<ServerWarning>,
}

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

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("url", &self.inner.url)
            .field("prefix", &self.inner.prefix)
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
        let warnings = preflight(&redis, &options).await?;
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
        if redis.functions {
            check_functions_loaded(&redis).await?;
        } else {
            redis.load_scripts().await?;
        }
        Ok(Client {
            inner: Arc::new(Inner {
                redis,
                prefix: options.prefix,
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
        let mut conn = self.inner.redis.conn.clone();
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
        self.inner.redis.is_cluster()
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
        let mut get = redis::cmd("HGET");
        get.arg(keys::topic_index(self.prefix())).arg(name);
        let json: Option<String> = self.inner.redis.query(&get).await?;
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
        let mut get = redis::cmd("HGETALL");
        get.arg(keys::topic_index(self.prefix()));
        let all: Vec<(String, String)> = self.inner.redis.query(&get).await?;
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

/// Whether `what` is said for the first time by this process: a warning
/// about a server is logged once, however often a process connects.
fn first_time_in_this_process(what: &str) -> bool {
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
async fn supports_waitaof(redis: &Redis) -> bool {
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
async fn check_functions_loaded(redis: &Redis) -> Result<()> {
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
async fn on_every_master(redis: &Redis, cmd: redis::Cmd) -> redis::RedisResult<Vec<Value>> {
    match &redis.conn {
        Conn::Single(_) => {
            let mut conn = redis.conn.clone();
            Ok(vec![cmd.query_async::<Value>(&mut conn).await?])
        }
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

async fn preflight(redis: &Redis, options: &ClientOptions) -> Result<Vec<ServerWarning>> {
    let mut warnings = Vec::new();
    let mut info = redis::cmd("INFO");
    info.arg("server");
    for v in on_every_master(redis, info).await? {
        let text: String = redis::from_redis_value(v)
            .map_err(|e| Error::new(ErrorKind::Redis, format!("unexpected INFO reply: {e}")))?;
        check_version(&text)?;
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
    Ok(warnings)
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

//! Connection settings: prefix, time-outs, credentials, TLS, the
//! locked-down mode and the failover window; how a URL and these settings
//! become the Redis client's connection info (credentials and TLS checked,
//! never a silent fall-back to plaintext); and URLs with their passwords
//! hidden, for every message and log line.

use std::time::Duration;

use crate::error::{Error, ErrorKind, Result};

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
    /// an admin loaded ([`Client::load_functions`](crate::Client::load_functions)) with `FCALL`, so the
    /// user needs no `EVAL`, `EVALSHA` or `SCRIPT` rights.
    pub functions: bool,
    /// Redis Cluster: how long a call (connecting included) keeps trying
    /// while a master fails over, before it fails with a retryable error.
    /// Default 15 s: more than a node time-out of a few seconds plus the
    /// election; raise it with the cluster's `cluster-node-timeout`.
    pub failover_window: Duration,
    /// A single server (not in cluster mode): keep each topic's head index,
    /// so that an idle consumer reads one key instead of looking at every
    /// slot (see the README, "Idle cost and the slot count"). On by
    /// default. Turn it off in every process of a prefix while processes
    /// of an rmq that does not keep it still send to it (a rolling upgrade):
    /// their sends would not be in the index, and consumers reading it would
    /// find them only by the slow sweep. The same holds for an rmq that
    /// keeps the index but not the topics' marks (the release before
    /// them): its sends mark nothing, and parallel consumers that wait on
    /// the marks would take those messages only at their rescans (up to
    /// 5 s late). Ignored on a cluster.
    pub head_index: bool,
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
    pub(super) fn certificates(&self) -> Result<redis::TlsCertificates> {
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
pub(super) fn ensure_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

pub(super) fn is_tls_url(url: &str) -> bool {
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
            head_index: true,
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

    /// Keeps (or not) each topic's head index on a single server (see
    /// [`ClientOptions::head_index`]).
    pub fn head_index(mut self, on: bool) -> Self {
        self.head_index = on;
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
    pub(super) fn check_tls(&self, url: &str) -> Result<()> {
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
    pub(super) fn connection_info(&self, url: &str) -> Result<redis::ConnectionInfo> {
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

/// Parameter names whose values are secrets, wherever they stand: in a
/// URL's query (`redis+unix:///s.sock?pass=…`, `postgres://h/db?password=…`,
/// `nats://h?token=…`) or in a key-value string (`host=h password=…`).
const SECRET_PARAMS: [&str; 9] = [
    "password",
    "passwd",
    "pass",
    "pwd",
    "token",
    "auth",
    "secret",
    "sslpassword",
    "access_token",
];

/// The text with every credential replaced by `***`: the user-info
/// password of each URL (or the user-info itself when it is one word, a
/// token), and the value of every secret parameter (`pass`, `password`,
/// `passwd`, `pwd`, `token`, `auth`, `secret`, `sslpassword`, `access_token`).
/// Several URLs separated by commas (a cluster's seeds) are each redacted.
/// For every address a tool prints: Redis, PostgreSQL, AMQP, NATS, ZooKeeper.
pub fn redact(url: &str) -> String {
    url.split(',')
        .map(|one| redact_params(&redact_userinfo(one)))
        .collect::<Vec<_>>()
        .join(",")
}

/// `scheme://user:secret@host` → `scheme://user:***@host`;
/// `scheme://secret@host` → `scheme://***@host`.
fn redact_userinfo(url: &str) -> String {
    let Some(s) = url.find("://") else {
        return url.to_string();
    };
    let rest = &url[s + 3..];
    // The user-info ends at the last '@' before the path or query.
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else {
        return url.to_string();
    };
    let userinfo = &rest[..at];
    let shown = match userinfo.find(':') {
        Some(c) => format!("{}:***", &userinfo[..c]),
        None => "***".to_string(),
    };
    format!("{}{shown}{}", &url[..s + 3], &rest[at..])
}

/// Every `name=value` whose name is a secret's (any case), after `?`, `&`,
/// `;`, white space or at the start, keeps its name and shows `***`.
fn redact_params(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(eq) = rest.find('=') {
        let before = &rest[..eq];
        let name_start = before
            .rfind(|c: char| c == '?' || c == '&' || c == ';' || c.is_whitespace())
            .map_or(0, |i| i + 1);
        let name = &before[name_start..];
        let value_len = rest[eq + 1..]
            .find(|c: char| c == '&' || c == ';' || c == '#' || c.is_whitespace())
            .unwrap_or(rest.len() - eq - 1);
        out.push_str(&rest[..=eq]);
        let value = &rest[eq + 1..eq + 1 + value_len];
        if SECRET_PARAMS.iter().any(|p| name.eq_ignore_ascii_case(p)) && !value.is_empty() {
            out.push_str("***");
        } else {
            out.push_str(value);
        }
        rest = &rest[eq + 1 + value_len..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(redact("redis://u:secret@h:1"), "redis://u:***@h:1");
        assert_eq!(redact("redis://secret@h:1"), "redis://***@h:1");
        assert_eq!(redact("redis://h:1"), "redis://h:1");
    }

    #[test]
    fn every_form_of_credential_is_redacted() {
        for (url, shown) in [
            (
                "redis+unix:///run/r.sock?db=2&pass=s3cr3t",
                "redis+unix:///run/r.sock?db=2&pass=***",
            ),
            (
                "redis+unix:///run/r.sock?user=u&password=s3cr3t",
                "redis+unix:///run/r.sock?user=u&password=***",
            ),
            (
                "redis://:s3cr3t@h1:1,redis://:s3cr3t@h2:2",
                "redis://:***@h1:1,redis://:***@h2:2",
            ),
            (
                "postgres://app:s3cr3t@db:5432/app?sslmode=require&sslpassword=s3cr3t",
                "postgres://app:***@db:5432/app?sslmode=require&sslpassword=***",
            ),
            (
                "host=db user=app password=s3cr3t dbname=app",
                "host=db user=app password=*** dbname=app",
            ),
            (
                "amqp://guest:s3cr3t@h:5672/%2f",
                "amqp://guest:***@h:5672/%2f",
            ),
            ("nats://s3cr3t@h:4222", "nats://***@h:4222"),
            (
                "nats://h:4222?subject=a&token=s3cr3t",
                "nats://h:4222?subject=a&token=***",
            ),
            ("zk://u:s3cr3t@h:2181/rmq", "zk://u:***@h:2181/rmq"),
            // An '@' in the path is not a user-info.
            ("redis://h:1/0?x=a@b", "redis://h:1/0?x=a@b"),
        ] {
            assert_eq!(redact(url), shown, "{url}");
            assert!(!redact(url).contains("s3cr3t"));
        }
    }
}

//! Connecting: one place that turns the global options into a
//! [`rmq::Client`] and opens topics, so every subcommand reports a missing
//! Redis or an unknown topic the same way (one line, the library's message).

use rmq::{Client, ClientOptions, Topic};

use crate::{CliError, CliResult, Global};

/// Connects to `--redis` (or `REDIS_URL`, or the default) under `--prefix`,
/// as `REDIS_USERNAME` / `REDIS_PASSWORD` when those are set.
pub async fn client(g: &Global) -> CliResult<Client> {
    let mut options = ClientOptions::default()
        .prefix(&g.prefix)
        .functions(g.functions)
        .head_index(!g.no_head_index)
        .failover_window(std::time::Duration::from_millis(g.failover_window));
    if let Some(tls) = tls_options(g)? {
        options = options.tls(tls);
    }
    client_with(g.url(), g.cluster, options).await
}

/// The TLS files of `--tls-ca`, `--tls-cert` and `--tls-key`, read.
fn tls_options(g: &Global) -> CliResult<Option<rmq::TlsOptions>> {
    if g.tls_ca.is_none() && g.tls_cert.is_none() {
        return Ok(None);
    }
    let read = |p: &Option<std::path::PathBuf>| -> CliResult<Option<Vec<u8>>> {
        match p {
            None => Ok(None),
            Some(path) => std::fs::read(path)
                .map(Some)
                .map_err(|e| CliError::usage(format!("cannot read {}: {e}", path.display()))),
        }
    };
    Ok(Some(rmq::TlsOptions {
        ca_pem: read(&g.tls_ca)?,
        client_cert_pem: read(&g.tls_cert)?,
        client_key_pem: read(&g.tls_key)?,
    }))
}

/// Connects to `url` under `prefix`; with `cluster`, `url` is one or more
/// comma-separated seed nodes of a Redis Cluster.
pub async fn client_at(url: &str, prefix: &str, cluster: bool) -> CliResult<Client> {
    client_with(url, cluster, ClientOptions::default().prefix(prefix)).await
}

/// Connects to `url` with `options` (plus credentials from the environment).
async fn client_with(url: &str, cluster: bool, mut options: ClientOptions) -> CliResult<Client> {
    let prefix = options.prefix.clone();
    // Credentials from the environment (never from a flag: flags show in `ps`).
    if let Ok(pw) = std::env::var("REDIS_PASSWORD") {
        let user = std::env::var("REDIS_USERNAME")
            .ok()
            .filter(|u| !u.is_empty());
        options = options.credentials(user, rmq::Password::new(pw));
    }
    if cluster {
        let seeds: Vec<&str> = url
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect();
        tracing::info!(
            "connecting to the Redis Cluster at {} (prefix {prefix:?})",
            rmq::redact(url)
        );
        return Ok(Client::connect_cluster(&seeds, options).await?);
    }
    tracing::info!("connecting to {} (prefix {prefix:?})", rmq::redact(url));
    Ok(Client::connect_with(url, options).await?)
}

/// Connects and opens a defined topic.
pub async fn topic(g: &Global, name: &str) -> CliResult<(Client, Topic)> {
    let client = client(g).await?;
    let topic = client.topic(name).await?;
    Ok((client, topic))
}

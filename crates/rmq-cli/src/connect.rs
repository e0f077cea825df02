//! Connecting: one place that turns the global options into a
//! [`rmq::Client`] and opens topics, so every subcommand reports a missing
//! Redis or an unknown topic the same way (one line, the library's message).

use rmq::{Client, ClientOptions, Topic};

use crate::{CliResult, Global};

/// Connects to `--redis` (or `REDIS_URL`, or the default) under `--prefix`.
pub async fn client(g: &Global) -> CliResult<Client> {
    client_at(g.url(), &g.prefix).await
}

/// Connects to `url` under `prefix`.
pub async fn client_at(url: &str, prefix: &str) -> CliResult<Client> {
    tracing::info!("connecting to {} (prefix {prefix:?})", rmq::redact(url));
    let options = ClientOptions::default().prefix(prefix);
    Ok(Client::connect_with(url, options).await?)
}

/// Connects and opens a defined topic.
pub async fn topic(g: &Global, name: &str) -> CliResult<(Client, Topic)> {
    let client = client(g).await?;
    let topic = client.topic(name).await?;
    Ok((client, topic))
}

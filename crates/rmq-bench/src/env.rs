//! The run environment: which Redis, how big, and per-case connections with
//! fresh key prefixes plus their cleanup. Every scenario gets one `Env`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use rmq::{Client, ClientOptions};

/// Where to run and how big.
pub(crate) struct Env {
    pub(crate) url: String,
    /// True when we started the server ourselves (FLUSHALL allowed).
    pub(crate) owned: bool,
    pub(crate) scale: f64,
    pub(crate) smoke: bool,
    pub(crate) counter: AtomicU64,
}

impl Env {
    pub(crate) fn n(&self, base: u64) -> u64 {
        ((base as f64 * self.scale).round() as u64).max(1)
    }

    pub(crate) fn fresh_prefix(&self) -> String {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        format!(
            "rmqbench-{}-{nanos}-{}",
            std::process::id(),
            self.counter.fetch_add(1, Ordering::Relaxed)
        )
    }

    pub(crate) async fn client(&self) -> Result<Client> {
        let opts = ClientOptions::default().prefix(self.fresh_prefix());
        Client::connect_with(&self.url, opts)
            .await
            .context("connecting to Redis")
    }

    pub(crate) async fn raw(&self) -> Result<redis::aio::MultiplexedConnection> {
        let c = redis::Client::open(self.url.as_str())?;
        Ok(c.get_multiplexed_async_connection().await?)
    }

    /// Deletes every key under the client's prefix.
    pub(crate) async fn cleanup(&self, client: &Client) -> Result<()> {
        let mut conn = self.raw().await?;
        let pattern = format!("{}:*", client.prefix());
        let mut cursor: u64 = 0;
        loop {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut conn)
                .await?;
            if !keys.is_empty() {
                let _: i64 = redis::cmd("UNLINK")
                    .arg(&keys)
                    .query_async(&mut conn)
                    .await?;
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
        Ok(())
    }

    /// Budget of one case: generous, but bounded.
    pub(crate) fn budget(&self, msgs: u64) -> Duration {
        Duration::from_secs(30) + Duration::from_micros(msgs.saturating_mul(1_000))
    }
}

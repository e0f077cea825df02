//! The run environment: which Redis, how big, and per-case connections with
//! fresh key prefixes plus their cleanup. Every scenario gets one `Env`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use rmq::{Client, ClientOptions};

/// The throwaway server(s) the bench started (dropping kills them).
pub(crate) enum Servers {
    One(rmq_test_support::RedisServer),
    Cluster(rmq_test_support::RedisCluster),
}

/// Where to run and how big.
pub(crate) struct Env {
    /// The URL, or a cluster's comma-separated seed URLs.
    pub(crate) url: String,
    /// Cluster mode: every node's URL (server statistics and cleanup).
    pub(crate) cluster_nodes: Option<Vec<String>>,
    /// True when we started the server ourselves (FLUSHALL allowed).
    pub(crate) owned: bool,
    pub(crate) scale: f64,
    pub(crate) smoke: bool,
    pub(crate) counter: AtomicU64,
}

impl Env {
    /// A throwaway single server the mode started itself (`url`).
    pub(crate) fn owned_single(url: String, scale: f64, smoke: bool) -> Env {
        Env {
            url,
            cluster_nodes: None,
            owned: true,
            scale,
            smoke,
            counter: AtomicU64::new(0),
        }
    }

    /// A throwaway cluster the mode started itself (every node's URL).
    pub(crate) fn owned_cluster(nodes: Vec<String>, scale: f64, smoke: bool) -> Env {
        Env {
            url: nodes.join(","),
            cluster_nodes: Some(nodes),
            owned: true,
            scale,
            smoke,
            counter: AtomicU64::new(0),
        }
    }

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
        self.client_with_prefix(&self.fresh_prefix()).await
    }

    /// Another client on the same Redis (or cluster) under `prefix`.
    pub(crate) async fn client_with_prefix(&self, prefix: &str) -> Result<Client> {
        // A/B of the head index in any mode (e.g. --instructions).
        let index = std::env::var("RMQ_BENCH_HEAD_INDEX").map_or(true, |v| v != "off");
        let opts = ClientOptions::default().prefix(prefix).head_index(index);
        // A/B of FCALL against EVALSHA: the library is loaded by a first
        // client, as `rmq functions load` would (not on a cluster).
        if std::env::var("RMQ_BENCH_FUNCTIONS").is_ok_and(|v| v == "on") {
            let loader = Client::connect_with(&self.url, opts.clone())
                .await
                .context("connecting to Redis")?;
            loader
                .load_functions()
                .await
                .context("loading the Function library")?;
            return Client::connect_with(&self.url, opts.functions(true))
                .await
                .context("connecting to Redis");
        }
        if self.cluster_nodes.is_some() {
            let seeds: Vec<&str> = self.url.split(',').map(str::trim).collect();
            return Client::connect_cluster(&seeds, opts)
                .await
                .context("connecting to the Redis Cluster");
        }
        Client::connect_with(&self.url, opts)
            .await
            .context("connecting to Redis")
    }

    /// A plain connection to every node (one node unless a cluster).
    pub(crate) async fn raw_all(&self) -> Result<Vec<redis::aio::MultiplexedConnection>> {
        let urls = match &self.cluster_nodes {
            Some(nodes) => nodes.clone(),
            None => vec![self.url.clone()],
        };
        let mut out = Vec::new();
        for u in urls {
            let c = redis::Client::open(u.as_str())?;
            out.push(c.get_multiplexed_async_connection().await?);
        }
        Ok(out)
    }

    pub(crate) async fn raw(&self) -> Result<redis::aio::MultiplexedConnection> {
        let c = redis::Client::open(self.url.as_str())?;
        Ok(c.get_multiplexed_async_connection().await?)
    }

    /// Deletes every key under the client's prefix (on every node).
    pub(crate) async fn cleanup(&self, client: &Client) -> Result<()> {
        for conn in self.raw_all().await? {
            Self::cleanup_on(conn, client).await?;
        }
        Ok(())
    }

    async fn cleanup_on(
        mut conn: redis::aio::MultiplexedConnection,
        client: &Client,
    ) -> Result<()> {
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
                // One UNLINK per key: a cluster node refuses keys of several slots in one.
                let mut pipe = redis::pipe();
                for k in &keys {
                    pipe.cmd("UNLINK").arg(k).ignore();
                }
                let _: () = pipe.query_async(&mut conn).await?;
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

/// A consumer of `topic`, taking on settle unless `RMQ_BENCH_TAKE_ON_SETTLE=off`
/// (A/B of `ConsumerBuilder::take_on_settle` in any mode).
pub(crate) fn consumer(topic: &rmq::Topic) -> rmq::ConsumerBuilder {
    let on = std::env::var("RMQ_BENCH_TAKE_ON_SETTLE").map_or(true, |v| v != "off");
    topic.consumer().take_on_settle(on)
}

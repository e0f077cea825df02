//! `rmq demo`: a guided tour of what rmq does that log-based brokers do
//! badly, in a few seconds, with nothing to set up.
//!
//! Without `--redis` and without `REDIS_URL` it starts a throwaway
//! `redis-server` (`throwaway.rs`: loopback only, a free port, its own
//! temporary directory) and stops it at the end. With a Redis given,
//! it works under a fresh random prefix `rmq-demo-<random>` and deletes that
//! prefix's keys at the end, so it never touches the user's queues.
//!
//! Each step checks what it shows (merged count, priority order, never
//! early, no retry before its shortest wait, dead letter after the last
//! attempt) and fails the command if the library did not behave as
//! promised: a demo that silently showed wrong output would be worse than
//! none. The retry step prints the waits the backoff draws from (the jitter
//! makes each one random) next to each measured gap, so that what it says
//! and what it shows cannot disagree.

use std::time::Duration;

use clap::Args;
use futures::StreamExt;
use rmq::{
    CancellationToken, Client, Deliveries, Delivery, Message, Settled, Topic, TopicKind, TopicSpec,
};

use crate::output::{self, clock};
use crate::throwaway::Server;
use crate::{connect, CliError, CliResult, Global};

mod steps;

use steps::{fixed_time, priority, range_merge, retries};

#[derive(Debug, Args)]
pub struct DemoArgs {}

fn say(s: &str) -> CliResult {
    output::line(s)
}

fn unexpected(what: String) -> CliError {
    CliError::runtime(format!("demo: {what} (this is a bug in rmq)"))
}

pub async fn run(g: &Global, _a: DemoArgs) -> CliResult {
    say("rmq demo: merging, priorities, exact times, retries and dead letters")?;
    let (server, url, prefix) = match &g.redis {
        Some(url) => {
            let prefix = format!("rmq-demo-{}", random_suffix());
            say(&format!(
                "using {} under the fresh prefix {prefix:?} (its keys are deleted at the end)",
                rmq::redact(url)
            ))?;
            (None, url.clone(), prefix)
        }
        None => {
            let server = start_server().await?;
            say(&format!(
                "started a throwaway redis-server on 127.0.0.1:{} (it will be stopped at the end)",
                server.port()
            ))?;
            let url = server.url();
            (Some(server), url, "rmq-demo".to_string())
        }
    };
    let client = connect::client_at(&url, &prefix, g.cluster).await?;
    let result = steps(&client).await;
    drop(client);
    let cleanup = match server {
        Some(s) => {
            drop(s);
            say("\nstopped the throwaway redis-server")
        }
        None => match delete_prefix(&url, &prefix, g.cluster).await {
            Ok(n) => say(&format!("\ndeleted the demo's {n} keys under {prefix:?}")),
            Err(e) => {
                output::warn_line(&format!(
                    "could not delete the demo keys under {prefix:?}: {e}"
                ));
                Ok(())
            }
        },
    };
    result?;
    cleanup
}

async fn steps(client: &Client) -> CliResult {
    range_merge(client).await?;
    priority(client).await?;
    fixed_time(client).await?;
    retries(client).await?;
    say("\nthat was rmq. Next: `rmq --help`, `rmq topic create --help`.")
}

/// A random-enough suffix without a random-number crate.
fn random_suffix() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let mixed = (nanos as u64) ^ (u64::from(std::process::id()) << 32);
    format!("{:08x}", mixed.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32)
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(program).is_file()))
}

/// Starts a throwaway server (`throwaway.rs`).
async fn start_server() -> CliResult<Server> {
    if !on_path("redis-server") {
        return Err(CliError::runtime(
            "redis-server is not installed (run scripts/ensure-deps.sh, or pass --redis URL)",
        ));
    }
    match tokio::task::spawn_blocking(Server::start).await {
        Ok(Ok(server)) => Ok(server),
        Ok(Err(why)) => Err(CliError::runtime(format!(
            "cannot start a throwaway redis-server: {why}"
        ))),
        Err(e) => Err(CliError::runtime(format!(
            "cannot start a throwaway redis-server: {e}"
        ))),
    }
}

/// Deletes every key under `prefix:` (only ever the demo's random prefix),
/// on every master of a cluster.
async fn delete_prefix(url: &str, prefix: &str, cluster: bool) -> Result<u64, redis::RedisError> {
    if !cluster {
        return delete_prefix_on(url, prefix).await;
    }
    let seed = url.split(',').next().unwrap_or(url).trim();
    let client = redis::Client::open(seed)?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let nodes: String = redis::cmd("CLUSTER")
        .arg("NODES")
        .query_async(&mut conn)
        .await?;
    let mut deleted = 0;
    for line in nodes.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (Some(addr), Some(flags)) = (f.get(1), f.get(2)) else {
            continue;
        };
        if !flags.contains("master") || flags.contains("fail") {
            continue;
        }
        let hostport = addr.split('@').next().unwrap_or(addr);
        let node_url = match seed.split_once("://") {
            Some((scheme, rest)) => match rest.rsplit_once('@') {
                Some((userinfo, _)) => format!("{scheme}://{userinfo}@{hostport}"),
                None => format!("{scheme}://{hostport}"),
            },
            None => format!("redis://{hostport}"),
        };
        deleted += delete_prefix_on(&node_url, prefix).await?;
    }
    Ok(deleted)
}

/// Deletes every key under `prefix:` on one node, one UNLINK per key (keys
/// of several cluster slots may not share one command).
async fn delete_prefix_on(url: &str, prefix: &str) -> Result<u64, redis::RedisError> {
    let client = redis::Client::open(url)?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let mut cursor: u64 = 0;
    let mut deleted = 0;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{prefix}:*"))
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut conn)
            .await?;
        if !keys.is_empty() {
            let mut pipe = redis::pipe();
            for k in &keys {
                pipe.cmd("UNLINK").arg(k);
            }
            let n: Vec<u64> = pipe.query_async(&mut conn).await?;
            deleted += n.iter().sum::<u64>();
        }
        if next == 0 {
            return Ok(deleted);
        }
        cursor = next;
    }
}

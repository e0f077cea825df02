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

/// How long any one step may wait for a message.
const STEP_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Args)]
pub struct DemoArgs {}

/// A consumer that hands out deliveries one at a time.
struct Consumer {
    stream: Deliveries,
    cancel: CancellationToken,
}

impl Consumer {
    fn new(topic: &Topic) -> Self {
        let cancel = CancellationToken::new();
        let stream = topic
            .consumer()
            .concurrency(1)
            // Frequent rescans: priority retries are found at rescans.
            .rescan(Duration::from_millis(25))
            .stream(cancel.clone());
        Consumer { stream, cancel }
    }

    async fn next(&mut self) -> CliResult<Delivery> {
        match tokio::time::timeout(STEP_TIMEOUT, self.stream.next()).await {
            Ok(Some(d)) => Ok(d),
            Ok(None) => Err(CliError::runtime("the demo consumer stopped unexpectedly")),
            Err(_) => Err(CliError::runtime(format!(
                "no message arrived within {} s",
                STEP_TIMEOUT.as_secs()
            ))),
        }
    }

    /// Stops taking and gives back anything taken meanwhile.
    async fn stop(mut self) -> CliResult {
        self.cancel.cancel();
        while let Some(d) = self.stream.next().await {
            d.release().await?;
        }
        Ok(())
    }
}

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

async fn range_merge(client: &Client) -> CliResult {
    say("\n1. range-merge: a burst of duplicates becomes one message per key")?;
    let topic = client
        .define_topic(TopicSpec::new("prices", TopicKind::RangeMerge).slots(4))
        .await?;
    let products = ["sku-1", "sku-2", "sku-3"];
    let mut newest = ["", "", ""].map(String::from);
    let messages: Vec<Message> = (0..1000usize)
        .map(|i| {
            let p = i % products.len();
            let price = 10.0 + ((i * 37) % 500) as f64 / 100.0;
            let payload = format!("{} costs {price:.2} (update {})", products[p], i + 1);
            newest[p].clone_from(&payload);
            Message::new(payload)
                .key(products[p])
                .range(Duration::from_millis(300))
        })
        .collect();
    let first_send = topic.stats().await?.server_ms;
    let report = topic.send_batch(&messages).await?;
    if let Some(Err(e)) = report.results.iter().find(|r| r.is_err()) {
        return Err(unexpected(format!("a price event was refused: {e}")));
    }
    say(&format!(
        "   sent 1000 price events for {} products (key = product id, range 300 ms): {} new, {} merged",
        products.len(),
        report.new_count(),
        report.merged_count()
    ))?;
    say(&format!(
        "   1000 sends merged into {} messages",
        report.new_count()
    ))?;
    if report.new_count() != products.len() {
        return Err(unexpected(format!(
            "expected {} messages, got {}",
            products.len(),
            report.new_count()
        )));
    }
    say("   consuming once the 300 ms range has passed:")?;
    let mut consumer = Consumer::new(&topic);
    for _ in 0..products.len() {
        let d = consumer.next().await?;
        let key = output::lossy(&d.key);
        let payload = output::lossy(&d.payload);
        let is_newest = products
            .iter()
            .position(|p| *p == key)
            .is_some_and(|i| newest[i] == payload);
        say(&format!(
            "   - {key}: {payload}{}, handled {} ms after the first send",
            if is_newest {
                " (the newest of its updates)"
            } else {
                ""
            },
            d.taken_ms - first_send
        ))?;
        d.ack().await?;
        if !is_newest {
            consumer.stop().await?;
            return Err(unexpected(format!(
                "{key} did not carry its newest payload"
            )));
        }
    }
    consumer.stop().await
}

async fn priority(client: &Client) -> CliResult {
    say("\n2. priority: the most urgent first, first come first served among equals")?;
    // One slot: priority order is exact within a slot.
    let topic = client
        .define_topic(TopicSpec::new("jobs", TopicKind::Priority).slots(1))
        .await?;
    let jobs = [
        ("nightly-report", 1),
        ("payment-retry", 9),
        ("thumbnail", 5),
        ("fraud-check", 9),
        ("cleanup", 1),
        ("invoice-pdf", 5),
    ];
    for (name, p) in jobs {
        topic.send(Message::new(name).priority(p)).await?;
    }
    say(&format!(
        "   sent in this order: {}",
        jobs.iter()
            .map(|(n, p)| format!("{n} ({p})"))
            .collect::<Vec<_>>()
            .join(", ")
    ))?;
    let mut expected = jobs.to_vec();
    expected.sort_by_key(|j| std::cmp::Reverse(j.1)); // stable: FIFO among equals
    say("   consumed one at a time (concurrency 1):")?;
    let mut consumer = Consumer::new(&topic);
    let mut got = Vec::new();
    for n in 1..=jobs.len() {
        let d = consumer.next().await?;
        let name = output::lossy(&d.payload);
        say(&format!(
            "   {n}. {name} (priority {})",
            d.priority.unwrap_or(0)
        ))?;
        got.push(name);
        d.ack().await?;
    }
    consumer.stop().await?;
    let want: Vec<String> = expected.iter().map(|(n, _)| n.to_string()).collect();
    if got != want {
        return Err(unexpected(format!("consumed {got:?}, expected {want:?}")));
    }
    Ok(())
}

async fn fixed_time(client: &Client) -> CliResult {
    say("\n3. fixed-time: delivered at its time, never before (by the Redis server's clock)")?;
    let topic = client
        .define_topic(TopicSpec::new("reminders", TopicKind::FixedTime).slots(4))
        .await?;
    let sent_at = topic.stats().await?.server_ms;
    topic
        .send(
            Message::new("call customer 42 back")
                .key("reminder-42")
                .delay(Duration::from_millis(500)),
        )
        .await?;
    say(&format!(
        "   at {} sent \"call customer 42 back\" due in 500 ms",
        clock(sent_at)
    ))?;
    let mut consumer = Consumer::new(&topic);
    let d = consumer.next().await?;
    let due = d.due_ms.unwrap_or(0);
    let taken = d.taken_ms;
    say(&format!(
        "   due at {}, handled at {} (late by {} ms)",
        clock(due),
        clock(taken),
        taken - due
    ))?;
    d.ack().await?;
    consumer.stop().await?;
    if taken < due {
        return Err(unexpected(format!("delivered {} ms early", due - taken)));
    }
    Ok(())
}

/// The wait before the retry that follows failed attempt `failed` (1 for
/// the first delivery), as the scripts compute it (`backoff` in
/// `lifecycle.lua`): exponential with equal jitter, i.e. a random time between
/// half and all of `base_ms × 2^(failed-1)`, that doubling capped at `max_ms`.
/// Returns the (shortest, longest) wait in ms.
fn retry_wait_ms(base_ms: u64, max_ms: u64, failed: u32) -> (u64, u64) {
    let doublings = failed.saturating_sub(1).min(63);
    let full = base_ms.saturating_mul(1u64 << doublings).min(max_ms);
    (full / 2, full)
}

async fn retries(client: &Client) -> CliResult {
    say("\n4. retries: a failing handler is retried with backoff, then dead-lettered")?;
    const MAX_ATTEMPTS: u32 = 3;
    let topic = client
        .define_topic(
            TopicSpec::new("payments", TopicKind::Priority)
                .slots(4)
                .max_attempts(MAX_ATTEMPTS)
                .backoff(Duration::from_millis(50), Duration::from_millis(200)),
        )
        .await?;
    topic
        .send(Message::new("charge order 7").key("order-7"))
        .await?;
    let (base, max) = (topic.spec().backoff_ms, topic.spec().backoff_max_ms);
    let wait = |failed: u32| retry_wait_ms(base, max, failed);
    say(&format!(
        "   topic \"payments\": max attempts {MAX_ATTEMPTS}, backoff {base} ms doubling up to \
         {max} ms, with jitter:\n   each retry waits a random time between half and all of \
         its backoff, so"
    ))?;
    say(&format!(
        "   {} (plus a few ms to record the failure and pick the retry up)",
        (1..MAX_ATTEMPTS)
            .map(|n| {
                let (lo, hi) = wait(n);
                format!("{lo}-{hi} ms before attempt {}", n + 1)
            })
            .collect::<Vec<_>>()
            .join(", ")
    ))?;
    let mut consumer = Consumer::new(&topic);
    let mut last_ms: Option<i64> = None;
    loop {
        let d = consumer.next().await?;
        let attempt = d.attempt;
        let mut gap = String::new();
        if let Some(previous) = last_ms {
            let (lo, hi) = wait(attempt.saturating_sub(1));
            let after = d.taken_ms - previous;
            gap = format!(
                ", {after} ms after attempt {} (wait: {lo}-{hi} ms)",
                attempt.saturating_sub(1)
            );
            if after < i64::try_from(lo).unwrap_or(i64::MAX) {
                consumer.stop().await?;
                return Err(unexpected(format!(
                    "attempt {attempt} came {after} ms after the previous one, before its \
                     shortest wait of {lo} ms"
                )));
            }
        }
        last_ms = Some(d.taken_ms);
        let error = format!("payment gateway timed out (simulated, attempt {attempt})");
        say(&format!(
            "   attempt {attempt} at {}{gap}: handler failed: {error}",
            clock(d.taken_ms)
        ))?;
        match d.nack(None, &error).await? {
            Settled::Dead => {
                say(&format!(
                    "   gave up after {attempt} attempts: moved to the dead letters"
                ))?;
                break;
            }
            _ if attempt >= MAX_ATTEMPTS => {
                consumer.stop().await?;
                return Err(unexpected(format!(
                    "still retried after attempt {attempt} of {MAX_ATTEMPTS}"
                )));
            }
            _ => {}
        }
    }
    consumer.stop().await?;
    let dead = topic.dead_letters(10).await?;
    let Some(letter) = dead.first() else {
        return Err(unexpected("the dead letter is missing".into()));
    };
    say(&format!(
        "   dead letter: key {}, payload \"{}\", {} attempts, error: {}",
        output::lossy(&letter.key),
        output::lossy(&letter.payload),
        letter.attempts,
        letter.error
    ))?;
    say("   (`rmq dead requeue payments --key order-7` would give it a fresh start)")
}

#[cfg(test)]
mod tests {
    use super::retry_wait_ms;

    #[test]
    fn retry_waits_are_half_to_all_of_a_capped_doubling() {
        assert_eq!(retry_wait_ms(50, 200, 1), (25, 50));
        assert_eq!(retry_wait_ms(50, 200, 2), (50, 100));
        assert_eq!(retry_wait_ms(50, 200, 3), (100, 200));
        assert_eq!(retry_wait_ms(50, 200, 4), (100, 200));
        assert_eq!(retry_wait_ms(1_000, 600_000, 200), (300_000, 600_000));
        assert_eq!(retry_wait_ms(25, 100, 1), (12, 25));
    }
}

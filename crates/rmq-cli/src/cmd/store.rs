//! `rmq store …`: the PostgreSQL message store under the queue
//! (`rmq-store`): apply its schema, define a topic in it, run a relay that
//! moves committed messages into Redis, recover after Redis lost data,
//! prune finished rows, and show what it holds.
//!
//! Every subcommand takes `--pg URL` (or `RMQ_PG_URL`): a
//! `postgres://user@host:port/db` URL or a `host=… user=…` string. An
//! unreachable database exits with 1; a database without the schema, an
//! unknown topic or a bad argument with 2.

use std::time::Duration;

use clap::{Args, Subcommand};
use rmq_store::{RelayOptions, Store, StoreError};
use serde::Serialize;

use crate::{connect, CliError, CliResult, Global};

#[derive(Debug, Args)]
pub struct Pg {
    /// The store's PostgreSQL: postgres://USER@HOST:PORT/DB (no TLS)
    #[arg(
        long = "pg",
        value_name = "URL",
        env = "RMQ_PG_URL",
        hide_env_values = true
    )]
    pub url: String,
}

#[derive(Debug, Subcommand)]
pub enum StoreCmd {
    /// Create or upgrade the store's tables (safe to run again, and from
    /// several processes at once)
    Migrate(Pg),
    /// Define in the store a topic defined in Redis (`rmq topic create`),
    /// with the same settings; sends to the store then go to it
    Define {
        /// Topic name
        topic: String,
        #[command(flatten)]
        pg: Pg,
    },
    /// Store one message (in a transaction of its own): to try the store
    /// from a shell; applications send in their own transactions
    Send(StoreSendArgs),
    /// Move committed messages into Redis until stopped (SIGINT, SIGTERM,
    /// SIGHUP): priority and range-merge at once, fixed-time when due within
    /// the window; several relays may run
    Relay(RelayArgs),
    /// After Redis lost data: send again every message the store holds as
    /// not finished that Redis no longer has
    Recover {
        /// Only this topic (default: all)
        topic: Option<String>,
        #[command(flatten)]
        pg: Pg,
    },
    /// Delete finished rows older than --older-than
    Prune {
        /// Age in seconds
        #[arg(long, value_name = "SECS", default_value_t = 7 * 86_400)]
        older_than: u64,
        #[command(flatten)]
        pg: Pg,
    },
    /// How many messages of each topic are stored, queued, done and dead
    Stats(Pg),
}

#[derive(Debug, Args)]
pub struct StoreSendArgs {
    /// Topic name (defined in the store: `rmq store define`)
    topic: String,
    /// Payload
    payload: String,
    /// Merge key (default: the payload)
    #[arg(long, value_name = "K")]
    key: Option<String>,
    /// Slot basis (default: the merge key)
    #[arg(long, value_name = "B")]
    slot_basis: Option<String>,
    /// Priority topics: 0..=2097151, bigger first [default: 0]
    #[arg(long, value_name = "P", group = "timing")]
    priority: Option<u32>,
    /// Fixed-time topics: due at this Unix time in ms
    #[arg(
        long,
        value_name = "UNIX_MS",
        group = "timing",
        allow_negative_numbers = true
    )]
    at: Option<i64>,
    /// Fixed-time topics: due this many ms from now (the database's clock)
    #[arg(long, value_name = "MS", group = "timing")]
    delay: Option<u64>,
    /// Range-merge topics: due this many ms after the first send of the key
    #[arg(long, value_name = "MS", group = "timing")]
    range: Option<u64>,
    #[command(flatten)]
    pg: Pg,
}

#[derive(Debug, Args)]
pub struct RelayArgs {
    #[command(flatten)]
    pg: Pg,
    /// Fixed-time messages enter Redis this many seconds before they are due
    #[arg(long, value_name = "SECS", default_value_t = 600)]
    window: u64,
    /// Rows moved per transaction
    #[arg(long, value_name = "N", default_value_t = 500,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    batch: u32,
    /// How often to look without a wake-up (ms)
    #[arg(long, value_name = "MS", default_value_t = 1_000,
          value_parser = clap::value_parser!(u64).range(10..))]
    poll_ms: u64,
    /// Delete finished rows after this many seconds (0 keeps them)
    #[arg(long, value_name = "SECS", default_value_t = 7 * 86_400)]
    retain: u64,
    /// This relay's name in the checkpoint table (default: relay-PID)
    #[arg(long, value_name = "NAME")]
    name: Option<String>,
}

fn store_error(e: StoreError) -> CliError {
    match e {
        StoreError::Postgres(_) => CliError::runtime(e.to_string()),
        StoreError::Rmq(e) => e.into(),
        _ => CliError::usage(e.to_string()),
    }
}

async fn open(pg: &Pg) -> CliResult<Store> {
    Store::connect(&pg.url).await.map_err(store_error)
}

pub async fn run(g: &Global, cmd: StoreCmd) -> CliResult {
    match cmd {
        StoreCmd::Migrate(pg) => {
            let store = Store::connect_unchecked(&pg.url)
                .await
                .map_err(store_error)?;
            let v = store.migrate().await.map_err(store_error)?;
            print(g, &serde_json::json!({ "schema_version": v }), || {
                format!("store schema at version {v}")
            })
        }
        StoreCmd::Define { topic, pg } => {
            let store = open(&pg).await?;
            let client = connect::client(g).await?;
            let spec = client.topic(&topic).await?.spec();
            store.define_topic(&spec).await.map_err(store_error)?;
            print(g, &serde_json::json!({ "defined": topic }), || {
                format!(
                    "topic {topic} defined in the store ({}, {} slots)",
                    spec.kind.as_str(),
                    spec.slots
                )
            })
        }
        StoreCmd::Send(a) => send(g, a).await,
        StoreCmd::Relay(a) => relay(g, a).await,
        StoreCmd::Recover { topic, pg } => {
            let store = open(&pg).await?;
            let client = connect::client(g).await?;
            let r = store
                .recover(&client, topic.as_deref())
                .await
                .map_err(store_error)?;
            let json = serde_json::json!({
                "checked": r.checked, "still_in_redis": r.still_in_redis,
                "requeued": r.requeued, "merged": r.merged, "dead": r.dead,
            });
            print(g, &json, || {
                format!(
                    "checked {} queued messages: {} still in Redis, {} sent again, {} merged into newer sends, {} dead letters",
                    r.checked, r.still_in_redis, r.requeued, r.merged, r.dead
                )
            })
        }
        StoreCmd::Prune { older_than, pg } => {
            let store = open(&pg).await?;
            let n = store
                .prune(Duration::from_secs(older_than), 1_000)
                .await
                .map_err(store_error)?;
            print(g, &serde_json::json!({ "deleted": n }), || {
                format!("deleted {n} finished messages")
            })
        }
        StoreCmd::Stats(pg) => {
            let store = open(&pg).await?;
            // A topic whose definition cannot be read is shown with why
            // (relays skip it), never hiding the others.
            for t in store.stats().await.map_err(store_error)? {
                let c = t.counts;
                let row = TopicCounts {
                    topic: &t.name,
                    stored: c.stored,
                    queued: c.queued,
                    done: c.done,
                    dead: c.dead,
                    problem: t.problem.as_deref(),
                };
                print(g, &row, || {
                    let mut line = format!(
                        "{:<24} stored {:>9}  queued {:>9}  done {:>9}  dead {:>9}",
                        row.topic, row.stored, row.queued, row.done, row.dead
                    );
                    if let Some(p) = row.problem {
                        line.push_str(&format!("  SKIPPED BY RELAYS: {p}"));
                    }
                    line
                })?;
            }
            Ok(())
        }
    }
}

#[derive(Serialize)]
struct TopicCounts<'a> {
    topic: &'a str,
    stored: u64,
    queued: u64,
    done: u64,
    dead: u64,
    /// Why the topic's definition cannot be used (relays skip it).
    #[serde(skip_serializing_if = "Option::is_none")]
    problem: Option<&'a str>,
}

fn print<T: Serialize>(g: &Global, value: &T, text: impl FnOnce() -> String) -> CliResult {
    if g.json {
        let line = serde_json::to_string(value).map_err(|e| CliError::runtime(e.to_string()))?;
        println!("{line}");
    } else {
        println!("{}", text());
    }
    Ok(())
}

async fn send(g: &Global, a: StoreSendArgs) -> CliResult {
    let timing = crate::cmd::send::Timing::from_opts(a.priority, a.at, a.delay, a.range)
        .map_err(CliError::usage)?;
    let store = open(&a.pg).await?;
    let topic = store.topic(&a.topic).await.map_err(store_error)?;
    let mut m = rmq::Message::new(a.payload);
    if let Some(k) = a.key {
        m = m.key(k);
    }
    if let Some(b) = a.slot_basis {
        m = m.slot_basis(b);
    }
    let m = timing.apply(m);
    let (pg, connection) = tokio_postgres_connect(&a.pg.url).await?;
    let stored = topic.send(&pg, &m).await.map_err(store_error);
    drop(pg);
    let _ = connection.await;
    let stored = stored?;
    let key = crate::output::lossy(m.merge_key());
    let json = serde_json::json!({ "id": stored.id, "key": key, "merged": stored.merged });
    print(g, &json, || {
        format!(
            "stored {key} in {} (row {}{})",
            a.topic,
            stored.id,
            if stored.merged {
                ", merged into a stored message"
            } else {
                ""
            }
        )
    })
}

/// A plain connection for one statement (autocommit: a transaction of its
/// own), and the task driving it.
async fn tokio_postgres_connect(
    url: &str,
) -> CliResult<(
    rmq_store::tokio_postgres::Client,
    tokio::task::JoinHandle<()>,
)> {
    use rmq_store::tokio_postgres;
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .map_err(|e| store_error(e.into()))?;
    let task = tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok((client, task))
}

async fn relay(g: &Global, a: RelayArgs) -> CliResult {
    let stop = crate::cmd::forward::stop_on_signals()?;
    let client = connect::client(g).await?;
    let mut options = RelayOptions {
        window: Duration::from_secs(a.window),
        batch: a.batch,
        poll: Duration::from_millis(a.poll_ms),
        retain: (a.retain > 0).then(|| Duration::from_secs(a.retain)),
        ..RelayOptions::default()
    };
    if let Some(name) = a.name {
        options.name = name;
    }
    let relay = rmq_store::Relay::connect(&a.pg.url, client, options)
        .await
        .map_err(store_error)?;
    tracing::info!("relay running");
    let r = relay.run(stop).await;
    let json = serde_json::json!({
        "moved": r.moved, "refused": r.refused, "recovered": r.recovered.requeued, "pruned": r.pruned,
    });
    print(g, &json, || {
        format!(
            "moved {} messages to Redis, {} refused by Redis (dead), {} sent again after Redis lost them, {} finished rows pruned",
            r.moved, r.refused, r.recovered.requeued, r.pruned
        )
    })
}

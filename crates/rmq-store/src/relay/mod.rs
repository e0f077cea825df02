//! The relay (the original's load module): moves committed messages from
//! the store into their Redis topics.
//!
//! Each round takes up to a batch of stored rows that are due to load
//! (priority and range-merge at once, fixed-time when due within the
//! window) with `FOR UPDATE SKIP LOCKED`, sends them to Redis, and marks
//! them queued in the same transaction, so several relays share the work
//! and never move one row at the same time. A relay that dies after the
//! Redis send and before its commit leaves the rows stored and unlocked:
//! the next round (its own after a restart, or another relay's) sends them
//! again and they merge into the copy Redis has. Only a copy that a
//! consumer took in between is delivered twice (that window is the
//! relay's send round trip plus the time until it is seen dead).
//!
//! Each round takes every topic's due rows on its own (up to a batch per
//! topic, each in its own transaction), so a topic whose rows cannot move
//! (full: `max_pending`) never fills the batches ahead of the others; such
//! a topic rests for a `poll`. The due bound is fixed for the statement,
//! which makes it an index condition: a round's cost follows the rows due,
//! not the rows stored (`migrations/002_per_topic_index.sql`).
//!
//! A commit of new rows wakes the relays (`LISTEN rmq_store`); they also
//! look every `poll`, which is how far-future messages enter their window.
//! Every `poll` the relay also reads the topics' definitions (`check`): a
//! topic that vanished from Redis (FLUSHALL, a failover that lost it) is
//! defined again from the store and recovered ([`crate::Store::recover`])
//! beside the rounds, on a connection of its own (`recovering`);
//! a topic Redis still has refreshes the store's copy when its settings
//! changed (`rmq topic update`), so that a later recovery defines it as it
//! was last; a definition that cannot be read is reported and its topic
//! skipped.

mod batch;
mod check;
mod listen;
mod recovering;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmq::CancellationToken;
use tokio::sync::Notify;

use crate::error::Result;
use crate::recover::Recovered;
use crate::store::connect;
use crate::topics::StoredTopic;
use recovering::{Finished, Recoveries};

/// How a relay works.
#[derive(Debug, Clone)]
pub struct RelayOptions {
    /// Its name in the `rmq_relays` checkpoint table.
    pub name: String,
    /// Fixed-time messages enter Redis this long before they are due.
    pub window: Duration,
    /// Rows moved per transaction.
    pub batch: u32,
    /// How often it looks without being woken.
    pub poll: Duration,
    /// Finished rows are deleted after this long (None: kept).
    pub retain: Option<Duration>,
}

impl Default for RelayOptions {
    fn default() -> Self {
        RelayOptions {
            name: format!("relay-{}", std::process::id()),
            window: Duration::from_secs(600),
            batch: 500,
            poll: Duration::from_secs(1),
            retain: Some(Duration::from_secs(7 * 86_400)),
        }
    }
}

/// What a relay did until it stopped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RelayReport {
    /// Rows sent to Redis and marked queued.
    pub moved: u64,
    /// Rows Redis refused (marked dead with its reason).
    pub refused: u64,
    /// What recoveries of vanished topics did.
    pub recovered: Recovered,
    /// Finished rows deleted by retention.
    pub pruned: u64,
}

/// Moves stored messages into Redis.
pub struct Relay {
    conninfo: String,
    redis: rmq::Client,
    options: RelayOptions,
    pg: tokio_postgres::Client,
    topics: HashMap<String, (StoredTopic, rmq::Topic)>,
    checked: Option<Instant>,
    /// Topics that refused rows for now (full: `max_pending`), left out of
    /// the rounds until then.
    resting: HashMap<String, Instant>,
    /// Topics whose definition cannot be used, with why (reported once per
    /// change, and skipped).
    unusable: HashMap<String, String>,
    /// Topics Redis defines with another kind or slot count than the store
    /// (reported once).
    diverged: HashSet<String>,
    /// Recoveries of topics Redis lost, running beside the rounds.
    recoveries: Recoveries,
    report: RelayReport,
}

/// How long a stopping relay waits for its running recoveries.
const RECOVERY_STOP_WAIT: Duration = Duration::from_secs(5);

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Its sessions' `application_name`.
fn app_name(relay: &str) -> String {
    format!("rmq-relay {relay}")
}

impl Relay {
    /// Connects to the store (checking its schema).
    pub async fn connect(
        conninfo: &str,
        redis: rmq::Client,
        options: RelayOptions,
    ) -> Result<Relay> {
        let pg = connect(conninfo, &app_name(&options.name)).await?;
        crate::schema::check(&pg).await?;
        // If this relay's host dies mid-round, PostgreSQL ends the session
        // (and frees its rows' locks) after a minute instead of when TCP
        // keepalive notices, hours later. A round waits on Redis at most
        // rmq's failover window (15 s) between statements.
        pg.batch_execute("SET idle_in_transaction_session_timeout = '60s'")
            .await?;
        let recoveries = Recoveries::new(
            conninfo,
            format!("{} (recovering)", app_name(&options.name)),
            redis.clone(),
        );
        Ok(Relay {
            conninfo: conninfo.to_string(),
            redis,
            options,
            pg,
            topics: HashMap::new(),
            checked: None,
            resting: HashMap::new(),
            unusable: HashMap::new(),
            diverged: HashSet::new(),
            recoveries,
            report: RelayReport::default(),
        })
    }

    /// Runs until `cancel`: moves, waits for a commit or the next poll,
    /// recovers vanished topics, prunes. Errors (PostgreSQL or Redis
    /// unreachable) are logged and retried; the report says what it did.
    pub async fn run(mut self, cancel: CancellationToken) -> RelayReport {
        let wake = Arc::new(Notify::new());
        // The listener ends with the relay, also when `run` is dropped.
        let listening = cancel.child_token();
        let _stop_listening = listening.clone().drop_guard();
        tokio::spawn(listen::listen(
            self.conninfo.clone(),
            format!("{} (listening)", app_name(&self.options.name)),
            wake.clone(),
            listening,
        ));
        let mut failing = false;
        let mut pruned_at = Instant::now();
        while !cancel.is_cancelled() {
            let round = self.round().await;
            let more = match round {
                Ok(more) => {
                    if failing {
                        tracing::info!(relay = %self.options.name, "relay works again");
                        failing = false;
                    }
                    more
                }
                Err(e) => {
                    if !failing {
                        tracing::warn!(relay = %self.options.name, error = %e, "relay round failed; retrying");
                        failing = true;
                    }
                    self.reconnect().await;
                    false
                }
            };
            if let Some(keep) = self.options.retain {
                if pruned_at.elapsed() >= Duration::from_secs(60) {
                    pruned_at = Instant::now();
                    match crate::retention::prune(&self.pg, keep, 1_000).await {
                        Ok(n) => self.report.pruned += n,
                        Err(e) => tracing::warn!(error = %e, "pruning finished rows failed"),
                    }
                }
            }
            if !more {
                tokio::select! {
                    () = cancel.cancelled() => {}
                    () = wake.notified() => {}
                    () = tokio::time::sleep(self.options.poll) => {}
                }
            }
        }
        for done in self.recoveries.end(RECOVERY_STOP_WAIT).await {
            if let Err(e) = self.recovered(done).await {
                tracing::warn!(relay = %self.options.name, error = %e,
                    "a finished recovery could not be recorded; its topic stays marked");
            }
        }
        self.report
    }

    /// Records the recoveries that finished since the last check.
    async fn collect_recoveries(&mut self) -> Result<()> {
        let mut first_error = None;
        for done in self.recoveries.finished() {
            if let Err(e) = self.recovered(done).await {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Counts a finished recovery and clears its topic's mark (kept when
    /// it failed, or when Redis lost the topic again while it ran).
    async fn recovered(&mut self, done: Finished) -> Result<()> {
        let Finished {
            topic,
            lost_again,
            outcome,
        } = done;
        match outcome {
            Ok(r) => {
                self.report.recovered.add(&r);
                tracing::warn!(topic = %topic, requeued = r.requeued, merged = r.merged,
                    "topic vanished from Redis: defined again and recovered from the store");
                if !lost_again {
                    crate::topics::needs_recovery(&self.pg, &topic, false).await?;
                }
            }
            Err(e) => tracing::warn!(topic = %topic, error = %e,
                "recovering a topic that vanished from Redis failed; trying again"),
        }
        Ok(())
    }

    async fn reconnect(&mut self) {
        if self.pg.is_closed() {
            if let Ok(pg) = connect(&self.conninfo, &app_name(&self.options.name)).await {
                self.pg = pg;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    /// One round: checks the topics (each `poll`), then moves a batch of
    /// each topic not resting. Returns true when some topic's batch was
    /// full (more may be waiting).
    pub async fn round(&mut self) -> Result<bool> {
        if self
            .checked
            .is_none_or(|t| t.elapsed() >= self.options.poll)
        {
            self.check_topics().await?;
            self.checked = Some(Instant::now());
        }
        let now = Instant::now();
        self.resting.retain(|_, until| *until > now);
        let mut names: Vec<String> = self
            .topics
            .keys()
            .filter(|n| !self.resting.contains_key(*n))
            .cloned()
            .collect();
        names.sort_unstable();
        let mut more = false;
        for name in names {
            let taken = self.move_topic(&name).await?;
            more |= taken >= self.options.batch as usize;
        }
        Ok(more)
    }
}

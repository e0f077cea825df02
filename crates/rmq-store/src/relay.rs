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
//! A commit of new rows wakes the relays (`LISTEN rmq_store`); they also
//! look every `poll`, which is how far-future messages enter their window.
//! Every `poll` the relay also checks that its topics are still defined in
//! Redis: a topic that vanished (FLUSHALL, a failover that lost it) is
//! defined again from the store and recovered ([`crate::Store::recover`]).
//! A topic that fills up (`max_pending`) rests for a `poll`, so that its
//! rows, which stay stored, do not hold back other topics'.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use rmq::{CancellationToken, ErrorKind, Message, TopicKind};
use tokio::sync::Notify;

use crate::error::{Result, StoreError};
use crate::recover::{self, Recovered};
use crate::store::connect;
use crate::topics::{self, StoredTopic};

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
    /// the rounds until then, so that their rows do not hold the head of
    /// the queue for every other topic.
    resting: HashMap<String, Instant>,
    report: RelayReport,
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// What became of one round's rows.
#[derive(Default)]
struct Round {
    queued: Vec<i64>,
    refused: Vec<(i64, String)>,
    /// Rows left stored for a later round (Redis full, or unreachable).
    held: usize,
}

impl Relay {
    /// Connects to the store (checking its schema).
    pub async fn connect(
        conninfo: &str,
        redis: rmq::Client,
        options: RelayOptions,
    ) -> Result<Relay> {
        let pg = connect(conninfo).await?;
        crate::schema::check(&pg).await?;
        // If this relay's host dies mid-round, PostgreSQL ends the session
        // (and frees its rows' locks) after a minute instead of when TCP
        // keepalive notices, hours later. A round waits on Redis at most
        // rmq's failover window (15 s) between statements.
        pg.batch_execute("SET idle_in_transaction_session_timeout = '60s'")
            .await?;
        Ok(Relay {
            conninfo: conninfo.to_string(),
            redis,
            options,
            pg,
            topics: HashMap::new(),
            checked: None,
            resting: HashMap::new(),
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
        tokio::spawn(listen(self.conninfo.clone(), wake.clone(), listening));
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
        self.report
    }

    async fn reconnect(&mut self) {
        if self.pg.is_closed() {
            if let Ok(pg) = connect(&self.conninfo).await {
                self.pg = pg;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    /// One round: checks the topics (each `poll`), moves one batch. Returns
    /// true when a full batch moved (more may be waiting).
    pub async fn round(&mut self) -> Result<bool> {
        if self
            .checked
            .is_none_or(|t| t.elapsed() >= self.options.poll)
        {
            self.check_topics().await?;
            self.checked = Some(Instant::now());
        }
        let moved = self.move_batch().await?;
        Ok(moved >= self.options.batch as usize)
    }

    /// Loads the store's topics; defines and recovers any that Redis lost.
    /// The need is written in the store (`rmq_topics.needs_recovery`)
    /// before the topic is defined again, so a recovery that fails, or
    /// whose relay dies, is done at a later check, by this relay or
    /// another.
    async fn check_topics(&mut self) -> Result<()> {
        for stored in topics::load_all(&self.pg).await? {
            let name = stored.name().to_string();
            let mut recover_it = stored.needs_recovery;
            let topic = match self.redis.topic(&name).await {
                Ok(t) => t,
                Err(e) if e.kind() == ErrorKind::UnknownTopic => {
                    recover_it = true;
                    // Said in the store first: a relay that dies before the
                    // recovery is done leaves it to the next one.
                    topics::needs_recovery(&self.pg, &name, true).await?;
                    self.redis.define_topic(stored.spec().clone()).await?
                }
                Err(e) => return Err(e.into()),
            };
            self.topics.insert(name.clone(), (stored.clone(), topic));
            if recover_it {
                // A recovery that fails is tried again at the next check;
                // meanwhile the other topics' rows keep moving.
                match recover::topic(&self.pg, &self.redis, &stored).await {
                    Ok(r) => {
                        topics::needs_recovery(&self.pg, &name, false).await?;
                        tracing::warn!(topic = %name, requeued = r.requeued, merged = r.merged,
                            "topic vanished from Redis: defined again and recovered from the store");
                        self.report.recovered.add(&r);
                    }
                    Err(e) => tracing::warn!(topic = %name, error = %e,
                        "recovering a topic that vanished from Redis failed; trying again"),
                }
            }
        }
        Ok(())
    }

    /// Moves one batch; returns how many rows it took.
    async fn move_batch(&mut self) -> Result<usize> {
        let (window, limit) = (
            ms(self.options.window),
            i64::from(self.options.batch.max(1)),
        );
        let now = Instant::now();
        self.resting.retain(|_, until| *until > now);
        let resting: Vec<&str> = self.resting.keys().map(String::as_str).collect();
        let tx = self.pg.transaction().await?;
        let rows = tx
            .query(crate::sql::TAKE_DUE, &[&window, &limit, &resting])
            .await?;
        if rows.is_empty() {
            return Ok(0);
        }
        let taken = rows.len();
        let mut bad: Vec<(i64, String)> = Vec::new();
        let mut by_topic: Vec<(String, Vec<(i64, Message)>)> = Vec::new();
        // Redis's clock, read before the send: deliveries are stamped with
        // it (`taken_ms`), and a delivery taken at or after this time
        // carries this send's content.
        let queued_ms = self.redis.server_time_ms().await?;
        for r in &rows {
            let id: i64 = r.try_get(0)?;
            let topic: String = r.try_get(1)?;
            let Some((stored, _)) = self.topics.get(&topic) else {
                // A topic defined after the last check: its rows wait for
                // the next check.
                self.resting.insert(topic, now + self.options.poll);
                continue;
            };
            let m = match message_of(stored.spec().kind, r, queued_ms) {
                Ok(m) => m,
                Err(e) => {
                    bad.push((id, e.to_string()));
                    continue;
                }
            };
            match by_topic.iter_mut().find(|(t, _)| *t == topic) {
                Some((_, v)) => v.push((id, m)),
                None => by_topic.push((topic, vec![(id, m)])),
            }
        }
        let mut round = Round {
            held: taken - bad.len() - by_topic.iter().map(|(_, v)| v.len()).sum::<usize>(),
            refused: bad,
            ..Round::default()
        };
        for (name, items) in &by_topic {
            let Some((_, topic)) = self.topics.get(name) else {
                continue;
            };
            // One message that does not fit the topic as Redis defines it
            // now (a lowered payload limit) would refuse its whole batch:
            // it goes dead alone.
            let spec = topic.spec();
            let mut fit = Vec::with_capacity(items.len());
            for (id, m) in items {
                match m.check(&spec) {
                    Ok(()) => fit.push((*id, m.clone())),
                    Err(e) => round.refused.push((*id, e.to_string())),
                }
            }
            for chunk in fit.chunks(rmq::MAX_BATCH) {
                let messages: Vec<Message> = chunk.iter().map(|(_, m)| m.clone()).collect();
                let report = topic.send_batch(&messages).await?;
                let mut late = Vec::new();
                for ((id, m), r) in chunk.iter().zip(report.results) {
                    match r {
                        Ok(_) => round.queued.push(*id),
                        // Due by Redis's clock already: due at once.
                        Err(e) if e.kind() == ErrorKind::PastDue => {
                            late.push((*id, m.clone().delay(Duration::ZERO)));
                        }
                        Err(e) if refused_for_good(e.kind()) => {
                            round.refused.push((*id, e.to_string()));
                        }
                        Err(e) => {
                            tracing::debug!(error = %e, "Redis refused a row for now; it stays stored");
                            round.held += 1;
                            self.resting.insert(name.clone(), now + self.options.poll);
                        }
                    }
                }
                if !late.is_empty() {
                    let messages: Vec<Message> = late.iter().map(|(_, m)| m.clone()).collect();
                    let report = topic.send_batch(&messages).await?;
                    for ((id, _), r) in late.iter().zip(report.results) {
                        match r {
                            Ok(_) => round.queued.push(*id),
                            Err(e) if refused_for_good(e.kind()) => {
                                round.refused.push((*id, e.to_string()));
                            }
                            Err(_) => {
                                round.held += 1;
                                self.resting.insert(name.clone(), now + self.options.poll);
                            }
                        }
                    }
                }
            }
        }
        tx.execute(
            "UPDATE rmq_messages SET status = 'queued', queued_ms = $2, updated_at = now()
             WHERE id = ANY($1) AND status = 'stored'",
            &[&round.queued, &queued_ms],
        )
        .await?;
        if !round.refused.is_empty() {
            let (ids, errors): (Vec<i64>, Vec<String>) = round.refused.iter().cloned().unzip();
            tx.execute(
                "UPDATE rmq_messages m SET status = 'dead', error = 'refused by Redis: ' || f.error,
                        finished_at = now(), updated_at = now()
                 FROM unnest($1::int8[], $2::text[]) AS f(id, error)
                 WHERE m.id = f.id AND m.status = 'stored'",
                &[&ids, &errors],
            )
            .await?;
        }
        let moved = i64::try_from(round.queued.len()).unwrap_or(i64::MAX);
        let last = round.queued.iter().max().copied();
        tx.execute(
            "INSERT INTO rmq_relays (name, moved, last_id, seen_at) VALUES ($1, $2, $3, now())
             ON CONFLICT (name) DO UPDATE SET moved = rmq_relays.moved + $2,
                 last_id = coalesce($3, rmq_relays.last_id), seen_at = now()",
            &[&self.options.name, &moved, &last],
        )
        .await?;
        tx.commit().await?;
        self.report.moved += round.queued.len() as u64;
        self.report.refused += round.refused.len() as u64;
        // Rows held back (a full topic) are not progress, but their topics
        // rest now: the next round takes other topics' rows.
        Ok(if round.held == taken { 0 } else { taken })
    }
}

/// Refusals that a later try would meet again: the row goes dead.
fn refused_for_good(kind: ErrorKind) -> bool {
    matches!(
        kind,
        ErrorKind::InvalidArgument
            | ErrorKind::InvalidName
            | ErrorKind::PayloadTooLarge
            | ErrorKind::PastDue
            | ErrorKind::WrongType
    )
}

/// The rmq message a row stands for. Fixed-time messages overdue by now
/// are sent as due at once; range-merge ones with what is left of their
/// range, so that they are due when the store's first send said.
fn message_of(kind: TopicKind, r: &tokio_postgres::Row, now: i64) -> Result<Message> {
    let key: Vec<u8> = r.try_get(2)?;
    let basis: Option<Vec<u8>> = r.try_get(3)?;
    let payload: Vec<u8> = r.try_get(4)?;
    let priority: Option<i64> = r.try_get(5)?;
    let due: Option<i64> = r.try_get(6)?;
    let mut m = Message::new(payload).key(key);
    if let Some(b) = basis {
        m = m.slot_basis(b);
    }
    let bad = |what: &str| StoreError::BadRow(format!("a {} row without {what}", kind.as_str()));
    Ok(match kind {
        TopicKind::Priority => {
            let p = priority.ok_or_else(|| bad("a priority"))?;
            m.priority(u32::try_from(p).map_err(|_| bad("a valid priority"))?)
        }
        TopicKind::FixedTime => {
            let due = due.ok_or_else(|| bad("a due time"))?;
            if due <= now {
                m.delay(Duration::ZERO)
            } else {
                m.at_ms(due)
            }
        }
        TopicKind::RangeMerge => {
            let due = due.ok_or_else(|| bad("a due time"))?;
            let left = u64::try_from((due - now).max(1)).unwrap_or(1);
            m.range(Duration::from_millis(left))
        }
    })
}

/// Listens for commits of new rows (`NOTIFY rmq_store`) and wakes the
/// relay; reconnects after a lost connection (the relay polls meanwhile).
async fn listen(conninfo: String, wake: Arc<Notify>, cancel: CancellationToken) {
    while !cancel.is_cancelled() {
        let connected = match crate::store::config(&conninfo) {
            Ok(c) => c.connect(tokio_postgres::NoTls).await.ok(),
            Err(_) => None,
        };
        if let Some((client, mut connection)) = connected {
            let messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
            let wake2 = wake.clone();
            let driver = tokio::spawn(async move {
                let mut messages = std::pin::pin!(messages);
                while let Some(m) = messages.next().await {
                    match m {
                        Ok(tokio_postgres::AsyncMessage::Notification(_)) => wake2.notify_one(),
                        Ok(_) => {}
                        Err(_) => break,
                    }
                }
            });
            if client.batch_execute("LISTEN rmq_store").await.is_ok() {
                // Something may have committed while we were not listening.
                wake.notify_one();
                tokio::select! {
                    () = cancel.cancelled() => {}
                    _ = driver => {}
                }
            } else {
                driver.abort();
            }
        }
        tokio::select! {
            () = cancel.cancelled() => {}
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}

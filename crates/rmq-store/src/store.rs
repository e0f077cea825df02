//! [`Store`]: a connection to the store's database, for defining topics,
//! migrating, recovering, pruning and counting. Sends do not need it: they
//! run in the application's own transaction ([`crate::StoredTopic::send`]).

use std::time::Duration;

use tokio::sync::Mutex;

use crate::error::Result;
use crate::topics::{self, StoredTopic};
use crate::{recover, retention, schema, Finisher, Recovered};

/// Connects to PostgreSQL (`postgres://user@host:port/db` or
/// `host=… port=… user=…`; no TLS) as `app` and drives the connection in a
/// task of its own. The task ends when the client is dropped.
pub(crate) async fn connect(conninfo: &str, app: &str) -> Result<tokio_postgres::Client> {
    let (client, connection) = config(conninfo, app)?
        .connect(tokio_postgres::NoTls)
        .await?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "store connection ended");
        }
    });
    Ok(client)
}

/// The connection settings: `conninfo`'s, with a 10 s connect timeout and
/// TCP keepalives unless it sets its own, so that a dead server or a
/// half-open connection is noticed; and `app` as `application_name` unless
/// it names one, so that `pg_stat_activity` and the server's log tell a
/// relay's sessions from a consumer's.
pub(crate) fn config(conninfo: &str, app: &str) -> Result<tokio_postgres::Config> {
    let mut config: tokio_postgres::Config = conninfo.parse()?;
    if config.get_application_name().is_none() {
        config.application_name(app);
    }
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(std::time::Duration::from_secs(10));
    }
    config.keepalives(true);
    config.keepalives_idle(std::time::Duration::from_secs(30));
    Ok(config)
}

/// How many rows of a topic are in each status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Committed, not yet moved to Redis.
    pub stored: u64,
    /// Moved to Redis, not known to be finished.
    pub queued: u64,
    /// Acked.
    pub done: u64,
    /// Dead-lettered (or refused by Redis).
    pub dead: u64,
}

/// One topic in [`Store::stats`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicStats {
    /// The topic's name.
    pub name: String,
    /// Its rows by status.
    pub counts: Counts,
    /// Why its definition cannot be used (relays leave its rows stored),
    /// or None.
    pub problem: Option<String>,
}

/// The store: a PostgreSQL database with rmq's schema.
pub struct Store {
    pg: Mutex<tokio_postgres::Client>,
    conninfo: String,
}

impl Store {
    /// Connects without checking the schema (for [`Store::migrate`]).
    pub async fn connect_unchecked(conninfo: &str) -> Result<Store> {
        Ok(Store {
            pg: Mutex::new(connect(conninfo, "rmq-store").await?),
            conninfo: conninfo.to_string(),
        })
    }

    /// Connects and checks that the database has this build's schema
    /// ([`crate::StoreError::NotMigrated`] if not).
    pub async fn connect(conninfo: &str) -> Result<Store> {
        let store = Self::connect_unchecked(conninfo).await?;
        schema::check(&*store.pg.lock().await).await?;
        Ok(store)
    }

    /// Applies the schema's migrations not yet applied (safe to run from
    /// several processes at once); returns the schema version.
    pub async fn migrate(&self) -> Result<i32> {
        schema::migrate(&mut *self.pg.lock().await).await
    }

    /// The connection string it was opened with.
    pub fn conninfo(&self) -> &str {
        &self.conninfo
    }

    /// Defines a topic in the store (or changes the settings of one with
    /// the same kind and slot count). Define it in Redis with the same
    /// spec; a relay defines it there if it is missing.
    pub async fn define_topic(&self, spec: &rmq::TopicSpec) -> Result<StoredTopic> {
        topics::define(&*self.pg.lock().await, spec).await
    }

    /// A topic defined in the store.
    pub async fn topic(&self, name: &str) -> Result<StoredTopic> {
        topics::load(&*self.pg.lock().await, name).await
    }

    /// Every topic defined in the store. Fails with
    /// [`crate::StoreError::BadRow`] if a definition cannot be read
    /// ([`Store::stats`] shows which).
    pub async fn topics(&self) -> Result<Vec<StoredTopic>> {
        topics::load_all(&*self.pg.lock().await)
            .await?
            .into_iter()
            .map(|(_, t)| t)
            .collect()
    }

    /// Every topic's counts, and what is wrong with a definition that
    /// cannot be read (a relay skips that topic).
    pub async fn stats(&self) -> Result<Vec<TopicStats>> {
        let mut all = Vec::new();
        for (name, t) in topics::load_all(&*self.pg.lock().await).await? {
            let problem = t.err().map(|e| e.to_string());
            all.push((name, problem));
        }
        let mut stats = Vec::with_capacity(all.len());
        for (name, problem) in all {
            let counts = self.counts(&name).await?;
            stats.push(TopicStats {
                name,
                counts,
                problem,
            });
        }
        Ok(stats)
    }

    /// A reporter of finished deliveries on a connection of its own
    /// (keeping up to [`crate::MAX_BUFFERED`] reports while
    /// PostgreSQL is unreachable).
    pub async fn finisher(&self) -> Result<Finisher> {
        Finisher::connect(&self.conninfo).await
    }

    /// [`Store::finisher`] keeping up to `bound` reports while they cannot
    /// be written; beyond it, new reports are dropped and counted
    /// ([`Finisher::dropped`]), their rows left queued.
    pub async fn finisher_bounded(&self, bound: usize) -> Result<Finisher> {
        Finisher::connect_bounded(&self.conninfo, bound).await
    }

    /// Re-queues what the store holds as not finished and Redis no longer
    /// has (see [`Recovered`]): every topic, or one. A topic whose
    /// definition cannot be read is skipped with a warning when all are
    /// recovered.
    pub async fn recover(&self, redis: &rmq::Client, topic: Option<&str>) -> Result<Recovered> {
        let topics = match topic {
            Some(t) => vec![self.topic(t).await?],
            None => {
                let mut usable = Vec::new();
                for (name, t) in topics::load_all(&*self.pg.lock().await).await? {
                    match t {
                        Ok(t) => usable.push(t),
                        Err(e) => tracing::warn!(topic = %name, error = %e,
                            "topic skipped: its definition in the store cannot be read"),
                    }
                }
                usable
            }
        };
        let mut total = Recovered::default();
        for t in topics {
            let r = recover::topic(&*self.pg.lock().await, redis, &t).await?;
            total.add(&r);
        }
        Ok(total)
    }

    /// Deletes rows finished longer than `older_than` ago, `batch` at a
    /// time (each batch its own short statement); returns how many.
    pub async fn prune(&self, older_than: Duration, batch: u32) -> Result<u64> {
        retention::prune(&*self.pg.lock().await, older_than, batch).await
    }

    /// How many rows of `topic` are in each status.
    pub async fn counts(&self, topic: &str) -> Result<Counts> {
        let rows = self
            .pg
            .lock()
            .await
            .query(
                "SELECT status, count(*) FROM rmq_messages WHERE topic = $1 GROUP BY status",
                &[&topic],
            )
            .await?;
        let mut c = Counts::default();
        for r in rows {
            let n = u64::try_from(r.try_get::<_, i64>(1)?).unwrap_or(0);
            match r.try_get::<_, &str>(0)? {
                "stored" => c.stored = n,
                "queued" => c.queued = n,
                "done" => c.done = n,
                "dead" => c.dead = n,
                _ => {}
            }
        }
        Ok(c)
    }
}

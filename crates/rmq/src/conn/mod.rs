//! The connection to one Redis or to a Redis Cluster, and the script runner.
//!
//! [`Conn`] hides which of the two it is from every caller: both are
//! auto-reconnecting, multiplexed connections (commands of all tasks share
//! the sockets). A single node gets a batch of script calls as one
//! pipeline. On a cluster rmq routes script calls itself (`routing.rs`):
//! each master gets its calls as one pipeline, all masters at once, and a
//! redirected call goes again alone (the cluster client would retry a
//! whole pipeline, running the calls that had succeeded a second time);
//! the cluster client serves the rest (reads, script loading, pub/sub).

use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};

mod cluster;
mod layout;
mod load;
mod revive;
mod routing;
mod seeds;
mod single;
mod subscribers;
mod wait;

use crate::error::{Error, ErrorKind, Result};
use crate::scripts::ScriptId;
pub(crate) use cluster::retry_through_failover;
use cluster::with_request_key;
pub(crate) use layout::ClusterLayout;
pub(crate) use seeds::ClusterSeeds;
pub(crate) use single::Single;
use wait::{acked_of, single_pipeline};
pub(crate) use wait::{WaitFor, MAX_WAIT};

/// A connection to a single node or to a cluster.
#[derive(Clone)]
pub(crate) enum Conn {
    Single(Single),
    Cluster(ClusterConnection),
}

impl redis::aio::ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

/// Where new connections (e.g. for pub/sub) come from.
#[derive(Clone)]
pub(crate) enum Target {
    Single(redis::Client),
    /// The seed nodes and settings, to build a pub/sub cluster client.
    Cluster(ClusterSeeds),
}

/// The connection and the script runner.
#[derive(Clone)]
pub(crate) struct Redis {
    pub(crate) target: Target,
    /// The connection every clone of this `Redis` shares: a cluster
    /// connection that stopped answering is replaced here (`revive.rs`).
    conn: std::sync::Arc<std::sync::RwLock<Conn>>,
    /// One check of a cluster connection at a time (`revive.rs`).
    reviving: std::sync::Arc<revive::Reviving>,
    /// A single node's durable sends only, made on first use (a cluster's
    /// have `wait_routing`): `WAIT` blocks the connection
    /// it is sent on until the replicas answer (up to its timeout), which
    /// must not hold up consumers' pops and acks on the shared connection.
    pub(crate) wait_conn: std::sync::Arc<tokio::sync::OnceCell<Conn>>,
    pub(crate) response_timeout: std::time::Duration,
    /// Locked-down mode: call the admin-loaded Function library with FCALL
    /// instead of loading and calling scripts.
    pub(crate) functions: bool,
    /// Every master is Redis 7.2+ with the AOF on: durable sends use
    /// `WAITAOF 1 n` (fsynced locally and on n replicas) instead of `WAIT n`.
    pub(crate) waitaof: bool,
    /// A cluster: how long a call keeps trying through a failover (see
    /// [`ClientOptions::failover_window`](crate::ClientOptions::failover_window)).
    pub(crate) failover_window: std::time::Duration,
    /// Slot scripts keep each topic's head index (`scripts/lua/notify.lua`;
    /// on a cluster one per hash tag), and consumers read it instead of
    /// looking at every slot.
    pub(crate) head_index: bool,
    /// A cluster: script calls, routed by rmq (`routing.rs`), made on
    /// first use.
    routing: std::sync::Arc<std::sync::OnceLock<routing::Routing>>,
    /// A cluster: durable sends' script calls, on connections of their
    /// own (`WAIT` holds up its connection), made on first use.
    wait_routing: std::sync::Arc<std::sync::OnceLock<routing::Routing>>,
}

/// How long a cluster call keeps trying through a failover by default:
/// more than a node time-out of a few seconds plus the election.
pub(crate) const DEFAULT_FAILOVER_WINDOW: std::time::Duration = std::time::Duration::from_secs(15);

impl Redis {
    pub(crate) fn new(target: Target, conn: Conn, response_timeout: std::time::Duration) -> Redis {
        Redis {
            target,
            conn: std::sync::Arc::new(std::sync::RwLock::new(conn)),
            reviving: Default::default(),
            wait_conn: Default::default(),
            response_timeout,
            functions: false,
            waitaof: false,
            failover_window: DEFAULT_FAILOVER_WINDOW,
            head_index: false,
            routing: Default::default(),
            wait_routing: Default::default(),
        }
    }

    /// How long a cluster call's answer is remembered for a second run:
    /// past every retry of it (rmq's own, within the failover window, and
    /// the cluster client's, each within a response time-out).
    fn memo_ttl_ms(&self) -> u128 {
        (self.failover_window + self.response_timeout * 2).as_millis() + 10_000
    }

    /// Sends one command that may safely run twice (a read, or an
    /// idempotent write such as `SCRIPT LOAD`). On a cluster it rides out a
    /// failover: it is tried again for up to the failover window while the
    /// cluster answers that it cannot serve the key, or a node cannot be
    /// reached.
    pub(crate) async fn query<T: redis::FromRedisValue>(&self, cmd: &Cmd) -> Result<T> {
        let mut conn = self.conn();
        if !self.is_cluster() {
            return Ok(cmd.query_async(&mut conn).await?);
        }
        let deadline = tokio::time::Instant::now() + self.failover_window;
        let mut wait = std::time::Duration::from_millis(50);
        loop {
            let r = cmd.query_async::<T>(&mut conn).await;
            let timed_out = r.as_ref().is_err_and(|e| e.is_timeout());
            if timed_out {
                self.call_timed_out();
            }
            match r {
                Err(e)
                    if retry_through_failover(&e, true)
                        && tokio::time::Instant::now() + wait < deadline =>
                {
                    if timed_out {
                        // The next try goes out on a replaced connection.
                        self.after_time_out().await;
                        conn = self.conn();
                    }
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(std::time::Duration::from_millis(500));
                }
                r => return Ok(r?),
            }
        }
    }

    /// A single node's connection for writes followed by WAIT.
    async fn wait_conn(&self, client: &redis::Client) -> Result<Conn> {
        let timeout = self.response_timeout + MAX_WAIT;
        let conn = self
            .wait_conn
            .get_or_try_init(|| async {
                let config = redis::aio::ConnectionManagerConfig::new()
                    .set_response_timeout(Some(timeout))
                    .set_connection_timeout(Some(std::time::Duration::from_secs(5)))
                    .set_number_of_retries(2)
                    .set_max_delay(std::time::Duration::from_secs(2));
                Ok::<_, Error>(Conn::Single(Single::connect(client.clone(), config).await?))
            })
            .await?;
        Ok(conn.clone())
    }

    /// Whether this is a cluster connection.
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.target, Target::Cluster(_))
    }

    /// The connection (a clone sharing its sockets).
    pub(crate) fn conn(&self) -> Conn {
        self.conn.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Runs script calls and returns one result per call. Calls that hit
    /// NOSCRIPT (they did nothing) are retried once after loading the
    /// scripts on every node. On a single node an error of the whole
    /// pipeline (connection) is returned as such: those calls may or may
    /// not have run; on a cluster each call fails alone.
    pub(crate) async fn run(&self, calls: Vec<(ScriptId, Cmd)>) -> Result<Vec<Result<Value>>> {
        Ok(self
            .run_waiting(calls, None)
            .await?
            .into_iter()
            .map(|(r, _)| r)
            .collect())
    }

    /// Like [`run`](Self::run); with `wait`, each successful call is
    /// followed by `WAIT replicas timeout` on the same connection, and its
    /// result comes with the number of replicas that acknowledged it.
    pub(crate) async fn run_waiting(
        &self,
        calls: Vec<(ScriptId, Cmd)>,
        wait: Option<WaitFor>,
    ) -> Result<Vec<(Result<Value>, Option<u32>)>> {
        if calls.is_empty() {
            return Ok(Vec::new());
        }
        let calls = self.prepare(calls);
        let mut out: Vec<Option<(Result<Value>, Option<u32>)>> =
            (0..calls.len()).map(|_| None).collect();
        let mut pending: Vec<usize> = (0..calls.len()).collect();
        for round in 0..2 {
            let started = std::time::Instant::now();
            let results = match &self.target {
                Target::Cluster(seeds) => {
                    self.routing(seeds, wait.is_some())
                        .run(&calls, &pending, wait, self.failover_window)
                        .await
                }
                Target::Single(client) => {
                    let conn = match wait {
                        Some(_) => self.wait_conn(client).await?,
                        None => self.conn(),
                    };
                    single_pipeline(conn, &calls, &pending, wait).await?
                }
            };
            round_trip_timed(calls[pending[0]].0, started.elapsed());
            let mut missing = Vec::new();
            for (&i, (r, acked)) in pending.iter().zip(results) {
                match r {
                    Err(e) if round == 0 && is_noscript(&e) && !self.functions => missing.push(i),
                    Err(e) if self.functions && is_function_missing(&e) => {
                        out[i] = Some((Err(functions_missing()), None))
                    }
                    Err(e) => out[i] = Some((Err(Error::from(e)), None)),
                    Ok(v) => out[i] = Some((Ok(v), acked)),
                }
            }
            if missing.is_empty() {
                break;
            }
            self.load_scripts().await?;
            pending = missing;
        }
        Ok(out
            .into_iter()
            .map(|o| {
                o.unwrap_or_else(|| {
                    (
                        Err(Error::new(ErrorKind::Redis, "script result missing")),
                        None,
                    )
                })
            })
            .collect())
    }

    /// The cluster's layout as last asked (by the routing of script calls),
    /// asking now if it never was or was forgotten.
    pub(crate) async fn known_layout(&self) -> Result<std::sync::Arc<ClusterLayout>> {
        let Target::Cluster(seeds) = &self.target else {
            return Err(Error::new(
                ErrorKind::Redis,
                "a single node has no cluster layout",
            ));
        };
        self.routing(seeds, false).layout().await.ok_or_else(|| {
            Error::new(
                ErrorKind::Redis,
                "no node of the cluster answered CLUSTER SLOTS with a layout",
            )
        })
    }

    /// Forgets the layout: a call grouped by it found a key elsewhere.
    pub(crate) fn forget_layout(&self) {
        if let Target::Cluster(seeds) = &self.target {
            self.routing(seeds, false).forget();
        }
    }

    /// A cluster's routing of script calls (a durable send's own when
    /// `waiting`).
    fn routing(&self, seeds: &ClusterSeeds, waiting: bool) -> &routing::Routing {
        let (cell, timeout) = match waiting {
            false => (&self.routing, self.response_timeout),
            true => (&self.wait_routing, self.response_timeout + MAX_WAIT),
        };
        cell.get_or_init(|| routing::Routing::new(seeds.clone(), timeout))
    }

    /// The calls as this connection sends them: as FCALLs in locked-down
    /// mode; on a cluster, which may run a call twice, each writing call
    /// names itself, so that a second run answers as the first and
    /// changes nothing.
    fn prepare(&self, calls: Vec<(ScriptId, Cmd)>) -> Vec<(ScriptId, Cmd)> {
        let ttl = self.memo_ttl_ms();
        calls
            .into_iter()
            .map(|(id, cmd)| {
                let cmd = match self.functions {
                    true => crate::scripts::functions::as_fcall(id, &cmd),
                    false => cmd,
                };
                let cluster = self.is_cluster();
                let cmd = match cluster && id.memoized() {
                    true => with_request_key(&cmd, ttl),
                    false => cmd,
                };
                // The index after the request key (notify.lua finds it by
                // its name); a cluster keeps no marks.
                let cmd = match (self.head_index && id.names_head_index(), cluster) {
                    (false, _) => cmd,
                    (true, true) => with_keys_after_keys(&cmd, |first| {
                        crate::keys::tag_head_index_of(first).map(|k| [k.into_bytes()])
                    }),
                    (true, false) => with_keys_after_keys(&cmd, |first| {
                        crate::keys::head_index_and_marks_of(first)
                            .map(|k| k.map(String::into_bytes))
                    }),
                };
                (id, cmd)
            })
            .collect()
    }

    /// Runs one script call.
    pub(crate) async fn run_one(&self, id: ScriptId, cmd: Cmd) -> Result<Value> {
        self.run(vec![(id, cmd)])
            .await?
            .pop()
            .unwrap_or_else(|| Err(Error::new(ErrorKind::Redis, "script result missing")))
    }
}

/// A script call with more keys after its keys, made from its first key
/// (the call unchanged when `make` gives none). Works on `EVALSHA sha n
/// keys.. args..` and `FCALL name n keys.. args..` alike.
fn with_keys_after_keys<const N: usize>(
    cmd: &Cmd,
    make: impl FnOnce(&[u8]) -> Option<[Vec<u8>; N]>,
) -> Cmd {
    let args: Vec<&[u8]> = cmd
        .args_iter()
        .filter_map(|a| match a {
            redis::Arg::Simple(b) => Some(b),
            _ => None,
        })
        .collect();
    let numkeys: Option<usize> = args
        .get(2)
        .and_then(|n| std::str::from_utf8(n).ok())
        .and_then(|n| n.parse().ok());
    let (Some(n), Some(first)) = (numkeys, args.get(3)) else {
        return cmd.clone();
    };
    let Some(more) = make(first) else {
        return cmd.clone();
    };
    let mut out = redis::cmd(&String::from_utf8_lossy(args[0]));
    out.arg(args[1]).arg(n + N);
    for k in args.iter().skip(3).take(n) {
        out.arg(*k);
    }
    for k in more {
        out.arg(k);
    }
    for a in args.iter().skip(3 + n) {
        out.arg(*a);
    }
    out
}

/// `rmq_redis_call_duration_seconds` (see `observe.rs`): one round trip,
/// labelled by the script of its calls.
fn round_trip_timed(script: ScriptId, took: std::time::Duration) {
    metrics::histogram!("rmq_redis_call_duration_seconds", "script" => script.name())
        .record(took.as_secs_f64());
}

fn is_function_missing(e: &redis::RedisError) -> bool {
    e.to_string().contains("Function not found")
}

/// The error when the Function library is not loaded (locked-down mode).
pub(crate) fn functions_missing() -> Error {
    Error::new(
        ErrorKind::UnsupportedServer,
        format!(
            "the rmq function library {} is not loaded on this Redis: an admin loads it \
             with `rmq functions load` (or Client::load_functions)",
            crate::scripts::functions::library().name
        ),
    )
}

fn is_noscript(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
}

//! The connection to one Redis or to a Redis Cluster, and the script runner.
//!
//! [`Conn`] hides which of the two it is from every caller: both are
//! auto-reconnecting, multiplexed connections (commands of all tasks share
//! the sockets). A single node gets a batch of script calls as one
//! pipeline. A cluster gets each call as its own command, all of them
//! concurrently: the cluster connection routes each by its first key (all
//! keys of a call share one hash tag), commands bound for one node leave on
//! its one socket back to back, and the nodes work in parallel. One command
//! per call matters on a cluster: the client retries a whole pipeline when
//! any of its replies is a redirect (MOVED, ASK, TRYAGAIN), which would run
//! the calls that had succeeded a second time, while a redirected single
//! command has not run at all.

use redis::aio::ConnectionManager;
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};

use crate::error::{Error, ErrorKind, Result};
use crate::scripts::{self, ScriptId};

/// A connection to a single node or to a cluster.
#[derive(Clone)]
pub(crate) enum Conn {
    Single(ConnectionManager),
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

/// What a cluster client is built from.
#[derive(Clone)]
pub(crate) struct ClusterSeeds {
    pub(crate) nodes: Vec<redis::ConnectionInfo>,
    pub(crate) response_timeout: std::time::Duration,
}

impl ClusterSeeds {
    /// A builder with rmq's settings (timeouts, retries).
    pub(crate) fn builder(&self) -> redis::cluster::ClusterClientBuilder {
        ClusterClient::builder(self.nodes.clone())
            .connection_timeout(std::time::Duration::from_secs(5))
            .response_timeout(self.response_timeout)
            .retries(12)
    }
}

/// The connection and the script runner.
#[derive(Clone)]
pub(crate) struct Redis {
    pub(crate) target: Target,
    pub(crate) conn: Conn,
}

/// What to ask of replicas after writes (durable sends).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WaitFor {
    pub(crate) replicas: u32,
    pub(crate) timeout_ms: u64,
}

impl Redis {
    /// Whether this is a cluster connection.
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.conn, Conn::Cluster(_))
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
        let mut out: Vec<Option<(Result<Value>, Option<u32>)>> =
            (0..calls.len()).map(|_| None).collect();
        let mut pending: Vec<usize> = (0..calls.len()).collect();
        for round in 0..2 {
            let results = match &self.conn {
                Conn::Single(_) => self.single_pipeline(&calls, &pending, wait).await?,
                Conn::Cluster(_) => self.cluster_each(&calls, &pending, wait).await,
            };
            let mut missing = Vec::new();
            for (&i, (r, acked)) in pending.iter().zip(results) {
                match r {
                    Err(e) if round == 0 && is_noscript(&e) => missing.push(i),
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

    /// One pipeline: the calls, then one WAIT that covers all of them.
    async fn single_pipeline(
        &self,
        calls: &[(ScriptId, Cmd)],
        pending: &[usize],
        wait: Option<WaitFor>,
    ) -> Result<Vec<(redis::RedisResult<Value>, Option<u32>)>> {
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for &i in pending {
            pipe.add_command(calls[i].1.clone());
        }
        if let Some(w) = wait {
            pipe.cmd("WAIT").arg(w.replicas).arg(w.timeout_ms);
        }
        let mut conn = self.conn.clone();
        let mut results: Vec<redis::RedisResult<Value>> = pipe.query_async(&mut conn).await?;
        let acked = if wait.is_some() {
            match results.pop() {
                Some(Ok(Value::Int(n))) => Some(u32::try_from(n).unwrap_or(0)),
                _ => Some(0),
            }
        } else {
            None
        };
        Ok(results.into_iter().map(|r| (r, acked)).collect())
    }

    /// Each call as its own command (or call + WAIT pipeline, routed by the
    /// call's key), all concurrently.
    async fn cluster_each(
        &self,
        calls: &[(ScriptId, Cmd)],
        pending: &[usize],
        wait: Option<WaitFor>,
    ) -> Vec<(redis::RedisResult<Value>, Option<u32>)> {
        let futures = pending.iter().map(|&i| {
            let mut conn = self.conn.clone();
            let cmd = &calls[i].1;
            async move {
                match wait {
                    None => (cmd.query_async::<Value>(&mut conn).await, None),
                    Some(w) => {
                        let mut pipe = redis::pipe();
                        pipe.ignore_errors();
                        pipe.add_command(cmd.clone());
                        pipe.cmd("WAIT").arg(w.replicas).arg(w.timeout_ms);
                        let r: redis::RedisResult<Vec<redis::RedisResult<Value>>> =
                            pipe.query_async(&mut conn).await;
                        match r {
                            Err(e) => (Err(e), None),
                            Ok(mut v) => {
                                let acked = match v.pop() {
                                    Some(Ok(Value::Int(n))) => u32::try_from(n).unwrap_or(0),
                                    _ => 0,
                                };
                                let first = v.pop().unwrap_or_else(|| {
                                    Err(redis::RedisError::from((
                                        redis::ErrorKind::Io,
                                        "missing reply",
                                    )))
                                });
                                (first, Some(acked))
                            }
                        }
                    }
                }
            }
        });
        futures::future::join_all(futures).await
    }

    /// Runs one script call.
    pub(crate) async fn run_one(&self, id: ScriptId, cmd: Cmd) -> Result<Value> {
        self.run(vec![(id, cmd)])
            .await?
            .pop()
            .unwrap_or_else(|| Err(Error::new(ErrorKind::Redis, "script result missing")))
    }

    /// Loads every script, on every node of a cluster (SCRIPT LOAD is
    /// idempotent; the cluster client sends it to all nodes).
    pub(crate) async fn load_scripts(&self) -> Result<()> {
        let mut conn = self.conn.clone();
        match &self.conn {
            Conn::Single(_) => {
                let mut pipe = redis::pipe();
                for id in ScriptId::ALL {
                    pipe.cmd("SCRIPT").arg("LOAD").arg(&scripts::get(id).code);
                }
                let _: Vec<String> = pipe.query_async(&mut conn).await?;
            }
            Conn::Cluster(_) => {
                for id in ScriptId::ALL {
                    let _: Value = redis::cmd("SCRIPT")
                        .arg("LOAD")
                        .arg(&scripts::get(id).code)
                        .query_async(&mut conn)
                        .await?;
                }
            }
        }
        Ok(())
    }
}

fn is_noscript(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
}

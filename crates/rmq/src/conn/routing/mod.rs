//! Script calls on a Redis Cluster, routed by rmq itself: each master gets
//! the calls for its hash slots as **one pipeline** on one connection of
//! rmq's own, all masters at once.
//!
//! Why not the cluster client's: it sends each command through its own
//! routing task (a hand-off and a response channel more per call, and the
//! bulk of the client's CPU in a large fleet), and it retries a *whole*
//! pipeline when one reply is a redirect, which would run the calls that
//! had succeeded a second time. Here every reply is judged alone:
//!
//! - a redirect (`MOVED`, `ASK`) or a refusal (`TRYAGAIN`, `CLUSTERDOWN`,
//!   `MASTERDOWN`, `LOADING`, `READONLY`) means that call did not run: it
//!   alone goes again, to the node named (`MOVED` also mends the map;
//!   `ASK` is sent once after `ASKING`), the others keep their answers;
//! - a connection that broke or timed out may have run any call of its
//!   pipeline: only calls whose second run is harmless (a memoized call
//!   answers as the first, `lua/memo.lua`) go again, on a new connection;
//! - every call gives up after the failover window.
//!
//! The map of hash slots to masters comes from `CLUSTER SLOTS` (asked again
//! after a redirect or a failure, at most once every
//! [`REFRESH_AT_MOST_EVERY`]), mended at once by each `MOVED`. The cluster
//! client still serves everything else (reads, `SCRIPT LOAD`, pub/sub).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::{BoxFuture, FutureExt, Shared};
use redis::aio::MultiplexedConnection;
use redis::{Cmd, RedisError, RedisResult, Value};
use tokio::time::Instant;

use super::cluster::retry_through_failover;
use super::layout::ClusterLayout;
use super::{acked_of, ClusterSeeds, WaitFor};
use crate::scripts::ScriptId;

mod judge;
mod nodes;
mod slot_map;

use slot_map::{NodeAddr, SlotMap};

/// The least time between two `CLUSTER SLOTS` questions: a burst of
/// redirects during a resharding asks once.
const REFRESH_AT_MOST_EVERY: Duration = Duration::from_millis(250);

/// How long a connection to a node may take to open.
const CONNECT_LIMIT: Duration = Duration::from_secs(2);

/// How long a `CLUSTER SLOTS` question may take, connecting included.
const ASK_LIMIT: Duration = Duration::from_secs(2);

/// Redirects a call may follow back to back before it waits like a
/// refused call (two nodes that disagree during a resharding).
const REDIRECTS_WITHOUT_PAUSE: u32 = 5;

/// The first and the longest pause before a refused call goes again.
const FIRST_PAUSE: Duration = Duration::from_millis(50);
const LONGEST_PAUSE: Duration = Duration::from_millis(500);

/// One connection to a node, opened once for every call that waits for
/// it (an attempt that failed is dropped, and the next call starts
/// another).
type NodeConn = Shared<BoxFuture<'static, RedisResult<MultiplexedConnection>>>;

/// Why a pipeline has no replies.
#[derive(Debug, Clone)]
enum Failed {
    /// No connection could be opened: nothing was sent.
    NotSent(RedisError),
    /// The connection broke or timed out: any call may have run.
    Broken(RedisError),
}

/// rmq's own routing of script calls on a cluster (see the module docs).
pub(crate) struct Routing {
    seeds: ClusterSeeds,
    response_timeout: Duration,
    map: Mutex<SlotMap>,
    conns: Mutex<HashMap<Arc<NodeAddr>, NodeConn>>,
    /// When the map was last asked for: one question at a time.
    refreshed: tokio::sync::Mutex<Option<Instant>>,
}

impl std::fmt::Debug for Routing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Routing").finish_non_exhaustive()
    }
}

/// A call on its way: where its reply goes and where it is sent next.
#[derive(Debug, Clone)]
struct Try {
    /// Its place in the answer.
    at: usize,
    /// Its index in the calls.
    call: usize,
    hash_slot: Option<u16>,
    /// Sent to this node once, after `ASKING` (a slot being migrated).
    ask: Option<Arc<NodeAddr>>,
    redirects: u32,
    last_error: Option<RedisError>,
}

/// What one pass left: the tries that go again, whether to pause before
/// they do, and whether to ask for the slot map first.
struct Pass {
    again: Vec<Try>,
    pause: bool,
    refresh: bool,
}

/// Each call's first try, routed by the hash slot of its first key.
fn first_tries(calls: &[(ScriptId, Cmd)], pending: &[usize]) -> Vec<Try> {
    pending
        .iter()
        .enumerate()
        .map(|(at, &call)| Try {
            at,
            call,
            hash_slot: first_key(&calls[call].1).map(crate::keys::cluster_hash_slot),
            ask: None,
            redirects: 0,
            last_error: None,
        })
        .collect()
}

/// What became of one try.
enum Outcome {
    Done(RedisResult<Value>, Option<u32>),
    /// It did not run (or may run again harmlessly): again, after a pause
    /// when `pause`.
    Again {
        pause: bool,
    },
}

impl Routing {
    pub(super) fn new(seeds: ClusterSeeds, response_timeout: Duration) -> Routing {
        Routing {
            seeds,
            response_timeout,
            map: Mutex::new(SlotMap::default()),
            conns: Mutex::new(HashMap::new()),
            refreshed: tokio::sync::Mutex::new(None),
        }
    }

    /// Runs `calls[pending]` and answers one result per pending call (with
    /// the replicas that acknowledged it, after `WAIT`, when `wait`).
    pub(super) async fn run(
        &self,
        calls: &[(ScriptId, Cmd)],
        pending: &[usize],
        wait: Option<WaitFor>,
        window: Duration,
    ) -> Vec<(RedisResult<Value>, Option<u32>)> {
        let deadline = Instant::now() + window;
        let mut out: Vec<Option<(RedisResult<Value>, Option<u32>)>> =
            (0..pending.len()).map(|_| None).collect();
        let mut todo = first_tries(calls, pending);
        let mut pause = FIRST_PAUSE;
        let mut first = true;
        while !todo.is_empty() {
            if self.map_unknown() {
                self.refresh(None).await;
            }
            // No second try leaves after the window (a memoized call's
            // answer is kept for the window and more, not for ever).
            if !first && Instant::now() >= deadline {
                give_up(todo, &mut out);
                break;
            }
            first = false;
            let pass = self.pass(calls, todo, wait, &mut out).await;
            if pass.again.is_empty() {
                break;
            }
            if pass.pause {
                if Instant::now() + pause >= deadline {
                    give_up(pass.again, &mut out);
                    break;
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(LONGEST_PAUSE);
            }
            if pass.refresh {
                self.refresh(Some(REFRESH_AT_MOST_EVERY)).await;
            }
            todo = pass.again;
        }
        out.into_iter()
            .map(|o| o.unwrap_or_else(|| (Err(unserved_error(None)), None)))
            .collect()
    }

    /// One pass: each try to the master the map names for it (all masters
    /// at once, one pipeline each), each reply judged alone; the answers go
    /// to `out`, and what must go again comes back.
    async fn pass(
        &self,
        calls: &[(ScriptId, Cmd)],
        todo: Vec<Try>,
        wait: Option<WaitFor>,
        out: &mut [Option<(RedisResult<Value>, Option<u32>)>],
    ) -> Pass {
        let (by_node, unserved) = self.route(todo);
        let mut pass = Pass {
            again: Vec::new(),
            pause: false,
            refresh: false,
        };
        for mut t in unserved {
            t.last_error = Some(unserved_error(t.hash_slot));
            pass.again.push(t);
            pass.pause = true;
            pass.refresh = true;
        }
        let sent = futures::future::join_all(by_node.into_iter().map(|(addr, tries)| async {
            let replies = self.send(&addr, calls, &tries, wait).await;
            (addr, tries, replies)
        }))
        .await;
        for (addr, tries, replies) in sent {
            let replies = match replies {
                Ok(replies) => replies.into_iter().map(Ok).collect::<Vec<_>>(),
                Err(failed) => {
                    pass.refresh = true;
                    tries.iter().map(|_| Err(failed.clone())).collect()
                }
            };
            for (mut t, reply) in tries.into_iter().zip(replies) {
                let rerun_safe = {
                    let id = calls[t.call].0;
                    id.memoized() || id.rerun_harmless()
                };
                match self.judge(&mut t, &addr, reply, rerun_safe, &mut pass.refresh) {
                    Outcome::Done(r, acked) => out[t.at] = Some((r, acked)),
                    Outcome::Again { pause } => {
                        pass.pause |= pause;
                        pass.again.push(t);
                    }
                }
            }
        }
        pass
    }

    /// The tries grouped by the node each goes to, and those no known
    /// master serves.
    #[allow(clippy::type_complexity)]
    fn route(&self, todo: Vec<Try>) -> (Vec<(Arc<NodeAddr>, Vec<Try>)>, Vec<Try>) {
        let map = self.lock_map();
        let mut by_node: Vec<(Arc<NodeAddr>, Vec<Try>)> = Vec::with_capacity(map.nodes.len());
        let mut unserved = Vec::new();
        for t in todo {
            let addr = match (&t.ask, t.hash_slot) {
                (Some(a), _) => Some(a.clone()),
                (None, Some(hs)) => map.master_of(hs).cloned(),
                // A call without keys: any master.
                (None, None) => map.nodes.first().cloned(),
            };
            match addr {
                Some(addr) => match by_node.iter_mut().find(|(a, _)| *a == addr) {
                    Some((_, tries)) => tries.push(t),
                    None => by_node.push((addr, vec![t])),
                },
                None => unserved.push(t),
            }
        }
        (by_node, unserved)
    }

    /// The tries' calls to one node as one pipeline (`ASKING` before an
    /// asked call, `WAIT` after all when `wait`): a reply per try, or the
    /// connection's failure.
    async fn send(
        &self,
        addr: &Arc<NodeAddr>,
        calls: &[(ScriptId, Cmd)],
        tries: &[Try],
        wait: Option<WaitFor>,
    ) -> std::result::Result<Vec<(RedisResult<Value>, Option<u32>)>, Failed> {
        let (handle, mut conn) = self.conn_to(addr).await.map_err(Failed::NotSent)?;
        let broken = |e: RedisError| {
            self.forget_conn(addr, &handle);
            Failed::Broken(e)
        };
        if let ([t], None) = (tries, wait) {
            if t.ask.is_none() {
                // One call: sent as it is, without a pipeline around it.
                let reply = calls[t.call].1.query_async::<Value>(&mut conn).await;
                return match reply {
                    Err(e) if is_connection_failure(&e) => Err(broken(e)),
                    reply => Ok(vec![(reply, None)]),
                };
            }
        }
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        let mut asked = Vec::with_capacity(tries.len());
        for t in tries {
            asked.push(t.ask.is_some());
            if t.ask.is_some() {
                pipe.cmd("ASKING");
            }
            pipe.add_command(calls[t.call].1.clone());
        }
        if let Some(w) = wait {
            w.push(&mut pipe);
        }
        let mut replies: Vec<RedisResult<Value>> =
            pipe.query_async(&mut conn).await.map_err(broken)?;
        let acked = wait.map(|_| acked_of(replies.pop()));
        let mut replies = replies.into_iter();
        let mut out = Vec::with_capacity(tries.len());
        for was_asked in asked {
            if was_asked {
                // ASKING's own OK.
                replies.next();
            }
            let reply = replies.next().unwrap_or_else(|| {
                Err(RedisError::from((
                    redis::ErrorKind::Io,
                    "a reply of the pipeline is missing",
                )))
            });
            out.push((reply, acked));
        }
        Ok(out)
    }

    /// The map as a layout, asked for first if it never was or was
    /// forgotten; None if no node answered.
    pub(super) async fn layout(&self) -> Option<Arc<ClusterLayout>> {
        if let Some(layout) = self.lock_map().layout() {
            return Some(layout);
        }
        self.refresh(None).await;
        self.lock_map().layout()
    }

    /// Forgets the layout (the map still routes calls until asked again).
    pub(super) fn forget(&self) {
        let mut map = self.lock_map();
        map.stale = true;
        map.forgotten += 1;
    }
}

/// Whether an error is the connection's (the call may or may not have
/// run), not a reply's.
fn is_connection_failure(e: &RedisError) -> bool {
    e.is_io_error() || e.is_timeout() || e.is_connection_dropped() || e.is_connection_refusal()
}

/// Answers the tries still to go with their last error.
fn give_up(tries: Vec<Try>, out: &mut [Option<(RedisResult<Value>, Option<u32>)>]) {
    for t in tries {
        let e = t.last_error.unwrap_or_else(|| unserved_error(t.hash_slot));
        if let Some(slot) = out.get_mut(t.at) {
            *slot = Some((Err(e), None));
        }
    }
}

/// The first key of a script call (`EVALSHA sha numkeys key...` or `FCALL
/// name numkeys key...`), which names its hash slot.
fn first_key(cmd: &Cmd) -> Option<&[u8]> {
    let mut args = cmd.args_iter().filter_map(|a| match a {
        redis::Arg::Simple(b) => Some(b),
        _ => None,
    });
    let numkeys: usize = std::str::from_utf8(args.nth(2)?).ok()?.parse().ok()?;
    (numkeys > 0).then(|| args.next()).flatten()
}

/// The error of a call whose hash slot no known master serves.
fn unserved_error(hash_slot: Option<u16>) -> RedisError {
    let what = match hash_slot {
        Some(hs) => format!("no known master serves hash slot {hs}"),
        None => "no known master".to_string(),
    };
    RedisError::from((
        redis::ErrorKind::Server(redis::ServerErrorKind::ClusterDown),
        "CLUSTERDOWN",
        what,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conn::layout::SlotRange;

    #[test]
    fn a_call_is_routed_by_its_first_key() {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg("abc")
            .arg(2)
            .arg("rmq:{x}:t:0:q")
            .arg("k2")
            .arg("arg");
        assert_eq!(first_key(&cmd), Some(&b"rmq:{x}:t:0:q"[..]));
        let mut fcall = redis::cmd("FCALL");
        fcall.arg("rmq_pop").arg(1).arg("k").arg("a");
        assert_eq!(first_key(&fcall), Some(&b"k"[..]));
        let mut keyless = redis::cmd("EVALSHA");
        keyless.arg("abc").arg(0).arg("arg");
        assert_eq!(first_key(&keyless), None);
        let mut broken = redis::cmd("EVALSHA");
        broken.arg("abc").arg("x").arg("k");
        assert_eq!(first_key(&broken), None);
    }

    #[test]
    fn redirects_name_hosts_with_and_without_brackets() {
        let sent_to = NodeAddr {
            host: "127.0.0.9".into(),
            port: 7000,
        };
        let of = |a: &str| NodeAddr::of_redirect(a, &sent_to);
        let v4 = of("127.0.0.1:7001").unwrap();
        assert_eq!((v4.host.as_str(), v4.port), ("127.0.0.1", 7001));
        let v6 = of("[::1]:7002").unwrap();
        assert_eq!((v6.host.as_str(), v6.port), ("::1", 7002));
        let bare_v6 = of("::1:7003").unwrap();
        assert_eq!((bare_v6.host.as_str(), bare_v6.port), ("::1", 7003));
        let no_host = of(":7004").unwrap();
        assert_eq!((no_host.host.as_str(), no_host.port), ("127.0.0.9", 7004));
        assert!(of("nohost").is_none());
        assert!(of("h:notaport").is_none());
    }

    fn range(start: u16, end: u16, host: &str, port: u16) -> SlotRange {
        SlotRange {
            start,
            end,
            host: host.to_string(),
            port,
            name: format!("{host}:{port}").into_bytes(),
        }
    }

    #[test]
    fn an_answer_asked_for_before_a_forget_is_kept_stale() {
        let asked = NodeAddr {
            host: "127.0.0.1".into(),
            port: 7000,
        };
        let answer = || SlotMap::of_ranges(vec![range(0, 16383, "", 7000)], &asked);
        let mut map = SlotMap::default();
        assert!(map.layout().is_none(), "never asked");
        let early = map.forgotten;
        // Meanwhile another call found a key elsewhere than the layout it
        // used said, and forgot it.
        map.forgotten += 1;
        map.stale = true;
        map.answered(answer(), early);
        assert!(map.layout().is_none(), "the early answer may be stale");
        assert!(map.master_of(5).is_some(), "it still routes calls");
        let late = map.forgotten;
        map.answered(answer(), late);
        let layout = map.layout().unwrap();
        assert_eq!(layout.master_of(0), layout.master_of(16383));
        assert!(Arc::ptr_eq(&layout, &map.layout().unwrap()), "made once");
        map.moved(5, NodeAddr::of_redirect("127.0.0.3:7002", &asked).unwrap());
        let moved = map.layout().unwrap();
        assert_ne!(moved.master_of(5), moved.master_of(0), "a MOVED changes it");
    }

    #[test]
    fn the_map_follows_cluster_slots_and_each_moved() {
        let asked = NodeAddr {
            host: "127.0.0.1".into(),
            port: 7000,
        };
        let mut map = SlotMap::of_ranges(
            vec![
                range(0, 8191, "", 7000),
                range(8192, 16383, "127.0.0.2", 7001),
            ],
            &asked,
        );
        assert_eq!(
            map.master_of(5).map(|a| &**a),
            Some(&asked),
            "an empty host is the asked node's"
        );
        assert_eq!(map.master_of(16383).map(|a| a.port), Some(7001));
        map.moved(5, NodeAddr::of_redirect("127.0.0.3:7002", &asked).unwrap());
        assert_eq!(map.master_of(5).map(|a| a.port), Some(7002));
        assert_eq!(
            map.master_of(6).map(|a| &**a),
            Some(&asked),
            "only the moved slot changes"
        );
        let unserved = SlotMap::of_ranges(vec![range(0, 99, "h", 1)], &asked);
        assert_eq!(unserved.master_of(100), None);
    }
}

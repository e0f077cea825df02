//! The cluster path of the script runner: each call is its own command
//! (the cluster client retries a whole pipeline when one reply is a
//! redirect, which would run the others twice), all concurrently; a call
//! rides out a failover for the failover window, retrying what did not run
//! and, when a second run is harmless, what may have run; a call that
//! writes carries a request key, so that a second run answers as the
//! first (`lua/memo.lua`).

use redis::{Cmd, Value};

use super::{acked_of, Conn, Redis, WaitFor};
use crate::scripts::ScriptId;

/// Each call as its own command (or call + WAIT pipeline, routed by the
/// call's key), all concurrently, each riding out a failover for up to
/// `window`. Each try takes `redis`'s connection anew (a stuck one is
/// replaced, see `revive.rs`; a time-out starts that check, and the next
/// try waits for it), or always `own` (a durable send's connection).
pub(super) async fn cluster_each(
    redis: &Redis,
    own: Option<&Conn>,
    calls: &[(ScriptId, Cmd)],
    pending: &[usize],
    wait: Option<WaitFor>,
    window: std::time::Duration,
) -> Vec<(redis::RedisResult<Value>, Option<u32>)> {
    let deadline = tokio::time::Instant::now() + window;
    let futures = pending.iter().map(|&i| {
        let (id, cmd) = &calls[i];
        // A memoized call (its answer remembered under its request key)
        // and one whose second run is harmless may run again whatever
        // happened to the first try; any other only when the reply says it
        // did not run.
        let rerun_safe = id.memoized() || id.rerun_harmless();
        async move {
            // The client retries redirects and broken connections itself,
            // but in a burst that a failover can outlast.
            let mut pause = std::time::Duration::from_millis(50);
            loop {
                let mut conn = own.cloned().unwrap_or_else(|| redis.conn());
                let r = one_call(&mut conn, cmd, wait).await;
                // (A durable send's own connection is not watched.)
                let timed_out = own.is_none() && r.0.as_ref().is_err_and(|e| e.is_timeout());
                if timed_out {
                    redis.call_timed_out();
                }
                match &r.0 {
                    Err(e)
                        if retry_through_failover(e, rerun_safe)
                            && tokio::time::Instant::now() + pause < deadline =>
                    {
                        if timed_out {
                            redis.after_time_out().await;
                        }
                        tokio::time::sleep(pause).await;
                        pause = (pause * 2).min(std::time::Duration::from_millis(500));
                    }
                    _ => return r,
                }
            }
        }
    });
    futures::future::join_all(futures).await
}

/// Whether a cluster call that failed so may be tried again. Replies that
/// mean the call did not run (the slot is elsewhere or moving, the cluster
/// is electing a master, the node is loading or was demoted) always; a
/// broken connection or a time-out (the call may have run) only when a
/// second run is harmless.
pub(crate) fn retry_through_failover(e: &redis::RedisError, rerun_safe: bool) -> bool {
    let not_run = matches!(
        e.kind(),
        redis::ErrorKind::Server(
            redis::ServerErrorKind::Moved
                | redis::ServerErrorKind::Ask
                | redis::ServerErrorKind::TryAgain
                | redis::ServerErrorKind::ClusterDown
                | redis::ServerErrorKind::MasterDown
                | redis::ServerErrorKind::BusyLoading
                | redis::ServerErrorKind::ReadOnly
        ) | redis::ErrorKind::ClusterConnectionNotFound
    ) || e.is_connection_refusal();
    let maybe_run = e.is_io_error() || e.is_timeout() || e.is_connection_dropped();
    not_run || (rerun_safe && maybe_run)
}

/// A memoized script call with its request key added after its keys (a
/// slot script's KEYS[11], room.lua's KEYS[2]): `<base>:req:<ttl ms>.<random
/// id>`, where `<base>` is its first key up to the last colon (a slot's
/// `<slot base>:q`, a topic's `<topic base>:room`), so in the same hash tag.
pub(super) fn with_request_key(cmd: &Cmd, ttl_ms: u128) -> Cmd {
    super::with_keys_after_keys(cmd, |first| {
        let colon = first.iter().rposition(|&b| b == b':')?;
        let mut key = first[..colon].to_vec();
        key.extend_from_slice(format!(":req:{ttl_ms}.{:016x}", rand::random::<u64>()).as_bytes());
        Some([key])
    })
}

/// One call on a cluster connection (with WAIT after it when asked).
async fn one_call(
    conn: &mut Conn,
    cmd: &Cmd,
    wait: Option<WaitFor>,
) -> (redis::RedisResult<Value>, Option<u32>) {
    let Some(w) = wait else {
        return (cmd.query_async::<Value>(conn).await, None);
    };
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    pipe.add_command(cmd.clone());
    w.push(&mut pipe);
    let r: redis::RedisResult<Vec<redis::RedisResult<Value>>> = pipe.query_async(conn).await;
    match r {
        Err(e) => (Err(e), None),
        Ok(mut v) => {
            let acked = acked_of(v.pop());
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

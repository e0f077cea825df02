//! Durable sends on one node: the script calls of a pipeline, then one
//! `WAIT` (or `WAITAOF`) on the same connection that covers them all, and
//! how many replicas its reply says acknowledged them. (A cluster's
//! routing sends the same `WAIT` per master, `routing.rs`.)

use redis::{Cmd, Pipeline, Value};

use super::Conn;
use crate::error::Result;
use crate::scripts::ScriptId;

/// The longest WAIT timeout a durable send may ask for.
pub(crate) const MAX_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// What to ask of replicas after writes (durable sends).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WaitFor {
    pub(crate) replicas: u32,
    pub(crate) timeout_ms: u64,
    /// `WAITAOF 1 replicas timeout` instead of `WAIT replicas timeout`.
    pub(crate) aof: bool,
}

impl WaitFor {
    pub(super) fn push(&self, pipe: &mut Pipeline) {
        if self.aof {
            pipe.cmd("WAITAOF")
                .arg(1)
                .arg(self.replicas)
                .arg(self.timeout_ms);
        } else {
            pipe.cmd("WAIT").arg(self.replicas).arg(self.timeout_ms);
        }
    }
}

/// Replicas that have the write, from a WAIT reply (a count) or a WAITAOF
/// reply (local fsyncs, replica fsyncs: none count unless the local one
/// happened).
pub(super) fn acked_of(reply: Option<redis::RedisResult<Value>>) -> u32 {
    match reply {
        Some(Ok(Value::Int(n))) => u32::try_from(n).unwrap_or(0),
        Some(Ok(Value::Array(v))) => match v.as_slice() {
            [Value::Int(local), Value::Int(replicas)] if *local >= 1 => {
                u32::try_from(*replicas).unwrap_or(0)
            }
            _ => 0,
        },
        _ => 0,
    }
}

/// One pipeline: the calls, then one WAIT that covers all of them.
pub(super) async fn single_pipeline(
    mut conn: Conn,
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
        w.push(&mut pipe);
    }
    let mut results: Vec<redis::RedisResult<Value>> = pipe.query_async(&mut conn).await?;
    let acked = if wait.is_some() {
        Some(acked_of(results.pop()))
    } else {
        None
    };
    Ok(results.into_iter().map(|r| (r, acked)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_and_waitaof_replies_count_replicas() {
        assert_eq!(acked_of(Some(Ok(Value::Int(2)))), 2);
        assert_eq!(
            acked_of(Some(Ok(Value::Array(vec![Value::Int(1), Value::Int(1)])))),
            1
        );
        // Not fsynced locally: nothing counts.
        assert_eq!(
            acked_of(Some(Ok(Value::Array(vec![Value::Int(0), Value::Int(1)])))),
            0
        );
        assert_eq!(acked_of(None), 0);
        let mut pipe = redis::pipe();
        WaitFor {
            replicas: 1,
            timeout_ms: 50,
            aof: true,
        }
        .push(&mut pipe);
        let packed = String::from_utf8_lossy(&pipe.get_packed_pipeline()).into_owned();
        assert!(
            packed.contains("WAITAOF") && packed.contains("\r\n50\r\n"),
            "{packed}"
        );
    }
}

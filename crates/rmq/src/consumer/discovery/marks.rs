//! The marks waiter: how an idle parallel consumer on a single node hears
//! of new work without every other consumer hearing of it too.
//!
//! A pub/sub notice reaches every subscriber, so with N consumers each new
//! message brought N pops to its slot and N-1 of them came back empty (the
//! thundering herd). Instead, the scripts mark a slot whose head changed
//! in one ZSET per topic (`notify.lua`), and idle consumers wait on it
//! with `BZMPOP`, which Redis serves to one blocked client at a time: each
//! mark wakes one consumer. A busy consumer does not wait, so new work
//! goes to those with room. A pop that leaves work behind marks it again,
//! so a backlog draws in as many consumers as are idle.
//!
//! What could strand a mark, and what covers it:
//! - the consumer that took it stays busy: the fetch loop hands marks of
//!   due work back when it has had no room for [`HAND_BACK_AFTER`];
//! - it stops: it ends its own wait (a write to a key only it waits on, so
//!   that what it hands back cannot come back to it), then hands back all
//!   it holds;
//! - it dies, or the reply is lost with its connection: the work is in the
//!   head index, and every consumer's rescan (5 s by default) takes what is
//!   overdue there.

use std::sync::Arc;
use std::time::Duration;

use redis::Value;
use tokio_util::sync::CancellationToken;

use crate::conn::Target;
use crate::consumer::Shared;
use crate::topic::Topic;

/// How long one `BZMPOP` waits at most: an idle consumer asks again this
/// often (its only call besides the rescan).
const BLOCK: Duration = Duration::from_secs(2);

/// How long a consumer with no room keeps due work it took a mark for
/// before it hands the marks back to the others.
pub(crate) const HAND_BACK_AFTER: Duration = Duration::from_millis(50);

/// Marks handed back per call at most.
const HAND_BACK_CHUNK: usize = 1_000;

/// Waits on the topic's marks while the fetch loop has room (as many as
/// it has room for) and puts what it takes in the schedule, or hands it
/// straight back when the room was used up meanwhile. Once `cancel`
/// fires it ends its own wait, then hands back the work the consumer
/// knows of and did not take, so that another consumer takes it now
/// rather than at a rescan.
pub(crate) async fn wait(topic: Topic, shared: Arc<Shared>, cancel: CancellationToken) {
    let Target::Single(client) = topic.redis().target.clone() else {
        return;
    };
    let mut w = Waiter {
        marks: crate::keys::marks(topic.prefix(), topic.name()),
        wake: crate::keys::marks_wake(
            topic.prefix(),
            topic.name(),
            &format!("{:016x}", rand::random::<u64>()),
        ),
        topic,
        client,
        conn: None,
    };
    w.run(&shared, &cancel).await;
    let known = shared.lock().take_due(None);
    hand_back(&w.topic, &known).await;
}

/// The marks waiter's state: the keys it waits on and its own connection
/// (a blocked call holds a connection).
struct Waiter {
    topic: Topic,
    client: redis::Client,
    marks: String,
    /// This consumer's own key, waited on with the marks: a write there
    /// ends its wait, and no other consumer's.
    wake: String,
    conn: Option<redis::aio::MultiplexedConnection>,
}

impl Waiter {
    /// Waits on the marks until cancelled.
    async fn run(&mut self, shared: &Shared, cancel: &CancellationToken) {
        let mut want = shared.want_marks.subscribe();
        let mut backoff = Duration::from_millis(50);
        loop {
            let n = loop {
                let n = *want.borrow_and_update();
                if n > 0 {
                    break n;
                }
                tokio::select! {
                    r = want.changed() => if r.is_err() { return },
                    () = cancel.cancelled() => return,
                }
            };
            let reply = match self.take(n, cancel).await {
                Some(Ok(marks)) => marks,
                Some(Err(e)) => {
                    // A foreign key at the marks answers WRONGTYPE at once:
                    // the rescans still find the work, and the backoff
                    // keeps this from spinning.
                    tracing::debug!(topic = %self.topic.name(), "waiting on the marks failed: {e}");
                    self.conn = None;
                    if !pause(&mut backoff, cancel).await {
                        return;
                    }
                    continue;
                }
                None => return,
            };
            backoff = Duration::from_millis(50);
            if reply.is_empty() {
                continue;
            }
            let kept = {
                // Under the lock the fetch loop holds to give up its room
                // (see `Fetcher::wait_for_room`).
                let mut s = shared.lock();
                let kept = *want.borrow() > 0 && !cancel.is_cancelled();
                if kept {
                    for &(slot, v) in &reply {
                        s.marked(slot, v);
                    }
                }
                kept
            };
            if !kept {
                // The consumer ran out of room (or stopped) while this call
                // waited: the work goes to one that has some.
                hand_back(&self.topic, &reply).await;
                continue;
            }
            crate::observe::woken(self.topic.name());
            shared.notify.notify_one();
        }
    }

    /// One wait for up to `n` marks (at most [`BLOCK`]). None when
    /// cancelled: after ending its own wait, and handing back what that
    /// wait took.
    async fn take(
        &mut self,
        n: usize,
        cancel: &CancellationToken,
    ) -> Option<redis::RedisResult<Vec<(u32, i64)>>> {
        let conn = match self.conn.as_mut() {
            Some(c) => c,
            None => {
                let config = redis::AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(Duration::from_secs(5)))
                    .set_response_timeout(Some(BLOCK + self.topic.redis().response_timeout));
                let connect = self
                    .client
                    .get_multiplexed_async_connection_with_config(&config);
                let c = tokio::select! {
                    r = connect => r,
                    () = cancel.cancelled() => return None,
                };
                match c {
                    Ok(c) => self.conn.insert(c),
                    Err(e) => return Some(Err(e)),
                }
            }
        };
        let mut cmd = redis::cmd("BZMPOP");
        cmd.arg(BLOCK.as_secs_f64())
            .arg(2)
            .arg(&self.marks)
            .arg(&self.wake)
            .arg("MIN")
            .arg("COUNT")
            .arg(n);
        let call = cmd.query_async::<Value>(conn);
        tokio::pin!(call);
        let reply = tokio::select! {
            r = &mut call => return Some(r.map(|v| parse(v, &self.marks))),
            () = cancel.cancelled() => {
                // Stopped mid-wait: end the wait by a write to this
                // consumer's own key (a mark handed back now must not go to
                // this wait), and give back what it took.
                let mut wake = redis::cmd("ZADD");
                wake.arg(&self.wake).arg(0).arg("stop");
                let _ = self.topic.redis().query::<Value>(&wake).await;
                let limit = BLOCK + self.topic.redis().response_timeout;
                tokio::time::timeout(limit, call).await
            }
        };
        let mut clear = redis::cmd("ZREM");
        clear.arg(&self.wake).arg("stop");
        let _ = self.topic.redis().query::<Value>(&clear).await;
        if let Ok(Ok(v)) = reply {
            hand_back(&self.topic, &parse(v, &self.marks)).await;
        }
        None
    }
}

/// Sleeps for the backoff (doubling it, up to 2 s); false when cancelled.
async fn pause(backoff: &mut Duration, cancel: &CancellationToken) -> bool {
    tokio::select! {
        () = tokio::time::sleep(*backoff) => {}
        () = cancel.cancelled() => return false,
    }
    *backoff = (*backoff * 2).min(Duration::from_secs(2));
    true
}

/// A `BZMPOP` reply: nil (timed out) or `[key, [[slot, value], ...]]`
/// (values as strings in RESP2, doubles in RESP3). Only entries of `marks`
/// count (not the consumer's own wake-up key), and only slot numbers.
fn parse(v: Value, marks: &str) -> Vec<(u32, i64)> {
    let Value::Array(mut top) = v else {
        return Vec::new();
    };
    let Some(Value::Array(entries)) = top.pop() else {
        return Vec::new();
    };
    if top.pop().and_then(text).as_deref() != Some(marks) {
        return Vec::new();
    }
    entries
        .into_iter()
        .filter_map(|e| match e {
            Value::Array(pair) => {
                let mut it = pair.into_iter();
                let slot = text(it.next()?)?.parse().ok()?;
                let score = match it.next()? {
                    Value::Double(d) => d,
                    other => text(other)?.parse().ok()?,
                };
                score.is_finite().then_some((slot, score as i64))
            }
            _ => None,
        })
        .collect()
}

fn text(v: Value) -> Option<String> {
    match v {
        Value::BulkString(b) => String::from_utf8(b).ok(),
        Value::SimpleString(s) => Some(s),
        Value::Int(i) => Some(i.to_string()),
        _ => None,
    }
}

/// Gives marks back to the topic (`ZADD LT`: a mark already there that is
/// earlier stays), so that another consumer takes the work. Best effort: a
/// mark that cannot be given back is found by the rescans.
pub(crate) async fn hand_back(topic: &Topic, marks: &[(u32, i64)]) {
    if marks.is_empty() {
        return;
    }
    let key = crate::keys::marks(topic.prefix(), topic.name());
    for chunk in marks.chunks(HAND_BACK_CHUNK) {
        let mut cmd = redis::cmd("ZADD");
        cmd.arg(&key).arg("LT");
        for &(slot, v) in chunk {
            cmd.arg(v).arg(slot);
        }
        if let Err(e) = topic.redis().query::<Value>(&cmd).await {
            tracing::debug!(topic = %topic.name(), "handing marks back failed: {e}");
            return;
        }
    }
    crate::observe::marks_handed_back(topic.name(), marks.len());
}

#[cfg(test)]
mod tests {
    use super::parse;
    use redis::Value;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn replies_parse_in_both_protocols() {
        assert!(parse(Value::Nil, "k").is_empty());
        let resp2 = Value::Array(vec![
            bulk("k"),
            Value::Array(vec![
                Value::Array(vec![bulk("3"), bulk("-42949672960")]),
                Value::Array(vec![bulk("7"), bulk("1700000000000")]),
                Value::Array(vec![bulk("x"), bulk("1")]),
            ]),
        ]);
        assert!(parse(resp2.clone(), "wake").is_empty(), "not marks");
        assert_eq!(
            parse(resp2, "k"),
            vec![(3, -42_949_672_960), (7, 1_700_000_000_000)]
        );
        let resp3 = Value::Array(vec![
            bulk("k"),
            Value::Array(vec![Value::Array(vec![bulk("5"), Value::Double(12.0)])]),
        ]);
        assert_eq!(parse(resp3, "k"), vec![(5, 12)]);
    }
}

//! Phase one: the fetch loop takes due messages into flight.
//!
//! It holds one semaphore permit per delivery it hands out (so a consumer
//! never has more than its limit in flight), picks the ready slots from the
//! schedule, pops them in one pipeline and sleeps, when nothing is ready,
//! until the earliest known due time, a wake-up notice or the next rescan.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, Semaphore};
use tokio_util::sync::CancellationToken;

use super::delivery::Delivery;
use super::settler::Settler;
use super::Shared;
use crate::message::Received;
use crate::scripts::{self, ScriptId};
use crate::topic::{Topic, TopicKind};
use crate::value::{as_int, bytes_at, int_at, items};

pub(crate) struct FetchConfig {
    pub(crate) batch: usize,
    pub(crate) concurrency: usize,
    pub(crate) rescan: Duration,
}

/// How long a busy consumer waits to fill half a batch.
const GATHER: Duration = Duration::from_millis(1);
/// Slots popped per round at most (time-based topics).
const FANOUT: usize = 8;
/// Slots looked at per pipeline in a survey.
const SURVEY_CHUNK: usize = 256;

/// A pop call taking up to `count` messages of `slot` (0: only look).
pub(crate) fn pop_call(topic: &Topic, slot: u32, count: usize) -> (ScriptId, redis::Cmd) {
    let spec = topic.spec();
    let count = count.to_string();
    let lease = spec.lease_ms.to_string();
    let max_attempts = spec.max_attempts.to_string();
    let backoff = spec.backoff_ms.to_string();
    let backoff_max = spec.backoff_max_ms.to_string();
    let jitter = rand::random::<f64>().to_string();
    let dead_max = spec.dead_letters_per_slot.to_string();
    let slot_s = slot.to_string();
    let args: [&[u8]; 10] = [
        spec.kind.code().as_bytes(),
        count.as_bytes(),
        lease.as_bytes(),
        max_attempts.as_bytes(),
        backoff.as_bytes(),
        backoff_max.as_bytes(),
        jitter.as_bytes(),
        topic.channel.as_bytes(),
        slot_s.as_bytes(),
        dead_max.as_bytes(),
    ];
    (
        ScriptId::Pop,
        scripts::call(ScriptId::Pop, &topic.slot_keys(slot), &args),
    )
}

pub(crate) async fn fetch_loop(
    topic: Topic,
    shared: Arc<Shared>,
    settler: Settler,
    permits: Arc<Semaphore>,
    tx: mpsc::Sender<Delivery>,
    cfg: FetchConfig,
    cancel: CancellationToken,
) {
    let spec = topic.spec().clone();
    let mut last_rescan = Instant::now();
    let mut error_backoff = Duration::from_millis(50);
    loop {
        let first = tokio::select! {
            p = permits.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => return },
            _ = cancel.cancelled() => return,
        };
        let mut held = vec![first];
        while held.len() < cfg.batch {
            match permits.clone().try_acquire_owned() {
                Ok(p) => held.push(p),
                Err(_) => break,
            }
        }
        // Under load (other deliveries still running), wait up to a
        // millisecond for half a batch: fewer, fuller round trips.
        let target = (cfg.batch / 2).max(1);
        if held.len() < target && permits.available_permits() + held.len() < cfg.concurrency {
            let deadline = tokio::time::Instant::now() + GATHER;
            while held.len() < target {
                tokio::select! {
                    p = permits.clone().acquire_owned() => match p { Ok(p) => held.push(p), Err(_) => return },
                    _ = tokio::time::sleep_until(deadline) => break,
                    _ = cancel.cancelled() => return,
                }
            }
        }
        // Wait for a slot with work.
        let slots = 'wait: loop {
            if cancel.is_cancelled() {
                return;
            }
            if last_rescan.elapsed() >= cfg.rescan {
                shared.lock().mark_all();
                last_rescan = Instant::now();
            }
            let unknown = shared.lock().unknown();
            if !unknown.is_empty() {
                // Look before taking, so the first choice is already the best slot.
                for chunk in unknown.chunks(SURVEY_CHUNK) {
                    let calls = chunk
                        .iter()
                        .map(|&slot| pop_call(&topic, slot, 0))
                        .collect();
                    match topic.redis().run(calls).await {
                        Ok(replies) => {
                            for (&slot, r) in chunk.iter().zip(replies) {
                                let mut s = shared.lock();
                                match r {
                                    Ok(v) => {
                                        let a = items(v);
                                        let now = int_at(&a, 0).unwrap_or(0);
                                        s.observe_server_time(now);
                                        let opt = |i: usize| a.get(i).and_then(as_int);
                                        s.after_pop(slot, opt(1), opt(2), opt(3), now);
                                    }
                                    Err(e) => {
                                        tracing::error!(topic = %spec.name, slot, "looking at a slot failed: {e}");
                                        let now = s.server_now();
                                        s.after_pop(slot, None, None, Some(now + 1_000), now);
                                    }
                                }
                            }
                        }
                        Err(e) => {
                            tracing::warn!(topic = %spec.name, "looking at slots failed, will retry: {e}");
                            tokio::select! {
                                _ = tokio::time::sleep(error_backoff) => {}
                                _ = cancel.cancelled() => return,
                            }
                            error_backoff = (error_backoff * 2).min(Duration::from_secs(2));
                            continue 'wait;
                        }
                    }
                }
            }
            let fanout = if spec.kind == TopicKind::Priority {
                1
            } else {
                FANOUT
            };
            let (ready, wait) = {
                let s = shared.lock();
                (s.ready(fanout), s.ms_until_next())
            };
            if !ready.is_empty() {
                break ready;
            }
            if !shared.lock().unknown().is_empty() {
                continue;
            }
            let until_rescan = cfg.rescan.saturating_sub(last_rescan.elapsed());
            let sleep = wait
                .map(|ms| Duration::from_millis(u64::try_from(ms).unwrap_or(0)))
                .unwrap_or(until_rescan)
                .min(until_rescan);
            tokio::select! {
                _ = shared.notify.notified() => {}
                _ = tokio::time::sleep(sleep) => {}
                _ = cancel.cancelled() => return,
            }
        };
        // Share the capacity among the slots, best first.
        let cap = held.len();
        let n = slots.len().min(cap);
        let kind = spec.kind.code().as_bytes();
        let lease = spec.lease_ms.to_string();
        let max_attempts = spec.max_attempts.to_string();
        let backoff = spec.backoff_ms.to_string();
        let backoff_max = spec.backoff_max_ms.to_string();
        let jitter = rand::random::<f64>().to_string();
        let dead_max = spec.dead_letters_per_slot.to_string();
        let mut calls = Vec::with_capacity(n);
        for (i, &slot) in slots.iter().take(n).enumerate() {
            let count = (cap / n + usize::from(i < cap % n)).to_string();
            let slot_s = slot.to_string();
            let args: [&[u8]; 10] = [
                kind,
                count.as_bytes(),
                lease.as_bytes(),
                max_attempts.as_bytes(),
                backoff.as_bytes(),
                backoff_max.as_bytes(),
                jitter.as_bytes(),
                topic.channel.as_bytes(),
                slot_s.as_bytes(),
                dead_max.as_bytes(),
            ];
            calls.push((
                ScriptId::Pop,
                scripts::call(ScriptId::Pop, &topic.slot_keys(slot), &args),
            ));
        }
        let replies = match topic.redis().run(calls).await {
            Ok(r) => {
                error_backoff = Duration::from_millis(50);
                r
            }
            Err(e) => {
                tracing::warn!(topic = %spec.name, "taking messages failed, will retry: {e}");
                drop(held);
                tokio::select! {
                    _ = tokio::time::sleep(error_backoff) => {}
                    _ = cancel.cancelled() => return,
                }
                error_backoff = (error_backoff * 2).min(Duration::from_secs(2));
                shared.lock().mark_all();
                continue;
            }
        };
        let mut out = Vec::new();
        for (&slot, reply) in slots.iter().zip(replies) {
            let a = match reply {
                Ok(v) => items(v),
                Err(e) => {
                    tracing::error!(topic = %spec.name, slot, "taking messages failed: {e}");
                    let mut s = shared.lock();
                    let now = s.server_now();
                    s.after_pop(slot, None, None, Some(now + 1_000), now);
                    continue;
                }
            };
            let popped = parse_pop(&spec, slot, a);
            {
                let mut s = shared.lock();
                s.observe_server_time(popped.now);
                s.after_pop(slot, popped.head, popped.retry, popped.lease, popped.now);
            }
            out.extend(popped.messages);
        }
        for msg in out {
            let permit = held.pop();
            let d = Delivery::new(msg, settler.clone(), permit);
            if let Err(mpsc::error::SendError(d)) = tx.send(d).await {
                let _ = d.release().await;
            }
        }
    }
}

/// A pop reply, decoded.
pub(crate) struct Popped {
    pub(crate) now: i64,
    pub(crate) head: Option<i64>,
    pub(crate) retry: Option<i64>,
    pub(crate) lease: Option<i64>,
    pub(crate) messages: Vec<Received>,
}

pub(crate) fn parse_pop(spec: &crate::topic::TopicSpec, slot: u32, a: Vec<redis::Value>) -> Popped {
    let now = int_at(&a, 0).unwrap_or(0);
    let opt = |i: usize| a.get(i).and_then(as_int);
    let mut messages = Vec::new();
    let mut i = 5;
    while i + 4 < a.len() {
        let score = int_at(&a, i + 3).unwrap_or(0);
        let (priority, due_ms) = Received::score_fields(spec.kind, score);
        messages.push(Received {
            topic: spec.name.clone(),
            kind: spec.kind,
            key: bytes_at(&a, i).unwrap_or_default(),
            payload: bytes_at(&a, i + 1).unwrap_or_default(),
            slot,
            attempt: u32::try_from(int_at(&a, i + 2).unwrap_or(1)).unwrap_or(u32::MAX),
            priority,
            due_ms,
            token: u64::try_from(int_at(&a, i + 4).unwrap_or(0)).unwrap_or(0),
            taken_ms: now,
        });
        i += 5;
    }
    Popped {
        now,
        head: opt(1),
        retry: opt(2),
        lease: opt(3),
        messages,
    }
}

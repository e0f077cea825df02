//! The settling task: it drains what queued up (settles, permit frees),
//! groups the settles by slot, sends one script call per slot in one
//! pipeline, answers each request on its own, then frees the permits of
//! the deliveries that ended (and gives a bounded topic its room back).

use super::*;
use crate::scripts::ScriptId;
use redis::Cmd;

pub(super) async fn run(me: WeakSettler, mut rx: mpsc::UnboundedReceiver<Job>) {
    let (topic, permits) = (me.topic.clone(), me.permits.clone());
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        // Drain what is queued; while the batch is small, let the tasks that
        // are about to settle run first (no timer: a few scheduler turns).
        for turn in 0..=GATHER_TURNS {
            while batch.len() < MAX_DRAIN {
                match rx.try_recv() {
                    Ok(r) => batch.push(r),
                    Err(_) => break,
                }
            }
            if turn == GATHER_TURNS || batch.len() >= FULL_ENOUGH {
                break;
            }
            tokio::task::yield_now().await;
        }
        let jobs = batch.len();
        let mut settles = Vec::with_capacity(batch.len());
        let mut tokens = Vec::new();
        for job in batch {
            match job {
                Job::Settle(r) => settles.push(r),
                Job::Free(t) => tokens.extend(t),
            }
        }
        let mut ended = 0;
        if !settles.is_empty() {
            ended = flush(&me, settles).await;
        }
        free(&topic, &permits, tokens, ended).await;
        me.load.queued.fetch_sub(jobs, Ordering::AcqRel);
    }
}

/// Frees permits and gives back room in one round trip (both keys live on
/// slot 0's hash tag). A lost free only holds the permits until their
/// deadline, a lost give-back keeps the room until the next recount: each
/// lowers a bound for a while, never raises it.
async fn free(topic: &Topic, permits: &Permits, tokens: Vec<String>, ended: u64) {
    let mut calls = Vec::new();
    if !tokens.is_empty() {
        calls.push(inflight::free(
            permits.keys(),
            &topic.channel_for(0),
            &tokens,
        ));
    }
    if ended > 0 && topic.cached().spec.max_pending > 0 {
        calls.push(room::give(
            &keys::room_keys(topic.prefix(), topic.name()),
            ended,
        ));
    }
    if calls.is_empty() {
        return;
    }
    let failed = match topic.redis().run(calls).await {
        Ok(replies) => replies.into_iter().find_map(Result::err),
        Err(e) => Some(e),
    };
    if let Some(e) = failed {
        tracing::debug!(topic = %topic.name(), "freeing in-flight permits or room failed (permits run out at their deadline): {e}");
    }
}

/// Whether a settle's outcome ended its message (and so gives back a unit
/// of a bounded topic's room): an ack that took, a dead letter, a message
/// superseded by its duplicate, or one cancelled in flight. A nack that
/// retries, an extension and a plain release keep the message.
fn ends_message(op: &Op, outcome: &Result<Settled>) -> bool {
    match outcome {
        Ok(Settled::Done) => matches!(op, Op::Ack),
        Ok(Settled::Dead | Settled::Superseded | Settled::Cancelled) => true,
        Err(_) => false,
    }
}

/// One call's settles (with the room and claims their ends handed on:
/// used by what the call takes, given back when it failed, else dropped
/// once it answered), and whether it takes.
struct Group {
    slot: u32,
    requests: Vec<Request>,
    /// The notice generation when it was sent, when the call takes.
    taking_since: Option<u64>,
}

/// Sends the settles, one call per slot and fence, all in one pipeline
/// (a call that may take takes one message per ending delivery that handed
/// on its room), hands out what they took; returns how many messages they
/// ended (and expired leases their takes rolled back that ended theirs).
pub(super) async fn flush(me: &WeakSettler, batch: Vec<Request>) -> u64 {
    let topic = &me.topic;
    let (calls, groups) = calls_of(me, batch);
    let span =
        crate::observe::settle_span(topic.name(), groups.iter().map(|g| g.requests.len()).sum());
    let replies = {
        use tracing::Instrument;
        topic.redis().run(calls).instrument(span).await
    };
    let mut ended = 0;
    match replies {
        Ok(replies) => {
            for (reply, group) in replies.into_iter().zip(groups) {
                match reply {
                    Ok(v) => ended += answer(me, group, v),
                    Err(e) => reply_all(group.requests, &e),
                }
            }
        }
        Err(e) => {
            tracing::warn!("settling failed: {e}");
            for g in groups {
                reply_all(g.requests, &e);
            }
        }
    }
    ended
}

/// The script calls for a batch of settles: one per slot and fence
/// (serial deliveries carry their lease epoch), split every [`PER_CALL`]
/// operations, each taking when its ends handed on room and the chain
/// lets it take from the slot now.
fn calls_of(me: &WeakSettler, batch: Vec<Request>) -> (Vec<(ScriptId, Cmd)>, Vec<Group>) {
    let topic = &me.topic;
    let mut by_slot: BTreeMap<(u32, Option<FenceKey>), Vec<Request>> = BTreeMap::new();
    for r in batch {
        let f = r.fence.as_ref().map(|f| (f.owner.clone(), f.epoch));
        by_slot.entry((r.slot, f)).or_default().push(r);
    }
    let mut calls = Vec::new();
    let mut groups: Vec<Group> = Vec::new();
    for ((slot, fence), mut reqs) in by_slot {
        let keys = topic.slot_keys_kept(slot);
        let channel = topic.channel_for(slot);
        let settings = topic.cached();
        while !reqs.is_empty() {
            let rest = reqs.split_off(reqs.len().min(PER_CALL));
            let chunk = std::mem::replace(&mut reqs, rest);
            let takers = chunk.iter().filter(|r| r.take.is_some()).count();
            let taking_since = me
                .chain
                .as_ref()
                .filter(|c| takers > 0 && c.may_take_from(topic, slot, fence.as_ref().map(|f| f.1)))
                .map(|c| c.generation());
            calls.push(
                SettleRequest {
                    keys: &keys[..],
                    topic: &settings.args,
                    channel: &channel,
                    slot,
                    fence: fence.as_ref().map(|(owner, epoch)| (&**owner, *epoch)),
                    ops: chunk.iter().map(|r| (r.id.as_slice(), &r.op)).collect(),
                    take: taking_since.map(|_| takers),
                }
                .call(),
            );
            groups.push(Group {
                slot,
                requests: chunk,
                taking_since,
            });
        }
    }
    (calls, groups)
}

/// Hands out what one call took, then tells each settle its outcome (with
/// the delivery taken for it, when it asked for it back); returns how many
/// messages the call ended (see [`flush`]).
fn answer(me: &WeakSettler, group: Group, reply: redis::Value) -> u64 {
    let Group {
        slot,
        mut requests,
        taking_since,
    } = group;
    let n = requests.len();
    let mut nexts = Vec::new();
    let (outcomes, mut ended) = match (taking_since, &me.chain) {
        (Some(since), Some(chain)) => {
            let answer = settle::taken_outcomes(reply, n);
            if let Some((marked, v)) = answer.mark {
                chain.marked(&me.topic, marked, v);
            }
            let takers = requests
                .iter_mut()
                .enumerate()
                .filter_map(|(i, r)| r.take.take().map(|t| (i, t)))
                .collect();
            let (rolled_back, back) = chain.hand_out(me, slot, since, answer.taken, takers);
            nexts = back;
            (answer.settled, rolled_back)
        }
        _ => (settle::outcomes(reply, n), 0),
    };
    let mut nexts = nexts.into_iter().peekable();
    for (i, (mut r, res)) in requests.into_iter().zip(outcomes).enumerate() {
        ended += u64::from(ends_message(&r.op, &res));
        // Not used by the call: dropped once it answered.
        drop(r.take.take());
        let next = Next(nexts.next_if(|(at, _)| *at == i).map(|(_, d)| d));
        let answer = Answer {
            outcome: res,
            taker: None,
            next,
        };
        // A detached settle never asks for what its call takes; should
        // one, it goes back untouched as the answer drops.
        if let Some(tx) = r.reply {
            answer.send(tx);
        }
    }
    ended
}

/// The call failed: each settle hears so, and gets its taker back.
fn reply_all(group: Vec<Request>, e: &Error) {
    for r in group {
        if let Some(tx) = r.reply {
            Answer::failed(e.duplicate(), r.take).send(tx);
        }
    }
}

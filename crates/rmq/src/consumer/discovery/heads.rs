//! Looking at a topic through its head index (`scripts/lua/notify.lua`;
//! on a cluster one per hash tag, read in a call per master): at start, after a reconnection and at every
//! rescan, one read tells the consumer which slots have work and when,
//! whatever the slot count, instead of one look per slot. A few slots are
//! looked at directly with each read, in turn (the sweep), so that an
//! entry the index lacks (a slot written by an older rmq, say) is still
//! found.
//!
//! A topic defined before the index existed has no complete index: its
//! first parallel consumer looks at every slot once (each look writes the
//! slot's entry), then marks the index complete.

use crate::consumer::discovery::pop::{parse_pop, pop_call};
use crate::consumer::Shared;
use crate::scripts::heads::{Heads, IndexOp};
use crate::topic::index::{self, index_calls, Reach};
use crate::topic::Topic;

/// Index entries read at most per call: all others sort after them.
const READ_LIMIT: usize = 10_000;
/// Slots looked at directly with each read of the index.
pub(crate) const SWEEP: usize = 4;
/// The same for a parallel consumer on a cluster, which sweeps only its
/// own slots (`affinity.rs`): a read already costs a call per master, and
/// with its heartbeat an idle consumer stays under 2 calls a second.
pub(crate) const SWEEP_WITH_AFFINITY: usize = 2;

/// What a look through the index came to.
pub(crate) enum Looked {
    /// Every slot is known now.
    Done,
    /// The index is not complete (yet): look at every slot instead.
    Incomplete,
    /// Redis could not be reached.
    Failed,
}

/// Reads the index (up to [`READ_LIMIT`] entries; on a cluster, one read
/// per master of the indexes `reach` needs) and looks at `sweep` directly,
/// in one round trip, and records what both say as of notice generation
/// `since` (read by the caller before it chose `reach`): every slot
/// becomes known, and one the read did not reach as holding nothing, so a
/// serial member reaches every slot it owns (one it owns later is woken
/// when it does, after `since`).
pub(crate) async fn look(
    topic: &Topic,
    shared: &Shared,
    reach: Reach<'_>,
    sweep: &[u32],
    since: u64,
) -> Looked {
    let redis = topic.redis();
    let mut calls = match index_calls(
        redis,
        topic.prefix(),
        topic.name(),
        topic.spec.slots,
        reach,
        IndexOp::Read(READ_LIMIT),
    )
    .await
    {
        Ok(calls) => calls,
        Err(e) => {
            tracing::debug!(topic = %topic.name(), "the head index cannot be read as a whole, looking at every slot: {e}");
            return Looked::Incomplete;
        }
    };
    let reads = calls.len();
    let args = topic.cached().args.clone();
    calls.extend(
        sweep
            .iter()
            .map(|&slot| pop_call(topic, &args, slot, 0, None)),
    );
    let mut replies = match redis.run(calls).await {
        Ok(r) => r.into_iter(),
        Err(e) => {
            tracing::warn!(topic = %topic.name(), "reading the head index failed, will retry: {e}");
            return Looked::Failed;
        }
    };
    let read = merged_reads(topic, replies.by_ref().take(reads));
    let Some(read) = read.filter(|r| r.complete) else {
        return Looked::Incomplete;
    };
    let mut s = shared.lock();
    s.apply_index(&read.entries, read.more, since);
    for (&slot, reply) in sweep.iter().zip(replies) {
        if let Ok(v) = reply {
            let p = parse_pop(&topic.spec, slot, v);
            topic.give_back_room_later(p.ended);
            s.observe_server_time(p.now);
            s.after_pop(slot, since, p.head, p.retry, p.lease, p.now);
        }
    }
    Looked::Done
}

/// The index reads' replies merged into one reading (None: one is
/// unreadable). On a cluster, a read that found an index elsewhere than
/// the layout said makes the layout be asked for again next time.
fn merged_reads(
    topic: &Topic,
    replies: impl Iterator<Item = crate::Result<redis::Value>>,
) -> Option<Heads> {
    let read: Option<Vec<Heads>> = replies
        .map(|reply| match reply {
            Ok(v) => Heads::parse(v),
            Err(e) => {
                tracing::warn!(topic = %topic.name(), "the head index is unreadable, looking at every slot: {e}");
                None
            }
        })
        .collect();
    let read = read.map(Heads::merged);
    if read.as_ref().is_none_or(|r| r.unreached) {
        topic.redis().forget_layout();
    }
    read
}

/// Notes the index complete, after every slot was looked at (each look
/// wrote its slot's entry).
pub(crate) async fn mark_complete(topic: &Topic) {
    let marked = index::mark_complete(
        topic.redis(),
        topic.prefix(),
        topic.name(),
        topic.spec.slots,
    );
    if let Err(e) = marked.await {
        tracing::debug!(topic = %topic.name(), "marking the head index complete failed: {e}");
    }
}

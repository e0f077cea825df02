//! One taking round of the on-demand engine: where work is due (one
//! reading over the slots), then up to `want` messages from those slots,
//! spread evenly over them in one pipeline (a slot that gave all it was
//! asked may hold more: a second pass asks those for the rest), under the
//! topic's rate limit and in-flight cap as any consumer meets them.

use super::super::delivery::Delivery;
use super::super::inflight::Taken;
use super::super::pop::{self, Popped};
use super::super::rate;
use super::super::settler::Settler;
use crate::error::Result;
use crate::topic::{Topic, TopicKind};

/// Passes over the slots per round at most.
const PASSES: usize = 4;
/// Messages per pop call at most (the pop script's own limit).
const PER_CALL: usize = 1_000;

/// What a round took, and when more work falls due.
pub(super) struct Round {
    pub(super) deliveries: Vec<Delivery>,
    /// The server's time of the reading (ms).
    pub(super) now: i64,
    /// When the first work not taken falls due (server ms), as far as this
    /// round saw: a time-based message, a retry, a lease that runs out.
    pub(super) next_ms: Option<i64>,
}

/// Takes up to `want` due messages with leases of `lease_ms`; `start`
/// turns which slots come first when there are more slots than messages
/// wanted, so that no slot waits behind the others round after round.
pub(super) async fn take(
    topic: &Topic,
    settler: &Settler,
    want: usize,
    lease_ms: u64,
    start: usize,
) -> Result<Round> {
    let settings = topic.settings().await?;
    let work = topic.work_due(settings.spec.dead_letter_ttl_ms).await?;
    let mut round = Round {
        deliveries: Vec::new(),
        now: work.now,
        next_ms: work.next_ms,
    };
    if work.slots.is_empty() || want == 0 {
        return Ok(round);
    }
    let rated = rate::take(topic, want).await?.tokens;
    let (max, mut permits) = match settler.permits().take(topic, rated, lease_ms).await {
        Ok(Taken::Uncapped) => (rated, None),
        Ok(Taken::Granted(t)) => (t.len(), Some(t)),
        Ok(Taken::Refused { .. }) => (0, Some(Vec::new())),
        Err(e) => {
            rate::give_back(topic, rated);
            return Err(e);
        }
    };
    let mut args = (*settings.args).clone();
    args.lease = lease_ms.to_string();
    let mut slots = work.slots;
    let turn = start % slots.len();
    slots.rotate_left(turn);
    for _ in 0..PASSES {
        let left = max - round.deliveries.len();
        if left == 0 || slots.is_empty() {
            break;
        }
        let asks = spread(left, &slots);
        let calls = asks
            .iter()
            .map(|&(slot, n)| pop::pop_call(topic, &args, slot, n, None))
            .collect();
        let replies = match topic.redis().run(calls).await {
            Ok(r) => r,
            Err(e) => {
                for d in round.deliveries {
                    d.release_detached();
                }
                rate::give_back(topic, rated);
                settler.free_permits(permits.unwrap_or_default());
                return Err(e);
            }
        };
        // Slots asked nothing this pass (fewer wanted than slots: the last
        // ones, see `spread`) may still give next pass, as may those that
        // gave all they were asked.
        let unasked = slots.split_off(asks.len().min(slots.len()));
        let mut again = Vec::new();
        for (&(slot, asked), reply) in asks.iter().zip(replies) {
            let popped = match reply {
                Ok(v) => pop::parse_pop(&topic.spec, slot, v),
                Err(e) => {
                    tracing::warn!(topic = %topic.name(), slot, "taking from a slot failed: {e}");
                    continue;
                }
            };
            topic.give_back_room_later(popped.ended);
            let got = popped.messages.len();
            if got == asked {
                again.push(slot);
            } else {
                round.next_ms = earliest(round.next_ms, next_of(topic.spec.kind, &popped));
            }
            round
                .deliveries
                .extend(popped.messages.into_iter().map(|m| {
                    let permit = permits.as_mut().and_then(Vec::pop);
                    Delivery::new(m, settler.clone(), None, None).with_cap_permit(permit)
                }));
        }
        again.extend(unasked);
        slots = again;
    }
    rate::give_back(topic, rated - round.deliveries.len());
    settler.free_permits(permits.unwrap_or_default());
    Ok(round)
}

/// `n` messages asked of `slots` as evenly as can be (the first slots get
/// one more when it does not divide); slots asked nothing (the last ones,
/// when `n` is below the number of slots) are left out.
fn spread(n: usize, slots: &[u32]) -> Vec<(u32, usize)> {
    let (each, extra) = (n / slots.len(), n % slots.len());
    slots
        .iter()
        .enumerate()
        .map(|(i, &s)| (s, (each + usize::from(i < extra)).min(PER_CALL)))
        .filter(|&(_, k)| k > 0)
        .collect()
}

/// When a slot that gave less than asked has work again: its next retry,
/// its first lease deadline, and (time-based kinds) its head's due time.
fn next_of(kind: TopicKind, p: &Popped) -> Option<i64> {
    let head = if kind == TopicKind::Priority {
        None
    } else {
        p.head.filter(|&h| h > p.now)
    };
    [head, p.retry, p.lease].into_iter().flatten().min()
}

fn earliest(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_asks_each_slot_its_share_and_never_more_than_wanted() {
        assert_eq!(spread(10, &[4, 5, 6]), vec![(4, 4), (5, 3), (6, 3)]);
        assert_eq!(spread(2, &[4, 5, 6]), vec![(4, 1), (5, 1)]);
        assert_eq!(spread(5_000, &[1, 2]), vec![(1, 1_000), (2, 1_000)]);
        for n in 0..50 {
            let asked: usize = spread(n, &[0, 1, 2, 3, 4, 5, 6]).iter().map(|a| a.1).sum();
            assert_eq!(asked, n);
        }
    }
}

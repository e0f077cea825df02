//! One taking round of the on-demand engine: where work is due (one
//! reading over the slots), then up to `want` messages from those slots,
//! spread evenly over them in one pipeline (a slot that gave all it was
//! asked may hold more: a second pass asks those for the rest), under the
//! topic's rate limit and in-flight cap as any consumer meets them.

use crate::consumer::discovery::pop::{self, Popped};
use crate::consumer::flow::inflight::Taken;
use crate::consumer::flow::rate;
use crate::consumer::life::delivery::settler::Settler;
use crate::consumer::life::delivery::Delivery;
use crate::error::Result;
use crate::scripts::TopicArgs;
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
    let mut metered = Metered::take(topic, settler, want, lease_ms).await?;
    let mut args = (*settings.args).clone();
    args.lease = lease_ms.to_string();
    let mut slots = work.slots;
    let turn = start % slots.len();
    slots.rotate_left(turn);
    for _ in 0..PASSES {
        let left = metered.max - round.deliveries.len();
        if left == 0 || slots.is_empty() {
            break;
        }
        let pass = Pass {
            topic,
            settler,
            args: &args,
        };
        match pass
            .run(slots, left, &mut metered.permits, &mut round)
            .await
        {
            Ok(again) => slots = again,
            Err(e) => {
                for d in round.deliveries {
                    d.release_detached();
                }
                metered.give_back(topic, settler, 0);
                return Err(e);
            }
        }
    }
    metered.give_back(topic, settler, round.deliveries.len());
    Ok(round)
}

/// What the topic's rate limit and in-flight cap let a round take.
struct Metered {
    /// Tokens the rate limit gave (all wanted when it has none).
    rated: usize,
    /// Messages the round may take at most.
    max: usize,
    /// In-flight cap permits granted, one per message taken (None:
    /// uncapped).
    permits: Option<Vec<String>>,
}

impl Metered {
    async fn take(topic: &Topic, settler: &Settler, want: usize, lease_ms: u64) -> Result<Metered> {
        let rated = rate::take(topic, want).await?.tokens;
        let (max, permits) = match settler.permits().take(topic, rated, lease_ms).await {
            Ok(Taken::Uncapped) => (rated, None),
            Ok(Taken::Granted(t)) => (t.len(), Some(t)),
            Ok(Taken::Refused { .. }) => (0, Some(Vec::new())),
            Err(e) => {
                rate::give_back(topic, rated);
                return Err(e);
            }
        };
        Ok(Metered {
            rated,
            max,
            permits,
        })
    }

    /// Gives back the tokens and permits of messages not taken (`used`
    /// were).
    fn give_back(self, topic: &Topic, settler: &Settler, used: usize) {
        rate::give_back(topic, self.rated - used);
        settler.free_permits(self.permits.unwrap_or_default());
    }
}

/// One pass over the slots: what they are asked, in one pipeline.
struct Pass<'a> {
    topic: &'a Topic,
    settler: &'a Settler,
    args: &'a TopicArgs,
}

impl Pass<'_> {
    /// Asks `slots` for `left` messages spread over them, adds what they
    /// gave to `round` (each with one of `permits`), and returns the slots
    /// that may give more next pass.
    async fn run(
        &self,
        mut slots: Vec<u32>,
        left: usize,
        permits: &mut Option<Vec<String>>,
        round: &mut Round,
    ) -> Result<Vec<u32>> {
        let topic = self.topic;
        let asks = spread(left, &slots);
        let calls = asks
            .iter()
            .map(|&(slot, n)| pop::pop_call(topic, self.args, slot, n, None))
            .collect();
        let replies = topic.redis().run(calls).await?;
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
            if popped.messages.len() == asked {
                again.push(slot);
            } else {
                round.next_ms = earliest(round.next_ms, next_of(topic.spec.kind, &popped));
            }
            round
                .deliveries
                .extend(popped.messages.into_iter().map(|m| {
                    let permit = permits.as_mut().and_then(Vec::pop);
                    Delivery::new(m, self.settler.clone(), None, None).with_cap_permit(permit)
                }));
        }
        again.extend(unasked);
        Ok(again)
    }
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

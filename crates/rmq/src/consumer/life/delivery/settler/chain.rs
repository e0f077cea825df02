//! Taking on settle: a delivery that ends (ack, nack, dead letter) gives its
//! room for one message to its settle, whose call then takes the slot's
//! next due message too (`settle_take.lua`), and the settling task hands
//! it out. A consumer at concurrency 1 then makes one round trip per
//! message instead of two (a settle, then a pop), and a busy one takes as
//! many messages as it ends, in the calls that end them.
//!
//! It takes only where the fetch loop would take the same: not once the
//! consumer stops; not in a pool (its gate resizes each topic's share as
//! deliveries end); not from a topic with a rate limit or an in-flight cap
//! (their tokens and permits are taken round by round by the fetch loop);
//! and only from a slot the fetch loop would pop among its next ones (best
//! priority first, else earliest due first), so that one slot's backlog
//! never keeps a better slot waiting (on a single node the call itself
//! also takes nothing while the topic's marks tell of better work in
//! another slot, which no consumer has been told of), and once per rescan
//! period an end takes nothing, so the fetch loop keeps its safety net.
//! A chain of takes ends after [`MAX_RUN`] messages, giving the fetch
//! loop its turn. In serial mode the delivery hands on
//! its claim on the slot as well: the slot's next message is taken under
//! the same fence, with nothing of the slot in flight in between.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{Settler, WeakSettler};
use crate::consumer::discovery::pop::{parse_pop, Popped};
use crate::consumer::flow::room::Held;
use crate::consumer::flow::{Gate, Probe};
use crate::consumer::life::delivery::Delivery;
use crate::consumer::Shared;
use crate::group::Claim;
use crate::message::Received;
use crate::topic::{Topic, TopicKind};

/// What an ending delivery hands to its settle so that the call can take
/// one message: its room and, in serial mode, its claim on the slot.
pub(crate) struct Taker {
    pub(crate) held: Held,
    pub(crate) claim: Option<Claim>,
    /// How many takes on settle in a row led to the ending delivery.
    pub(crate) run: u32,
    /// Whether what the call takes goes back to the ending delivery's
    /// task (a handler of `run`, which handles it next, in the same task)
    /// rather than out through the consumer's stream.
    pub(crate) back: bool,
}

/// Takes on settle in a row at most (each by the delivery the one before
/// took): then the chain's room goes back to the fetch loop, which takes
/// by its own order. So one slot's backlog keeps another slot's work of
/// the same priority (or due within [`SLACK_MS`]) waiting for at most this
/// many messages per chain, at one round trip more per this many messages.
///
/// [`SLACK_MS`]: crate::consumer::discovery::schedule::SLACK_MS
pub(crate) const MAX_RUN: u32 = 32;

/// A consumer's side of taking on settle: where taken messages go and what
/// decides whether an end may take.
pub(crate) struct Chain {
    pub(crate) shared: Arc<Shared>,
    /// The consumer's deliveries (weak: the stream ends with the fetch
    /// loop, whatever settles are still running).
    pub(crate) tx: mpsc::WeakSender<Delivery>,
    pub(crate) gate: Option<Arc<Gate>>,
    pub(crate) stop: CancellationToken,
    /// Slots the fetch loop pops per round at most (see `life/fetcher/`).
    pub(crate) fanout: usize,
    /// The consumer's rescan period: ends leave the fetch loop a turn at
    /// least this often (see [`Chain::may_take_from`]).
    pub(crate) rescan: Duration,
    /// When ends last left the fetch loop a turn.
    pub(crate) last_turn: Mutex<Instant>,
}

impl Chain {
    /// Whether ends may take now: the consumer has not stopped, is not in
    /// a pool (whose gate resizes a topic's share as deliveries end and
    /// queue for the pool's slots), and the topic has neither a rate limit
    /// nor an in-flight cap.
    pub(crate) fn open(&self, topic: &Topic) -> bool {
        let spec = &topic.cached().spec;
        !self.stop.is_cancelled()
            && self.gate.is_none()
            && spec.rate_per_sec == 0
            && spec.max_in_flight == 0
    }

    /// Whether ends may take from `slot` now: they may take at all and the
    /// fetch loop would pop `slot` among its next slots. When not, the
    /// call only settles, and its takers are dropped once it answered
    /// (their room goes back to the fetch loop, and a serial claim ends
    /// only after the end it was held for).
    /// In serial mode the slot must still be kept at the call's `epoch`.
    /// And once per rescan period an end takes nothing, so that a
    /// consumer whose ends keep taking still gives its fetch loop a turn:
    /// the loop's rescan is the safety net for lost notices and for work
    /// another consumer left behind.
    pub(crate) fn may_take_from(&self, topic: &Topic, slot: u32, epoch: Option<u64>) -> bool {
        if !self.open(topic) {
            return false;
        }
        {
            let mut last = self.last_turn.lock().unwrap_or_else(|p| p.into_inner());
            if last.elapsed() >= self.rescan {
                *last = Instant::now();
                return false;
            }
        }
        let allowed = match (&self.shared.ownership, epoch) {
            (Some(o), Some(epoch)) => {
                let own = self.shared.own(o);
                if !own.keeps(slot, epoch) {
                    return false;
                }
                Some(own.takeable())
            }
            (Some(_), None) => return false,
            (None, _) => None,
        };
        self.shared
            .lock()
            .ranks_among_next(slot, self.fanout, allowed.as_ref())
    }

    /// The call took this mark for the consumer instead of taking (better
    /// work in another slot): it holds it as if its marks waiter had taken
    /// it (`discovery/marks.rs`), so the fetch loop pops that slot next, or hands the
    /// mark back if it cannot serve it soon.
    /// A consumer that stopped meanwhile hands it back at once.
    pub(crate) fn marked(&self, topic: &Topic, slot: u32, v: i64) {
        {
            // Under the lock, as the marks waiter records what it took:
            // the fetch loop hands back what the schedule holds when it
            // stops.
            let mut s = self.shared.lock();
            if !self.stop.is_cancelled() {
                s.marked(slot, v);
                drop(s);
                crate::observe::woken(topic.name());
                self.shared.notify.notify_one();
                return;
            }
        }
        let topic = topic.clone();
        tokio::spawn(async move {
            crate::consumer::discovery::marks::hand_back(&topic, &[(slot, v)]).await
        });
    }

    /// A call that takes is being sent: the notice generation its answer
    /// is judged by (see `Schedule::after_take_on_settle`).
    pub(crate) fn generation(&self) -> u64 {
        self.shared.lock().generation()
    }

    /// Hands out what a settle took from `slot` (`taken`: its take's
    /// reply, None when it took nothing), one delivery per taker (each
    /// with the index of the settle that handed it on), and records what
    /// the reply says of the slot. Takers left over are dropped after
    /// that, so the fetch loop sees the slot as it now is when their room
    /// comes back. Returns how many expired leases the take rolled back
    /// that ended their message (a bounded topic's room comes back for
    /// them), and the deliveries whose takers asked for them back
    /// ([`Taker::back`]), with the index of their settle.
    pub(crate) fn hand_out(
        &self,
        me: &WeakSettler,
        slot: u32,
        since: u64,
        taken: Option<Value>,
        takers: Vec<(usize, Taker)>,
    ) -> (u64, Vec<(usize, Delivery)>) {
        let mut back = Vec::new();
        let Some(reply) = taken else {
            return (0, back);
        };
        let topic = &me.topic;
        let popped = parse_pop(&topic.spec, slot, reply);
        crate::observe::taken_on_settle(topic.name(), !popped.messages.is_empty());
        self.record(slot, since, &popped);
        let mut takers = takers.into_iter();
        for msg in popped.messages {
            // Nobody left to end it (every handle is gone): its lease
            // runs out and it is taken again.
            let Some(settler) = me.upgrade() else {
                break;
            };
            crate::observe::delivered(&msg);
            let Some((at, taker)) = takers.next() else {
                // More than asked for, which the script never does.
                Delivery::new_detached(msg, settler).release_detached();
                continue;
            };
            if let Some(d) = self.hand_one(msg, settler, taker) {
                back.push((at, d));
            }
        }
        (popped.ended, back)
    }

    /// Records what a take's reply says of its slot in the schedule.
    fn record(&self, slot: u32, since: u64, popped: &Popped) {
        let mut s = self.shared.lock();
        s.observe_server_time(popped.now);
        s.after_take_on_settle(
            slot,
            since,
            popped.head,
            popped.retry,
            popped.lease,
            popped.now,
            popped.taken,
        );
    }

    /// Hands out one message taken for `taker`: out through the stream, or
    /// back to the taker's task when it asked for it (returned). What can
    /// no longer be handed out goes back untouched.
    fn hand_one(&self, msg: Received, settler: Settler, taker: Taker) -> Option<Delivery> {
        let Taker {
            held,
            claim,
            run,
            back: wants_it,
        } = taker;
        // Serial mode: the slot lost since the call was sent (its
        // fence refused nothing yet): the message goes back under the
        // fence, as the fetch loop does with one it cannot claim.
        if let Some(c) = claim.as_ref().filter(|c| !c.is_current()) {
            let fence = c.fence().clone();
            drop((held, claim));
            Delivery::new_detached(msg, settler)
                .with_fence(fence)
                .release_detached();
            return None;
        }
        let probe = self.gate.clone().map(Probe::start);
        let d = Delivery::new(msg, settler, Some(held), claim)
            .with_probe(probe)
            .taken_on_settle(run + 1);
        let Some(tx) = self.tx.upgrade() else {
            // The consumer stopped: the message goes back untouched.
            d.release_detached();
            return None;
        };
        if wants_it {
            return Some(d);
        }
        if let Err(e) = tx.try_send(d) {
            // Likewise (or full, which its room rules out).
            let d = match e {
                mpsc::error::TrySendError::Full(d) | mpsc::error::TrySendError::Closed(d) => d,
            };
            d.release_detached();
        }
        None
    }
}

/// Slots the fetch loop pops per round at most, as `life/fetcher/` chooses
/// them: one for a parallel consumer of a priority topic, else `fanout`.
pub(crate) fn fanout_of(kind: TopicKind, serial: bool, fanout: usize) -> usize {
    if kind == TopicKind::Priority && !serial {
        1
    } else {
        fanout
    }
}

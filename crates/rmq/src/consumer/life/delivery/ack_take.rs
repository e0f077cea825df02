//! Acking a delivery taken by hand and taking the slot's next due messages
//! in the same call: a tool that ends its messages one at a time makes one
//! round trip per message instead of two. A consumer's deliveries take on
//! settle by themselves (`settler/chain.rs`), within the consumer's room.

use super::{Delivery, Op};
use crate::consumer::discovery::{marks, pop};
use crate::error::{Error, ErrorKind, Result};
use crate::group::Fence;
use crate::message::Received;
use crate::scripts::settle::{self, SettleRequest};
use crate::scripts::ScriptId;
use crate::topic::Topic;
use redis::Cmd;

/// Messages one call takes at most (the settle script's own limit).
const MAX_TAKE: usize = 1_000;

impl Delivery {
    /// Done, and up to `max` of the same slot's next due messages taken in
    /// the same call (one round trip): for messages taken by hand
    /// ([`Topic::take`](crate::Topic::take)), which end one at a time. (A
    /// consumer's deliveries do this by themselves: see
    /// [`ConsumerBuilder::take_on_settle`](crate::ConsumerBuilder::take_on_settle).)
    /// Serial mode takes under the same fence, one message at most. On a
    /// topic with a rate limit or an in-flight cap it only acks (their
    /// tokens and permits come first: use `Topic::take` there), and so it
    /// does while better work waits in another slot, unannounced (a mark,
    /// see the README). An error leaves the delivery to its lease, as
    /// [`Delivery::ack`] does after its retries. A consumer's delivery
    /// only acks here: it takes by itself, within the consumer's room.
    pub async fn ack_and_take(mut self, max: usize) -> Result<Vec<Delivery>> {
        let topic = self.settler.topic().clone();
        if max == 0 || !self.may_take_by_hand(&topic) {
            return self.ack().await.map(|()| Vec::new());
        }
        self.ended = true;
        if let Some(p) = self.probe.take() {
            p.end(Some(true));
        }
        let slot = self.msg.slot;
        let fence = self.fence();
        let (id, cmd) = self.ack_taking(&topic, max, &fence).await?;
        let answer = settle::taken_outcomes(topic.redis().run_one(id, cmd).await?, 1);
        if let Some(mark) = answer.mark {
            // Nobody here waits to serve it: it goes back to those who do.
            marks::hand_back(&topic, &[mark]).await;
        }
        let acked = answer.settled.into_iter().next().unwrap_or_else(|| {
            Err(Error::new(
                ErrorKind::StaleDelivery,
                "no outcome for the ack",
            ))
        });
        let popped = answer
            .taken
            .map(|reply| pop::parse_pop(&topic.spec, slot, reply));
        if let Err(e) = acked {
            if e.kind() == ErrorKind::Fenced {
                crate::observe::fenced(topic.name());
            }
            // (A call whose ack ended nothing takes nothing; should it
            // have, what it took goes back untouched.)
            if let Some(p) = popped {
                let taken = self.deliveries_of(p.messages, &fence);
                taken.into_iter().for_each(Delivery::release_detached);
            }
            return Err(e);
        }
        let Some(popped) = popped else {
            topic.give_back_room_later(1);
            return Ok(Vec::new());
        };
        // The acked message's room, and that of the expired leases the
        // take rolled back, come back to a bounded topic.
        topic.give_back_room_later(1 + popped.ended);
        Ok(self.deliveries_of(popped.messages, &fence))
    }

    /// The call that acks this delivery and takes up to `max` of its
    /// slot's next due messages (one in serial mode, under its fence).
    async fn ack_taking(
        &self,
        topic: &Topic,
        max: usize,
        fence: &Option<Fence>,
    ) -> Result<(ScriptId, Cmd)> {
        let settings = topic.settings().await?;
        let slot = self.msg.slot;
        let max = if fence.is_some() {
            1
        } else {
            max.min(MAX_TAKE)
        };
        Ok(SettleRequest {
            keys: &topic.slot_keys(slot),
            topic: &settings.args,
            channel: &topic.channel_for(slot),
            slot,
            fence: fence.as_ref().map(|f| (&*f.owner, f.epoch)),
            ops: vec![(self.msg.id.as_slice(), &Op::Ack)],
            take: Some(max),
        }
        .call())
    }

    /// Whether this delivery may take in its ack's call: it was taken by
    /// hand (a consumer's takes by itself, within its room and claims),
    /// and the topic has neither a rate limit nor an in-flight cap.
    fn may_take_by_hand(&self, topic: &Topic) -> bool {
        let spec = &topic.cached().spec;
        let consumers = self._permit.is_some() || self.claim.is_some();
        !consumers && spec.rate_per_sec == 0 && spec.max_in_flight == 0 && self.cap.is_none()
    }

    /// Deliveries of what an ack's call took, each under the same fence.
    fn deliveries_of(&self, taken: Vec<Received>, fence: &Option<Fence>) -> Vec<Delivery> {
        taken
            .into_iter()
            .map(|m| {
                let d = Delivery::new_detached(m, self.settler.clone());
                match fence {
                    Some(f) => d.with_fence(f.clone()),
                    None => d,
                }
            })
            .collect()
    }
}

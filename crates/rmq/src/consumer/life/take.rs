//! Taking messages by hand, without a consumer: for tools, scripts and
//! tests (a long-running consumer uses [`Topic::consumer`]).

use crate::consumer::discovery::pop;
use crate::consumer::flow::inflight::{Permits, Taken};
use crate::consumer::flow::rate;
use crate::consumer::life::delivery::settler::Settler;
use crate::consumer::life::delivery::Delivery;
use crate::error::Result;
use crate::group::Fence;
use crate::topic::Topic;

impl Topic {
    /// Takes up to `max` due messages right now, without waiting, slot by
    /// slot from slot 0 (no cross-slot priority order), calling only the
    /// slots that have work due (one reading finds them), dead letters past
    /// their TTL to trim included. For tools, scripts
    /// and tests; a long-running consumer should use [`Topic::consumer`].
    /// A rate-limited topic gives what its bucket grants now (maybe none);
    /// a capped one at most the permits it grants now, each delivery
    /// holding one until it is ended.
    pub async fn take(&self, max: usize) -> Result<Vec<Delivery>> {
        let settings = self.settings().await?;
        // Where work is due, read before any token or permit is taken.
        let due_slots = self
            .slots_with_due_work(settings.spec.dead_letter_ttl_ms)
            .await?;
        if due_slots.is_empty() || max == 0 {
            return Ok(Vec::new());
        }
        let rated = rate::take(self, max).await?.tokens;
        let settler = Settler::spawn(self.clone(), Permits::new(self));
        let lease = self.spec.lease_ms;
        let (max, mut tokens) = match settler.permits().take(self, rated, lease).await {
            Ok(Taken::Uncapped) => (rated, None),
            Ok(Taken::Granted(t)) => (t.len(), Some(t)),
            Ok(Taken::Refused { .. }) => (0, Some(Vec::new())),
            Err(e) => {
                rate::give_back(self, rated);
                return Err(e);
            }
        };
        let mut out: Vec<Delivery> = Vec::new();
        for slot in due_slots {
            // Per call at most 1000 (the pop script's own limit).
            loop {
                let want = (max - out.len()).min(1_000);
                if want == 0 {
                    break;
                }
                let (id, cmd) = pop::pop_call(self, &settings.args, slot, want, None);
                let v = match self.redis().run_one(id, cmd).await {
                    Ok(v) => v,
                    Err(e) => {
                        for d in out {
                            let _ = d.release().await;
                        }
                        rate::give_back(self, rated);
                        settler.free_permits(tokens.unwrap_or_default());
                        return Err(e);
                    }
                };
                let popped = pop::parse_pop(&self.spec, slot, v);
                self.give_back_room_later(popped.ended);
                let got = popped.messages.len();
                out.extend(popped.messages.into_iter().map(|m| {
                    let token = tokens.as_mut().and_then(Vec::pop);
                    Delivery::new(m, settler.clone(), None, None).with_cap_permit(token)
                }));
                if got < want {
                    break;
                }
            }
        }
        rate::give_back(self, rated - out.len());
        settler.free_permits(tokens.unwrap_or_default());
        Ok(out)
    }
}

impl Topic {
    /// Low-level serial-mode primitive, for tools and tests: takes one
    /// message of `slot` as the lease holder `owner` at `epoch`; the
    /// delivery settles with that fence.
    #[doc(hidden)]
    pub async fn take_fenced(
        &self,
        slot: u32,
        owner: &str,
        epoch: u64,
    ) -> Result<Option<Delivery>> {
        let fence = Fence {
            owner: owner.into(),
            epoch,
        };
        let (id, cmd) = pop::pop_call(self, &self.settings().await?.args, slot, 1, Some(&fence));
        let v = self.redis().run_one(id, cmd).await?;
        let popped = pop::parse_pop(&self.spec, slot, v);
        self.give_back_room_later(popped.ended);
        let settler = Settler::spawn(self.clone(), Permits::new(self));
        Ok(popped
            .messages
            .into_iter()
            .next()
            .map(|m| Delivery::new_detached(m, settler).with_fence(fence)))
    }
}

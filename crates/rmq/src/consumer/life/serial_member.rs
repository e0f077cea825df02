//! A serial group member that takes by hand: for a server that consumes
//! on behalf of remote clients (HTTP take with a group and a member).
//!
//! It is a member as a serial consumer is one: it joins the group, keeps
//! the slot leases that the assignment gives it (renewed in the
//! background, released when it leaves), and takes only from those slots,
//! one message per slot at a time (the pop script refuses a slot with a
//! delivery in flight), each delivery fenced with the slot's lease epoch.
//! So a settle after the slot moved on is refused ([`ErrorKind::Fenced`]),
//! and no two deliveries of one slot are out at once across the group.
//! Who ends the member's life is up to the caller (a server ends a member
//! that stopped asking).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::consumer::discovery::pop;
use crate::consumer::flow::inflight::Permits;
use crate::consumer::life::delivery::settler::Settler;
use crate::consumer::life::delivery::Delivery;
use crate::consumer::Shared;
use crate::error::{ErrorKind, Result};
use crate::group::{keep_leases, validate_group, Ownership, RedisCoordinator, SerialConfig};
use crate::group::{Coordinator, Fence};
use crate::topic::Topic;

/// A look at the owned slots at least this often while a take waits (a
/// wake-up notice lost while the connection was away costs this at most).
const LOOK_AT_LEAST_EVERY: Duration = Duration::from_millis(500);

/// One member of a serial group, taking by hand (see the module docs).
pub struct SerialMember {
    topic: Topic,
    shared: Arc<Shared>,
    own: Arc<Mutex<Ownership>>,
    settler: Settler,
    stop: CancellationToken,
    keeper: Option<JoinHandle<()>>,
    listen: CancellationToken,
    /// Turns which owned slot a take starts with.
    turn: AtomicUsize,
}

impl std::fmt::Debug for SerialMember {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SerialMember")
            .field("topic", &self.topic.name())
            .finish_non_exhaustive()
    }
}

impl Topic {
    /// Joins serial group `group` as member `member` (both 1 to 100 of
    /// `A-Z a-z 0-9 _ . -`), with Redis membership: a member silent for
    /// `member_timeout` is counted out by the others, and a slot lease
    /// lasts as long unless renewed. The member keeps its leases until
    /// [`SerialMember::leave`] (or until it is dropped: then it leaves in
    /// the background).
    pub fn serial_member(
        &self,
        group: &str,
        member: &str,
        member_timeout: Duration,
    ) -> Result<SerialMember> {
        validate_group(group)?;
        validate_member(member)?;
        let timeout = member_timeout.max(Duration::from_millis(50));
        let cfg = SerialConfig {
            group: group.to_string(),
            member_timeout: timeout,
            lease_ttl: timeout,
        };
        let spec = &self.spec;
        let shared = Arc::new(Shared::new(
            spec.kind,
            spec.slots,
            Some(member.into()),
            false,
            false,
        ));
        let own = shared
            .ownership
            .clone()
            .unwrap_or_else(|| Arc::new(Mutex::new(Ownership::new(member.into()))));
        let membership =
            RedisCoordinator::new(self.clone()).join(&self.group_ref(group, timeout), member);
        let stop = CancellationToken::new();
        let keeper = tokio::spawn(keep_leases(
            self.clone(),
            own.clone(),
            shared.clone(),
            membership,
            cfg,
            stop.clone(),
        ));
        let listen = CancellationToken::new();
        tokio::spawn(crate::consumer::discovery::wake::listen(
            self.clone(),
            shared.clone(),
            listen.clone(),
        ));
        Ok(SerialMember {
            topic: self.clone(),
            settler: Settler::spawn(self.clone(), Permits::new(self)),
            shared,
            own,
            stop,
            keeper: Some(keeper),
            listen,
            turn: AtomicUsize::new(0),
        })
    }
}

/// A member id follows the rules of a group name.
fn validate_member(member: &str) -> Result<()> {
    validate_group(member).map_err(|_| {
        crate::Error::new(
            ErrorKind::InvalidName,
            format!("invalid member id {member:?}: use 1 to 100 letters, digits, '_', '.' or '-'"),
        )
    })
}

impl SerialMember {
    /// The slots this member holds the lease of now.
    pub fn slots(&self) -> Vec<u32> {
        let mut s: Vec<u32> = self.own().owned().into_iter().collect();
        s.sort_unstable();
        s
    }

    /// Up to `max` due messages of the slots this member holds, at most
    /// one per slot and none of a slot with a delivery out, each fenced
    /// and with a lease of `lease`: at once when some are due, else as
    /// soon as one is, or none after `wait`.
    pub async fn take(&self, max: usize, lease: Duration, wait: Duration) -> Result<Vec<Delivery>> {
        let deadline = Instant::now() + wait;
        loop {
            let got = self.take_now(max, lease).await?;
            if !got.is_empty() || Instant::now() >= deadline {
                return Ok(got);
            }
            let until = deadline.min(Instant::now() + LOOK_AT_LEAST_EVERY);
            tokio::select! {
                _ = self.shared.notify.notified() => {}
                _ = tokio::time::sleep_until(until) => {}
            }
        }
    }

    async fn take_now(&self, max: usize, lease: Duration) -> Result<Vec<Delivery>> {
        let fences: Vec<(u32, Fence)> = {
            let own = self.own();
            let mut slots: Vec<u32> = own.takeable().into_iter().collect();
            slots.sort_unstable();
            // At most `max` slots, starting elsewhere each time, so that
            // no slot waits behind the others take after take.
            if !slots.is_empty() {
                let turn = self.turn.fetch_add(1, Ordering::Relaxed) % slots.len();
                slots.rotate_left(turn);
            }
            slots.truncate(max);
            slots
                .into_iter()
                .filter_map(|s| own.fence(s).map(|f| (s, f)))
                .collect()
        };
        if fences.is_empty() || max == 0 {
            return Ok(Vec::new());
        }
        let settings = self.topic.settings().await?;
        let mut args = (*settings.args).clone();
        let lease_ms = u64::try_from(lease.as_millis()).unwrap_or(u64::MAX).max(1);
        args.lease = lease_ms.to_string();
        let calls = fences
            .iter()
            .map(|(slot, f)| pop::pop_call(&self.topic, &args, *slot, 1, Some(f)))
            .collect();
        let replies = self.topic.redis().run(calls).await?;
        let mut out = Vec::new();
        for ((slot, fence), reply) in fences.into_iter().zip(replies) {
            match reply {
                Ok(v) => {
                    let popped = pop::parse_pop(&self.topic.spec, slot, v);
                    self.topic.give_back_room_later(popped.ended);
                    out.extend(popped.messages.into_iter().map(|m| {
                        Delivery::new_detached(m, self.settler.clone()).with_fence(fence.clone())
                    }));
                }
                Err(e) if e.kind() == ErrorKind::Fenced => {
                    crate::observe::fenced(self.topic.name());
                    self.own().lose_epoch(slot, fence.epoch);
                }
                Err(e) => {
                    tracing::warn!(topic = %self.topic.name(), slot, "serial take failed: {e}");
                }
            }
        }
        Ok(out)
    }

    /// Leaves the group: releases every slot lease and waits until it is
    /// done (deliveries still out come back after their leases).
    pub async fn leave(mut self) {
        self.stop.cancel();
        if let Some(k) = self.keeper.take() {
            let _ = k.await;
        }
    }

    fn own(&self) -> std::sync::MutexGuard<'_, Ownership> {
        self.own.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for SerialMember {
    fn drop(&mut self) {
        self.listen.cancel();
        self.stop.cancel();
    }
}

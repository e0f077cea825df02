//! The topic's global in-flight cap as a consumer meets it: before a pop
//! round, take one permit per message wanted (each named by a token unique
//! to this consumer); each delivery carries its permit, extended with its
//! lease and freed through the settler once its end is recorded, so the
//! permit is always released after the message left flight, never before.
//! Topics without a cap make no call at all.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::error::Result;
use crate::keys;
use crate::scripts::inflight::{self, CapKeys};
use crate::topic::Topic;

/// How long a permit outlives its delivery's lease: a permit must not run
/// out before the lease it covers (the permit is taken before the pop, so
/// its clock starts earlier).
pub(crate) const MARGIN_MS: u64 = 1_000;

/// Names this consumer's permits: `<random id>:<n>`.
#[derive(Debug)]
pub(crate) struct Permits {
    keys: CapKeys,
    holder: String,
    next: AtomicU64,
}

/// What a take answered: the permits granted, or when none were, how long
/// until the first held permit runs out (a freed one is announced sooner).
pub(crate) enum Taken {
    /// The topic has no cap: take as many as wanted, no permits.
    Uncapped,
    Granted(Vec<String>),
    Refused {
        wait_ms: u64,
    },
}

impl Permits {
    pub(crate) fn new(topic: &Topic) -> Arc<Permits> {
        Arc::new(Permits {
            keys: keys::cap_keys(topic.prefix(), topic.name()),
            holder: format!("{:016x}", rand::random::<u64>()),
            next: AtomicU64::new(0),
        })
    }

    pub(crate) fn keys(&self) -> &CapKeys {
        &self.keys
    }

    /// Up to `n` permits for deliveries whose lease is `lease_ms`.
    pub(crate) async fn take(&self, topic: &Topic, n: usize, lease_ms: u64) -> Result<Taken> {
        if !capped(topic) {
            return Ok(Taken::Uncapped);
        }
        let first = self.next.fetch_add(n as u64, Ordering::Relaxed);
        let tokens: Vec<String> = (first..first + n as u64)
            .map(|i| format!("{}:{i}", self.holder))
            .collect();
        let (id, cmd) = inflight::take(&self.keys, lease_ms + MARGIN_MS, &tokens);
        let (granted, wait_ms) = inflight::pair(topic.redis().run_one(id, cmd).await?);
        let granted = usize::try_from(granted).unwrap_or(0).min(n);
        Ok(if granted == 0 {
            Taken::Refused { wait_ms }
        } else {
            let mut tokens = tokens;
            tokens.truncate(granted);
            Taken::Granted(tokens)
        })
    }
}

/// Whether the topic has an in-flight cap, as this handle's definition
/// says (refreshed every 2 s; the cap itself is read in Redis at once).
fn capped(topic: &Topic) -> bool {
    topic.cached().spec.max_in_flight > 0
}

//! A topic's settings as they are now.
//!
//! The settings that may change after creation (lease, attempts, backoff,
//! payload limit, tolerance, dead-letter limits; never the kind or the slot
//! count) are read again from the registry by whoever uses the topic, at
//! most every [`REFRESH`], inline before a send or a pop: a handle sees an
//! update (or a deletion) within seconds, with no background task and no
//! cost for a handle nobody uses. Every clone of a [`Topic`](super::Topic)
//! shares one `Live`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use super::spec::TopicSpec;
use crate::scripts::TopicArgs;

/// How old a reading of the registry may be before it is read again.
pub(crate) const REFRESH: Duration = Duration::from_secs(2);

/// The settings, and what every script call passes of them.
#[derive(Debug)]
pub(crate) struct Current {
    pub(crate) spec: Arc<TopicSpec>,
    pub(crate) args: Arc<TopicArgs>,
}

impl Current {
    fn of(spec: TopicSpec) -> Current {
        let args = TopicArgs {
            kind: spec.script_kind(),
            lease: spec.lease_ms.to_string(),
            max_attempts: spec.max_attempts.to_string(),
            backoff: spec.backoff_ms.to_string(),
            backoff_max: spec.backoff_max_ms.to_string(),
            dead_max: spec.dead_letters_per_slot.to_string(),
            dead_ttl: spec.dead_letter_ttl_ms.to_string(),
        };
        Current {
            spec: Arc::new(spec),
            args: Arc::new(args),
        }
    }
}

#[derive(Debug)]
pub(crate) struct Live {
    now: RwLock<Arc<Current>>,
    /// When the registry was last read, in ms after `born`.
    read_at: AtomicU64,
    born: Instant,
    /// The definition is gone from the registry (the topic was deleted).
    gone: AtomicBool,
}

impl Live {
    pub(crate) fn new(spec: TopicSpec) -> Live {
        Live {
            now: RwLock::new(Arc::new(Current::of(spec))),
            read_at: AtomicU64::new(0),
            born: Instant::now(),
            gone: AtomicBool::new(false),
        }
    }

    /// The settings as last read (no Redis call).
    pub(crate) fn current(&self) -> Arc<Current> {
        self.now.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn elapsed_ms(&self) -> u64 {
        u64::try_from(self.born.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Whether the last reading is older than [`REFRESH`]; if so, the
    /// caller takes the turn to read (others go on with the old reading
    /// meanwhile).
    pub(crate) fn take_turn(&self) -> bool {
        let now = self.elapsed_ms();
        let last = self.read_at.load(Ordering::Relaxed);
        let refresh = u64::try_from(REFRESH.as_millis()).unwrap_or(2_000);
        now.saturating_sub(last) >= refresh
            && self
                .read_at
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }

    /// A new reading: the definition as stored, or None when it is gone.
    /// The kind and slot count never change (an update refuses to), so a
    /// definition that differs there is not this topic any more: gone too.
    pub(crate) fn read(&self, stored: Option<TopicSpec>) {
        let cur = self.current();
        match stored {
            Some(s) if s.kind == cur.spec.kind && s.slots == cur.spec.slots => {
                if s != *cur.spec {
                    *self.now.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(Current::of(s));
                }
            }
            _ => self.gone.store(true, Ordering::Relaxed),
        }
    }

    pub(crate) fn is_gone(&self) -> bool {
        self.gone.load(Ordering::Relaxed)
    }
}

//! How much to take: what a fetch loop must hold before it takes a
//! message, and what each delivery gives back when it ends.
//!
//! A consumer's own room (`room.rs`: a permit per delivery, up to its
//! concurrency) comes first; in a pool, the topic's gate (`gate.rs`: a
//! semaphore as large as the topic's share, resized from the adaptive
//! limiter in `limiter.rs`) and the pool's own semaphore; under a
//! lifetime budget, a budget permit (`budget.rs`). Then the topic's
//! global limits, which Redis keeps: its rate limit (`rate.rs`: tokens)
//! and its in-flight cap (`inflight.rs`: permits named per delivery).
//!
//! Flow control decides how many, never which message first: it knows
//! nothing of where work is (`discovery/`) nor of deliveries (`life/`).

mod budget;
mod gate;
pub(in crate::consumer) mod inflight;
mod limiter;
pub(in crate::consumer) mod rate;
pub(in crate::consumer) mod room;

pub(crate) use budget::{Budget, Spendable};
pub(crate) use gate::{resize, Gate, Probe};
pub use gate::{PoolLimits, Share, TopicLimit};
pub(crate) use inflight::Permits;

//! The seeded workload: three topics (one per kind) and, for each message
//! number, its unique id, topic and timing. Every process derives the same
//! plan from the seed, so the checker knows what each id was meant to be.

use std::time::Duration;

use rand::{Rng, SeedableRng};
use rmq::{Message, TopicKind, TopicSpec};

/// The topics of a run: (name, kind).
pub const TOPICS: [(&str, TopicKind); 3] = [
    ("prio", TopicKind::Priority),
    ("fixed", TopicKind::FixedTime),
    ("range", TopicKind::RangeMerge),
];

/// Settings every topic of a run shares.
#[derive(Debug, Clone, Copy)]
pub struct TopicSettings {
    pub slots: u32,
    pub lease: Duration,
    pub max_attempts: u32,
}

pub fn spec(name: &str, kind: TopicKind, s: TopicSettings) -> TopicSpec {
    TopicSpec::new(name, kind)
        .slots(s.slots)
        .lease(s.lease)
        .max_attempts(s.max_attempts)
        .backoff(Duration::from_millis(50), Duration::from_millis(500))
}

/// Message number `i` of the run with `seed`.
pub struct Planned {
    pub id: String,
    pub topic: &'static str,
    pub kind: TopicKind,
    pub priority: u32,
    /// Fixed-time: due this long after the send; range-merge: the range.
    pub offset_ms: u64,
    pub poison: bool,
}

/// The plan of message `i`. `poison_every` > 0 makes every such message
/// (chosen by the seed) a poison message that crashes its consumer.
pub fn planned(seed: u64, i: u64, poison_every: u64) -> Planned {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let (topic, kind) = TOPICS[(i % 3) as usize];
    let poison = poison_every > 0 && rng.random_range(0..poison_every) == 0;
    Planned {
        id: format!("{topic}-{i}"),
        topic,
        kind,
        priority: rng.random_range(0..10),
        offset_ms: rng.random_range(1..1500),
        poison,
    }
}

impl Planned {
    /// The message to send (built at send time: due times are relative).
    pub fn message(&self) -> Message {
        let m = Message::new(self.id.as_str()).key(self.id.as_str());
        match self.kind {
            TopicKind::Priority => m.priority(self.priority),
            TopicKind::FixedTime => m.delay(Duration::from_millis(self.offset_ms)),
            TopicKind::RangeMerge => m.range(Duration::from_millis(self.offset_ms)),
        }
    }
}

/// Whether the id names a poison message of this run.
pub fn is_poison(seed: u64, id: &str, poison_every: u64) -> bool {
    id.rsplit('-')
        .next()
        .and_then(|n| n.parse::<u64>().ok())
        .is_some_and(|i| planned(seed, i, poison_every).poison)
}

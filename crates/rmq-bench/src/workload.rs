//! What every scenario sends: the topic kinds measured, the base message
//! counts, and the helpers that build, define and send benchmark messages.
//! Shared by all scenarios so they load Redis with identical messages.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Result};
use rmq::{Client, Message, Topic, TopicKind, TopicSpec};

pub(crate) const KINDS: [TopicKind; 3] = [
    TopicKind::Priority,
    TopicKind::FixedTime,
    TopicKind::RangeMerge,
];
pub(crate) const SEND_N: u64 = 200_000;
pub(crate) const BIG_N: u64 = 1_000_000;

pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// A 16-byte merge key.
pub(crate) fn key16(i: u64) -> Vec<u8> {
    format!("k{i:015}").into_bytes()
}

/// A 64-byte payload.
pub(crate) fn payload64(i: u64) -> Vec<u8> {
    format!("{i:064}").into_bytes()
}

pub(crate) fn make(kind: TopicKind, key: u64, i: u64) -> Message {
    let m = Message::new(payload64(i)).key(key16(key));
    match kind {
        TopicKind::Priority => m.priority((i % 8) as u32),
        TopicKind::FixedTime => m.delay(Duration::ZERO),
        TopicKind::RangeMerge => m.range(Duration::from_millis(1)),
    }
}

pub(crate) async fn define(client: &Client, name: &str, kind: TopicKind) -> Result<Topic> {
    Ok(client.define_topic(TopicSpec::new(name, kind)).await?)
}

pub(crate) async fn send_all(topic: &Topic, kind: TopicKind, n: u64, batch: u64) -> Result<()> {
    let mut i = 0;
    while i < n {
        let end = (i + batch).min(n);
        let msgs: Vec<Message> = (i..end).map(|j| make(kind, j, j)).collect();
        let r = topic.send_batch(&msgs).await?;
        if r.refused_count() > 0 {
            bail!("{} messages refused", r.refused_count());
        }
        i = end;
    }
    Ok(())
}

/// Small deterministic PRNG (xorshift64*), enough for spreading due times.
pub(crate) struct Rng(pub(crate) u64);
impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

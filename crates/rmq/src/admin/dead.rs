//! The dead letters: listing them (oldest death first, across slots),
//! purging them, and finding the slots that hold any (requeueing is
//! `requeue.rs`). Each operation visits only slots that hold dead letters.

use super::once_each;
use super::ordered::{self, Page};
use crate::error::{Error, ErrorKind, Result};
use crate::scripts::admin::{self, Dead, FirstsOf, Which};
use crate::topic::Topic;

/// Dead letters one purge call deletes at most.
const PURGE_PER_CALL: u64 = 1_000;

/// A dead letter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    /// Merge key.
    pub key: Vec<u8>,
    /// Payload.
    pub payload: Vec<u8>,
    /// Slot.
    pub slot: u32,
    /// Deliveries it had.
    pub attempts: u32,
    /// The last error.
    pub error: String,
    /// When it died (Unix ms, server clock).
    pub dead_at_ms: i64,
    /// How many times this key died (dead letters of one key merge).
    pub deaths: u32,
}

/// Which dead letters an operation applies to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeadSelection {
    /// The dead letter of one merge key.
    Key(Vec<u8>),
    /// All of them.
    All,
    /// Those that died more than this long ago (server clock); purge only
    /// (a requeue of them is refused).
    OlderThan(std::time::Duration),
}

impl Topic {
    /// The slots holding dead letters, with their oldest death (ms), and
    /// the server time.
    async fn slots_with_dead(&self) -> Result<(i64, Vec<(u32, i64)>)> {
        let (now, firsts) = self.firsts(FirstsOf::Dead).await?;
        let dead = firsts
            .into_iter()
            .filter_map(|(slot, f)| Some((slot, f.dead?)))
            .collect();
        Ok((now, dead))
    }

    /// Up to `limit` dead letters, oldest death first (merged across
    /// slots). Fetches only from the slots whose oldest dead letter is
    /// among the `limit` oldest (a reading, as [`peek`](Self::peek) is).
    pub async fn dead_letters(&self, limit: usize) -> Result<Vec<DeadLetter>> {
        let (_, with_dead) = self.slots_with_dead().await?;
        let found = ordered::first_across(
            with_dead
                .into_iter()
                .map(|(slot, ms)| (slot, (ms, slot)))
                .collect(),
            limit,
            |slot, d: &Dead| (d.dead_at_ms, slot),
            |asks| self.dead_pages(asks),
        )
        .await?;
        Ok(once_each(found, |d| &d.key)
            .into_iter()
            .map(|(slot, d)| DeadLetter {
                key: d.key,
                payload: d.payload,
                slot,
                attempts: d.attempts,
                dead_at_ms: d.dead_at_ms,
                deaths: d.deaths,
                error: d.error,
            })
            .collect())
    }

    /// Dead letters of each (slot, from, count).
    async fn dead_pages(&self, asks: Vec<(u32, usize, usize)>) -> Result<Vec<Page<Dead>>> {
        let calls: Vec<_> = asks
            .iter()
            .map(|&(slot, from, count)| {
                let (from, count) = (from.to_string(), count.to_string());
                admin::dead_list(&self.slot_keys(slot), &count, &from)
            })
            .collect();
        self.pages(calls, Dead::parse).await
    }

    /// Deletes dead letters for good; returns how many.
    pub async fn purge_dead(&self, which: DeadSelection) -> Result<u64> {
        let mut purged = 0u64;
        match which {
            DeadSelection::Key(key) => {
                self.check_key(&key)?;
                let slots = self.dead_slots(None).await?;
                let replies = self
                    .each_slot_of(&slots, |keys, _| admin::dead_purge(keys, &Which::Key(&key)))
                    .await?;
                for r in replies {
                    purged += admin::purged(&r?);
                }
            }
            DeadSelection::All | DeadSelection::OlderThan(_) => {
                let limit = PURGE_PER_CALL.to_string();
                let older_than = match &which {
                    DeadSelection::OlderThan(d) => Some(*d),
                    _ => None,
                };
                let age = older_than.map_or(String::new(), |d| d.as_millis().to_string());
                let which = match age.is_empty() {
                    true => Which::All { limit: &limit },
                    false => Which::OlderThan {
                        limit: &limit,
                        ms: &age,
                    },
                };
                for slot in self.dead_slots(older_than).await? {
                    let keys = self.slot_keys(slot);
                    loop {
                        let (id, cmd) = admin::dead_purge(&keys, &which);
                        let n = admin::purged(&self.redis().run_one(id, cmd).await?);
                        purged += n;
                        if n < PURGE_PER_CALL {
                            break;
                        }
                    }
                }
            }
        }
        Ok(purged)
    }

    /// The slots holding dead letters (with `older_than`, letters that died
    /// at least that long ago by the server clock).
    pub(super) async fn dead_slots(
        &self,
        older_than: Option<std::time::Duration>,
    ) -> Result<Vec<u32>> {
        let (now, with_dead) = self.slots_with_dead().await?;
        let cutoff = older_than.map_or(i64::MAX, |d| {
            now.saturating_sub(i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        });
        Ok(with_dead
            .into_iter()
            .filter(|&(_, oldest)| oldest <= cutoff)
            .map(|(slot, _)| slot)
            .collect())
    }

    pub(super) fn check_key(&self, key: &[u8]) -> Result<()> {
        if key.is_empty() {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "the merge key is empty",
            ));
        }
        Ok(())
    }
}

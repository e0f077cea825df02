//! Where work is due: the slots a pop would find work in now, and when
//! the others' first work falls due, by one reading of every slot's firsts.
//! Taking by hand (`Topic::take`) and on demand (`consumer/life/on_demand/`)
//! call only the slots with work.

use crate::error::Result;
use crate::scripts::admin::FirstsOf;
use crate::topic::{Topic, TopicKind};

impl Topic {
    /// The slots where a pop would find work now, in slot order: a due
    /// pending message (any, on a priority topic), a due retry, a lease
    /// that ran out, or (with a dead-letter TTL) a dead letter to trim. A
    /// tool that takes by hand calls only those.
    pub(crate) async fn slots_with_due_work(&self, dead_ttl_ms: u64) -> Result<Vec<u32>> {
        Ok(self.work_due(dead_ttl_ms).await?.slots)
    }

    /// The slots with work due now (as [`Topic::slots_with_due_work`]
    /// says), and when the others' first work falls due (a time-based
    /// message, a priority retry, a lease that runs out), by one reading.
    pub(crate) async fn work_due(&self, dead_ttl_ms: u64) -> Result<WorkDue> {
        let (now, firsts) = self.firsts(FirstsOf::All).await?;
        let due = |t: Option<i64>| t.is_some_and(|t| t <= now);
        let ttl = i64::try_from(dead_ttl_ms).unwrap_or(i64::MAX);
        let expired =
            |t: Option<i64>| dead_ttl_ms > 0 && t.is_some_and(|t| t <= now.saturating_sub(ttl));
        let priority = self.spec.kind == TopicKind::Priority;
        let mut out = WorkDue {
            now,
            slots: Vec::new(),
            next_ms: None,
        };
        for (slot, f) in firsts {
            if (priority && f.pending.is_some())
                || (!priority && due(f.pending))
                || due(f.retry)
                || due(f.lease_ends)
                || expired(f.dead)
            {
                out.slots.push(slot);
                continue;
            }
            let pending = if priority { None } else { f.pending };
            for t in [pending, f.retry, f.lease_ends].into_iter().flatten() {
                out.next_ms = Some(out.next_ms.map_or(t, |n: i64| n.min(t)));
            }
        }
        Ok(out)
    }
}

/// Where work is due now, and when more falls due (see
/// [`Topic::work_due`]).
pub(crate) struct WorkDue {
    /// The server's time of the reading (ms).
    pub(crate) now: i64,
    /// The slots with work due now.
    pub(crate) slots: Vec<u32>,
    /// When the first work of the other slots falls due (server ms).
    pub(crate) next_ms: Option<i64>,
}

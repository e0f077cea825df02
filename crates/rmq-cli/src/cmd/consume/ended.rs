//! How `rmq consume`'s deliveries end: each handler task's [`Ended`], the
//! line (or JSON object) printed per `--exec` or `--worker` delivery, and
//! the counts summed up at exit.

use serde::Serialize;

use super::{print, Ctx};
use crate::output;

/// How one delivery ended.
pub(super) enum Ended {
    Acked,
    Retried,
    Dead,
    Released,
    /// The message was cancelled in flight: its nack or dead ended it.
    Cancelled,
    /// The settle call failed: the message comes back after its lease.
    Failed,
}

#[derive(Default)]
pub(super) struct Report {
    acked: u64,
    retried: u64,
    dead: u64,
    released: u64,
    cancelled: u64,
    failed: u64,
}

impl Report {
    pub(super) fn count(&mut self, r: Result<Vec<Ended>, tokio::task::JoinError>) {
        let Ok(ends) = r else {
            self.failed += 1;
            return;
        };
        for e in ends {
            match e {
                Ended::Acked => self.acked += 1,
                Ended::Retried => self.retried += 1,
                Ended::Dead => self.dead += 1,
                Ended::Released => self.released += 1,
                Ended::Cancelled => self.cancelled += 1,
                Ended::Failed => self.failed += 1,
            }
        }
    }

    pub(super) fn ended(&self) -> u64 {
        self.acked + self.retried + self.dead + self.cancelled + self.failed
    }

    /// The line printed at exit: what ended how, and a pool's limits.
    pub(super) fn summary(&self, pool_limits: Option<String>) -> String {
        let mut s = format!(
            "consumed {}: acked {}, retried {}, dead {}",
            self.ended(),
            self.acked,
            self.retried,
            self.dead
        );
        if self.cancelled > 0 {
            s.push_str(&format!(", cancelled {}", self.cancelled));
        }
        if self.released > 0 {
            s.push_str(&format!(", released {} untouched", self.released));
        }
        if self.failed > 0 {
            s.push_str(&format!(
                ", {} not settled (they come back after their lease)",
                self.failed
            ));
        }
        if let Some(l) = pool_limits {
            s.push_str(&format!("; pool limits at the end: {l}"));
        }
        s
    }
}

impl Ended {
    /// How it ended, as the `outcome` metric label says it.
    pub(super) fn label(&self) -> &'static str {
        match self {
            Ended::Acked => "acked",
            Ended::Retried => "retried",
            Ended::Dead => "dead",
            Ended::Released => "released",
            Ended::Cancelled => "cancelled",
            Ended::Failed => "failed",
        }
    }
}

/// How an `--exec` delivery ended, as printed.
#[derive(Serialize)]
struct OutcomeJson<'a> {
    key: String,
    slot: u32,
    attempt: u32,
    /// When it was taken (Unix ms, server clock).
    taken_ms: i64,
    outcome: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
}

/// Prints how one delivery ended.
pub(super) fn report_outcome(ctx: &Ctx, m: &rmq::Received, ended: &Ended, error: Option<&str>) {
    let outcome = match ended {
        Ended::Failed => "not settled",
        e => e.label(),
    };
    print(ctx, |out| {
        if out.json {
            out.json(&OutcomeJson {
                key: output::lossy(&m.key),
                slot: m.slot,
                attempt: m.attempt,
                taken_ms: m.taken_ms,
                outcome,
                error,
            })
        } else {
            let why = error.map(|e| format!(": {e}")).unwrap_or_default();
            output::line(&format!(
                "{outcome} {} (slot {}, attempt {}){why}",
                output::cell(&m.key, 80),
                m.slot,
                m.attempt
            ))
        }
    });
}

//! Pausing and resuming a whole topic: a flag in every slot, read by
//! every pop (`pause.lua`).

use super::{PauseReport, SLOTS_PER_ROUND};
use crate::error::Result;
use crate::scripts::control;
use crate::topic::Topic;

impl Topic {
    /// Pauses the topic: once this returns, no consumer (parallel or
    /// serial, in any process) starts a new delivery of it, until
    /// [`Topic::resume`]. Deliveries in flight finish and settle normally;
    /// sends go on.
    pub async fn pause(&self) -> Result<PauseReport> {
        self.set_paused(true).await
    }

    /// Resumes a paused topic; idle consumers are woken at once.
    pub async fn resume(&self) -> Result<PauseReport> {
        self.set_paused(false).await
    }

    async fn set_paused(&self, pause: bool) -> Result<PauseReport> {
        let kind = self.spec.kind.code();
        let mut report = PauseReport {
            were_paused: 0,
            slots: self.spec.slots,
            server_ms: 0,
        };
        let all: Vec<u32> = (0..self.spec.slots).collect();
        for chunk in all.chunks(SLOTS_PER_ROUND) {
            let names: Vec<(String, String)> = chunk
                .iter()
                .map(|&s| (s.to_string(), self.channel_for(s).into_owned()))
                .collect();
            let keys: Vec<[String; 10]> = chunk.iter().map(|&s| self.slot_keys(s)).collect();
            let calls = keys
                .iter()
                .zip(&names)
                .map(|(k, (slot, channel))| control::pause(k, pause, kind, channel, slot))
                .collect();
            for reply in self.redis().run(calls).await? {
                let (now, was) = control::paused_before(&reply?);
                report.were_paused += u32::from(was);
                report.server_ms = report.server_ms.max(now);
            }
        }
        Ok(report)
    }
}

//! Where work is, and when to look again: the slots a round may pop
//! (the schedule, narrowed by serial leases and slot affinity), a look
//! through the head index, and the sleep until the earliest due time, a
//! wake-up (notice or mark), the next rescan or a back-off after a failure.

use super::*;

impl Fetcher {
    /// The next few slots the sweep looks at, in turn (serial mode: of
    /// those it may take from; with slot affinity, of its own).
    pub(super) fn sweep(&mut self, allowed: Option<&std::collections::HashSet<u32>>) -> Vec<u32> {
        let slots = self.topic.spec.slots.max(1);
        let size = if self.shared.affinity {
            SWEEP_WITH_AFFINITY
        } else {
            SWEEP
        };
        let mut out = Vec::with_capacity(size);
        let schedule = self.shared.lock();
        for i in 0..slots {
            let slot = (self.sweep_from + i) % slots;
            if allowed.is_none_or(|a| a.contains(&slot)) && schedule.hears(slot) {
                out.push(slot);
                if out.len() == size {
                    self.sweep_from = (slot + 1) % slots;
                    return out;
                }
            }
        }
        self.sweep_from = 0;
        out
    }

    /// Looks at the slots it knows nothing of: through the head index when
    /// the connection keeps one and it is complete, else one look per slot
    /// (after which a parallel consumer whose look at every slot got every
    /// answer marks the index complete). False when Redis could not be
    /// reached.
    ///
    /// Serial mode: `allowed` are the slots it may take from now, `owned`
    /// all it owns (a read of the index reaches those), both taken after
    /// notice generation `since`.
    pub(super) async fn look(
        &mut self,
        unknown: &[u32],
        allowed: Option<&std::collections::HashSet<u32>>,
        owned: Option<&std::collections::HashSet<u32>>,
        since: u64,
    ) -> bool {
        if self.topic.redis().head_index {
            let sweep = self.sweep(allowed);
            let reach = owned.map_or(Reach::Every, Reach::Slots);
            let gains = self.shared.affinity_gains.load(Ordering::Acquire);
            let looked = heads::look(&self.topic, &self.shared, reach, &sweep, since).await;
            if self.shared.affinity_gains.load(Ordering::Acquire) != gains {
                self.shared.lock().mark_all(); // slots became its own meanwhile
            }
            match looked {
                Looked::Done => return true,
                Looked::Failed => return false,
                Looked::Incomplete => {}
            }
        }
        // A survey of many slots takes many round trips: a consumer told to
        // stop must not go on looking.
        let surveyed = tokio::select! {
            s = survey(&self.topic, &self.shared, unknown) => s,
            () = self.cancel.cancelled() => return false,
        };
        let everything = unknown.len() == self.topic.spec.slots as usize;
        match surveyed {
            Surveyed::Unreachable => false,
            Surveyed::All if self.topic.redis().head_index && !self.serial && everything => {
                heads::mark_complete(&self.topic).await;
                true
            }
            _ => true,
        }
    }

    /// The consumer can serve no more for now (no room, no in-flight
    /// permit, no rate token): it takes no more marks, and those its waiter
    /// gets meanwhile go back at once. Under the schedule's lock, which
    /// the waiter holds to check this and record what it took: a mark it
    /// recorded is in the schedule (and handed back from there if due), one
    /// it has not goes back.
    pub(super) fn take_no_marks(&self) {
        if self.shared.marks {
            let _s = self.shared.lock();
            self.shared.want_marks.send_replace(0);
        }
    }

    /// How long until the earliest work it holds a mark for has waited
    /// [`HAND_BACK_AFTER`](crate::consumer::discovery::marks::HAND_BACK_AFTER) past its time, or
    /// past `since` (server ms: when the wait for room began), whichever
    /// is later (None: no work known).
    pub(super) fn until_hand_back(&self, since: i64) -> Option<Duration> {
        let s = self.shared.lock();
        let earliest = s.earliest_held()?.max(since);
        let at = earliest + crate::consumer::discovery::marks::HAND_BACK_AFTER.as_millis() as i64;
        Some(Duration::from_millis(
            u64::try_from(at - s.server_now()).unwrap_or(0),
        ))
    }

    /// Slots popped per round at most: one for a parallel consumer of a
    /// priority topic (the best slot first), else [`FANOUT`].
    pub(super) fn fanout(&self) -> usize {
        crate::consumer::life::delivery::settler::chain::fanout_of(
            self.topic.kind(),
            self.serial,
            FANOUT,
        )
    }

    /// Waits for slots with work: surveys slots it knows nothing of, then
    /// sleeps until the earliest known due time, a notice (or a mark) or
    /// the next rescan. None once cancelled.
    pub(super) async fn wait_for_work(&mut self) -> Option<Vec<u32>> {
        loop {
            if self.cancel.is_cancelled() || self.topic_deleted().await {
                return None;
            }
            if self.last_rescan.elapsed() >= self.cfg.rescan {
                self.shared.lock().mark_all();
                self.last_rescan = Instant::now();
            }
            // Read before the slots it may take from: a wake-up that comes
            // after (a slot acquired, or one whose delivery ended) is newer
            // than the look, which keeps it.
            let since = self.shared.lock().generation();
            // Serial mode: only the slots this member may take from. The
            // others' owners look at theirs; a slot acquired later is woken
            // then (`slot_may_have_work`). A read of the index reaches every
            // slot it owns, busy or leaving ones too, so that a slot that
            // becomes takeable again without a wake-up keeps what the
            // index said of it.
            let allowed = self
                .shared
                .ownership
                .as_ref()
                .map(|o| self.shared.own(o).takeable());
            if !self.look_at_unknown(allowed.as_ref(), since).await {
                if !self.back_off().await {
                    return None;
                }
                continue;
            }
            let fanout = self.fanout();
            let (ready, wait) = {
                let s = self.shared.lock();
                (
                    s.ready(fanout, allowed.as_ref()),
                    s.ms_until_next(allowed.as_ref()),
                )
            };
            if !ready.is_empty() {
                return Some(ready);
            }
            // The last index read left entries out, and they may come
            // before the sleep ends: read it again (not too often).
            if self.shared.lock().index_exhausted(wait)
                && self.last_index_read.elapsed() >= INDEX_REREAD
            {
                self.last_index_read = Instant::now();
                self.shared.lock().mark_all();
                continue;
            }
            let sleep = self.sleep_before_looking(wait);
            tokio::select! {
                _ = self.shared.notify.notified() => {}
                _ = tokio::time::sleep(sleep) => {}
                _ = self.cancel.cancelled() => return None,
            }
        }
    }

    /// Looks at the slots it knows nothing of (of those it may take from);
    /// false when the look failed.
    async fn look_at_unknown(
        &mut self,
        allowed: Option<&std::collections::HashSet<u32>>,
        since: u64,
    ) -> bool {
        let mut unknown = self.shared.lock().unknown();
        if let Some(a) = allowed {
            unknown.retain(|slot| a.contains(slot));
        }
        // Most rounds have nothing unknown.
        if unknown.is_empty() {
            return true;
        }
        let owned = self
            .shared
            .ownership
            .as_ref()
            .map(|o| self.shared.own(o).owned());
        self.look(&unknown, allowed, owned.as_ref(), since).await
    }

    /// How long to sleep with nothing ready: until the earliest known due
    /// time (`wait_ms` from now), at most until the next rescan, and not
    /// past the next index read while the last one left entries out.
    fn sleep_before_looking(&self, wait_ms: Option<i64>) -> Duration {
        let until_rescan = self.cfg.rescan.saturating_sub(self.last_rescan.elapsed());
        let sleep = wait_ms
            .map(|ms| Duration::from_millis(u64::try_from(ms).unwrap_or(0)))
            .unwrap_or(until_rescan)
            .min(until_rescan);
        if self.shared.lock().index_exhausted(wait_ms) {
            sleep.min(INDEX_REREAD)
        } else {
            sleep
        }
    }

    /// Whether the topic was deleted (its definition is read again at most
    /// every 2 s, on waking): then the consumer stops, saying why.
    pub(super) async fn topic_deleted(&self) -> bool {
        match self.topic.settings().await {
            Err(e) if e.kind() == ErrorKind::UnknownTopic => {
                tracing::error!(topic = %self.topic.name(), "the consumer stops: {e}");
                self.shared.stop_with(e);
                self.cancel.cancel();
                true
            }
            _ => false,
        }
    }

    /// Sleeps the error backoff (doubling up to 2 s). False once cancelled.
    pub(super) async fn back_off(&mut self) -> bool {
        tokio::select! {
            _ = tokio::time::sleep(self.error_backoff) => {}
            _ = self.cancel.cancelled() => return false,
        }
        self.error_backoff = (self.error_backoff * 2).min(Duration::from_secs(2));
        true
    }
}

//! What a consumer's background duties share: the schedule (which slots
//! to visit, and when), the notifier that wakes the fetch loop, and in
//! serial mode the slots this consumer owns. The fetch loop, the wake-up
//! listener and the deliveries read and change it; serial mode's lease
//! keeper and claims (`group/`) see only the ownership and the
//! [`SlotEvents`] it implements, so `group` never depends on `consumer`.

use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

use crate::consumer::discovery::schedule::Schedule;
use crate::error::Error;
use crate::group::{Ownership, SlotEvents};
use crate::topic::TopicKind;

pub(crate) struct Shared {
    schedule: Mutex<Schedule>,
    pub(crate) notify: Notify,
    /// Wakes a fetch loop that waits for an in-flight cap permit (a
    /// `room` notice): apart from `notify`, so that notices of new
    /// messages do not make a capped consumer ask for permits again.
    pub(crate) room: Notify,
    /// Serial mode: the slots this consumer owns.
    pub(crate) ownership: Option<Arc<Mutex<Ownership>>>,
    /// Whether the consumer waits on the topic's marks (`marks.rs`).
    pub(crate) marks: bool,
    /// Whether it splits the slots with the topic's other parallel
    /// consumers (`affinity.rs`).
    pub(crate) affinity: bool,
    /// With affinity: whether the fetch loop waits for room now (a
    /// consumer that waits long leaves the split).
    pub(crate) waiting_for_room: tokio::sync::watch::Sender<bool>,
    /// With affinity: how many times slots became this consumer's, so that
    /// a look on its way meanwhile is followed by another.
    pub(crate) affinity_gains: std::sync::atomic::AtomicU64,
    /// How many marks the fetch loop would take: the room it gathered last
    /// (at most one round's slots), 0 while it waits for room. The marks
    /// waiter asks Redis only while this is set. Set and read under the
    /// schedule's lock where a mark's fate depends on it.
    pub(crate) want_marks: tokio::sync::watch::Sender<usize>,
    /// Why the consumer stopped by itself (its topic was deleted).
    stopped: Mutex<Option<Error>>,
}

impl Shared {
    /// `member`: serial mode's member id (None in parallel mode); `marks`:
    /// whether it waits on the topic's marks; `affinity`: whether it
    /// splits the slots with the other parallel consumers.
    pub(crate) fn new(
        kind: TopicKind,
        slots: u32,
        member: Option<Arc<str>>,
        marks: bool,
        affinity: bool,
    ) -> Shared {
        Shared {
            schedule: Mutex::new(Schedule::with_marks(kind, slots, marks)),
            notify: Notify::new(),
            room: Notify::new(),
            ownership: member.map(|m| Arc::new(Mutex::new(Ownership::new(m)))),
            marks,
            affinity,
            waiting_for_room: tokio::sync::watch::Sender::new(false),
            affinity_gains: std::sync::atomic::AtomicU64::new(0),
            want_marks: tokio::sync::watch::Sender::new(0),
            stopped: Mutex::new(None),
        }
    }

    /// The consumer stops by itself, for this reason.
    pub(crate) fn stop_with(&self, e: Error) {
        *self.stopped.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
    }

    /// Why the consumer stopped by itself, if it did.
    pub(crate) fn stopped(&self) -> Option<Error> {
        self.stopped
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(Error::duplicate)
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Schedule> {
        self.schedule.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn schedule(&self) -> MutexGuard<'_, Schedule> {
        self.lock()
    }

    pub(crate) fn own<'a>(&self, o: &'a Mutex<Ownership>) -> MutexGuard<'a, Ownership> {
        o.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl SlotEvents for Shared {
    fn slot_may_have_work(&self, slot: u32) {
        self.schedule().wake_at(slot, 0);
        self.notify.notify_one();
    }

    fn ownership_changed(&self) {
        self.notify.notify_one();
    }
}

//! Taking on demand, for many waiting callers at once: HTTP clients that
//! long-poll `take`, each asking for up to N messages and willing to wait
//! up to W ms for the first.
//!
//! One engine per topic serves them all. It takes only while someone
//! waits (nothing is taken ahead, so a server with no clients holds no
//! message in flight), as much as the waiting callers asked together, and
//! hands what it took to them in the order they came. When nothing is due
//! it sleeps until the consumer's wake-up notices say a slot's head
//! changed, the first time-based message or retry falls due, a lease runs
//! out, or a new caller comes; never polling Redis in a loop, however
//! many callers wait. A delivery nobody can be given any more (its caller
//! gave up meanwhile) goes to the next caller, or back untouched.

mod round;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::consumer::flow::inflight::Permits;
use crate::consumer::life::delivery::settler::Settler;
use crate::consumer::life::delivery::Delivery;
use crate::consumer::Shared;
use crate::error::{Error, ErrorKind, Result};
use crate::topic::Topic;

/// Messages one round takes at most.
const MAX_ROUND: usize = crate::limits::MAX_TAKE;
/// A look without any notice at least this often while callers wait: a
/// notice lost while the wake-up connection was away costs this at most.
const LOOK_AT_LEAST_EVERY: Duration = Duration::from_secs(2);
/// The pause after a failed round before the next.
const AFTER_FAILURE: Duration = Duration::from_millis(200);

/// A topic's on-demand taker (see the module docs); clones share one
/// engine, which stops when the last clone is dropped.
#[derive(Clone)]
pub struct OnDemand {
    state: Arc<State>,
    _stop: Arc<DropGuard>,
}

impl std::fmt::Debug for OnDemand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OnDemand")
            .field("topic", &self.state.topic.name())
            .finish_non_exhaustive()
    }
}

struct State {
    topic: Topic,
    settler: Settler,
    waiting: Mutex<Waiting>,
    /// A caller came.
    came: Notify,
}

#[derive(Default)]
struct Waiting {
    callers: VecDeque<Caller>,
    /// Numbers the callers in the order they came.
    next_number: u64,
}

struct Caller {
    number: u64,
    max: usize,
    lease_ms: u64,
    /// Answered after the next round even with nothing (`wait` 0).
    now_only: bool,
    answer: oneshot::Sender<Result<Vec<Delivery>>>,
}

impl Topic {
    /// An on-demand taker for this topic: one engine that takes for any
    /// number of waiting callers (see [`OnDemand::take`]). Keep it and
    /// clone it; each call here starts another engine.
    pub fn on_demand(&self) -> OnDemand {
        let settler = Settler::spawn(self.clone(), Permits::new(self));
        let state = Arc::new(State {
            topic: self.clone(),
            settler,
            waiting: Mutex::default(),
            came: Notify::new(),
        });
        let cancel = CancellationToken::new();
        let spec = &self.spec;
        let shared = Arc::new(Shared::new(spec.kind, spec.slots, None, false, false));
        tokio::spawn(crate::consumer::discovery::wake::listen(
            self.clone(),
            shared.clone(),
            cancel.clone(),
        ));
        tokio::spawn(run(state.clone(), shared, cancel.clone()));
        OnDemand {
            state,
            _stop: Arc::new(cancel.drop_guard()),
        }
    }
}

impl OnDemand {
    /// Up to `max` due messages (at most [`MAX_TAKE`](crate::limits::MAX_TAKE)),
    /// each with a lease of `lease` (1 ms to
    /// [`MAX_LEASE_MS`](crate::limits::MAX_LEASE_MS), else refused with
    /// `InvalidArgument`): at once when some are due, else as soon as one
    /// is, or an empty list after `wait` (a `wait` of zero answers after
    /// one look).
    /// A caller that goes away before its answer (its future dropped)
    /// loses nothing: what was taken for it goes to the next caller or
    /// back untouched.
    pub async fn take(&self, max: usize, lease: Duration, wait: Duration) -> Result<Vec<Delivery>> {
        let max = max.min(MAX_ROUND);
        if max == 0 {
            return Ok(Vec::new());
        }
        let lease_ms = crate::consumer::life::delivery::lease_ms(lease)?;
        let (answer, mut rx) = oneshot::channel();
        {
            let mut w = self.state.lock();
            let number = w.next_number;
            w.next_number += 1;
            w.callers.push_back(Caller {
                number,
                max,
                lease_ms,
                now_only: wait.is_zero(),
                answer,
            });
        }
        self.state.came.notify_one();
        let stopped = || {
            Err(Error::new(
                ErrorKind::Shutdown,
                "the on-demand taker stopped",
            ))
        };
        if wait.is_zero() {
            return rx.await.unwrap_or_else(|_| stopped());
        }
        match tokio::time::timeout(wait, &mut rx).await {
            Ok(r) => r.unwrap_or_else(|_| stopped()),
            Err(_) => {
                // Whatever was sent just now is still ours to hand out.
                rx.close();
                rx.try_recv().unwrap_or_else(|_| Ok(Vec::new()))
            }
        }
    }
}

impl State {
    fn lock(&self) -> MutexGuard<'_, Waiting> {
        self.waiting.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What the waiting callers want together: the first caller's lease,
    /// and the messages asked by every caller with that lease (callers
    /// that gave up are dropped). None: nobody waits.
    fn demand(&self) -> Option<(usize, u64, u64)> {
        let mut w = self.lock();
        w.callers.retain(|c| !c.answer.is_closed());
        let lease = w.callers.front()?.lease_ms;
        let want = w
            .callers
            .iter()
            .filter(|c| c.lease_ms == lease)
            .map(|c| c.max)
            .sum::<usize>()
            .min(MAX_ROUND);
        Some((want, lease, w.next_number))
    }

    /// Hands `taken` out to the callers with this lease, first come first
    /// served; answers the callers up to `seen` that wanted one look only;
    /// gives back what nobody took.
    fn hand_out(&self, mut taken: Vec<Delivery>, lease_ms: u64, seen: u64) {
        taken.reverse();
        let mut w = self.lock();
        let mut kept = VecDeque::with_capacity(w.callers.len());
        while let Some(c) = w.callers.pop_front() {
            if c.lease_ms != lease_ms || taken.is_empty() {
                if c.now_only && c.number < seen {
                    let _ = c.answer.send(Ok(Vec::new()));
                } else {
                    kept.push_back(c);
                }
                continue;
            }
            let at = taken.len().saturating_sub(c.max);
            let mut mine = taken.split_off(at);
            mine.reverse();
            if let Err(Ok(back)) = c.answer.send(Ok(mine)) {
                // It gave up meanwhile: the next caller gets them.
                taken.extend(back.into_iter().rev());
            }
        }
        w.callers = kept;
        drop(w);
        for d in taken {
            d.release_detached();
        }
    }

    /// A round failed: every caller learns why.
    fn fail_all(&self, e: &Error) {
        let mut w = self.lock();
        for c in w.callers.drain(..) {
            let _ = c.answer.send(Err(e.duplicate()));
        }
    }
}

async fn run(state: Arc<State>, shared: Arc<Shared>, cancel: CancellationToken) {
    let mut look = true;
    let mut next_look = Instant::now();
    let mut start = 0usize;
    loop {
        let Some((want, lease_ms, seen)) = state.demand() else {
            tokio::select! {
                _ = state.came.notified() => {}
                _ = cancel.cancelled() => return,
            }
            look = true;
            continue;
        };
        if !look {
            let until = next_look.min(Instant::now() + LOOK_AT_LEAST_EVERY);
            tokio::select! {
                _ = shared.notify.notified() => {}
                _ = state.came.notified() => {}
                _ = tokio::time::sleep_until(until) => {}
                _ = cancel.cancelled() => return,
            }
        }
        start = start.wrapping_add(1);
        match round::take(&state.topic, &state.settler, want, lease_ms, start).await {
            Ok(r) => {
                let got = r.deliveries.len();
                state.hand_out(r.deliveries, lease_ms, seen);
                // Something was there: there may be more. Else sleep until
                // the first work falls due (or a notice, or a caller).
                look = got > 0;
                next_look = match r.next_ms {
                    Some(at) => {
                        let ms = u64::try_from(at.saturating_sub(r.now)).unwrap_or(0);
                        Instant::now() + Duration::from_millis(ms.max(1))
                    }
                    None => Instant::now() + LOOK_AT_LEAST_EVERY,
                };
            }
            Err(e) => {
                tracing::warn!(topic = %state.topic.name(), "taking on demand failed: {e}");
                state.fail_all(&e);
                look = false;
                next_look = Instant::now() + AFTER_FAILURE;
            }
        }
    }
}

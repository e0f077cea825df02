//! A topic's door into the pool: a semaphore as large as the topic's
//! share, resized every tick from the shares (fixed, or following each
//! handler's latency and failures: `limiter.rs`), and the probe each
//! delivery carries to report how its handling went.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;

use super::limiter::{share, Limiter};

/// A topic's bounds and weight in a [`Pool`](crate::Pool).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Share {
    /// Its part of a contended pool, relative to the others' (default 1).
    pub weight: u32,
    /// It may always run at least this many (default 1).
    pub min: usize,
    /// It never runs more than this many (default 0: the whole pool).
    pub max: usize,
}

impl Default for Share {
    fn default() -> Self {
        Share {
            weight: 1,
            min: 1,
            max: 0,
        }
    }
}

/// A topic's limit in a pool as last computed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicLimit {
    /// The topic.
    pub topic: String,
    /// Deliveries of it that may be in flight at once now.
    pub limit: usize,
    /// Deliveries of it in flight now.
    pub running: usize,
}

/// The pool's limits per topic, updated every 100 ms while it runs.
#[derive(Debug, Clone, Default)]
pub struct PoolLimits(Arc<Mutex<Vec<TopicLimit>>>);

impl PoolLimits {
    /// The limits now, in the order the topics were given.
    pub fn get(&self) -> Vec<TopicLimit> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// A topic's door into the pool: a semaphore as large as its share, and
/// what its deliveries report on ending.
#[derive(Debug)]
pub(crate) struct Gate {
    topic: String,
    pub(crate) sem: Arc<Semaphore>,
    share: Share,
    max: usize,
    adaptive: bool,
    state: Mutex<GateState>,
}

#[derive(Debug)]
struct GateState {
    limiter: Limiter,
    /// The semaphore's size as last set.
    size: usize,
    running: usize,
    peak: usize,
}

impl Gate {
    pub(crate) fn new(topic: &str, share: Share, max: usize, adaptive: bool) -> Gate {
        let start = if adaptive {
            Limiter::new(share.min, max).limit()
        } else {
            max
        };
        Gate {
            topic: topic.to_string(),
            sem: Arc::new(Semaphore::new(start)),
            share,
            max,
            adaptive,
            state: Mutex::new(GateState {
                limiter: Limiter::new(share.min, max),
                size: start,
                running: 0,
                peak: 0,
            }),
        }
    }

    /// The topic's share now: deliveries of it that may be out at once.
    pub(crate) fn size(&self) -> usize {
        self.lock().size
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, GateState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A delivery of the topic was handed out.
    pub(crate) fn started(&self) {
        let mut s = self.lock();
        s.running += 1;
        s.peak = s.peak.max(s.running);
    }

    /// A delivery ended after `took`: `Some(ok)` for a handler's verdict,
    /// `None` for a release (no verdict on the downstream).
    pub(crate) fn finished(&self, took: Duration, ok: Option<bool>) {
        let mut s = self.lock();
        s.running = s.running.saturating_sub(1);
        if let Some(ok) = ok {
            s.limiter.record(took, ok);
        }
    }

    /// Ends a window: the limit this topic wants now.
    fn want(&self) -> usize {
        let mut s = self.lock();
        let busy = s.peak * 5 >= s.size * 4 || s.peak + 1 >= s.size;
        s.peak = s.running;
        if self.adaptive {
            s.limiter.tick(busy)
        } else {
            self.max
        }
    }

    /// Sets the semaphore's size. Growing adds permits at once; shrinking
    /// takes permits out of circulation as deliveries give them back: a
    /// task queues for them (the semaphore is fair, so it is served before
    /// the fetch loop asks again) and forgets them.
    fn resize(&self, size: usize) -> usize {
        let mut s = self.lock();
        if size > s.size {
            self.sem.add_permits(size - s.size);
        } else if size < s.size {
            let (sem, n) = (
                self.sem.clone(),
                u32::try_from(s.size - size).unwrap_or(u32::MAX),
            );
            tokio::spawn(async move {
                if let Ok(p) = sem.acquire_many_owned(n).await {
                    p.forget();
                }
            });
        }
        s.size = size;
        s.running
    }

    /// The pool stopped: waiters (shrinks, fetch loops) are let go.
    pub(crate) fn close(&self) {
        self.sem.close();
    }
}

/// Every tick: each topic's wanted limit, the pool shared by weight over
/// them (never below a topic's minimum while the pool has room), the gates
/// resized, the limits published and logged when they change.
pub(crate) fn resize(gates: &[Arc<Gate>], pool: usize, limits: &PoolLimits) {
    let want: Vec<usize> = gates.iter().map(|g| g.want()).collect();
    let weights: Vec<u32> = gates.iter().map(|g| g.share.weight).collect();
    let mut given = share(pool, &want, &weights);
    for (g, n) in gates.iter().zip(given.iter_mut()) {
        *n = (*n).max(g.share.min.min(g.max));
    }
    let mut now = Vec::with_capacity(gates.len());
    let before = limits.get();
    for (i, (g, &n)) in gates.iter().zip(&given).enumerate() {
        let running = g.resize(n);
        crate::observe::pool_limit(&g.topic, n);
        if before.get(i).map(|t| t.limit) != Some(n) {
            tracing::debug!(topic = %g.topic, limit = n, wanted = want[i], running, "pool share changed");
        }
        now.push(TopicLimit {
            topic: g.topic.clone(),
            limit: n,
            running,
        });
    }
    *limits.0.lock().unwrap_or_else(|p| p.into_inner()) = now;
}

/// What a pool delivery reports when it ends (dropped unreported: it ran,
/// with no verdict on the downstream).
#[derive(Debug)]
pub(crate) struct Probe {
    gate: Option<Arc<Gate>>,
    since: Instant,
}

impl Probe {
    pub(crate) fn start(gate: Arc<Gate>) -> Probe {
        gate.started();
        Probe {
            gate: Some(gate),
            since: Instant::now(),
        }
    }

    /// `Some(ok)`: the handler's verdict; `None`: given back untouched.
    pub(crate) fn end(mut self, ok: Option<bool>) {
        if let Some(g) = self.gate.take() {
            g.finished(self.since.elapsed(), ok);
        }
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        if let Some(g) = self.gate.take() {
            g.finished(self.since.elapsed(), None);
        }
    }
}

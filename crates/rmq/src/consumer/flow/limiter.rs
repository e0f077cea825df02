//! Automatic per-topic throttling for a pool over several topics: how many
//! deliveries of one topic may run at once, adapted to how its handler
//! behaves, and how a contended pool is shared among topics.
//!
//! The limit follows the handler's latency like TCP Vegas and Netflix's
//! gradient limiter: the lowest window-average latency seen is the
//! topic's no-load latency; while the recent average stays within a
//! tolerance of it (x1.2, or 10 ms more for fast handlers, whose latency is
//! mostly scheduling noise) and the topic uses what it has, the limit grows
//! by its square root per tick; up to x1.5 (or 20 ms more) it holds; when
//! the average rises above that, the limit
//! shrinks in proportion (at most by half per tick); when more than a tenth
//! of the window's handlers failed, it shrinks by a fifth. A downstream that
//! queues (a few GPUs, a rate-limited API) shows rising latency as soon as
//! more is sent than it serves at once, so the limit settles near what it
//! can take, and grows back once it serves faster. The limit starts low
//! (4) so that the no-load latency is seen before any queue builds.
//!
//! The pool's slots go to topics by weighted max-min fairness over their
//! limits ([`share`]): a topic never gets more than its limit, and what one
//! topic does not need goes to the others.

use std::time::Duration;

/// Latency within this factor of the no-load latency is not congestion.
const TOLERANCE: f64 = 1.5;
/// ... nor within this much of it (scheduling noise of fast handlers).
const SLACK: Duration = Duration::from_millis(20);
/// The limit grows only while latency is within this factor (or half the
/// slack) of the no-load latency; between that and the tolerance it holds,
/// which damps the swing that the lag between a change and its effect on
/// latency would cause.
const GROW_BELOW: f64 = 1.2;
/// Where a limit starts (within its bounds).
pub(crate) const START: usize = 4;

/// One topic's adaptive limit.
#[derive(Debug, Clone)]
pub(crate) struct Limiter {
    limit: f64,
    min: f64,
    max: f64,
    /// The lowest window-average latency seen (seconds).
    no_load: Option<f64>,
    done: u64,
    failed: u64,
    latency_sum: f64,
}

impl Limiter {
    pub(crate) fn new(min: usize, max: usize) -> Limiter {
        let (min, max) = (min.max(1) as f64, max.max(min).max(1) as f64);
        Limiter {
            limit: (START as f64).clamp(min, max),
            min,
            max,
            no_load: None,
            done: 0,
            failed: 0,
            latency_sum: 0.0,
        }
    }

    /// A handler finished after `latency`; `ok` false when it failed.
    pub(crate) fn record(&mut self, latency: Duration, ok: bool) {
        self.done += 1;
        self.failed += u64::from(!ok);
        self.latency_sum += latency.as_secs_f64();
    }

    /// The limit now.
    pub(crate) fn limit(&self) -> usize {
        self.limit.round() as usize
    }

    /// Ends a window: adapts the limit to what the window saw. `busy`: the
    /// topic had (nearly) as many running as it was allowed at some point,
    /// so a higher limit could be used.
    pub(crate) fn tick(&mut self, busy: bool) -> usize {
        if self.done > 0 {
            let avg = self.latency_sum / self.done as f64;
            let base = self.no_load.map_or(avg, |b| b.min(avg));
            self.no_load = Some(base);
            let slack = SLACK.as_secs_f64();
            let threshold = (base * TOLERANCE).max(base + slack);
            let grow_below = (base * GROW_BELOW).max(base + slack / 2.0);
            if self.failed * 10 > self.done {
                self.limit *= 0.8;
            } else if avg > threshold {
                self.limit *= (threshold / avg).max(0.5);
            } else if busy && avg <= grow_below {
                self.limit += self.limit.sqrt().max(1.0);
            }
            self.limit = self.limit.clamp(self.min, self.max);
        }
        self.done = 0;
        self.failed = 0;
        self.latency_sum = 0.0;
        self.limit()
    }
}

/// Shares `pool` slots among topics that want `want[i]` each, by weight:
/// weighted max-min fairness (water-filling). Nobody gets more than it
/// wants; slots one topic does not want go to the others; every topic
/// that wants any gets at least one when the pool has enough.
pub(crate) fn share(pool: usize, want: &[usize], weight: &[u32]) -> Vec<usize> {
    let n = want.len();
    let mut got = vec![0usize; n];
    let mut left = pool;
    let mut open: Vec<usize> = (0..n).filter(|&i| want[i] > 0).collect();
    while left > 0 && !open.is_empty() {
        let total: u64 = open.iter().map(|&i| u64::from(weight[i].max(1))).sum();
        let mut given = 0;
        for &i in &open {
            let fair = (left as u64 * u64::from(weight[i].max(1)) / total).max(1) as usize;
            let add = fair.min(want[i] - got[i]).min(left - given);
            got[i] += add;
            given += add;
        }
        if given == 0 {
            break;
        }
        left -= given;
        open.retain(|&i| got[i] < want[i]);
    }
    got
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A downstream serving `capacity` at once, `service` each, queueing
    /// the rest: the latency a limit of `l` sees.
    fn queued(l: usize, capacity: usize, service: u64) -> Duration {
        ms(service * (l.div_ceil(capacity)).max(1) as u64)
    }

    fn settle(lim: &mut Limiter, capacity: usize, service: u64, ticks: usize) -> Vec<usize> {
        (0..ticks)
            .map(|_| {
                let l = lim.limit();
                for _ in 0..10 {
                    lim.record(queued(l, capacity, service), true);
                }
                lim.tick(true)
            })
            .collect()
    }

    #[test]
    fn a_saturated_downstream_holds_the_limit_near_its_capacity_and_it_grows_back() {
        let mut lim = Limiter::new(1, 64);
        let path = settle(&mut lim, 4, 50, 50);
        let end = *path.last().unwrap();
        assert!((4..=8).contains(&end), "settled at {end}: {path:?}");
        // The downstream recovers (32 at once): back up within 20 ticks (2 s).
        let path = settle(&mut lim, 32, 50, 20);
        assert!(path.iter().any(|&l| l >= 32), "{path:?}");
    }

    #[test]
    fn a_fast_handler_grows_to_its_maximum_and_noise_does_not_shrink_it() {
        let mut lim = Limiter::new(1, 64);
        for i in 0..20 {
            for _ in 0..50 {
                lim.record(ms(1 + (i % 3)), true);
            }
            lim.tick(true);
        }
        assert_eq!(lim.limit(), 64);
    }

    #[test]
    fn failures_shrink_the_limit_and_idle_topics_do_not_grow() {
        let mut lim = Limiter::new(2, 64);
        for _ in 0..10 {
            lim.record(ms(1), true);
            lim.tick(true);
        }
        let high = lim.limit();
        // A fifth less per failing window: under half in four.
        for _ in 0..4 {
            lim.record(ms(1), false);
            lim.tick(true);
        }
        assert!(lim.limit() < high / 2, "{} from {high}", lim.limit());
        let mut idle = Limiter::new(1, 64);
        for _ in 0..10 {
            idle.record(ms(1), true);
            idle.tick(false);
        }
        assert_eq!(idle.limit(), START);
        // Bounds hold.
        let mut low = Limiter::new(3, 5);
        for _ in 0..10 {
            low.record(ms(1), false);
            low.tick(true);
        }
        assert_eq!(low.limit(), 3);
    }

    #[test]
    fn the_pool_is_shared_by_weight_and_nobody_gets_more_than_it_wants() {
        assert_eq!(share(64, &[64, 6], &[1, 1]), vec![58, 6]);
        assert_eq!(share(64, &[64, 64], &[1, 1]), vec![32, 32]);
        assert_eq!(share(64, &[64, 64], &[3, 1]), vec![48, 16]);
        assert_eq!(share(10, &[2, 2, 2], &[1, 1, 1]), vec![2, 2, 2]);
        assert_eq!(
            share(3, &[5, 5, 5, 5], &[1, 1, 1, 1]).iter().sum::<usize>(),
            3
        );
        assert_eq!(share(64, &[0, 64], &[1, 1]), vec![0, 64]);
    }
}

//! The first N items of many slots in one order (peek: consumption order;
//! dead letters: oldest death first), fetching from as few slots as
//! possible and no more of each than can be among the N.
//!
//! Only slots whose first item is among the N best first items can hold
//! any of the N best items (each of N better slots holds at least one
//! better item), so a reading first learns each slot's first item
//! (`firsts.lua`, many slots per call) and then fetches pages from those
//! candidates alone. A slot needs its next page while its last fetched
//! item comes before the N-th best fetched so far; pages double, so a
//! slot holding all N takes a handful of rounds, not N.

use std::future::Future;

use crate::error::Result;

/// Items one fetch takes from a slot at most.
const PAGE_MAX: usize = 1_000;

/// One slot's items fetched so far, in the slot's own order.
#[derive(Debug)]
pub(crate) struct Run<T> {
    pub(crate) slot: u32,
    pub(crate) items: Vec<T>,
    /// The slot has nothing after `items`.
    pub(crate) done: bool,
    /// How many to fetch next.
    page: usize,
}

/// The runs that may still hold items among the first `limit` of all, by
/// `key` (smallest first): every run not done while fewer than `limit`
/// items are fetched, else each run not done whose last fetched item comes
/// before the `limit`-th (later items of a run come after its last one).
pub(crate) fn wanting_more<T, K: Ord>(
    runs: &[Run<T>],
    limit: usize,
    key: &impl Fn(u32, &T) -> K,
) -> Vec<usize> {
    let mut keys: Vec<K> = runs
        .iter()
        .flat_map(|r| r.items.iter().map(|t| key(r.slot, t)))
        .collect();
    let open = runs.iter().enumerate().filter(|(_, r)| !r.done);
    if keys.len() < limit {
        return open.map(|(i, _)| i).collect();
    }
    let nth = limit.saturating_sub(1);
    keys.select_nth_unstable(nth);
    let bound = &keys[nth];
    open.filter(|(_, r)| r.items.last().is_some_and(|t| key(r.slot, t) < *bound))
        .map(|(i, _)| i)
        .collect()
}

/// The first `limit` items of all runs by `key`, with their slots (items of
/// one run with equal keys keep the run's order).
pub(crate) fn first_of<T, K: Ord>(
    runs: Vec<Run<T>>,
    limit: usize,
    key: impl Fn(u32, &T) -> K,
) -> Vec<(u32, T)> {
    let mut all: Vec<(u32, T)> = runs
        .into_iter()
        .flat_map(|r| r.items.into_iter().map(move |t| (r.slot, t)))
        .collect();
    all.sort_by_key(|(slot, t)| key(*slot, t));
    all.truncate(limit);
    all
}

/// The first `limit` items over `candidates` (slot, key of its first item):
/// `fetch` takes a list of (slot, from, count) and gives each slot's items
/// from `from` on, at most `count`.
pub(crate) async fn first_across<T, K, F, Fut>(
    mut candidates: Vec<(u32, K)>,
    limit: usize,
    key: impl Fn(u32, &T) -> K,
    fetch: F,
) -> Result<Vec<(u32, T)>>
where
    K: Ord,
    F: Fn(Vec<(u32, usize, usize)>) -> Fut,
    Fut: Future<Output = Result<Vec<Vec<T>>>>,
{
    if limit == 0 || candidates.is_empty() {
        return Ok(Vec::new());
    }
    candidates.sort_by(|a, b| a.1.cmp(&b.1).then(a.0.cmp(&b.0)));
    candidates.truncate(limit);
    let first_page = limit.div_ceil(candidates.len()).clamp(1, PAGE_MAX);
    let mut runs: Vec<Run<T>> = candidates
        .into_iter()
        .map(|(slot, _)| Run {
            slot,
            items: Vec::new(),
            done: false,
            page: first_page,
        })
        .collect();
    let mut asking: Vec<usize> = (0..runs.len()).collect();
    while !asking.is_empty() {
        let asks = asking
            .iter()
            .map(|&i| (runs[i].slot, runs[i].items.len(), runs[i].page))
            .collect();
        for (&i, page) in asking.iter().zip(fetch(asks).await?) {
            let run = &mut runs[i];
            run.done = page.len() < run.page;
            run.items.extend(page);
            run.page = (run.page * 2).min(PAGE_MAX);
        }
        asking = wanting_more(&runs, limit, &key);
    }
    Ok(first_of(runs, limit, key))
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::collections::BTreeMap;

    use super::*;

    /// Slots holding sorted numbers; fetches are served from them and
    /// counted.
    struct Slots {
        held: BTreeMap<u32, Vec<i64>>,
        fetched: RefCell<usize>,
        rounds: RefCell<usize>,
    }

    impl Slots {
        fn new(held: &[(u32, Vec<i64>)]) -> Slots {
            Slots {
                held: held.iter().cloned().collect(),
                fetched: RefCell::new(0),
                rounds: RefCell::new(0),
            }
        }

        fn candidates(&self) -> Vec<(u32, (i64, u32))> {
            self.held
                .iter()
                .filter_map(|(&s, v)| v.first().map(|&f| (s, (f, s))))
                .collect()
        }

        fn fetch(&self, asks: Vec<(u32, usize, usize)>) -> Result<Vec<Vec<i64>>> {
            *self.rounds.borrow_mut() += 1;
            Ok(asks
                .into_iter()
                .map(|(slot, from, count)| {
                    let page: Vec<i64> = self.held[&slot]
                        .iter()
                        .skip(from)
                        .take(count)
                        .copied()
                        .collect();
                    *self.fetched.borrow_mut() += page.len();
                    page
                })
                .collect())
        }

        fn first(&self, limit: usize) -> Vec<(u32, i64)> {
            let mut all: Vec<(i64, u32)> = self
                .held
                .iter()
                .flat_map(|(&s, v)| v.iter().map(move |&x| (x, s)))
                .collect();
            all.sort();
            all.into_iter().take(limit).map(|(x, s)| (s, x)).collect()
        }
    }

    async fn merged(slots: &Slots, limit: usize) -> Vec<(u32, i64)> {
        first_across(
            slots.candidates(),
            limit,
            |s, x: &i64| (*x, s),
            |asks| std::future::ready(slots.fetch(asks)),
        )
        .await
        .unwrap_or_default()
    }

    #[tokio::test]
    async fn the_first_items_of_all_slots_come_in_order_whatever_their_spread() {
        let spreads: Vec<Vec<(u32, Vec<i64>)>> = vec![
            // Everything in one slot among many small ones.
            (0..50)
                .map(|s| (s, vec![1_000 + i64::from(s)]))
                .chain([(50, (0..500).collect())])
                .collect(),
            // Interleaved evenly.
            (0..8)
                .map(|s| (s, (0..100).map(|i| i * 8 + i64::from(s)).collect()))
                .collect(),
            // Equal values in several slots.
            (0..4).map(|s| (s, vec![5; 30])).collect(),
            // Nothing at all.
            vec![],
        ];
        for held in spreads {
            let slots = Slots::new(&held);
            for limit in [0, 1, 7, 100, 450, 2_000] {
                assert_eq!(
                    merged(&slots, limit).await,
                    slots.first(limit),
                    "limit {limit}"
                );
            }
        }
    }

    #[tokio::test]
    async fn a_slot_holding_all_of_them_takes_few_rounds_and_the_rest_one_item_each() {
        let held: Vec<(u32, Vec<i64>)> = (0..1_000)
            .map(|s| (s, vec![10_000 + i64::from(s)]))
            .chain([(1_000, (0..5_000).collect())])
            .collect();
        let slots = Slots::new(&held);
        let got = merged(&slots, 1_000).await;
        assert_eq!(got, slots.first(1_000));
        assert!(
            *slots.rounds.borrow() <= 12,
            "{} rounds",
            slots.rounds.borrow()
        );
        // The 999 other candidates gave one item each; the big slot at most
        // twice what was needed.
        assert!(
            *slots.fetched.borrow() <= 999 + 2_000,
            "{} fetched",
            slots.fetched.borrow()
        );
    }

    #[test]
    fn a_run_past_the_nth_item_or_done_is_not_asked_again() {
        let run = |slot, items: Vec<i64>, done| Run {
            slot,
            items,
            done,
            page: 1,
        };
        let key = |s: u32, x: &i64| (*x, s);
        let runs = vec![
            run(0, vec![1, 2], false),
            run(1, vec![3, 9], false),
            run(2, vec![4], true),
        ];
        // Third item is 3: slot 0 (last 2) may hold more before it; slot 1
        // (last 9) cannot; slot 2 is done.
        assert_eq!(wanting_more(&runs, 3, &key), vec![0]);
        // Fewer items than wanted: every open run.
        assert_eq!(wanting_more(&runs, 10, &key), vec![0, 1]);
    }
}

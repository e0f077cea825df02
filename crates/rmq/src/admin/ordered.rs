//! The first N items of many slots in one order (peek: consumption order;
//! dead letters: oldest death first), fetching from as few slots as
//! possible and no more of each than can be among the N.
//!
//! Only slots whose first item is among the N best first items can hold
//! any of the N best items (each of N better slots holds at least one
//! better item), so a reading first learns each slot's first item
//! (`firsts.lua`, many slots per call) and then fetches pages from the
//! best N slots alone. A slot needs its next page while its last fetched
//! item comes before the N-th best fetched so far; pages double, so a
//! slot holding all N takes a handful of rounds, not N.
//!
//! The reading is not a snapshot: consumers take and producers send while
//! it runs. A slot found empty when fetched (its messages were taken) lets
//! the next best slots in, by their first item as the reading saw it, so a
//! busy topic never reads as empty; a page may then miss or repeat an item
//! that moved meanwhile (the caller drops repeats).

use std::future::Future;

use crate::error::{Error, ErrorKind, Result};

/// Items one fetch takes from a slot at most (the listing scripts' own
/// limit per slot: a page that comes back short is the slot's last).
pub(crate) const PAGE_MAX: usize = 1_000;

/// What a fetch found in one slot: how many members of its set it scanned
/// (the next page starts after them), and the items among them (a member
/// whose record is missing is scanned and skipped).
pub(crate) struct Page<T> {
    pub(crate) scanned: usize,
    pub(crate) items: Vec<T>,
}

/// One slot: where the reading saw it begin, and what was fetched of it.
#[derive(Debug)]
struct Run<T, K> {
    slot: u32,
    /// The key of its first item when the reading looked.
    first: K,
    items: Vec<T>,
    /// Members scanned so far (where the next page starts).
    scanned: usize,
    fetched: bool,
    /// The slot has nothing after what was scanned.
    done: bool,
    /// How many to fetch next.
    page: usize,
}

/// Which runs to fetch next, by `key` (smallest first). With `limit` items
/// or more fetched, the `limit`-th is the bound: a fetched run is asked
/// again while its last item comes before it, a run not fetched yet while
/// its first item did (at most `admit` of those). With fewer, every fetched
/// run not done is asked again, and as many runs not fetched yet as items
/// are missing, at least `admit`.
fn to_fetch<T, K: Ord + Clone>(
    runs: &[Run<T, K>],
    limit: usize,
    admit: usize,
    key: &impl Fn(u32, &T) -> K,
) -> Vec<usize> {
    let mut keys: Vec<K> = runs
        .iter()
        .flat_map(|r| r.items.iter().map(|t| key(r.slot, t)))
        .collect();
    let bound = (keys.len() >= limit).then(|| {
        let nth = limit.saturating_sub(1);
        keys.select_nth_unstable(nth);
        keys.swap_remove(nth)
    });
    let before_bound = |k: &K| bound.as_ref().is_none_or(|b| k < b);
    let mut out: Vec<usize> = (runs.iter().enumerate())
        .filter(|(_, r)| r.fetched && !r.done)
        .filter(|(_, r)| match r.items.last() {
            Some(t) => before_bound(&key(r.slot, t)),
            None => before_bound(&r.first),
        })
        .map(|(i, _)| i)
        .collect();
    // Runs are sorted by their first item: the unfetched come in order.
    let missing = limit.saturating_sub(keys.len()).max(1);
    let waiting = (runs.iter().enumerate())
        .filter(|(_, r)| !r.fetched && before_bound(&r.first))
        .map(|(i, _)| i);
    match bound {
        None => out.extend(waiting.take(missing.max(admit))),
        Some(_) => out.extend(waiting.take(admit)),
    }
    out
}

/// The first `limit` items over `slots` (each slot with the key of its
/// first item, as a reading saw it), with their slots; items of one slot
/// with equal keys keep the slot's order. `fetch` takes a list of (slot,
/// from, count) and gives each slot's page from member `from` on, at most
/// `count` (never more than [`PAGE_MAX`]).
pub(crate) async fn first_across<T, K, F, Fut>(
    mut slots: Vec<(u32, K)>,
    limit: usize,
    key: impl Fn(u32, &T) -> K,
    fetch: F,
) -> Result<Vec<(u32, T)>>
where
    K: Ord + Clone,
    F: Fn(Vec<(u32, usize, usize)>) -> Fut,
    Fut: Future<Output = Result<Vec<Page<T>>>>,
{
    if limit == 0 || slots.is_empty() {
        return Ok(Vec::new());
    }
    slots.sort_by(|a, b| a.1.cmp(&b.1).then(a.0.cmp(&b.0)));
    let first_page = limit.div_ceil(slots.len().min(limit)).clamp(1, PAGE_MAX);
    let mut runs: Vec<Run<T, K>> = slots
        .into_iter()
        .map(|(slot, first)| Run {
            slot,
            first,
            items: Vec::new(),
            scanned: 0,
            fetched: false,
            done: false,
            page: first_page,
        })
        .collect();
    // Slots let in per round beyond the first `limit`: doubles each round,
    // so slots emptied since the reading are passed in a few rounds.
    let mut admit = limit;
    let mut asking = to_fetch(&runs, limit, admit, &key);
    while !asking.is_empty() {
        let asks = asking
            .iter()
            .map(|&i| (runs[i].slot, runs[i].scanned, runs[i].page))
            .collect();
        let pages = fetch(asks).await?;
        if pages.len() != asking.len() {
            return Err(Error::new(
                ErrorKind::Redis,
                "a listing answered for fewer slots than it was asked",
            ));
        }
        for (&i, page) in asking.iter().zip(pages) {
            let run = &mut runs[i];
            run.fetched = true;
            run.done = page.scanned < run.page;
            run.scanned += page.scanned;
            run.items.extend(page.items);
            run.page = (run.page * 2).min(PAGE_MAX);
        }
        admit = admit.saturating_mul(2);
        asking = to_fetch(&runs, limit, admit, &key);
    }
    let mut all: Vec<(u32, T)> = runs
        .into_iter()
        .flat_map(|r| r.items.into_iter().map(move |t| (r.slot, t)))
        .collect();
    all.sort_by_key(|(slot, t)| key(*slot, t));
    all.truncate(limit);
    Ok(all)
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::collections::BTreeMap;

    use super::*;

    /// Slots holding sorted numbers (None: a member whose record is
    /// missing); fetches are served from them and counted.
    struct Slots {
        held: RefCell<BTreeMap<u32, Vec<Option<i64>>>>,
        /// What the reading saw of each slot's first item.
        seen_first: BTreeMap<u32, i64>,
        fetched: RefCell<usize>,
        rounds: RefCell<usize>,
    }

    impl Slots {
        fn new(held: &[(u32, Vec<i64>)]) -> Slots {
            let held: BTreeMap<u32, Vec<Option<i64>>> = held
                .iter()
                .map(|(s, v)| (*s, v.iter().copied().map(Some).collect()))
                .collect();
            let seen_first = held
                .iter()
                .filter_map(|(&s, v)| Some((s, (*v.first()?)?)))
                .collect();
            Slots {
                held: RefCell::new(held),
                seen_first,
                fetched: RefCell::new(0),
                rounds: RefCell::new(0),
            }
        }

        fn candidates(&self) -> Vec<(u32, (i64, u32))> {
            self.seen_first.iter().map(|(&s, &f)| (s, (f, s))).collect()
        }

        fn fetch(&self, asks: Vec<(u32, usize, usize)>) -> Result<Vec<Page<i64>>> {
            *self.rounds.borrow_mut() += 1;
            let held = self.held.borrow();
            Ok(asks
                .into_iter()
                .map(|(slot, from, count)| {
                    let page: Vec<Option<i64>> =
                        held[&slot].iter().skip(from).take(count).copied().collect();
                    *self.fetched.borrow_mut() += page.len();
                    Page {
                        scanned: page.len(),
                        items: page.into_iter().flatten().collect(),
                    }
                })
                .collect())
        }

        /// The right answer: every item there now, sorted.
        fn first(&self, limit: usize) -> Vec<(u32, i64)> {
            let mut all: Vec<(i64, u32)> = (self.held.borrow().iter())
                .flat_map(|(&s, v)| v.iter().flatten().map(move |&x| (x, s)))
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

    #[tokio::test]
    async fn slots_emptied_since_the_reading_let_the_next_best_slots_in() {
        let held: Vec<(u32, Vec<i64>)> = (0..100).map(|s| (s, vec![i64::from(s)])).collect();
        let slots = Slots::new(&held);
        // Consumers took the heads of the five best slots after the reading.
        for s in 0..5 {
            slots.held.borrow_mut().insert(s, Vec::new());
        }
        assert_eq!(merged(&slots, 1).await, vec![(5, 5)]);
        assert_eq!(merged(&slots, 3).await, slots.first(3));
        // Many emptied: they are passed in a few rounds, not one at a time.
        for s in 0..90 {
            slots.held.borrow_mut().insert(s, Vec::new());
        }
        *slots.rounds.borrow_mut() = 0;
        assert_eq!(merged(&slots, 1).await, vec![(90, 90)]);
        assert!(
            *slots.rounds.borrow() <= 8,
            "{} rounds",
            slots.rounds.borrow()
        );
    }

    #[tokio::test]
    async fn a_member_without_its_record_is_skipped_not_taken_for_the_end() {
        let slots = Slots::new(&[(0, (0..10).collect()), (1, (100..110).collect())]);
        // Slot 0's second member lost its record.
        slots.held.borrow_mut().get_mut(&0).unwrap()[1] = None;
        // Nine of slot 0's, then slot 1's first.
        assert_eq!(merged(&slots, 10).await, slots.first(10));
    }
}

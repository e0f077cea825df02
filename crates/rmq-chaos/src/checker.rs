//! The checker: from the histories of every process and the final state of
//! the queues, account for every message (Jepsen-style total-queue check).

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Serialize;

use crate::history::Event;

/// Where every message is at the end, read from Redis after the drain.
#[derive(Debug, Default)]
pub struct FinalState {
    pub pending: HashSet<String>,
    pub in_flight: HashSet<String>,
    /// Dead letters: id -> deliveries it had.
    pub dead: HashMap<String, u32>,
}

/// What the run was expected to do.
#[derive(Debug, Default, Clone)]
pub struct Expectations {
    /// Ids that are poison (must end dead after `max_attempts`).
    pub poison: HashSet<String>,
    pub max_attempts: u32,
    pub serial: bool,
}

/// The verdict of one scenario.
#[derive(Debug, Default, Serialize)]
pub struct Report {
    pub attempted: usize,
    pub accepted: usize,
    pub unknown: usize,
    pub recovered: usize,
    pub delivered: usize,
    pub deliveries: usize,
    pub duplicated: usize,
    pub acked: usize,
    pub acked_more_than_once: usize,
    /// Delivered by a process that died before recording the ack's
    /// outcome, and gone from the queue (not pending, in flight or dead):
    /// the ack went through.
    pub acks_unrecorded: usize,
    /// Acks whose reply was lost and whose retry found the delivery ended
    /// (`OutcomeUnknown`), and gone from the queue: the ack went through.
    pub acks_unknown: usize,
    pub lost: usize,
    pub lost_ids: Vec<String>,
    pub unexpected: usize,
    pub dead: usize,
    pub dead_expected: usize,
    pub dead_unexpected: usize,
    /// Healthy messages dead although one of their deliveries ended with a
    /// recorded outcome (not only crashed with their consumer): must be 0.
    pub dead_unexpected_not_crash: usize,
    pub poison_not_dead: usize,
    pub poison_deliveries_max: u32,
    /// Poison dead letters whose attempt count is not the maximum.
    pub poison_dead_early: usize,
    pub pending_at_end: usize,
    pub in_flight_at_end: usize,
    pub ledger_balanced: bool,
    pub ledger_in_several: usize,
    pub early: usize,
    pub lateness_ms_p50: i64,
    pub lateness_ms_p99: i64,
    pub lateness_ms_max: i64,
    pub priority_inversions: usize,
    pub serial_overlaps: usize,
    pub stale_acks_accepted: usize,
    pub stale_acks_refused: usize,
    pub fenced_acks_refused: usize,
    pub settle_errors: usize,
    pub faults: BTreeMap<String, usize>,
}

struct Delivery<'a> {
    id: &'a str,
    topic: &'a str,
    slot: u32,
    token: u64,
    taken_ms: i64,
    due_ms: Option<i64>,
    priority: Option<u32>,
    start: i64,
}

pub fn check(events: &[Event], fin: &FinalState, exp: &Expectations) -> Report {
    let mut r = Report::default();
    let mut invoked = HashSet::new();
    let mut accepted = HashSet::new();
    let mut send_ok_at: HashMap<&str, i64> = HashMap::new();
    let mut deliveries: Vec<Delivery> = Vec::new();
    let mut ends: Vec<(&str, u64, i64, i64, &str, &str, u32)> = Vec::new();
    for e in events {
        match e {
            Event::SendInvoke { id, .. } => {
                invoked.insert(id.as_str());
            }
            Event::SendOk { id, at, .. } => {
                accepted.insert(id.as_str());
                send_ok_at.entry(id.as_str()).or_insert(*at);
            }
            Event::SendErr { .. } => {}
            Event::Deliver {
                id,
                topic,
                slot,
                token,
                taken_ms,
                due_ms,
                priority,
                start,
                ..
            } => deliveries.push(Delivery {
                id,
                topic,
                slot: *slot,
                token: *token,
                taken_ms: *taken_ms,
                due_ms: *due_ms,
                priority: *priority,
                start: *start,
            }),
            Event::End {
                id,
                token,
                settle_at,
                end,
                result,
                topic,
                slot,
                ..
            } => ends.push((id, *token, *settle_at, *end, result, topic, *slot)),
            Event::Fault { kind, .. } => *r.faults.entry(kind.clone()).or_default() += 1,
        }
    }
    r.attempted = invoked.len();
    r.accepted = accepted.len();
    let unknown: HashSet<&str> = invoked.difference(&accepted).copied().collect();
    r.unknown = unknown.len();

    let mut per_id: HashMap<&str, Vec<&Delivery>> = HashMap::new();
    for d in &deliveries {
        per_id.entry(d.id).or_default().push(d);
    }
    r.deliveries = deliveries.len();
    r.delivered = per_id.len();
    r.duplicated = r.deliveries - r.delivered;
    r.unexpected = per_id.keys().filter(|id| !invoked.contains(*id)).count();
    let dead: HashSet<&str> = fin.dead.keys().map(String::as_str).collect();
    r.dead = dead.len();
    r.recovered = unknown
        .iter()
        .filter(|id| per_id.contains_key(*id) || dead.contains(*id))
        .count();

    // Acks, refusals, stale acks accepted.
    let mut acks: HashMap<&str, usize> = HashMap::new();
    for &(id, token, settle_at, _end, result, _, _) in &ends {
        match result {
            "ack" => {
                *acks.entry(id).or_default() += 1;
                // Another delivery of the id taken before this ack was sent
                // superseded this one: the ack had to be refused.
                let superseded = per_id.get(id).is_some_and(|ds| {
                    ds.iter().any(|d| {
                        d.token != token
                            && d.taken_ms + 5 < settle_at
                            && d.taken_ms > taken_of(ds, token)
                    })
                });
                if superseded {
                    r.stale_acks_accepted += 1;
                }
            }
            "stale" => r.stale_acks_refused += 1,
            "fenced" => r.fenced_acks_refused += 1,
            "unknown" => {}
            _ => r.settle_errors += 1,
        }
    }
    let mut acked: HashSet<&str> = acks.keys().copied().collect();
    r.acked_more_than_once = acks.values().filter(|&&n| n > 1).count();
    let pending: HashSet<&str> = fin.pending.iter().map(String::as_str).collect();
    let in_flight: HashSet<&str> = fin.in_flight.iter().map(String::as_str).collect();
    // Deliveries whose process died before it wrote how they ended.
    let ended: HashSet<(&str, u64)> = ends.iter().map(|e| (e.0, e.1)).collect();
    let open: HashSet<&str> = deliveries
        .iter()
        .filter(|d| !ended.contains(&(d.id, d.token)))
        .map(|d| d.id)
        .collect();
    for id in &open {
        if !acked.contains(id)
            && !dead.contains(id)
            && !pending.contains(id)
            && !in_flight.contains(id)
        {
            acked.insert(id);
            r.acks_unrecorded += 1;
        }
    }
    // Acks of unknown outcome: the first try ran, or the lease ran out and
    // the message went back. Gone from the queue, it was the first.
    for &(id, _, _, _, result, _, _) in &ends {
        if result == "unknown"
            && !acked.contains(id)
            && !dead.contains(id)
            && !pending.contains(id)
            && !in_flight.contains(id)
        {
            acked.insert(id);
            r.acks_unknown += 1;
        }
    }
    r.acked = acked.len();

    // The ledger: every accepted (or recovered) id in exactly one place.
    r.pending_at_end = pending.len();
    r.in_flight_at_end = in_flight.len();
    let mut lost = Vec::new();
    for id in accepted.iter().chain(unknown.iter()) {
        let places = [&acked, &dead, &pending, &in_flight]
            .iter()
            .filter(|s| s.contains(id))
            .count();
        if places == 0 && accepted.contains(id) {
            lost.push(id.to_string());
        }
        if places > 1 {
            r.ledger_in_several += 1;
        }
    }
    lost.sort();
    r.lost = lost.len();
    r.lost_ids = lost;
    r.ledger_balanced = r.lost == 0 && r.ledger_in_several == 0;

    // Dead letters against the seeded poison.
    r.dead_expected = dead.iter().filter(|id| exp.poison.contains(**id)).count();
    r.dead_unexpected = r.dead - r.dead_expected;
    let with_outcome: HashSet<&str> = ends.iter().map(|e| e.0).collect();
    r.dead_unexpected_not_crash = dead
        .iter()
        .filter(|id| !exp.poison.contains(**id) && with_outcome.contains(**id))
        .count();
    r.poison_not_dead = exp
        .poison
        .iter()
        .filter(|id| accepted.contains(id.as_str()) && !dead.contains(id.as_str()))
        .count();
    r.poison_dead_early = exp
        .poison
        .iter()
        .filter_map(|id| fin.dead.get(id))
        .filter(|&&attempts| attempts < exp.max_attempts)
        .count();
    r.poison_deliveries_max = exp
        .poison
        .iter()
        .map(|id| per_id.get(id.as_str()).map_or(0, |d| d.len() as u32))
        .max()
        .unwrap_or(0);

    // Time kinds: never early; lateness of first deliveries.
    let mut late = Vec::new();
    for ds in per_id.values() {
        let Some(first) = ds.iter().min_by_key(|d| d.taken_ms) else {
            continue;
        };
        if let Some(due) = first.due_ms {
            if first.topic != "prio" {
                if first.taken_ms < due {
                    r.early += 1;
                }
                late.push(first.taken_ms - due);
            }
        }
    }
    late.sort_unstable();
    let pct = |p: f64| -> i64 {
        if late.is_empty() {
            return 0;
        }
        let i = ((late.len() as f64 - 1.0) * p).round() as usize;
        late[i.min(late.len() - 1)]
    };
    r.lateness_ms_p50 = pct(0.5);
    r.lateness_ms_p99 = pct(0.99);
    r.lateness_ms_max = late.last().copied().unwrap_or(0);

    r.priority_inversions = priority_inversions(&per_id, &send_ok_at);
    if exp.serial {
        r.serial_overlaps = serial_overlaps(&deliveries, &ends);
    }
    r
}

fn taken_of(ds: &[&Delivery], token: u64) -> i64 {
    ds.iter()
        .find(|d| d.token == token)
        .map_or(i64::MIN, |d| d.taken_ms)
}

/// First deliveries of the priority topic taken while a higher-priority
/// message of the same slot, accepted at least 100 ms earlier, was still
/// waiting (it was first taken later). Retries and concurrent consumers
/// make some legitimate; reported, not asserted.
fn priority_inversions(
    per_id: &HashMap<&str, Vec<&Delivery>>,
    send_ok_at: &HashMap<&str, i64>,
) -> usize {
    let mut firsts: Vec<(&Delivery, i64)> = per_id
        .values()
        .filter_map(|ds| ds.iter().min_by_key(|d| d.taken_ms).copied())
        .filter(|d| d.topic == "prio")
        .filter_map(|d| send_ok_at.get(d.id).map(|&ok| (d, ok)))
        .collect();
    firsts.sort_by_key(|(d, _)| d.taken_ms);
    let mut inversions = 0;
    for (i, (d, _)) in firsts.iter().enumerate() {
        let p = d.priority.unwrap_or(0);
        let inverted = firsts[i + 1..].iter().any(|(later, ok)| {
            later.slot == d.slot && later.priority.unwrap_or(0) > p && *ok + 100 < d.taken_ms
        });
        if inverted {
            inversions += 1;
        }
    }
    inversions
}

/// Serial mode: two accepted deliveries of one slot whose handlers ran at
/// the same time.
fn serial_overlaps(
    deliveries: &[Delivery],
    ends: &[(&str, u64, i64, i64, &str, &str, u32)],
) -> usize {
    // Tokens count per slot: a delivery is (topic, slot, token).
    let start_of: HashMap<(&str, u32, u64), i64> = deliveries
        .iter()
        .map(|d| ((d.topic, d.slot, d.token), d.start))
        .collect();
    let mut by_slot: HashMap<(&str, u32), Vec<(i64, i64)>> = HashMap::new();
    // A handler's work ends when it sends its ack (`settle_at`); the next
    // owner can only take the slot's next message after that ack ran.
    for &(_, token, settle_at, _end, result, topic, slot) in ends {
        if result != "ack" {
            continue;
        }
        if let Some(&start) = start_of.get(&(topic, slot, token)) {
            by_slot
                .entry((topic, slot))
                .or_default()
                .push((start, settle_at));
        }
    }
    let mut overlaps = 0;
    for v in by_slot.values_mut() {
        v.sort_unstable();
        for w in v.windows(2) {
            if w[1].0 < w[0].1 {
                overlaps += 1;
            }
        }
    }
    overlaps
}

impl Report {
    /// One line for humans.
    pub fn summary(&self, name: &str) -> String {
        format!(
            "{name}: attempted {} accepted {} unknown {} (recovered {}) delivered {} (duplicates {}) \
             acked {} dead {} (expected {}) lost {} unexpected {} early {} lateness p50/p99/max {}/{}/{} ms \
             inversions {} overlaps {} stale acks accepted {} refused {} fenced {} faults {} ledger {}",
            self.attempted,
            self.accepted,
            self.unknown,
            self.recovered,
            self.delivered,
            self.duplicated,
            self.acked,
            self.dead,
            self.dead_expected,
            self.lost,
            self.unexpected,
            self.early,
            self.lateness_ms_p50,
            self.lateness_ms_p99,
            self.lateness_ms_max,
            self.priority_inversions,
            self.serial_overlaps,
            self.stale_acks_accepted,
            self.stale_acks_refused,
            self.fenced_acks_refused,
            self.faults.values().sum::<usize>(),
            if self.ledger_balanced { "balanced" } else { "NOT balanced" }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send(id: &str) -> Vec<Event> {
        vec![
            Event::SendInvoke {
                id: id.into(),
                topic: "prio".into(),
                at: 0,
            },
            Event::SendOk {
                id: id.into(),
                at: 1,
                replicas: None,
            },
        ]
    }

    fn deliver(id: &str, token: u64, taken: i64, start: i64) -> Event {
        Event::Deliver {
            id: id.into(),
            topic: "fixed".into(),
            slot: 0,
            attempt: 1,
            token,
            fence: None,
            taken_ms: taken,
            due_ms: Some(100),
            priority: None,
            start,
            pid: 1,
        }
    }

    fn end(id: &str, token: u64, settle_at: i64, result: &str) -> Event {
        Event::End {
            id: id.into(),
            token,
            settle_at,
            slot: 0,
            topic: "fixed".into(),
            result: result.into(),
            end: settle_at + 1,
            pid: 1,
        }
    }

    fn run(events: Vec<Event>, fin: FinalState, serial: bool) -> Report {
        check(
            &events,
            &fin,
            &Expectations {
                serial,
                ..Default::default()
            },
        )
    }

    #[test]
    fn a_clean_history_balances() {
        let mut ev = send("a");
        ev.extend([deliver("a", 1, 150, 150), end("a", 1, 160, "ack")]);
        let r = run(ev, FinalState::default(), false);
        assert!(r.ledger_balanced && r.lost == 0 && r.duplicated == 0 && r.early == 0);
        assert_eq!((r.acked, r.lateness_ms_max), (1, 50));
    }

    #[test]
    fn an_accepted_message_that_vanished_is_lost() {
        let r = run(send("a"), FinalState::default(), false);
        assert_eq!(r.lost, 1);
        assert!(!r.ledger_balanced);
        // ...but not if it is still pending.
        let fin = FinalState {
            pending: ["a".to_string()].into(),
            ..Default::default()
        };
        assert_eq!(run(send("a"), fin, false).lost, 0);
    }

    #[test]
    fn early_unexpected_and_duplicates_are_counted() {
        let mut ev = send("a");
        ev.extend([
            deliver("a", 1, 90, 90), // due at 100: early
            end("a", 1, 95, "stale"),
            deliver("a", 2, 120, 120),
            end("a", 2, 130, "ack"),
            deliver("ghost", 1, 120, 120),
            end("ghost", 1, 125, "ack"),
        ]);
        let r = run(ev, FinalState::default(), false);
        assert_eq!((r.early, r.unexpected, r.duplicated), (1, 1, 1));
        assert_eq!(r.stale_acks_refused, 1);
    }

    #[test]
    fn an_ack_accepted_after_a_redelivery_is_a_stale_ack_accepted() {
        let mut ev = send("a");
        ev.extend([
            deliver("a", 1, 110, 110),
            deliver("a", 2, 200, 200), // redelivered: token 1 is stale now
            end("a", 1, 300, "ack"),   // ...yet its ack went through
            end("a", 2, 310, "ack"),
        ]);
        let r = run(ev, FinalState::default(), false);
        assert_eq!(r.stale_acks_accepted, 1);
    }

    #[test]
    fn overlapping_accepted_deliveries_of_one_slot_are_serial_overlaps() {
        let mut ev = send("a");
        ev.extend(send("b"));
        ev.extend([
            deliver("a", 1, 110, 110),
            deliver("b", 2, 120, 120),
            end("a", 1, 150, "ack"),
            end("b", 2, 160, "ack"),
        ]);
        assert_eq!(
            run(ev.clone(), FinalState::default(), true).serial_overlaps,
            1
        );
        // A fenced ack does not count: its work was refused.
        ev[6] = end("a", 1, 150, "fenced");
        let fin = FinalState {
            in_flight: ["a".to_string()].into(),
            ..Default::default()
        };
        assert_eq!(run(ev, fin, true).serial_overlaps, 0);
    }

    #[test]
    fn an_ack_of_unknown_outcome_counts_as_acked_when_the_message_is_gone() {
        let mut ev = send("a");
        ev.extend([deliver("a", 1, 110, 110), end("a", 1, 150, "unknown")]);
        let r = run(ev.clone(), FinalState::default(), false);
        assert_eq!(
            (r.lost, r.acks_unknown, r.acked, r.settle_errors),
            (0, 1, 1, 0)
        );
        // Still pending (the lease ran out first): not an ack.
        let fin = FinalState {
            pending: ["a".to_string()].into(),
            ..Default::default()
        };
        let r = run(ev, fin, false);
        assert_eq!((r.lost, r.acks_unknown, r.acked), (0, 0, 0));
    }

    #[test]
    fn a_delivery_cut_short_by_a_crash_and_gone_counts_as_acked() {
        let mut ev = send("a");
        ev.push(deliver("a", 1, 110, 110)); // the process died before writing the end
        let r = run(ev, FinalState::default(), false);
        assert_eq!((r.lost, r.acks_unrecorded, r.acked), (0, 1, 1));
    }
}

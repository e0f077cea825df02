//! I5 Serial: in serial mode no two handlers run at once for one slot, even
//! across owner changes; a consumer that lost a slot's lease can neither
//! take nor settle its messages (fencing by epoch).
#![allow(clippy::unwrap_used)]
mod common;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use rmq::{CancellationToken, ErrorKind, Message, Outcome, TopicKind, TopicSpec};

#[tokio::test]
async fn stale_epochs_are_refused_for_pop_ack_nack_and_extend() {
    let (_s, _c, topic) = setup_with(
        TopicSpec::new("t", TopicKind::Priority)
            .slots(2)
            .lease(Duration::from_millis(400))
            .backoff(Duration::from_millis(10), Duration::from_millis(10)),
    )
    .await;
    // One message per slot.
    let a = topic
        .send(Message::new("a").slot_basis("x"))
        .await
        .unwrap()
        .slot;
    let other = (0..)
        .map(|i| format!("y{i}"))
        .find(|k| rmq::slot_of(k.as_bytes(), 2) != a)
        .unwrap();
    let b = topic
        .send(Message::new("b").slot_basis(other))
        .await
        .unwrap()
        .slot;
    let ttl = Duration::from_millis(150);
    let ea = topic.slot_lease(a, "acquire", "old", 0, ttl).await.unwrap();
    let eb = topic.slot_lease(b, "acquire", "old", 0, ttl).await.unwrap();
    assert!(ea.granted && eb.granted);
    let da = topic
        .take_fenced(a, "old", ea.epoch)
        .await
        .unwrap()
        .unwrap();
    let db = topic
        .take_fenced(b, "old", eb.epoch)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(da.fence, Some(ea.epoch));
    // While "old" holds the leases, "new" is refused.
    assert!(
        !topic
            .slot_lease(a, "acquire", "new", 0, ttl)
            .await
            .unwrap()
            .granted
    );
    tokio::time::sleep(ttl + Duration::from_millis(50)).await;
    let na = topic
        .slot_lease(a, "acquire", "new", 0, ttl * 10)
        .await
        .unwrap();
    let nb = topic
        .slot_lease(b, "acquire", "new", 0, ttl * 10)
        .await
        .unwrap();
    assert!(
        na.granted && na.epoch > ea.epoch && nb.epoch > eb.epoch,
        "epochs grow on a change of owner"
    );

    let before = topic.stats().await.unwrap().total;
    assert_eq!(
        da.extend(Duration::from_secs(5)).await.unwrap_err().kind(),
        ErrorKind::Fenced
    );
    assert_eq!(db.ack().await.unwrap_err().kind(), ErrorKind::Fenced);
    assert_eq!(
        da.nack(None, "late").await.unwrap_err().kind(),
        ErrorKind::Fenced
    );
    assert_eq!(
        topic
            .take_fenced(a, "old", ea.epoch)
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::Fenced
    );
    assert!(
        !topic
            .slot_lease(a, "renew", "old", ea.epoch, ttl)
            .await
            .unwrap()
            .granted
    );
    assert!(
        !topic
            .slot_lease(a, "release", "old", ea.epoch, ttl)
            .await
            .unwrap()
            .granted
    );
    let after = topic.stats().await.unwrap().total;
    assert_eq!(
        (after.in_flight, after.acked, after.retried),
        (before.in_flight, 0, 0),
        "nothing changed"
    );

    // The new owner takes nothing while the old delivery is in flight, and
    // gets it (attempt 2) once its message lease has run out.
    assert!(topic
        .take_fenced(a, "new", na.epoch)
        .await
        .unwrap()
        .is_none());
    tokio::time::sleep(Duration::from_millis(450)).await;
    // The first look rolls the expired delivery back (a retry after a 10 ms backoff).
    let mut d = None;
    for _ in 0..50 {
        d = topic.take_fenced(a, "new", na.epoch).await.unwrap();
        if d.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let d = d.expect("rolled back to the new owner");
    assert_eq!((d.attempt, d.fence), (2, Some(na.epoch)));
    d.ack().await.unwrap();
}

/// I5 across a handover: an owner takes an entity's first message and is
/// gone (frozen, crashed, cut off) before it ends it. The next owner gets
/// nothing while that delivery is in flight, then that very message (its
/// second attempt), then the entity's later messages in order: the
/// rolled-back message goes back at its place, not behind a backoff that
/// would let the later ones go first.
#[tokio::test]
async fn a_delivery_of_a_lost_owner_comes_back_at_its_place_before_the_entitys_later_messages() {
    for kind in [TopicKind::Priority, TopicKind::FixedTime] {
        let (_s, _c, topic) = setup_with(
            TopicSpec::new("t", kind)
                .slots(1)
                .lease(Duration::from_millis(400))
                // A retry after a backoff would come after every later message.
                .backoff(Duration::from_secs(30), Duration::from_secs(30)),
        )
        .await;
        for i in 0..5u64 {
            let m = Message::new(format!("e-{i}")).slot_basis("e");
            let m = match kind {
                TopicKind::FixedTime => m.delay(Duration::from_millis(10 + 10 * i)),
                _ => m,
            };
            topic.send(m).await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(100)).await; // all due
        let ttl = Duration::from_millis(150);
        let old = topic.slot_lease(0, "acquire", "old", 0, ttl).await.unwrap();
        let first = topic
            .take_fenced(0, "old", old.epoch)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(first.payload, b"e-0");
        // "old" is frozen with e-0 in hand: its slot lease runs out, "new" takes the slot.
        tokio::time::sleep(ttl + Duration::from_millis(50)).await;
        let new = topic
            .slot_lease(0, "acquire", "new", 0, Duration::from_secs(120))
            .await
            .unwrap();
        assert!(new.granted && new.epoch > old.epoch);
        let mut handled = Vec::new();
        // (e-0's message lease ends 400 ms after it was taken; a retry
        // after the 30 s backoff would come long after this deadline.)
        let deadline = Instant::now() + Duration::from_secs(10);
        while handled.len() < 5 && Instant::now() < deadline {
            match topic.take_fenced(0, "new", new.epoch).await.unwrap() {
                Some(d) => {
                    handled.push((String::from_utf8(d.payload.clone()).unwrap(), d.attempt));
                    d.ack().await.unwrap();
                }
                None => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
        assert_eq!(
            handled,
            [("e-0", 2), ("e-1", 1), ("e-2", 1), ("e-3", 1), ("e-4", 1)]
                .map(|(p, a)| (p.to_string(), a)),
            "{kind:?}: the entity's messages in order across the handover"
        );
        std::mem::forget(first); // frozen: it never ends
    }
}

type Log = Arc<Mutex<Vec<(u32, u64, Vec<u8>, Instant, Instant)>>>;

/// Handlers of one slot never overlap and keys keep their order; every message is handled.
fn check_log(log: &Log, sent: &HashMap<Vec<u8>, Vec<u32>>) {
    rmq_test_support::check_serial_log(&log.lock().unwrap(), sent);
}

#[tokio::test]
async fn members_joining_and_leaving_never_overlap_a_slot() {
    let (_s, _c, topic) = setup_with(
        TopicSpec::new("t", TopicKind::FixedTime)
            .slots(16)
            .lease(Duration::from_secs(2)),
    )
    .await;
    // 40 entities, 10 messages each, in order per entity (distinct merge keys, one slot basis).
    let mut sent: HashMap<Vec<u8>, Vec<u32>> = HashMap::new();
    let mut msgs = Vec::new();
    for seq in 0..10u32 {
        for e in 0..40 {
            let entity = format!("e{e}");
            msgs.push(
                Message::new(format!("{entity}#{seq}"))
                    .slot_basis(entity.clone())
                    .delay(Duration::from_millis(u64::from(seq) * 5)),
            );
            sent.entry(entity.into_bytes()).or_default().push(seq);
        }
    }
    topic.send_batch(&msgs).await.unwrap();
    let log: Log = Arc::new(Mutex::new(Vec::new()));
    let consumer = |stop: CancellationToken| {
        let topic = topic.clone();
        let log = log.clone();
        tokio::spawn(async move {
            topic
                .consumer()
                .concurrency(4)
                .serial("g")
                .member_timeout(Duration::from_millis(400))
                .slot_lease(Duration::from_millis(400))
                .shutdown_grace(Duration::from_secs(5))
                .run(stop, move |m| {
                    let log = log.clone();
                    async move {
                        let start = Instant::now();
                        tokio::time::sleep(Duration::from_millis(5 + u64::from(m.payload[1] % 10)))
                            .await;
                        log.lock().unwrap().push((
                            m.slot,
                            m.fence.unwrap(),
                            m.payload.clone(),
                            start,
                            Instant::now(),
                        ));
                        Outcome::Ack
                    }
                })
                .await
                .unwrap()
        })
    };
    let (s1, s2, s3) = (
        CancellationToken::new(),
        CancellationToken::new(),
        CancellationToken::new(),
    );
    let c1 = consumer(s1.clone());
    let c2 = consumer(s2.clone());
    tokio::time::sleep(Duration::from_millis(150)).await;
    let c3 = consumer(s3.clone()); // joins
    tokio::time::sleep(Duration::from_millis(250)).await;
    s2.cancel(); // leaves gracefully
    c2.await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while log.lock().unwrap().len() < 400 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    s1.cancel();
    s3.cancel();
    c1.await.unwrap();
    c3.await.unwrap();
    check_log(&log, &sent);
    let st = topic.stats().await.unwrap().total;
    assert_eq!((st.pending, st.in_flight, st.acked), (0, 0, 400));
    let fences: std::collections::HashSet<(u32, u64)> =
        log.lock().unwrap().iter().map(|e| (e.0, e.1)).collect();
    assert!(fences.len() > 16, "owners changed during the run");
}

#[tokio::test]
async fn the_groups_view_shows_each_member_and_the_slots_it_owns() {
    // Rendezvous hashing leaves a member of two with no slot of eight once
    // in 128 runs; with 64 slots that chance is 2^-63.
    let (_s, _c, topic) = setup(TopicKind::Priority, 64).await;
    let view = topic.serial_groups().await.unwrap();
    assert!(view.groups.is_empty() && view.leases.iter().all(|l| l.owner.is_none()));
    let stop = CancellationToken::new();
    let members: Vec<_> = (0..2)
        .map(|_| {
            let (topic, stop) = (topic.clone(), stop.clone());
            tokio::spawn(async move {
                topic
                    .consumer()
                    .serial("g")
                    .run(stop, |_| async { Outcome::Ack })
                    .await
                    .unwrap()
            })
        })
        .collect();
    // Both members join and split the slots between them.
    let deadline = Instant::now() + Duration::from_secs(20);
    let view = loop {
        let v = topic.serial_groups().await.unwrap();
        let settled = v.groups.len() == 1
            && v.groups[0].members.len() == 2
            && v.groups[0].members.iter().all(|m| !m.slots.is_empty())
            && v.leases.iter().all(|l| l.owner.is_some());
        if settled {
            break v;
        }
        assert!(Instant::now() < deadline, "never settled: {v:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let g = &view.groups[0];
    assert_eq!(g.name, "g");
    let mut owned: Vec<u32> = g.members.iter().flat_map(|m| m.slots.clone()).collect();
    owned.sort();
    assert_eq!(
        owned,
        (0..64).collect::<Vec<_>>(),
        "each slot has one owner"
    );
    for m in &g.members {
        assert!(m.alive && m.deadline_ms > view.server_ms, "{m:?}");
        for &s in &m.slots {
            let lease = &view.leases[s as usize];
            assert_eq!(lease.owner.as_deref(), Some(m.id.as_str()));
            assert!(
                lease.epoch >= 1 && lease.until_ms > view.server_ms,
                "{lease:?}"
            );
        }
    }
    stop.cancel();
    for m in members {
        m.await.unwrap();
    }
    // Members that left are gone from the view, and so are their leases.
    let after = topic.serial_groups().await.unwrap();
    assert!(after.groups[0].members.is_empty(), "{after:?}");
    assert!(after.leases.iter().all(|l| l.owner.is_none()));
}

/// A membership backend for the test: every member sees itself among
/// seven members that never hold a lease, so it owns about an eighth of
/// the slots.
struct AmongGhosts;

impl rmq::Coordinator for AmongGhosts {
    fn join(&self, _group: &rmq::GroupRef, member: &str) -> Arc<dyn rmq::Membership> {
        let mut members: Vec<String> = (0..7).map(|i| format!("ghost-{i}")).collect();
        members.push(member.to_string());
        Arc::new(Fixed(members))
    }
}

struct Fixed(Vec<String>);

impl rmq::Membership for Fixed {
    fn heartbeat(
        &self,
        _leaving: bool,
    ) -> rmq::CoordinatorFuture<'_, Result<Vec<String>, rmq::CoordinatorError>> {
        let members = self.0.clone();
        Box::pin(async move { Ok(members) })
    }
}

#[tokio::test]
async fn an_idle_serial_member_looks_only_at_the_slots_it_owns() {
    // 1,024 slots, a member that owns ~128 of them, a safety-net rescan
    // every 500 ms and a lease round every 5 s: over 3 s its rescans may
    // read the head index and look at four of its own slots each, and
    // renew them once, never at the ~900 slots it cannot take from.
    let (server, _c, topic) = setup(TopicKind::FixedTime, 1024).await;
    let stop = CancellationToken::new();
    let lease = Duration::from_secs(20);
    let _s = serial_member(&topic, lease)
        .rescan(Duration::from_millis(500))
        .coordinator(Arc::new(AmongGhosts))
        .stream(stop.clone());
    let owned = eventually_owned(&topic).await;
    assert!((60..=200).contains(&owned), "owns about an eighth: {owned}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = calls(&server).await;
    let ranges_before = command_calls(&server, &["zrange"]).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let idle = calls(&server).await - before;
    let ranges = command_calls(&server, &["zrange"]).await - ranges_before;
    let budget = 8 * owned as u64 + 2 * owned as u64;
    assert!(
        idle <= budget,
        "{idle} script calls in 3 s of idling while owning {owned} slots (budget {budget})"
    );
    // Each rescan reads the topic's head index (on a cluster, one call per
    // master of three) and looks at four of its own slots in turn: six
    // rescans and a renewal round, not a look at each slot it owns.
    let reads = match server {
        Backend::Single(_) => 1,
        Backend::Cluster(_) => 3,
    };
    let most = 6 * (reads + 4) + 10;
    assert!(
        (6..=most).contains(&idle),
        "{idle} script calls in 3 s: six index reads and sweeps (at most {most})"
    );
    // What those reads cost Redis: on a cluster a read reaches only the
    // indexes of the slots it owns (a ZRANGE each; 1,024 of them for the
    // whole topic), on a single node the topic's one index; each look of
    // the sweep's adds a few.
    let ranges_most = 6 * (owned as u64 + 4 * SWEEP_LOOK_RANGES) + 100;
    assert!(
        ranges <= ranges_most,
        "{ranges} ZRANGEs in 3 s of idling while owning {owned} of 1,024 slots (at most {ranges_most})"
    );
    stop.cancel();
}

/// ZRANGEs one look at an empty slot makes at most.
const SWEEP_LOOK_RANGES: u64 = 8;

/// A member of group "g" whose member timeout and slot lease are `lease`.
fn serial_member(topic: &rmq::Topic, lease: Duration) -> rmq::ConsumerBuilder {
    topic
        .consumer()
        .serial("g")
        .member_timeout(lease)
        .slot_lease(lease)
}

/// Every slot's lease epoch, by slot.
async fn lease_epochs(topic: &rmq::Topic) -> Vec<u64> {
    let view = topic.serial_groups().await.unwrap();
    view.leases.iter().map(|l| l.epoch).collect()
}

/// Every slot's lease epoch, once two reads a lease round apart agree.
async fn settled_epochs(topic: &rmq::Topic) -> Vec<u64> {
    let mut last = lease_epochs(topic).await;
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        let now = lease_epochs(topic).await;
        if now == last {
            return now;
        }
        last = now;
    }
    last
}

/// The number of slots whose lease is held, once it stops growing.
async fn eventually_owned(topic: &rmq::Topic) -> usize {
    let mut last = 0;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let held = topic
            .serial_groups()
            .await
            .unwrap()
            .leases
            .iter()
            .filter(|l| l.owner.is_some())
            .count();
        if held > 0 && held == last {
            return held;
        }
        last = held;
    }
    last
}

#[tokio::test]
async fn an_idle_member_renews_its_leases_in_one_call_per_round_per_node() {
    // ~128 leases, a round every 500 ms, no rescan in the window, no
    // membership call (the ghosts' backend answers from memory): each
    // round is one call per node whatever the slot count (the test
    // cluster has three masters).
    let (server, _c, topic) = setup(TopicKind::FixedTime, 1024).await;
    let stop = CancellationToken::new();
    let lease = Duration::from_secs(2);
    let _s = serial_member(&topic, lease)
        .rescan(Duration::from_secs(60))
        .coordinator(Arc::new(AmongGhosts))
        .stream(stop.clone());
    let owned = eventually_owned(&topic).await as u64;
    assert!(owned > 60, "owns about an eighth: {owned}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = calls(&server).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let idle = calls(&server).await - before;
    let (least, most) = match server {
        // About 5 rounds in 3 s (fewer on a loaded machine).
        Backend::Single(_) => (2, 8),
        Backend::Cluster(_) => (2 * 3, 8 * 3),
    };
    assert!(
        (least..=most).contains(&idle),
        "{idle} script calls in 3 s of renewing {owned} leases (expected {least}..={most})"
    );
    assert_eq!(
        eventually_owned(&topic).await as u64,
        owned,
        "every lease still held"
    );
    stop.cancel();
}

#[tokio::test]
async fn a_renewal_refused_for_one_slot_loses_that_slot_and_keeps_the_others() {
    let (server, _c, topic) = setup(TopicKind::Priority, 8).await;
    let stop = CancellationToken::new();
    let lease = Duration::from_millis(1_000);
    let mut s = serial_member(&topic, lease)
        .concurrency(8)
        .stream(stop.clone());
    assert_eq!(eventually_owned(&topic).await, 8, "one member owns all");
    let epochs_before: Vec<u64> = lease_epochs(&topic).await;
    // Another owner takes slot `stolen` at a newer epoch (as after a lease
    // that ran out while this member was frozen), for a minute.
    let stolen = 3u32;
    let epoch = topic.serial_groups().await.unwrap().leases[stolen as usize].epoch;
    let lease_key = topic.keys_of_slot(stolen).pop().unwrap();
    let until = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        + 60_000)
        .to_string();
    raw(
        &server,
        &[
            "HSET",
            &lease_key,
            "owner",
            "thief",
            "epoch",
            &(epoch + 1).to_string(),
            "until",
            &until,
        ],
    )
    .await;
    // Within two rounds the member's renewal of that slot is refused, and
    // only that one: a message there waits, the others are delivered.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let basis = |slot: u32| {
        (0..)
            .map(|i| format!("e{i}"))
            .find(|b| rmq::slot_of(b.as_bytes(), 8) == slot)
            .unwrap()
    };
    for slot in 0..8 {
        topic
            .send(Message::new(format!("s{slot}")).slot_basis(basis(slot)))
            .await
            .unwrap();
    }
    let mut got = Vec::new();
    while let Some(d) = next(&mut s, 3).await {
        got.push(d.slot);
        d.ack().await.unwrap();
    }
    got.sort();
    assert_eq!(got, vec![0, 1, 2, 4, 5, 6, 7], "all but the stolen slot");
    let leases = topic.serial_groups().await.unwrap().leases;
    assert_eq!(leases[stolen as usize].owner.as_deref(), Some("thief"));
    for (slot, l) in leases.iter().enumerate() {
        if slot != stolen as usize {
            assert_eq!(
                l.epoch, epochs_before[slot],
                "slot {slot} was renewed all along, never given up and taken again"
            );
        }
    }
    assert_eq!(
        leases.iter().filter(|l| l.owner.is_some()).count(),
        8,
        "the member still holds the other seven"
    );
    stop.cancel();
}

#[tokio::test]
async fn a_lease_key_of_a_foreign_type_loses_its_slot_only() {
    // One slot's lease key holds a string: renewing it fails. On one node
    // the member's one renewal call fails as a whole, so it renews one
    // call per slot from then on; the other slots are kept all along.
    let (server, _c, topic) = setup(TopicKind::Priority, 8).await;
    let stop = CancellationToken::new();
    let lease = Duration::from_millis(1_000);
    let _s = serial_member(&topic, lease).stream(stop.clone());
    assert_eq!(eventually_owned(&topic).await, 8, "one member owns all");
    let epochs_before: Vec<u64> = lease_epochs(&topic).await;
    let broken = 5u32;
    let lease_key = topic.keys_of_slot(broken).pop().unwrap();
    raw(&server, &["DEL", &lease_key]).await;
    raw(&server, &["SET", &lease_key, "not a lease"]).await;
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    // (The groups view reads every lease and fails on the broken one:
    // read the others' hashes directly.)
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    for slot in (0..8u32).filter(|&s| s != broken) {
        let key = topic.keys_of_slot(slot).pop().unwrap();
        let field = |name: &'static str| {
            let (server, key) = (&server, key.clone());
            async move {
                match raw(server, &["HGET", &key, name]).await {
                    redis::Value::BulkString(b) => String::from_utf8(b).unwrap(),
                    other => panic!("slot {slot} {name}: {other:?}"),
                }
            }
        };
        let epoch: u64 = field("epoch").await.parse().unwrap();
        let until: i64 = field("until").await.parse().unwrap();
        assert_eq!(
            epoch, epochs_before[slot as usize],
            "slot {slot} kept (renewed, never given up and taken again)"
        );
        assert!(until > now, "slot {slot}: its lease is still renewed");
    }
    stop.cancel();
}

#[tokio::test]
async fn a_server_in_cluster_mode_reached_as_one_node_keeps_its_leases() {
    // A server in cluster mode owning every hash slot, reached with
    // `Client::connect`: it refuses a call whose keys span hash slots
    // (CROSSSLOT) though it owns them all, so the member's renewals fall
    // back to one call per slot; its slots are never given up.
    let server = RedisServer::builder().arg("cluster-enabled", "yes").start();
    serve_every_hash_slot(&server).await;
    let client = rmq::Client::connect(&server.url()).await.unwrap();
    let topic = client
        .define_topic(TopicSpec::new("t", TopicKind::Priority).slots(8))
        .await
        .unwrap();
    let stop = CancellationToken::new();
    let lease = Duration::from_millis(1_000);
    let _s = serial_member(&topic, lease).stream(stop.clone());
    assert_eq!(eventually_owned(&topic).await, 8, "one member owns all");
    let before = lease_epochs(&topic).await;
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    let after = lease_epochs(&topic).await;
    assert_eq!(
        after, before,
        "every lease renewed, none given up and taken again"
    );
    stop.cancel();
}

#[tokio::test]
async fn a_member_owning_thousands_of_slots_renews_them_in_chunks_and_keeps_them() {
    // 2,048 leases: two renewal calls of 1,024 per round on one node (one
    // per master on a cluster of three), each answer mapped back to its
    // slot (a mix-up would give slots up).
    let (server, _c, topic) = setup(TopicKind::Priority, 2048).await;
    let stop = CancellationToken::new();
    // A round every second; a round may take a quarter of the lease, which
    // the first round's 2,048 acquires (one call per slot on a cluster, a
    // debug build, a loaded machine) need.
    let lease = Duration::from_millis(4_000);
    let _s = serial_member(&topic, lease)
        .rescan(Duration::from_secs(60))
        .stream(stop.clone());
    assert_eq!(eventually_owned(&topic).await, 2048, "one member owns all");
    // The first round's 2,048 acquires (one call per slot on a cluster)
    // may outlast its quarter of the lease on a loaded machine: Redis
    // granted them, the member took them for refused and acquires them
    // again at a new epoch. What is measured is the steady state after.
    let before = settled_epochs(&topic).await;
    let calls_before = calls(&server).await;
    tokio::time::sleep(Duration::from_millis(3_000)).await;
    let idle = calls(&server).await - calls_before;
    let after = lease_epochs(&topic).await;
    assert_eq!(
        after, before,
        "every lease renewed, none given up and taken again"
    );
    // ~3 rounds of 2 (3 on a cluster) renewal calls and a heartbeat; one
    // call per slot would be over 6,000.
    assert!((3..=30).contains(&idle), "{idle} calls in 3 s");
    stop.cancel();
}

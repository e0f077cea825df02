//! Serial mode across OS processes (I5): several `rmq consume --serial`
//! processes in one group, each running a shell handler that logs its start
//! and end; the log proves that no two handlers of one slot overlapped, that
//! fencing tokens only grew, and that every message was handled — also while
//! members join, leave, are SIGKILLed or frozen past their lease.
#![allow(clippy::unwrap_used)]
mod support;

use std::process::{Child, Stdio};
use std::time::Duration;

use support::serial::*;
use support::*;

#[test]
fn serial_consumer_processes_never_overlap_a_slot_and_keep_entity_order() {
    three_members_handle_each_message_once_in_order(Group::new());
}

/// Three members drain the group's topic: each message handled once, in
/// order per entity, no two handlers of a slot at once.
fn three_members_handle_each_message_once_in_order(g: Group) {
    let cs: Vec<Child> = (0..3).map(|_| g.consumer()).collect();
    g.wait_all_acked();
    for c in cs {
        stop(c);
    }
    assert_eq!(
        g.check(true),
        ENTITIES * PER_ENTITY,
        "each message handled once"
    );
    g.assert_drained();
}

#[test]
fn serial_consumers_with_workers_never_overlap_a_slot_and_keep_entity_order() {
    three_members_handle_each_message_once_in_order(Group::with_workers());
}

#[test]
fn workers_of_members_joining_leaving_and_crashing_never_overlap_a_slot() {
    let g = Group::with_workers();
    let a = g.consumer();
    let b = g.consumer();
    std::thread::sleep(Duration::from_millis(400));
    let c = g.consumer(); // joins
    std::thread::sleep(Duration::from_millis(300));
    let mut a = a;
    kill("-9", &a.id().to_string()); // crashes: its workers die with it
    let _ = a.wait();
    stop(b); // leaves gracefully
    let d = g.consumer(); // joins late
    g.wait_all_acked();
    for x in [c, d] {
        stop(x);
    }
    assert!(g.check(false) >= ENTITIES * PER_ENTITY);
    g.assert_drained();
}

#[test]
fn joins_leaves_crashes_and_a_frozen_member_never_overlap_a_slot() {
    let g = Group::new();
    let a = g.consumer();
    let b = g.consumer();
    let c = g.consumer();
    std::thread::sleep(Duration::from_millis(400));
    let d = g.consumer(); // joins
    std::thread::sleep(Duration::from_millis(300));
    // Freeze b past its slot lease and its message lease, then let it go on.
    kill("-STOP", &b.id().to_string());
    let mut a = a;
    kill("-9", &a.id().to_string()); // crashes
    let _ = a.wait();
    std::thread::sleep(Duration::from_millis(2_000));
    kill("-CONT", &b.id().to_string());
    stop(c); // leaves gracefully
    let e = g.consumer(); // joins late
    g.wait_all_acked();
    for x in [b, d, e] {
        stop(x);
    }
    let runs = g.check(false);
    assert!(runs >= ENTITIES * PER_ENTITY);
    g.assert_drained();
}

#[test]
fn a_member_that_owns_no_slot_renews_nothing_and_stays_quiet() {
    // Two members, one slot: one of them owns nothing. Its lease keeper has
    // nothing to renew and must not fail at every tick (that noise would
    // hide a real renewal failure).
    let env = Env::new();
    env.ok(&[
        "topic",
        "create",
        "one",
        "--kind",
        "fixed-time",
        "--slots",
        "1",
    ]);
    let dir = tempfile::tempdir().unwrap();
    let members: Vec<(Child, std::path::PathBuf)> = (0..2)
        .map(|i| {
            let err = dir.path().join(format!("m{i}.err"));
            let child = env
                .cmd(&[
                    "consume",
                    "one",
                    "--serial",
                    "--group",
                    "g",
                    "--member-timeout",
                    "600",
                    "--slot-lease",
                    "600",
                    "--idle-exit",
                    "2000",
                ])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&err).unwrap())
                .spawn()
                .unwrap();
            (child, err)
        })
        .collect();
    for (mut child, err) in members {
        let status = wait_limited(&mut child, Duration::from_secs(15)).expect("idle exit");
        let said = std::fs::read_to_string(err).unwrap();
        assert!(status.success(), "{said}");
        assert!(
            !said.contains("slot leases failed") && !said.contains("empty command"),
            "a member with nothing to renew reported failures:\n{said}"
        );
    }
}

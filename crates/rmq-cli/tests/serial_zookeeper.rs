//! Serial mode coordinated by ZooKeeper (`--coordinator zk://…`), across
//! OS processes, each with its own ZooKeeper session, against a real
//! ZooKeeper (standalone, or a three-server ensemble) that the test starts:
//! the same handler log and checks as the Redis-coordinated suite (no two
//! handlers of a slot overlap, fences only grow, every message handled,
//! once and in order where nothing died), while members join, leave, are
//! SIGKILLed or frozen past their session, while ZooKeeper's leader is
//! killed, and while ZooKeeper is down altogether.
#![allow(clippy::unwrap_used)]
mod support;

use std::process::Child;
use std::time::Duration;

use rmq_test_support::{ZooKeeperEnsemble, ZooKeeperServer};
use support::serial::*;
use support::*;

/// Membership flags: ZooKeeper at `address`, a session (member timeout)
/// and a slot lease of the given milliseconds.
fn zk_group(address: &str, session_ms: u32, lease_ms: u32) -> Group {
    Group::with(&[
        "--coordinator",
        address,
        "--member-timeout",
        &session_ms.to_string(),
        "--slot-lease",
        &lease_ms.to_string(),
    ])
}

/// Member znodes ZooKeeper holds (the members are its only ephemerals).
fn members_in(zk: &ZooKeeperServer) -> usize {
    zk.monitor()
        .get("zk_ephemerals_count")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn stop_all(members: Vec<Child>) {
    for m in members {
        stop(m);
    }
}

#[test]
fn zookeeper_members_never_overlap_a_slot_and_keep_entity_order() {
    let zk = ZooKeeperServer::start();
    let g = zk_group(&zk.address("rmq"), 600, 600);
    let members: Vec<Child> = (0..3).map(|_| g.consumer()).collect();
    assert!(
        eventually(Duration::from_secs(60), || members_in(&zk) >= 3),
        "each member is a znode"
    );
    g.wait_all_acked();
    stop_all(members);
    assert!(
        eventually(Duration::from_secs(10), || members_in(&zk) == 0),
        "members that stopped deleted their znodes"
    );
    assert_eq!(g.check(true), ENTITIES * PER_ENTITY, "each message once");
    g.assert_drained();
    let said = g.said();
    assert!(!said.contains("ERROR"), "{said}");
}

#[test]
fn zookeeper_members_joining_leaving_crashing_and_frozen_past_their_session_never_overlap() {
    let zk = ZooKeeperServer::start();
    let g = zk_group(&zk.address("rmq"), 600, 600);
    let mut a = g.consumer();
    let b = g.consumer();
    let c = g.consumer();
    std::thread::sleep(Duration::from_millis(800));
    let d = g.consumer(); // joins
    std::thread::sleep(Duration::from_millis(500));
    // b frozen past its session (and its leases), a killed: ZooKeeper
    // expires both sessions and the others rebalance.
    kill("-STOP", &b.id().to_string());
    kill("-9", &a.id().to_string());
    let _ = a.wait();
    std::thread::sleep(Duration::from_millis(2_000));
    kill("-CONT", &b.id().to_string());
    stop(c); // leaves gracefully
    let e = g.consumer(); // joins late
    g.wait_all_acked();
    stop_all(vec![b, d, e]);
    assert!(g.check(false) >= ENTITIES * PER_ENTITY);
    g.assert_drained();
    let said = g.said();
    assert!(
        said.contains("session expired"),
        "the frozen member's session should have expired:\n{said}"
    );
}

#[test]
fn a_member_whose_session_expired_while_its_slot_leases_ran_never_overlaps() {
    // Sessions of 400 ms, slot leases of 5 s: freezing a member for 1.5 s
    // expires its session (the others see it leave and want its slots)
    // while its leases still run in Redis (they cannot have them yet).
    let zk = ZooKeeperServer::start();
    let g = zk_group(&zk.address("rmq"), 400, 5_000);
    let a = g.consumer();
    let b = g.consumer();
    std::thread::sleep(Duration::from_millis(1_500));
    let before = g.acked();
    kill("-STOP", &b.id().to_string());
    std::thread::sleep(Duration::from_millis(1_500));
    kill("-CONT", &b.id().to_string());
    g.wait_all_acked();
    stop_all(vec![a, b]);
    assert!(before > 0, "consumption had started");
    assert!(g.check(false) >= ENTITIES * PER_ENTITY);
    g.assert_drained();
    let said = g.said();
    assert!(
        said.contains("session expired"),
        "b should have found its session expired:\n{said}"
    );
}

#[test]
fn the_zookeeper_leader_killed_under_traffic_loses_nothing() {
    let mut ensemble = ZooKeeperEnsemble::start();
    let g = zk_group(&ensemble.address("rmq"), 4_000, 1_500);
    let members: Vec<Child> = (0..3).map(|_| g.consumer()).collect();
    assert!(
        eventually(Duration::from_secs(20), || g.acked() > 0),
        "consumption starts"
    );
    let leader = ensemble.leader(Duration::from_secs(10)).expect("a leader");
    ensemble.kill(leader);
    let acked_at_kill = g.acked();
    let new_leader = ensemble.leader(Duration::from_secs(30));
    assert!(
        new_leader.is_some_and(|l| l != leader),
        "the two others elect a leader"
    );
    g.wait_all_acked();
    assert!(g.acked() > acked_at_kill, "consumption went on");
    stop_all(members);
    // No member died: every message once, in order.
    assert_eq!(g.check(true), ENTITIES * PER_ENTITY);
    g.assert_drained();
}

#[test]
fn zookeeper_killed_past_the_sessions_keeps_the_owned_slots_going_and_loses_nothing() {
    outage_keeps_the_owned_slots_going(ZooKeeperServer::kill, ZooKeeperServer::restart);
}

#[test]
fn zookeeper_frozen_past_the_sessions_keeps_the_owned_slots_going_and_loses_nothing() {
    // SIGSTOP: connections stay open and nothing answers.
    outage_keeps_the_owned_slots_going(ZooKeeperServer::pause, ZooKeeperServer::resume);
}

/// Sessions of 1 s: after 1.4 s without an answer the client gives them
/// up. The members keep the slots whose leases they hold all the same,
/// and every message is handled once, in order.
fn outage_keeps_the_owned_slots_going(
    stop: fn(&mut ZooKeeperServer),
    back: fn(&mut ZooKeeperServer),
) {
    let mut zk = ZooKeeperServer::start();
    let g = zk_group(&zk.address("rmq"), 1_000, 800);
    let members: Vec<Child> = (0..2).map(|_| g.consumer()).collect();
    // (A session that expired on a loaded machine leaves its znode behind
    // for a while: at least the two members.)
    assert!(
        eventually(Duration::from_secs(60), || members_in(&zk) >= 2
            && g.acked() > 0),
        "both members joined through ZooKeeper and consumption started"
    );
    std::thread::sleep(Duration::from_millis(500));
    stop(&mut zk);
    // Past 1.4 sessions, with ZooKeeper still silent, the members handle
    // every message of the slots they own: all of them. (The library test
    // `members_keep_their_slots_through_a_zookeeper_outage_longer_than_their_session`
    // checks the lease owners themselves.)
    std::thread::sleep(Duration::from_millis(1_600));
    g.wait_all_acked();
    back(&mut zk);
    stop_all(members);
    // Nobody died and nobody lost a slot: once each, in order.
    assert_eq!(g.check(true), ENTITIES * PER_ENTITY);
    g.assert_drained();
}

#[test]
fn an_unreachable_or_malformed_coordinator_stops_the_consumer_before_it_takes_anything() {
    let env = Env::new();
    env.ok(&["topic", "create", "s", "--kind", "priority", "--slots", "4"]);
    env.rmq_in(&["send", "s", "--key", "k"], b"p").success();
    let port = rmq_test_support::free_port();
    let unreachable = format!("zk://127.0.0.1:{port}/rmq");
    let r = env.rmq(&[
        "consume",
        "s",
        "--serial",
        "--coordinator",
        &unreachable,
        "--member-timeout",
        "1000",
    ]);
    assert!(r.one_error(1).contains("is unreachable"), "{r:?}");
    for bad in [
        "zk://127.0.0.1/rmq",
        "zk://127.0.0.1:2181",
        "etcd://x:1/rmq",
    ] {
        let r = env.rmq(&["consume", "s", "--serial", "--coordinator", bad]);
        assert_eq!(r.code, 2, "{bad}: {r:?}");
    }
    let st = env.stats("s");
    assert_eq!(st["delivered"].as_u64(), Some(0), "nothing was taken");
}

#[test]
fn a_consumer_started_before_zookeeper_waits_for_it_and_then_consumes() {
    // A whole-cluster reboot starts consumers and ZooKeeper together: the
    // consumer keeps trying (for --coordinator-wait) instead of exiting.
    let env = Env::new();
    env.ok(&["topic", "create", "s", "--kind", "priority", "--slots", "2"]);
    env.rmq_in(&["send", "s", "--key", "k"], b"p").success();
    let mut zk = ZooKeeperServer::start();
    let address = zk.address("rmq");
    zk.kill(); // down when the consumer starts, back on the same port later
    let mut consumer = env
        .cmd(&[
            "consume",
            "s",
            "--serial",
            "--coordinator",
            &address,
            "--member-timeout",
            "1000",
            "--coordinator-wait",
            "60000",
            "--max",
            "1",
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(2_500));
    assert!(
        consumer.try_wait().unwrap().is_none(),
        "the consumer waits for ZooKeeper"
    );
    zk.restart();
    let status =
        wait_limited(&mut consumer, Duration::from_secs(60)).expect("it consumes and stops");
    assert!(status.success(), "{status:?}");
    assert_eq!(env.stats("s")["acked"].as_u64(), Some(1));
}

#[test]
fn a_coordinator_that_stays_unreachable_fails_after_the_wait_with_a_clear_error() {
    let env = Env::new();
    env.ok(&["topic", "create", "s", "--kind", "priority", "--slots", "2"]);
    let port = rmq_test_support::free_port();
    let unreachable = format!("zk://127.0.0.1:{port}/rmq");
    let started = std::time::Instant::now();
    let r = env.rmq(&[
        "consume",
        "s",
        "--serial",
        "--coordinator",
        &unreachable,
        "--member-timeout",
        "1000",
        "--coordinator-wait",
        "1500",
    ]);
    assert!(r.one_error(1).contains("is unreachable"), "{r:?}");
    assert!(
        started.elapsed() >= Duration::from_millis(1_500),
        "it kept trying for the wait"
    );
}

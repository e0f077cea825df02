//! The chaos scenarios that CI runs: each one is the real `rmq-chaos run`
//! (producers, consumers and the fault injector as separate processes), and
//! each must end with the checker's verdict "ok". They run one at a time:
//! two at once on a 2-core machine would measure the machine, not rmq.
//!
//! Each run also must leave no process behind: everything it starts (its
//! workers, faketime's children, its redis-servers) inherits a tag in its
//! environment, and a tagged process still alive after the run fails the
//! test (and is killed).
#![allow(clippy::unwrap_used)]

use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use rmq_test_support::reap;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn scenario(name: &str) -> serde_json::Value {
    let _guard = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let out_dir = tempfile_dir(name);
    let tag = format!("{name}-{}", std::process::id());
    let out = Command::new(env!("CARGO_BIN_EXE_rmq-chaos"))
        .args(["run", name, "--seed", "7", "--out"])
        .arg(&out_dir)
        .env(TAG, &tag)
        .output()
        .unwrap();
    let leaked = no_process_left(&tag);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let json: serde_json::Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("no JSON verdict ({e}): {stdout}\n{stderr}"));
    assert_eq!(json["ok"], true, "{json:#}");
    assert!(out.status.success());
    assert!(leaked.is_empty(), "processes outlived the run: {leaked:?}");
    let _ = std::fs::remove_dir_all(&out_dir);
    json
}

/// The environment variable that marks everything one run started.
const TAG: &str = "RMQ_CHAOS_TEST_RUN";

/// Tagged processes still alive a few seconds after the run ended (each
/// described), after killing them.
fn no_process_left(tag: &str) -> Vec<String> {
    let left = reap::wait_until_none(Duration::from_secs(3), || reap::with_env(TAG, tag));
    for p in &left {
        // Just seen alive with our tag: the PID is still that process.
        reap::signal_pid(p.pid, "KILL");
    }
    left.iter().map(reap::Proc::describe).collect()
}

fn tempfile_dir(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("rmq-chaos-test-{name}-{}", std::process::id()))
}

#[test]
fn baseline_delivers_every_message_exactly_once() {
    let r = scenario("baseline");
    let rep = &r["report"];
    assert_eq!(rep["lost"], 0);
    assert_eq!(rep["duplicated"], 0);
    assert_eq!(rep["accepted"], rep["acked"]);
}

#[test]
fn single_node_chaos_loses_nothing() {
    let r = scenario("chaos");
    let rep = &r["report"];
    assert_eq!(rep["lost"], 0);
    assert_eq!(rep["early"], 0);
    assert_eq!(rep["stale_acks_accepted"], 0);
    assert!(rep["faults"].as_object().unwrap().len() >= 6, "{rep}");
}

#[test]
fn poison_messages_end_dead_without_a_crash_loop() {
    let r = scenario("poison");
    assert!(r["report"]["dead_expected"].as_u64().unwrap() > 0);
    assert_eq!(r["report"]["poison_not_dead"], 0);
}

#[test]
fn a_zombie_serial_owner_never_overlaps_the_new_one() {
    let r = scenario("zombie");
    assert_eq!(r["report"]["serial_overlaps"], 0);
}

#[test]
fn kill_9_of_redis_with_appendfsync_always_loses_nothing() {
    let r = scenario("durable-always");
    assert_eq!(r["report"]["lost"], 0);
}

#[test]
fn kill_9_of_redis_with_appendfsync_everysec_loses_at_most_the_last_second() {
    scenario("durable-everysec");
}

#[test]
fn skewed_client_clocks_change_nothing() {
    let r = scenario("clock-skew");
    assert_eq!(r["report"]["early"], 0);
    assert_eq!(r["report"]["duplicated"], 0);
}

#[test]
fn cluster_failover_with_plain_sends_is_accounted_for() {
    // Lost acknowledged writes are allowed only from just before the kill
    // (asynchronous replication); the checker counts them exactly.
    scenario("cluster-failover");
}

#[test]
fn cluster_failover_with_durable_sends_loses_nothing() {
    let r = scenario("cluster-failover-durable");
    assert_eq!(r["report"]["lost"], 0);
}

#[test]
fn resharding_under_traffic_loses_nothing() {
    let r = scenario("cluster-reshard");
    assert_eq!(r["report"]["lost"], 0);
}

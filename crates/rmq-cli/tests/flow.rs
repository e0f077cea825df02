//! A topic's rate limit across OS processes: three `rmq consume` processes
//! share one topic limited with `--rate 1000/s --burst 100`; over ten
//! seconds they deliver rate x time + burst within 5%, never more than the
//! limit allows in any span (server clock, `taken_ms`), and a live
//! `rmq topic update --rate 200/s` is followed within a second.
//!
//! A topic's in-flight cap across OS processes: three `rmq consume
//! --concurrency 16` processes on a topic with `--max-in-flight 8` never run
//! more than 8 handlers at once (a log the handlers append to says so), and
//! the permits of a consumer killed with SIGKILL come back after its lease.
//!
//! A bounded topic from the command line: exit code 75 and one line when
//! full, merges pass, batches report per message, `topic recount`.
#![allow(clippy::unwrap_used)]
mod support;

use std::process::{Child, Stdio};
use std::time::Duration;

use rmq_test_support::densest;
use serde_json::Value;
use support::*;

fn consumer(env: &Env, path: &std::path::Path) -> Child {
    let file = std::fs::File::create(path).unwrap();
    env.cmd(&[
        "--json",
        "consume",
        "r",
        "--concurrency",
        "16",
        "--idle-exit",
        "1500",
    ])
    .stdout(Stdio::from(file))
    .stderr(Stdio::null())
    .spawn()
    .unwrap()
}

#[test]
fn three_processes_share_one_rate_limit_and_follow_its_change() {
    let env = Env::new();
    env.ok(&[
        "topic", "create", "r", "--kind", "priority", "--slots", "16", "--rate", "1000/s",
        "--burst", "100",
    ]);
    let v = &env.ok(&["--json", "topic", "show", "r"]).json()[0];
    assert_eq!(
        (v["rate_per_sec"].as_u64(), v["rate_burst"].as_u64()),
        (Some(1000), Some(100))
    );
    // More than ten seconds can take: 14,000 messages.
    for part in 0..2 {
        let lines: String = (0..7_000)
            .map(|i| format!("{{\"payload\":\"v\",\"key\":\"k{part}-{i}\",\"priority\":1}}\n"))
            .collect();
        env.rmq_in(&["send", "r", "--batch"], lines.as_bytes())
            .success();
    }
    let dir = tempfile::tempdir().unwrap();
    let paths: Vec<_> = (0..3).map(|n| dir.path().join(format!("c{n}"))).collect();
    let mut children: Vec<Child> = paths.iter().map(|p| consumer(&env, p)).collect();
    std::thread::sleep(Duration::from_secs(10));
    env.ok(&["topic", "update", "r", "--rate", "200/s", "--burst", "100"]);
    // The server's clock now (a lookup answers with it).
    let changed_ms = env.ok(&["--json", "get", "r", "no-such-key"]).json()[0]["server_ms"]
        .as_i64()
        .unwrap();
    std::thread::sleep(Duration::from_secs(3));
    env.ok(&["topic", "pause", "r"]);
    for c in &mut children {
        wait_limited(c, Duration::from_secs(60)).expect("consumers exit when idle");
    }
    let mut times: Vec<i64> = paths
        .iter()
        .flat_map(|p| {
            std::fs::read_to_string(p)
                .unwrap()
                .lines()
                .map(|l| {
                    serde_json::from_str::<Value>(l).unwrap()["taken_ms"]
                        .as_i64()
                        .unwrap()
                })
                .collect::<Vec<_>>()
        })
        .collect();
    times.sort();
    let first = times[0];
    let before: Vec<i64> = times.iter().copied().filter(|&t| t < changed_ms).collect();
    let after: Vec<i64> = times
        .iter()
        .copied()
        .filter(|&t| t >= changed_ms + 1_000)
        .collect();
    let secs = (changed_ms - first) as f64 / 1000.0;
    let expected = 100.0 + 1000.0 * secs;
    eprintln!(
        "{} delivered in {secs:.2} s at 1000/s (expected {expected:.0}); densest second {}; \
         {} in the {} ms from a second after the change to 200/s",
        before.len(),
        densest(&before, 1_000),
        after.len(),
        times.last().unwrap() - changed_ms - 1_000
    );
    let got = before.len() as f64;
    assert!(
        (got - expected).abs() <= expected * 0.05,
        "{got} delivered, expected {expected:.0} within 5%"
    );
    // Any span: at most burst + rate x (span + 200 ms for the take->pop trip).
    for span in [100, 1_000, 5_000] {
        let cap = |rate: f64| (100.0 + rate * (span as f64 + 200.0) / 1000.0) as usize;
        assert!(densest(&before, span) <= cap(1000.0), "{span} ms at 1000/s");
        assert!(densest(&after, span) <= cap(200.0), "{span} ms at 200/s");
    }
}

/// Sends `n` priority messages `k0`, `k1`, ... to `topic`.
fn fill(env: &Env, topic: &str, n: usize) {
    let lines: String = (0..n)
        .map(|i| format!("{{\"payload\":\"v\",\"key\":\"k{i}\",\"priority\":1}}\n"))
        .collect();
    env.rmq_in(&["send", topic, "--batch"], lines.as_bytes())
        .success();
}

/// The most lines `+` not yet followed by a `-` at any point of the log.
fn most_at_once(log: &str) -> usize {
    let (mut now, mut most) = (0i64, 0i64);
    for l in log.lines() {
        now += if l == "+" { 1 } else { -1 };
        most = most.max(now);
    }
    usize::try_from(most).unwrap_or(0)
}

#[test]
fn three_processes_never_run_more_than_the_in_flight_cap() {
    let env = Env::new();
    env.ok(&[
        "topic",
        "create",
        "c",
        "--kind",
        "priority",
        "--slots",
        "16",
        "--max-in-flight",
        "8",
    ]);
    let v = &env.ok(&["--json", "topic", "show", "c"]).json()[0];
    assert_eq!(v["max_in_flight"].as_u64(), Some(8));
    fill(&env, "c", 240);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("handlers.log");
    // Appends of a few bytes are atomic: the log's order is the order in
    // which handlers started and finished, each inside its delivery.
    let handler = format!(
        "echo + >> {log}; sleep 0.05; echo - >> {log}",
        log = log.display()
    );
    let mut children: Vec<Child> = (0..3)
        .map(|_| {
            env.cmd(&[
                "consume",
                "c",
                "--concurrency",
                "16",
                "--idle-exit",
                "1500",
                "--exec",
                &handler,
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
        })
        .collect();
    for c in &mut children {
        wait_limited(c, Duration::from_secs(120)).expect("consumers exit when idle");
    }
    let log = std::fs::read_to_string(&log).unwrap();
    let most = most_at_once(&log);
    eprintln!(
        "{} handler runs, at most {most} at once under a cap of 8",
        log.lines().count() / 2
    );
    assert_eq!(log.lines().count(), 480, "every message handled once");
    assert!(most <= 8, "{most} handlers at once under a cap of 8");
    assert!(
        most >= 6,
        "only {most} at once: the cap should be nearly reached"
    );
}

#[test]
fn a_killed_consumers_permits_come_back_after_its_lease() {
    let env = Env::new();
    env.ok(&[
        "topic",
        "create",
        "k",
        "--kind",
        "priority",
        "--slots",
        "4",
        "--max-in-flight",
        "8",
        "--lease",
        "2000",
        "--backoff",
        "1",
        "--backoff-max",
        "1",
    ]);
    fill(&env, "k", 30);
    // The first consumer takes 8 and keeps them (its handlers hang; their
    // leases, and the permits with them, are extended while it lives).
    let mut stuck = env
        .cmd(&["consume", "k", "--concurrency", "16", "--exec", "sleep 600"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let in_flight = || env.ok(&["--json", "stats", "k"]).json()[0]["in_flight"].as_u64();
    assert!(
        eventually(Duration::from_secs(20), || in_flight() == Some(8)),
        "the first consumer should hold 8"
    );
    // Longer than a lease: the permits are still held.
    std::thread::sleep(Duration::from_millis(3_000));
    assert_eq!(in_flight(), Some(8), "the cap holds while its holder lives");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("second");
    let mut second = env
        .cmd(&[
            "--json",
            "consume",
            "k",
            "--concurrency",
            "16",
            "--idle-exit",
            "8000",
        ])
        .stdout(Stdio::from(std::fs::File::create(&out).unwrap()))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1_000));
    assert_eq!(
        std::fs::read_to_string(&out).unwrap().lines().count(),
        0,
        "nothing for a second consumer while the cap is held"
    );
    kill("-9", &stuck.id().to_string());
    let _ = stuck.wait();
    // Lease 2 s + the permits' 1 s margin, then everything drains.
    wait_limited(&mut second, Duration::from_secs(60))
        .expect("the second consumer exits when idle");
    let handled = std::fs::read_to_string(&out).unwrap().lines().count();
    assert_eq!(
        handled, 30,
        "all 30, the 8 the killed consumer held among them"
    );
    let s = &env.ok(&["--json", "stats", "k"]).json()[0];
    assert_eq!(
        (s["acked"].as_u64(), s["in_flight"].as_u64()),
        (Some(30), Some(0))
    );
}

#[test]
fn one_process_consumes_several_topics_in_one_pool_with_fixed_or_adaptive_shares() {
    let env = Env::new();
    for t in ["a", "b"] {
        env.ok(&["topic", "create", t, "--kind", "priority", "--slots", "4"]);
        let lines: String = (0..60)
            .map(|i| format!("{{\"payload\":\"v\",\"key\":\"{t}{i}\",\"priority\":1}}\n"))
            .collect();
        env.rmq_in(&["send", t, "--batch"], lines.as_bytes())
            .success();
    }
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("handlers.log");
    // Each handler logs "+a" / "-a" around its work (its topic from RMQ_TOPIC).
    let handler = format!(
        "echo +$RMQ_TOPIC >> {log}; sleep 0.02; echo -$RMQ_TOPIC >> {log}",
        log = log.display()
    );
    let run = env.rmq(&[
        "-v",
        "consume",
        "a,b",
        "--concurrency",
        "8",
        "--idle-exit",
        "1500",
        "--no-adaptive",
        "--share-max",
        "a=2",
        "--exec",
        &handler,
    ]);
    let run = run.success();
    assert!(run.stderr.contains("pool limits: a 2"), "{}", run.stderr);
    assert!(
        run.stderr.contains("pool limits at the end"),
        "{}",
        run.stderr
    );
    let text = std::fs::read_to_string(&log).unwrap();
    let (mut now, mut most_a, mut most) = ([0i64; 2], 0, 0);
    for l in text.lines() {
        let i = usize::from(l.ends_with('b'));
        now[i] += if l.starts_with('+') { 1 } else { -1 };
        most_a = most_a.max(now[0]);
        most = most.max(now[0] + now[1]);
    }
    assert_eq!(
        text.lines().count(),
        240,
        "every message of both topics, once"
    );
    assert!(most_a <= 2, "{most_a} of a at once with --share-max a=2");
    assert!(most <= 8, "{most} at once in a pool of 8");
    for t in ["a", "b"] {
        assert_eq!(env.stats(t)["acked"].as_u64(), Some(60));
    }
    // Adaptive (the default) consumes the same way.
    for t in ["a", "b"] {
        let lines: String = (0..30)
            .map(|i| format!("{{\"payload\":\"v\",\"key\":\"n{t}{i}\",\"priority\":1}}\n"))
            .collect();
        env.rmq_in(&["send", t, "--batch"], lines.as_bytes())
            .success();
    }
    let out = env.ok(&[
        "--json",
        "consume",
        "b,a",
        "--concurrency",
        "8",
        "--idle-exit",
        "1000",
    ]);
    assert_eq!(out.json().len(), 60);
}

#[test]
fn pool_flags_are_checked_before_anything_is_consumed() {
    let env = Env::new();
    env.ok(&["topic", "create", "a", "--kind", "priority"]);
    env.ok(&["topic", "create", "b", "--kind", "priority"]);
    let e = env.rmq(&["consume", "a", "--no-adaptive"]).one_error(2);
    assert!(e.contains("several topics"), "{e}");
    let e = env
        .rmq(&["consume", "a,b", "--share-max", "c=2"])
        .one_error(2);
    assert!(e.contains("\"c\""), "{e}");
    let e = env.rmq(&["consume", "a,a"]).one_error(2);
    assert!(e.contains("twice"), "{e}");
    // Clap's own usage error (with its hint line).
    let r = env.rmq(&["consume", "a,b", "--share-min", "a=x"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("\"x\" is not a whole number"), "{r:?}");
    let e = env.rmq(&["consume", "a,nope", "--max", "1"]).one_error(2);
    assert!(e.contains("nope"), "{e}");
}

/// A bounded topic from the command line: `--max-pending 3` takes three
/// new messages; a fourth is refused with exit code 75 (retry later) and
/// one error line; a merge still succeeds; a batch reports each refusal on
/// its own line and exits 75 when only full refusals happened; a consumer
/// makes room; `topic show` says how full it is; `topic recount` counts
/// again.
#[test]
fn a_full_topic_refuses_sends_with_exit_code_75_and_takes_merges() {
    let env = Env::new();
    env.ok(&[
        "topic",
        "create",
        "b",
        "--kind",
        "priority",
        "--slots",
        "2",
        "--max-pending",
        "3",
    ]);
    fill(&env, "b", 3);
    let full = env.rmq(&["send", "b", "new", "--key", "z", "--priority", "1"]);
    let line = full.one_error(75);
    assert!(
        line.contains("full") && line.contains("bound of 3"),
        "{line}"
    );
    env.ok(&["send", "b", "newer", "--key", "k0", "--priority", "1"]);
    let show = env.ok(&["topic", "show", "b"]);
    assert!(
        show.stdout
            .contains("3 messages waiting or in flight (3 counted now)"),
        "{show:?}"
    );
    // A batch: one merge and two new messages on a full topic.
    let lines = "{\"payload\":\"v\",\"key\":\"k1\",\"priority\":1}\n\
                 {\"payload\":\"v\",\"key\":\"n1\",\"priority\":1}\n\
                 {\"payload\":\"v\",\"key\":\"n2\",\"priority\":1}\n";
    let batch = env.rmq_in(&["send", "b", "--batch"], lines.as_bytes());
    assert_eq!(batch.code, 75, "{batch:?}");
    let errors: Vec<&str> = batch.stderr.lines().collect();
    assert_eq!(errors.len(), 2, "{batch:?}");
    assert!(
        errors[0].starts_with("error: line 2: the topic is full"),
        "{batch:?}"
    );
    assert!(
        errors[1].starts_with("error: line 3: the topic is full"),
        "{batch:?}"
    );
    assert!(
        batch
            .stdout
            .contains("1 merged into waiting messages, 2 refused (2 because the topic is full"),
        "{batch:?}"
    );
    // A consumer acks all three: room for three again.
    env.ok(&["consume", "b", "--max", "3"]);
    assert!(
        eventually(Duration::from_secs(10), || {
            env.rmq(&["send", "b", "again", "--key", "z", "--priority", "1"])
                .code
                == 0
        }),
        "room never came back"
    );
    let v = env.ok(&["--json", "topic", "show", "b"]).json();
    assert_eq!(
        (&v[0]["max_pending"], &v[0]["bound_held"]),
        (&3.into(), &1.into()),
        "{v:?}"
    );
    // A recount agrees with what the topic holds; an unbounded topic has
    // nothing to recount.
    let r = env.ok(&["topic", "recount", "b"]);
    assert!(
        r.stdout
            .contains("1 messages counted against its bound of 3 (was 1)"),
        "{r:?}"
    );
    env.ok(&["topic", "create", "u", "--kind", "priority"]);
    let line = env.rmq(&["topic", "recount", "u"]).one_error(2);
    assert!(line.contains("not bounded"), "{line}");
}

//! A topic's rate limit across OS processes: three `rmq consume` processes
//! share one topic limited with `--rate 1000/s --burst 100`; over ten
//! seconds they deliver rate x time + burst within 5%, never more than the
//! limit allows in any span (server clock, `taken_ms`), and a live
//! `rmq topic update --rate 200/s` is followed within a second.
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

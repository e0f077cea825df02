//! Runs `rmq-bench --smoke` end to end against a throwaway redis-server.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn smoke_run_prints_json_for_every_scenario() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_rmq-bench"))
        .arg("--smoke")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("rmq-bench starts");
    let mut stdout = child.stdout.take().expect("stdout piped");
    let mut stderr = child.stderr.take().expect("stderr piped");
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });

    // Never hang CI: the smoke run takes a few seconds; give it ample room.
    let deadline = Instant::now() + Duration::from_secs(240);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for rmq-bench") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("rmq-bench --smoke did not finish within 240 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = out_reader.join().expect("stdout reader");
    let err = err_reader.join().expect("stderr reader");
    assert!(
        status.success(),
        "rmq-bench --smoke failed ({status}):\nstdout:\n{out}\nstderr:\n{err}"
    );

    let rows: Vec<serde_json::Value> = out
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    // A case that cannot run here (the handover crash case without the rmq
    // CLI binary next to rmq-bench) prints a "skipped" line instead.
    let (skipped, rows): (Vec<_>, Vec<_>) =
        rows.into_iter().partition(|r| r.get("skipped").is_some());
    for row in &skipped {
        assert_eq!(row["scenario"], "handover", "unexpected skip: {row}");
        assert_eq!(row["params"], "case=crash", "unexpected skip: {row}");
    }
    assert!(rows.len() >= 10, "only {} JSON lines:\n{out}", rows.len());
    for row in &rows {
        assert!(row.get("error").is_none(), "error line: {row}");
        assert!(
            row["msgs"].as_u64().is_some_and(|n| n > 0),
            "no msgs: {row}"
        );
        assert!(row["msgs_per_sec"].as_f64().is_some(), "no rate: {row}");
    }
    for scenario in [
        "send_single",
        "send_batch",
        "consume",
        "merge_heavy",
        "latency",
        "memory",
        "consume_mode",
        "adaptive_pool",
        "send_bounded",
        "handover",
    ] {
        assert!(
            rows.iter().any(|r| r["scenario"] == scenario),
            "no {scenario} line:\n{out}"
        );
    }

    // Serial-mode scenarios: both consume modes, the ratio, the handovers.
    let find = |scenario: &str, key: &str, value: &str| {
        rows.iter()
            .find(|r| r["scenario"] == scenario && r["params"][key] == value)
    };
    assert!(
        find("consume_mode", "mode", "parallel").is_some(),
        "no parallel consume_mode:\n{out}"
    );
    let serial = find("consume_mode", "mode", "serial")
        .unwrap_or_else(|| panic!("no serial consume_mode:\n{out}"));
    assert!(
        serial["serial_vs_parallel"]
            .as_f64()
            .is_some_and(|r| r > 0.0),
        "{serial}"
    );
    let graceful = find("handover", "case", "graceful")
        .unwrap_or_else(|| panic!("no graceful handover:\n{out}"));
    assert!(
        graceful["graceful_handover_ms"].as_f64().is_some(),
        "{graceful}"
    );
    match find("handover", "case", "crash") {
        Some(crash) => {
            assert!(crash["crash_handover_ms"].as_f64().is_some(), "{crash}");
            assert_eq!(crash["configured_slot_lease_ms"], 1000, "{crash}");
        }
        None => assert!(!skipped.is_empty(), "no crash handover line:\n{out}"),
    }
}

/// `--instructions --smoke`: redis-server under callgrind, every phase
/// counted (instructions per message above zero, one JSON line each), and
/// the server under valgrind stopped at the end.
#[test]
fn instructions_mode_counts_redis_work_per_phase() {
    let (rows, stderr) = smoke_rows("--instructions");
    let phases: Vec<&str> = rows
        .iter()
        .map(|r| r["params"]["phase"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        phases,
        [
            "send batch=64",
            "consume batch=64",
            "send single",
            "consume single",
            "send batch=64 again",
            "consume concurrency=1"
        ],
        "{stderr}"
    );
    for r in &rows {
        assert!(
            r["instructions_per_msg"]
                .as_f64()
                .is_some_and(|n| n > 1_000.0),
            "{r}"
        );
    }
}

/// `--forward --smoke`: both brokers measured (a ceiling, a forward rate
/// and lateness percentiles each, one JSON line per broker).
#[test]
fn forward_mode_measures_both_brokers_against_their_ceiling() {
    let (rows, stderr) = smoke_rows("--forward");
    let brokers: Vec<&str> = rows
        .iter()
        .map(|r| r["broker"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(brokers, ["nats", "rabbitmq"], "{stderr}");
    for r in &rows {
        for field in ["ceiling_msgs_per_s", "forward_msgs_per_s"] {
            assert!(r[field].as_f64().is_some_and(|n| n > 0.0), "{field}: {r}");
        }
        let late = &r["lateness_ms"];
        assert!(
            late["p50"].as_i64().is_some_and(|p| p >= 0)
                && late["p99"].as_i64() >= late["p50"].as_i64(),
            "{r}"
        );
    }
}

/// `--coordination --smoke`: the handover cases and the idle group load,
/// once with Redis and once with ZooKeeper coordinating (and the load once
/// more on a Redis Cluster), every message drained, and the load read from
/// every server.
#[test]
fn coordination_mode_measures_redis_and_zookeeper_side_by_side() {
    let (rows, stderr) = smoke_rows("--coordination");
    let cases: Vec<String> = rows
        .iter()
        .map(|r| {
            format!(
                "{} {} {} {}",
                r["scenario"].as_str().unwrap_or_default(),
                r["params"]["case"].as_str().unwrap_or("-"),
                r["params"]["coordinator"].as_str().unwrap_or_default(),
                r["params"]["backend"].as_str().unwrap_or("-")
            )
        })
        .collect();
    assert_eq!(
        cases,
        [
            "handover graceful redis -",
            "handover crash redis -",
            "handover graceful zookeeper -",
            "handover crash zookeeper -",
            "group_load - redis single",
            "group_load - zookeeper single",
            "group_load - redis cluster",
        ],
        "{stderr}"
    );
    for r in &rows {
        if r["scenario"] == "handover" {
            assert_eq!(r["drained"], true, "{r}");
            assert_eq!(r["dead"], 0, "{r}");
        } else {
            assert!(
                r["redis_script_calls_per_s"]
                    .as_f64()
                    .is_some_and(|n| n > 0.0),
                "{r}"
            );
        }
    }
    let zk_load = &rows[5];
    assert!(
        zk_load["zookeeper_requests_per_s"]
            .as_f64()
            .is_some_and(|n| n > 0.0),
        "the ZooKeeper members' sessions reach ZooKeeper: {zk_load}"
    );
}

/// Runs `rmq-bench MODE --smoke`, asserts it succeeded, and returns its
/// JSON lines and what it said on stderr.
fn smoke_rows(mode: &str) -> (Vec<serde_json::Value>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rmq-bench"))
        .args([mode, "--smoke"])
        .output()
        .expect("rmq-bench starts");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let rows = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    (rows, stderr)
}

/// `--fleet --smoke`: one small fleet with the head index and without,
/// its consumers in this process and then in processes of their own, each
/// through every phase: the calls at start and idle, the load's
/// deliveries with their pop calls counted (in the member processes too),
/// and the backlog drained.
#[test]
fn fleet_mode_measures_a_fleet_with_and_without_the_head_index() {
    let (rows, stderr) = smoke_rows("--fleet");
    let cases: Vec<(bool, bool)> = rows
        .iter()
        .filter_map(|r| {
            let p = &r["params"];
            Some((p["head_index"].as_bool()?, p["processes"].as_bool()?))
        })
        .collect();
    assert_eq!(
        cases,
        [(true, false), (false, false), (false, true), (true, true)],
        "{stderr}"
    );
    for r in &rows {
        assert!(r["msgs"].as_u64().is_some_and(|n| n > 0), "{r}");
        for field in ["start_script_calls", "idle_script_calls_per_s"] {
            assert!(r[field].as_f64().is_some_and(|n| n >= 0.0), "{field}: {r}");
        }
        // Every delivery came from a pop call the library counted.
        assert!(
            r["load_pops_per_msg"].as_f64().is_some_and(|n| n > 0.0),
            "{r}"
        );
        assert!(
            r["saturation_msgs_per_s"].as_f64().is_some_and(|n| n > 0.0),
            "{r}"
        );
    }
}

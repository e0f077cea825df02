//! `rmq consume --worker`: long-lived workers over stdin/stdout. Every
//! message is acked exactly once whatever order the results come in; a
//! worker killed with SIGKILL mid-batch, or one that writes garbage on
//! stdout, is started again and what it held is retried; binary keys and
//! payloads round-trip as base64; a delivery past its timeout restarts its
//! worker. The workers are small Python scripts (the machine's python3).
#![allow(clippy::unwrap_used)]
mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use support::*;

fn create(env: &Env, topic: &str, extra: &[&str]) {
    let mut args = vec!["topic", "create", topic, "--kind", "priority"];
    args.extend_from_slice(extra);
    env.ok(&args);
}

/// Writes `body` (Python, after the common imports) to a script in `dir`;
/// returns the `--worker` command that runs it.
fn worker(dir: &Path, body: &str) -> String {
    let path: PathBuf = dir.join("worker.py");
    std::fs::write(&path, format!("import base64, json, os, sys, time\n{body}")).unwrap();
    format!("python3 -u {}", path.display())
}

fn send_many(env: &Env, topic: &str, n: usize) {
    let lines: String = (0..n)
        .map(|i| format!("{{\"payload\":\"p{i}\",\"key\":\"k{i}\"}}\n"))
        .collect();
    env.rmq_in(&["send", topic, "--batch"], lines.as_bytes())
        .success();
}

#[test]
fn results_in_any_order_ack_each_message_exactly_once() {
    let env = Env::new();
    create(&env, "t", &[]);
    send_many(&env, "t", 40);
    let dir = tempfile::tempdir().unwrap();
    // Holds four deliveries, then answers them last first.
    let cmd = worker(
        dir.path(),
        r#"held = []
for line in sys.stdin:
    held.append(json.loads(line)["id"])
    if len(held) == 4:
        for i in reversed(held):
            print(json.dumps({"id": i, "outcome": "ack"}))
        held = []
"#,
    );
    let r = env.ok(&[
        "consume",
        "t",
        "--worker",
        &cmd,
        "--worker-concurrency",
        "4",
        "--max",
        "40",
    ]);
    assert!(
        r.stderr.contains("consumed 40: acked 40, retried 0"),
        "{r:?}"
    );
    let s = env.stats("t");
    assert_eq!(
        (s["acked"].as_u64(), s["delivered"].as_u64()),
        (Some(40), Some(40)),
        "{s}"
    );
}

#[test]
fn a_worker_killed_mid_batch_is_restarted_and_what_it_held_is_retried() {
    let env = Env::new();
    create(&env, "t", &["--backoff", "50", "--backoff-max", "50"]);
    send_many(&env, "t", 10);
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    let first = dir.path().join("first-life");
    // Its first life takes three and answers nothing (then it is killed);
    // later lives ack at once.
    let cmd = worker(
        dir.path(),
        &format!(
            r#"first = not os.path.exists({first:?})
open({first:?}, "a").close()
open({pid:?} + ".tmp", "w").write(str(os.getpid()))
os.rename({pid:?} + ".tmp", {pid:?})
held = 0
for line in sys.stdin:
    if first:
        held += 1
        if held == 3:
            sys.stderr.write("holding 3\n"); sys.stderr.flush()
        continue
    print(json.dumps({{"id": json.loads(line)["id"], "outcome": "ack"}}))
"#,
            first = first.display().to_string(),
            pid = pid_file.display().to_string(),
        ),
    );
    let mut consume = env.cmd(&[
        "consume",
        "t",
        "--worker",
        &cmd,
        "--worker-concurrency",
        "3",
        "--max",
        "13",
        "--idle-exit",
        "10000",
    ]);
    let err = dir.path().join("stderr");
    consume
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&err).unwrap());
    let mut child = Reaped(consume.spawn().unwrap());
    assert!(
        eventually(Duration::from_secs(15), || std::fs::read_to_string(&err)
            .unwrap_or_default()
            .contains("holding 3")),
        "the worker took three"
    );
    let pid = std::fs::read_to_string(&pid_file).unwrap();
    kill("-9", pid.trim());
    let status = wait_limited(&mut child.0, RUN_LIMIT).expect("rmq consume finished");
    let said = std::fs::read_to_string(&err).unwrap();
    assert!(status.success(), "{said}");
    // (sh reports its child's SIGKILL as exit status 137.)
    assert!(said.contains("worker 1 exited ("), "{said}");
    assert!(said.contains("consumed 13: acked 10, retried 3"), "{said}");
    let s = env.stats("t");
    assert_eq!(
        (s["acked"].as_u64(), s["pending"].as_u64()),
        (Some(10), Some(0)),
        "{s}"
    );
}

#[test]
fn a_worker_that_writes_garbage_is_restarted_with_a_clear_error() {
    let env = Env::new();
    create(&env, "t", &["--backoff", "50", "--backoff-max", "50"]);
    send_many(&env, "t", 1);
    let dir = tempfile::tempdir().unwrap();
    let first = dir.path().join("first-life");
    let cmd = worker(
        dir.path(),
        &format!(
            r#"first = not os.path.exists({first:?})
open({first:?}, "a").close()
for line in sys.stdin:
    if first:
        print("processing...")
        continue
    print(json.dumps({{"id": json.loads(line)["id"], "outcome": "ack"}}))
"#,
            first = first.display().to_string()
        ),
    );
    let r = env.ok(&[
        "consume",
        "t",
        "--worker",
        &cmd,
        "--max",
        "2",
        "--idle-exit",
        "10000",
    ]);
    assert!(
        r.stderr
            .contains("worker 1 wrote a line that is not a result")
            && r.stderr.contains("processing..."),
        "{r:?}"
    );
    assert!(r.stderr.contains("consumed 2: acked 1, retried 1"), "{r:?}");
    assert_eq!(env.stats("t")["acked"], 1);
}

#[test]
fn binary_keys_and_payloads_round_trip_as_base64() {
    let env = Env::new();
    create(&env, "t", &[]);
    let key: Vec<u8> = vec![0x80, 0x00, b'k'];
    let payload: Vec<u8> = vec![0xff, 0xfe, 0x00, 0x01];
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let client = rmq::Client::connect(&env.url).await.unwrap();
        let topic = client.topic("t").await.unwrap();
        topic
            .send(rmq::Message::new(payload.clone()).key(key.clone()))
            .await
            .unwrap();
        topic
            .send(rmq::Message::new("text").key("plain"))
            .await
            .unwrap();
    });
    let dir = tempfile::tempdir().unwrap();
    let seen = dir.path().join("seen");
    let cmd = worker(
        dir.path(),
        &format!(
            r#"for line in sys.stdin:
    m = json.loads(line)
    with open({seen:?}, "a") as f:
        f.write(json.dumps(m) + "\n")
    print(json.dumps({{"id": m["id"], "outcome": "ack"}}))
"#,
            seen = seen.display().to_string()
        ),
    );
    env.ok(&["consume", "t", "--worker", &cmd, "--max", "2"]);
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&seen)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let binary = lines
        .iter()
        .find(|m| m.get("key_base64").is_some())
        .unwrap();
    let decode = |v: &serde_json::Value| {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD
            .decode(v.as_str().unwrap())
            .unwrap()
    };
    assert_eq!(decode(&binary["key_base64"]), key);
    assert_eq!(decode(&binary["payload_base64"]), payload);
    let text = lines.iter().find(|m| m["key"] == "plain").unwrap();
    assert_eq!(text["payload"], "text");
    assert_eq!(text["attempt"], 1);
    assert_eq!(text["topic"], "t");
}

#[test]
fn a_delivery_past_its_timeout_restarts_its_worker_and_is_retried() {
    let env = Env::new();
    create(&env, "t", &["--backoff", "50", "--backoff-max", "50"]);
    send_many(&env, "t", 1);
    let dir = tempfile::tempdir().unwrap();
    let cmd = worker(
        dir.path(),
        r#"for line in sys.stdin:
    m = json.loads(line)
    if m["attempt"] == 1:
        time.sleep(300)
    print(json.dumps({"id": m["id"], "outcome": "ack"}))
"#,
    );
    let r = env.ok(&[
        "consume",
        "t",
        "--worker",
        &cmd,
        "--timeout",
        "500",
        "--max",
        "2",
        "--idle-exit",
        "10000",
    ]);
    assert!(r.stdout.contains("timed out after 500ms"), "{r:?}");
    assert!(r.stderr.contains("consumed 2: acked 1, retried 1"), "{r:?}");
}

/// The examples in `examples/` do what the README says: ack, and send a
/// poison message to the dead letters.
#[test]
fn the_example_workers_ack_and_dead_letter() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    for (run, concurrency) in [("python3", "1"), ("node", "8")] {
        let env = Env::new();
        create(&env, "t", &[]);
        send_many(&env, "t", 3);
        env.ok(&["send", "t", "poison", "--key", "bad"]);
        let script = match run {
            "python3" => root.join("examples/worker.py"),
            _ => root.join("examples/worker.mjs"),
        };
        let cmd = format!("{run} {}", script.display());
        let r = env.ok(&[
            "consume",
            "t",
            "--worker",
            &cmd,
            "--workers",
            "2",
            "--worker-concurrency",
            concurrency,
            "--max",
            "4",
        ]);
        assert!(
            r.stderr.contains("acked 3, retried 0, dead 1"),
            "{run}: {r:?}"
        );
        let dead = env.ok(&["--json", "dead", "list", "t"]).json();
        assert_eq!(dead[0]["error"], "cannot handle this payload", "{run}");
    }
}

/// SIGTERM: what the workers hold is released untouched (nothing stays in
/// flight) and the workers are gone when rmq exits.
#[test]
fn sigterm_releases_what_the_workers_hold_and_stops_them() {
    let env = Env::new();
    create(&env, "t", &[]);
    send_many(&env, "t", 5);
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    let cmd = worker(
        dir.path(),
        &format!(
            r#"open({pid:?} + ".tmp", "w").write(str(os.getpid()))
os.rename({pid:?} + ".tmp", {pid:?})
for line in sys.stdin:
    pass
"#,
            pid = pid_file.display().to_string()
        ),
    );
    let mut consume = env.cmd(&[
        "consume",
        "t",
        "--worker",
        &cmd,
        "--worker-concurrency",
        "5",
    ]);
    consume
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut child = Reaped(consume.spawn().unwrap());
    assert!(
        eventually(Duration::from_secs(15), || env.stats("t")["in_flight"] == 5
            && pid_file.exists()),
        "the worker holds all five"
    );
    let worker_pid: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    kill("-TERM", &child.0.id().to_string());
    let status = wait_limited(&mut child.0, RUN_LIMIT).expect("rmq consume stopped");
    assert!(status.success(), "{status:?}");
    let s = env.stats("t");
    assert_eq!(
        (s["in_flight"].as_u64(), s["pending"].as_u64()),
        (Some(0), Some(5)),
        "{s}"
    );
    assert_eq!(s["retried"], 0, "released, not retried: {s}");
    assert!(
        eventually(Duration::from_secs(5), || !alive(worker_pid)),
        "the worker outlived rmq"
    );
}

//! `rmq consume --exec` as a protocol: what a handler's exit status, its
//! last stdout line and its stderr mean (0 acks, 65 dead-letters at once,
//! 75 or anything else retries after the backoff or the delay the handler
//! asked for; the end of stderr is the error), and handler timeouts (the
//! handler's process group killed, its message retried).
#![allow(clippy::unwrap_used)]
mod support;

use std::time::{Duration, Instant};

use serde_json::Value;
use support::*;

fn create(env: &Env, topic: &str, extra: &[&str]) {
    let mut args = vec!["topic", "create", topic, "--kind", "priority"];
    args.extend_from_slice(extra);
    env.ok(&args);
}

/// `rmq get TOPIC KEY --json`.
fn get(env: &Env, topic: &str, key: &str) -> Value {
    env.ok(&["--json", "get", topic, key]).json().remove(0)
}

fn consume_one(env: &Env, topic: &str, handler: &str) -> Run {
    env.ok(&["consume", topic, "--exec", handler, "--max", "1"])
}

#[test]
fn exit_65_sends_the_message_to_the_dead_letters_at_once() {
    let env = Env::new();
    create(&env, "p", &["--max-attempts", "5"]);
    env.ok(&["send", "p", "{not json", "--key", "bad"]);
    let r = consume_one(&env, "p", "echo 'cannot parse the payload' >&2; exit 65");
    assert!(r.stderr.contains("dead 1"), "{r:?}");
    let dead = env.ok(&["--json", "dead", "list", "p"]).json();
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0]["attempts"], 1, "the first attempt, of five");
    assert_eq!(
        dead[0]["error"],
        "exit status 65 (EX_DATAERR): cannot parse the payload"
    );
}

#[test]
fn exit_75_retries_after_the_backoff_or_the_delay_the_handler_asked_for() {
    let env = Env::new();
    create(&env, "p", &["--backoff", "50", "--backoff-max", "50"]);
    env.ok(&["send", "p", "job", "--key", "later"]);
    let r = consume_one(
        &env,
        "p",
        r#"echo working; echo '{"retry_after_ms": 60000}'; exit 75"#,
    );
    assert!(r.stderr.contains("retried 1"), "{r:?}");
    assert!(
        r.stdout.contains("working"),
        "the handler's stdout is shown: {r:?}"
    );
    let m = get(&env, "p", "later");
    assert_eq!(m["state"], "retry-waiting", "{m}");
    assert_eq!(m["error"], "exit status 75 (EX_TEMPFAIL)", "{m}");
    let wait = m["next_attempt_ms"].as_i64().unwrap() - m["server_ms"].as_i64().unwrap();
    assert!(
        (50_000..=60_000).contains(&wait),
        "asked for 60 s, waits {wait} ms"
    );
    // Without a request: the topic's backoff (50 ms), then handled again.
    env.ok(&["send", "p", "job", "--key", "soon"]);
    let r = env.ok(&[
        "consume",
        "p",
        "--exec",
        r#"[ "$RMQ_KEY" = soon ] || exit 0; [ "$RMQ_ATTEMPT" = 2 ] || exit 75"#,
        "--max",
        "2",
        "--idle-exit",
        "5000",
    ]);
    assert!(r.stderr.contains("acked 1, retried 1"), "{r:?}");
}

#[test]
fn the_error_is_the_end_of_a_long_stderr() {
    let env = Env::new();
    create(&env, "p", &["--max-attempts", "1"]);
    env.ok(&["send", "p", "job", "--key", "tb"]);
    // A 20 KiB traceback: its last lines are what explains it.
    let handler = r#"echo 'Traceback (most recent call last):' >&2
i=0; while [ $i -lt 1000 ]; do echo "  File \"app.py\", line $i, in handle" >&2; i=$((i+1)); done
echo 'KeyError: customer_id' >&2; exit 1"#;
    consume_one(&env, "p", handler);
    let dead = env.ok(&["--json", "dead", "list", "p"]).json();
    let error = dead[0]["error"].as_str().unwrap();
    assert!(error.starts_with("exit status 1: …\n  File"), "{error:.80}");
    assert!(
        error.ends_with("line 999, in handle\nKeyError: customer_id"),
        "{error}"
    );
    assert!(error.len() < 4_200, "{} bytes", error.len());
}

#[test]
fn a_handler_past_its_timeout_is_killed_with_its_group_and_its_message_retried() {
    let env = Env::new();
    create(&env, "p", &["--backoff", "50", "--backoff-max", "50"]);
    env.ok(&["send", "p", "job", "--key", "hangs"]);
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    // The first attempt hangs in a grandchild; the second acks.
    let handler = format!(
        r#"[ "$RMQ_ATTEMPT" = 2 ] && exit 0; sleep 300 & echo $! > {}; wait"#,
        pid_file.display()
    );
    let started = Instant::now();
    let r = env.ok(&[
        "consume",
        "p",
        "--exec",
        &handler,
        "--timeout",
        "500",
        "--max",
        "2",
        "--idle-exit",
        "5000",
    ]);
    assert!(r.stderr.contains("acked 1, retried 1"), "{r:?}");
    assert!(r.stdout.contains("timed out after 500ms"), "{r:?}");
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
    let grandchild: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        eventually(Duration::from_secs(5), || !alive(grandchild)),
        "the handler's process group was killed"
    );
}

#[test]
fn the_topics_handler_timeout_applies_unless_the_consumer_sets_its_own() {
    let env = Env::new();
    create(
        &env,
        "p",
        &["--max-attempts", "1", "--handler-timeout", "300"],
    );
    let shown = env.ok(&["topic", "show", "p"]).stdout;
    assert!(shown.contains("handler timeout:"), "{shown}");
    assert!(shown.contains("300 ms"), "{shown}");
    env.ok(&["send", "p", "job", "--key", "slow"]);
    consume_one(&env, "p", "sleep 30");
    let dead = env.ok(&["--json", "dead", "list", "p"]).json();
    assert_eq!(dead[0]["error"], "timed out after 300ms", "{dead:?}");
    // The consumer's own --timeout comes first: 10 s lets a 0.5 s handler finish.
    env.ok(&["send", "p", "job", "--key", "fine"]);
    let r = env.ok(&[
        "consume",
        "p",
        "--exec",
        "sleep 0.5",
        "--timeout",
        "10000",
        "--max",
        "1",
    ]);
    assert!(r.stderr.contains("acked 1"), "{r:?}");
    // And `topic update --handler-timeout 0` removes the topic's.
    env.ok(&["topic", "update", "p", "--handler-timeout", "0"]);
    env.ok(&["send", "p", "job", "--key", "fine-too"]);
    let r = consume_one(&env, "p", "sleep 0.5");
    assert!(r.stderr.contains("acked 1"), "{r:?}");
}

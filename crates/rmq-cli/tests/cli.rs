//! End-to-end tests of the `rmq` binary against throwaway redis-servers.

mod support;

use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{bin, children_of, eventually, keys, kill, names, wait_limited, Env};

fn create(env: &Env, topic: &str, kind: &str, extra: &[&str]) {
    let mut args = vec!["topic", "create", topic, "--kind", kind];
    args.extend_from_slice(extra);
    env.ok(&args);
}

const STATS_FIELDS: [&str; 16] = [
    "pending",
    "due_now",
    "scheduled",
    "retry_waiting",
    "in_flight",
    "behind_in_flight",
    "dead",
    "sent",
    "merged",
    "delivered",
    "acked",
    "retried",
    "dead_lettered",
    "dead_dropped",
    "cancelled",
    "paused_slots",
];

#[test]
fn topic_create_is_idempotent_and_refuses_conflicts() {
    let env = Env::new();
    let first = env.ok(&[
        "--json", "topic", "create", "orders", "--kind", "priority", "--slots", "4",
    ]);
    assert_eq!(first.json()[0]["created"], true);
    assert_eq!(first.json()[0]["slots"], 4);
    let again = env.ok(&[
        "--json", "topic", "create", "orders", "--kind", "priority", "--slots", "4",
    ]);
    assert_eq!(again.json()[0]["created"], false);
    let text = env.ok(&[
        "topic", "create", "orders", "--kind", "priority", "--slots", "4",
    ]);
    assert!(text.stdout.contains("already exists"), "{text:?}");

    let conflict = env.rmq(&[
        "topic", "create", "orders", "--kind", "priority", "--slots", "8",
    ]);
    let line = conflict.one_error(2);
    assert!(
        line.contains("already exists with another definition"),
        "{line}"
    );
    let conflict = env.rmq(&["topic", "create", "orders", "--kind", "fixed-time"]);
    assert!(conflict.one_error(2).contains("kind"));
}

#[test]
fn bad_definitions_fail_with_one_line() {
    let env = Env::new();
    let bad_kind = env.rmq(&["topic", "create", "t", "--kind", "banana"]);
    assert_eq!(bad_kind.code, 2, "{bad_kind:?}");
    assert!(bad_kind.stderr.contains("banana"));
    assert!(!bad_kind.stderr.contains("panicked"));

    let line = env
        .rmq(&["topic", "create", "t", "--kind", "priority", "--slots", "3"])
        .one_error(2);
    assert!(line.contains("power of two"), "{line}");
    let line = env
        .rmq(&["topic", "create", "a:b", "--kind", "priority"])
        .one_error(2);
    assert!(line.contains("invalid topic name"), "{line}");
    let line = env
        .rmq(&[
            "topic",
            "create",
            "t",
            "--kind",
            "priority",
            "--backoff",
            "5000",
            "--backoff-max",
            "10",
        ])
        .one_error(2);
    assert!(line.contains("backoff"), "{line}");
    // Nothing was defined.
    assert!(env.ok(&["--json", "topic", "list"]).json().is_empty());
}

#[test]
fn topic_list_and_show() {
    let env = Env::new();
    create(
        &env,
        "a",
        "priority",
        &["--slots", "2", "--lease", "5000", "--max-attempts", "3"],
    );
    create(&env, "b", "range-merge", &["--backoff", "200"]);
    env.ok(&["send", "a", "x"]);

    let list = env.ok(&["--json", "topic", "list"]).json();
    assert_eq!(list.len(), 2);
    assert_eq!(list[0]["name"], "a");
    assert_eq!(list[0]["kind"], "priority");
    assert_eq!(list[0]["lease_ms"], 5000);
    assert_eq!(list[0]["max_attempts"], 3);
    assert_eq!(list[0]["stats"]["pending"], 1);
    assert_eq!(list[1]["name"], "b");
    assert_eq!(list[1]["backoff_ms"], 200);
    assert_eq!(list[1]["backoff_max_ms"], 600_000, "max stays the default");

    let show = env.ok(&["--json", "topic", "show", "a"]).json();
    assert_eq!(show.len(), 1);
    assert_eq!(show[0]["slots"], 2);
    assert_eq!(keys(&show[0]["stats"]), names(&STATS_FIELDS));
    assert_eq!(show[0]["stats"]["sent"], 1);

    let text = env.ok(&["topic", "list"]);
    assert!(text.stdout.contains("range-merge"), "{text:?}");
    let text = env.ok(&["topic", "show", "b"]);
    assert!(text.stdout.contains("backoff:"), "{text:?}");
    assert!(
        text.stdout.contains("pending layout:      flat"),
        "{text:?}"
    );
    env.rmq(&["topic", "show", "nope"]).one_error(2);

    // The pending layout: set at creation or by an update, shown, and
    // left out of the JSON definition when flat (the default).
    create(&env, "c", "fixed-time", &["--pending-layout", "compact"]);
    let show = env.ok(&["--json", "topic", "show", "c"]).json();
    assert_eq!(show[0]["pending_layout"], "compact");
    env.ok(&["topic", "update", "c", "--pending-layout", "flat"]);
    let show = env.ok(&["--json", "topic", "show", "c"]).json();
    assert_eq!(show[0].get("pending_layout"), None, "{:?}", show[0]);
    let bad = env.rmq(&["topic", "update", "c", "--pending-layout", "buckets"]);
    assert_eq!(bad.code, 2, "{bad:?}");
    assert!(
        bad.stderr.contains("[possible values: flat, compact]"),
        "{bad:?}"
    );
}

#[test]
fn send_single_from_argument_and_stdin() {
    let env = Env::new();
    create(&env, "p", "priority", &["--slots", "4"]);
    let sent = env
        .ok(&["--json", "send", "p", "hello", "--priority", "3"])
        .json();
    assert_eq!(sent.len(), 1);
    assert_eq!(
        keys(&sent[0]),
        names(&[
            "key",
            "slot",
            "merged",
            "behind_in_flight",
            "priority",
            "server_ms"
        ])
    );
    assert_eq!(sent[0]["key"], "hello");
    assert_eq!(sent[0]["priority"], 3);
    assert_eq!(sent[0]["merged"], false);
    assert_eq!(sent[0]["behind_in_flight"], false);
    let again = env
        .ok(&["--json", "send", "p", "hello", "--priority", "5"])
        .json();
    assert_eq!(again[0]["merged"], true);
    assert_eq!(again[0]["priority"], 5, "the merge's priority, as stored");
    assert_eq!(again[0]["slot"], sent[0]["slot"]);

    let text = env.ok(&["send", "p", "other", "--key", "k1"]);
    assert!(text.stdout.starts_with("sent new to slot "), "{text:?}");
    let text = env.ok(&["send", "p", "newer", "--key", "k1"]);
    assert!(
        text.stdout
            .starts_with("merged into a waiting message (slot "),
        "{text:?}"
    );

    // No payload argument: all of stdin, bytes as they are.
    let r = env
        .rmq_in(
            &["--json", "send", "p", "--key", "from-stdin"],
            b"line 1\nline 2\n",
        )
        .success();
    assert_eq!(r.json()[0]["key"], "from-stdin");
    let peek = env.ok(&["--json", "peek", "p", "--limit", "10"]).json();
    let p = peek
        .iter()
        .find(|v| v["key"] == "from-stdin")
        .expect("sent from stdin");
    assert_eq!(p["payload"], "line 1\nline 2\n");
    let hello = peek.iter().find(|v| v["key"] == "hello").expect("hello");
    assert_eq!(hello["priority"], 5, "the last priority wins");
    assert_eq!(env.stats("p")["merged"], 2);
}

#[test]
fn send_batch_reports_a_summary_and_sends_nothing_on_a_bad_line() {
    let env = Env::new();
    create(&env, "r", "range-merge", &["--slots", "4"]);
    let mut input = String::new();
    for i in 0..2500 {
        input.push_str(&format!(
            "{{\"payload\":\"price {i}\",\"key\":\"sku-{}\"}}\n",
            i % 3
        ));
    }
    input.push('\n'); // blank lines are skipped
    let r = env
        .rmq_in(
            &["--json", "send", "r", "--batch", "--range", "60000"],
            input.as_bytes(),
        )
        .success();
    // One result per line (batch_results.rs checks them), the summary last.
    let out = r.json();
    assert_eq!(out.len(), 2501);
    let summary = &out[2500..];
    assert_eq!(
        keys(&summary[0]),
        names(&["sent", "new", "merged", "refused", "full"])
    );
    assert_eq!(summary[0]["sent"], 2500);
    assert_eq!(summary[0]["full"], 0);
    assert_eq!(summary[0]["new"], 3);
    assert_eq!(summary[0]["merged"], 2497);
    assert_eq!(summary[0]["refused"], 0);

    // A wrong type on line 3, an unparsable line, a timing of another kind:
    // each is named by its line and nothing is sent.
    for (bad, what) in [
        ("{\"payload\":\"ok\",\"range\":100}\n{\"payload\":\"ok2\",\"range\":100}\n{\"payload\":7}\n", "line 3"),
        ("{\"payload\":\"ok\",\"range\":100}\nnot json\n", "line 2"),
        ("{\"payload\":\"ok\",\"priority\":1}\n", "line 1"),
        ("{\"payload\":\"ok\",\"range\":100,\"typo\":1}\n", "line 1"),
        ("{\"payload\":\"ok\"}\n", "line 1"),
    ] {
        let r = env.rmq_in(&["send", "r", "--batch"], bad.as_bytes());
        let line = r.one_error(2);
        assert!(line.contains(what), "{what}: {line}");
        assert!(line.contains("nothing was sent"), "{line}");
    }
    assert_eq!(env.stats("r")["sent"], 2500, "nothing more was sent");
}

#[test]
fn send_refusals_are_one_line() {
    let env = Env::new();
    let line = env.rmq(&["send", "nope", "x"]).one_error(2);
    assert!(line.contains("does not exist"), "{line}");

    create(&env, "f", "fixed-time", &[]);
    let line = env.rmq(&["send", "f", "x", "--at", "1000"]).one_error(2);
    assert!(line.contains("past"), "{line}");
    let line = env.rmq(&["send", "f", "x", "--priority", "1"]).one_error(2);
    assert!(line.contains("does not apply"), "{line}");
    // In a batch, a past time is refused by the server per message.
    let r = env.rmq_in(
        &["--json", "send", "f", "--batch"],
        b"{\"payload\":\"late\",\"at\":1000}\n{\"payload\":\"fine\",\"delay\":60000}\n",
    );
    assert_eq!(r.code, 2, "{r:?}");
    let out = r.json();
    assert_eq!(out.len(), 3, "two results, then the summary: {r:?}");
    assert_eq!(out[0]["outcome"], "refused");
    let s = &out[2];
    assert_eq!(
        (s["sent"].as_u64(), s["refused"].as_u64()),
        (Some(1), Some(1))
    );
    assert!(
        r.stderr.contains("error: line 1:") && r.stderr.contains("past"),
        "{r:?}"
    );
    assert_eq!(env.stats("f")["sent"], 1);
}

#[test]
fn missing_redis_is_one_line_and_exit_1() {
    let mut c = bin();
    c.args(["--redis", "redis://127.0.0.1:1", "topic", "list"]);
    let r = support::run(c, b"");
    let line = r.one_error(1);
    assert!(
        line.contains("cannot connect") || line.contains("reached"),
        "{line}"
    );
    let mut c = bin();
    c.args(["--redis", "not-a-url", "stats"]);
    support::run(c, b"").one_error(2);
}

#[test]
fn consume_max_and_idle_exit_print_json() {
    let env = Env::new();
    create(&env, "p", "priority", &["--slots", "2"]);
    for (m, p) in [("low", "1"), ("high", "9"), ("mid", "5")] {
        env.ok(&["send", "p", m, "--priority", p]);
    }
    let r = env.ok(&["--json", "consume", "p", "--max", "2"]);
    let got = r.json();
    assert_eq!(got.len(), 2, "{r:?}");
    assert_eq!(
        keys(&got[0]),
        names(&["key", "payload", "slot", "attempt", "kind", "priority", "taken_ms"])
    );
    assert_eq!(got[0]["key"], "high");
    assert_eq!(got[0]["attempt"], 1);
    assert_eq!(got[0]["kind"], "priority");
    assert_eq!(got[1]["payload"], "mid");

    let r = env.ok(&["--json", "consume", "p", "--idle-exit", "300"]);
    assert_eq!(r.json().len(), 1);
    assert_eq!(r.json()[0]["key"], "low");
    let started = Instant::now();
    let r = env.ok(&["consume", "p", "--idle-exit", "300"]);
    assert!(r.stdout.is_empty());
    assert!(
        r.stderr.contains("consumed 0: acked 0, retried 0, dead 0"),
        "{r:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    let s = env.stats("p");
    assert_eq!(
        (s["acked"].as_u64(), s["in_flight"].as_u64()),
        (Some(3), Some(0))
    );

    create(&env, "f", "fixed-time", &[]);
    env.ok(&["send", "f", "soon", "--delay", "100"]);
    let got = env
        .ok(&[
            "--json",
            "consume",
            "f",
            "--max",
            "1",
            "--idle-exit",
            "5000",
        ])
        .json();
    assert_eq!(
        keys(&got[0]),
        names(&["key", "payload", "slot", "attempt", "kind", "due_ms", "taken_ms"])
    );
    assert_eq!(got[0]["kind"], "fixed-time");
}

#[test]
fn consume_text_and_concurrency() {
    let env = Env::new();
    create(&env, "p", "priority", &[]);
    for i in 0..6 {
        env.ok(&["send", "p", &format!("job-{i}")]);
    }
    let started = Instant::now();
    let r = env.ok(&[
        "consume",
        "p",
        "--exec",
        "sleep 0.6",
        "--concurrency",
        "3",
        "--max",
        "6",
    ]);
    let took = started.elapsed();
    assert!(
        r.stderr.contains("consumed 6: acked 6, retried 0, dead 0"),
        "{r:?}"
    );
    assert_eq!(
        r.stdout.lines().filter(|l| l.starts_with("acked ")).count(),
        6,
        "{r:?}"
    );
    // Six 0.6 s jobs three at a time: about 1.2 s, far below the serial 3.6 s.
    assert!(took < Duration::from_millis(3300), "took {took:?}");
    assert_eq!(env.stats("p")["acked"], 6);
}

#[test]
fn exec_exit_0_acks() {
    let env = Env::new();
    create(&env, "p", "priority", &[]);
    env.ok(&["send", "p", "payload-bytes", "--key", "k"]);
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("seen");
    let script = format!(
        "cat >/dev/null; echo \"$RMQ_KEY $RMQ_ATTEMPT $RMQ_TOPIC $RMQ_SLOT\" > {}",
        file.display()
    );
    env.ok(&["consume", "p", "--exec", "cat >/dev/null", "--max", "1"]);
    let s = env.stats("p");
    assert_eq!(
        (s["acked"].as_u64(), s["pending"].as_u64()),
        (Some(1), Some(0))
    );

    env.ok(&["send", "p", "again", "--key", "k2"]);
    let r = env.ok(&["--json", "consume", "p", "--exec", &script, "--max", "1"]);
    assert_eq!(r.json()[0]["outcome"], "acked", "{r:?}");
    let seen = std::fs::read_to_string(&file).expect("the command ran");
    let slot = r.json()[0]["slot"].to_string();
    assert_eq!(seen.trim(), format!("k2 1 p {slot}"));
}

#[test]
fn exec_failure_retries_then_dead_letters_with_the_error() {
    let env = Env::new();
    create(
        &env,
        "p",
        "priority",
        &["--max-attempts", "2", "--backoff", "50"],
    );
    env.ok(&["send", "p", "job", "--key", "job-1"]);
    let r = env.ok(&[
        "consume",
        "p",
        "--exec",
        "echo 'gateway down' >&2; echo more >&2; exit 3",
        "--max",
        "2",
        "--idle-exit",
        "5000",
    ]);
    assert!(
        r.stderr.contains("consumed 2: acked 0, retried 1, dead 1"),
        "{r:?}"
    );
    assert!(
        r.stderr.contains("gateway down"),
        "the child's stderr is shown: {r:?}"
    );
    let dead = env.ok(&["--json", "dead", "list", "p"]).json();
    assert_eq!(dead.len(), 1);
    assert_eq!(
        keys(&dead[0]),
        names(&[
            "key",
            "payload",
            "slot",
            "attempts",
            "error",
            "dead_at_ms",
            "deaths"
        ])
    );
    assert_eq!(dead[0]["key"], "job-1");
    assert_eq!(dead[0]["attempts"], 2);
    // The end of stderr (a traceback's useful end is its last lines).
    assert_eq!(dead[0]["error"], "exit status 3: gateway down\nmore");

    // `exit 3` alone: the error is the status.
    env.ok(&["send", "p", "job2", "--key", "job-2"]);
    env.ok(&[
        "consume",
        "p",
        "--exec",
        "exit 3",
        "--max",
        "2",
        "--idle-exit",
        "5000",
    ]);
    let dead = env.ok(&["--json", "dead", "list", "p"]).json();
    let d2 = dead
        .iter()
        .find(|d| d["key"] == "job-2")
        .expect("job-2 dead");
    assert_eq!(d2["error"], "exit status 3");
}

#[test]
fn exec_longer_than_the_lease_is_extended_and_delivered_once() {
    let env = Env::new();
    create(
        &env,
        "p",
        "priority",
        &["--lease", "300", "--backoff", "50"],
    );
    env.ok(&["send", "p", "slow"]);
    let r = env.ok(&["consume", "p", "--exec", "sleep 1", "--max", "1"]);
    assert!(r.stderr.contains("acked 1"), "{r:?}");
    let s = env.stats("p");
    assert_eq!(s["delivered"], 1, "{s}");
    assert_eq!(s["acked"], 1, "{s}");
    assert_eq!(s["retried"], 0, "{s}");
}

#[test]
fn fail_flag_nacks_every_message() {
    let env = Env::new();
    create(&env, "p", "priority", &["--max-attempts", "1"]);
    env.ok(&["send", "p", "drill"]);
    let r = env.ok(&["consume", "p", "--fail", "--max", "1"]);
    assert!(
        r.stderr.contains("consumed 1: acked 0, retried 0, dead 1"),
        "{r:?}"
    );
    let s = env.stats("p");
    assert_eq!(
        (s["dead"].as_u64(), s["dead_lettered"].as_u64()),
        (Some(1), Some(1))
    );
    let dead = env.ok(&["--json", "dead", "list", "p"]).json();
    assert!(dead[0]["error"].as_str().unwrap_or("").contains("--fail"));
}

#[test]
fn stats_peek_and_dead_letters() {
    let env = Env::new();
    create(
        &env,
        "p",
        "priority",
        &["--slots", "4", "--max-attempts", "1"],
    );
    create(&env, "f", "fixed-time", &["--slots", "2"]);
    env.ok(&["send", "p", "a", "--priority", "1"]);
    env.ok(&["send", "p", "b", "--priority", "7"]);
    env.ok(&["send", "f", "later", "--delay", "60000"]);

    let all = env.ok(&["--json", "stats"]).json();
    assert_eq!(all.len(), 2);
    let mut expected = STATS_FIELDS.to_vec();
    expected.extend(["topic", "kind", "slots"]);
    assert_eq!(keys(&all[0]), names(&expected));
    assert_eq!(all[0]["topic"], "f");
    assert_eq!(all[0]["scheduled"], 1);
    assert_eq!(all[1]["topic"], "p");
    assert_eq!(all[1]["pending"], 2);
    assert_eq!(all[1]["slots"], 4);
    let per_slot = env.ok(&["--json", "stats", "p", "--slots"]).json();
    let slots = per_slot[0]["per_slot"].as_array().expect("per_slot");
    let pending: u64 = slots.iter().filter_map(|s| s["pending"].as_u64()).sum();
    assert_eq!(pending, 2);
    assert!(slots
        .iter()
        .all(|s| s["slot"].as_u64().is_some_and(|n| n < 4)));
    let text = env.ok(&["stats", "--slots"]);
    assert!(
        text.stdout.contains("DEAD-LETTERED") && text.stdout.contains("slot "),
        "{text:?}"
    );

    let peek = env.ok(&["--json", "peek", "p"]).json();
    assert_eq!(peek.len(), 2);
    assert_eq!(
        keys(&peek[0]),
        names(&["key", "payload", "slot", "attempts", "priority"])
    );
    assert_eq!(peek[0]["key"], "b");
    assert_eq!(
        env.ok(&["--json", "peek", "p", "--limit", "1"])
            .json()
            .len(),
        1
    );
    let peek = env.ok(&["--json", "peek", "f"]).json();
    assert_eq!(
        keys(&peek[0]),
        names(&["key", "payload", "slot", "attempts", "due_ms"])
    );
    assert!(env.ok(&["peek", "f"]).stdout.contains("later"));

    // Two dead letters, then requeue one, purge the rest.
    env.ok(&["consume", "p", "--fail", "--max", "2"]);
    let dead = env.ok(&["--json", "dead", "list", "p"]).json();
    assert_eq!(dead.len(), 2);
    assert_eq!(dead[0]["deaths"], 1);
    assert!(env.ok(&["dead", "list", "p"]).stdout.contains("ERROR"));

    env.rmq(&["dead", "requeue", "p"]).success_not();
    env.rmq(&["dead", "purge", "p", "--key", "a", "--all"])
        .success_not();

    let r = env
        .ok(&["--json", "dead", "requeue", "p", "--key", "a"])
        .json();
    // The letter's line, then the counts.
    assert_eq!(r.len(), 2, "{r:?}");
    assert_eq!(
        (&r[0]["key"], &r[0]["outcome"]),
        (&Value::from("a"), &Value::from("requeued"))
    );
    assert_eq!(keys(&r[1]), names(&["requeued", "merged"]));
    assert_eq!(r[1]["requeued"], 1);
    let peek = env.ok(&["--json", "peek", "p"]).json();
    assert_eq!(
        (peek.len(), &peek[0]["key"], &peek[0]["attempts"]),
        (1, &Value::from("a"), &Value::from(0))
    );

    let r = env.ok(&["--json", "dead", "purge", "p", "--all"]).json();
    assert_eq!(keys(&r[0]), names(&["purged"]));
    assert_eq!(r[0]["purged"], 1);
    assert!(env.ok(&["--json", "dead", "list", "p"]).json().is_empty());
    let text = env.ok(&["dead", "purge", "p", "--key", "missing"]);
    assert!(text.stdout.contains("purged 0"), "{text:?}");
}

trait Fails {
    fn success_not(self);
}

impl Fails for support::Run {
    fn success_not(self) {
        assert_eq!(self.code, 2, "{self:?}");
        assert!(!self.stderr.contains("panicked"), "{self:?}");
    }
}

#[test]
fn demo_runs_on_its_own_server() {
    let mut c = bin();
    c.arg("demo");
    let started = Instant::now();
    let r = support::run(c, b"").success();
    assert!(
        r.stdout
            .contains("started a throwaway redis-server on 127.0.0.1:"),
        "{r:?}"
    );
    assert!(
        r.stdout.contains("1000 sends merged into 3 messages"),
        "{r:?}"
    );
    assert!(r.stdout.contains("late by"), "{r:?}");
    assert!(r.stdout.contains("dead letter: key order-7"), "{r:?}");
    assert!(
        r.stdout.contains("stopped the throwaway redis-server"),
        "{r:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(15));

    // The retry step announces each wait ("25-50 ms before attempt 2, ...")
    // and prints every gap next to its wait: the announced waits are the
    // scripts' rule (half to all of 50 ms doubling up to 200 ms), and no
    // gap is shorter than its wait. A gap may exceed the wait by the time
    // to record the failure and pick the retry up: a few ms, allowed up to
    // 300 ms here for a loaded CI machine.
    let range = |s: &str| -> (i64, i64) {
        let (lo, hi) = s.trim_end_matches(" ms").split_once('-').expect("A-B ms");
        (lo.parse().expect("lo"), hi.parse().expect("hi"))
    };
    let announced: Vec<(u32, (i64, i64))> = r
        .stdout
        .lines()
        .find(|l| l.contains(" before attempt 2"))
        .unwrap_or_else(|| panic!("no announced waits: {r:?}"))
        .split(" (plus")
        .next()
        .unwrap_or_default()
        .split(", ")
        .map(|part| {
            let (waits, attempt) = part.trim().split_once(" before attempt ").expect("wait");
            (attempt.parse().expect("attempt"), range(waits))
        })
        .collect();
    assert_eq!(announced, [(2, (25, 50)), (3, (50, 100))], "{r:?}");
    let mut gaps = 0;
    for line in r
        .stdout
        .lines()
        .filter(|l| l.contains(" ms after attempt "))
    {
        let attempt: u32 = line
            .trim()
            .strip_prefix("attempt ")
            .and_then(|l| l.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("attempt number in {line:?}"));
        let (before, after) = line.split_once(" ms after attempt ").expect("gap");
        let gap: i64 = before
            .rsplit(' ')
            .next()
            .unwrap_or_default()
            .parse()
            .expect("gap");
        let wait = after
            .split_once("(wait: ")
            .and_then(|(_, w)| w.split_once(')'))
            .map(|(w, _)| range(w))
            .unwrap_or_else(|| panic!("no wait in {line:?}"));
        let promised = announced
            .iter()
            .find(|(a, _)| *a == attempt)
            .map(|(_, w)| *w);
        assert_eq!(promised, Some(wait), "{line}");
        assert!(wait.0 <= gap && gap <= wait.1 + 300, "{line}");
        gaps += 1;
    }
    assert_eq!(gaps, 2, "{r:?}");
}

#[test]
fn demo_on_a_given_redis_cleans_up_after_itself() {
    let env = Env::new();
    create(&env, "mine", "priority", &[]);
    let r = env.ok(&["demo"]);
    assert!(r.stdout.contains("fresh prefix \"rmq-demo-"), "{r:?}");
    assert!(r.stdout.contains("deleted the demo's"), "{r:?}");
    // The user's own topics are untouched; the demo's keys are gone.
    assert_eq!(env.ok(&["--json", "topic", "list"]).json().len(), 1);
}

#[test]
fn sigint_releases_a_running_message_untouched() {
    let env = Env::new();
    create(&env, "p", "priority", &[]);
    env.ok(&["send", "p", "long-job"]);
    let mut child = env
        .cmd(&["consume", "p", "--exec", "sleep 30"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    assert!(eventually(Duration::from_secs(10), || env.stats("p")
        ["in_flight"]
        == 1));
    kill("-INT", &child.id().to_string());
    let status = wait_limited(&mut child, Duration::from_secs(10)).expect("stops on SIGINT");
    assert!(status.success(), "{status:?}");
    let s = env.stats("p");
    assert_eq!(
        (s["in_flight"].as_u64(), s["pending"].as_u64()),
        (Some(0), Some(1))
    );
    assert_eq!(s["retried"], 0, "a release is not a failed attempt");
    let peek = env.ok(&["--json", "peek", "p"]).json();
    assert_eq!(peek[0]["attempts"], 0);
}

#[test]
fn a_consumer_killed_mid_message_leaves_it_for_the_next_one() {
    let env = Env::new();
    create(
        &env,
        "p",
        "priority",
        &["--lease", "1000", "--backoff", "50"],
    );
    env.ok(&["send", "p", "survivor"]);
    let mut child = env
        .cmd(&["consume", "p", "--exec", "sleep 30"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let pid = child.id();
    assert!(eventually(Duration::from_secs(10), || env.stats("p")
        ["in_flight"]
        == 1));
    let shells = children_of(pid);
    kill("-9", &pid.to_string());
    let _ = wait_limited(&mut child, Duration::from_secs(5));
    // The orphaned `sh -c 'sleep 30'` has its own process group: end it.
    for sh in shells {
        kill("-9", &format!("-{sh}"));
    }

    let r = env.ok(&[
        "--json",
        "consume",
        "p",
        "--max",
        "1",
        "--idle-exit",
        "10000",
    ]);
    let got = r.json();
    assert_eq!(got.len(), 1, "{r:?}");
    assert_eq!(got[0]["key"], "survivor");
    assert_eq!(got[0]["attempt"], 2);
    let s = env.stats("p");
    assert_eq!(
        (s["acked"].as_u64(), s["in_flight"].as_u64()),
        (Some(1), Some(0))
    );
}

#[test]
fn acl_prints_a_line_that_makes_a_working_least_privilege_user() {
    let env = Env::new();
    let line = bin()
        .args(["acl", "shop", "--user", "shop-rmq"])
        .output()
        .unwrap();
    assert!(line.status.success());
    let line = String::from_utf8(line.stdout).unwrap();
    assert!(
        line.starts_with("ACL SETUSER shop-rmq reset -@all "),
        "{line}"
    );
    assert!(!line.contains('>'), "no password: {line}");
    // The operator appends `on >password` and runs it.
    let mut args: Vec<String> = vec!["-p".into(), env.server.port().to_string()];
    args.extend(line.split_whitespace().map(String::from));
    args.extend(["on".into(), ">pw".into()]);
    let out = std::process::Command::new("redis-cli")
        .args(&args)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "OK", "{out:?}");
    let url = format!("redis://shop-rmq:pw@127.0.0.1:{}", env.server.port());
    let as_user = |args: &[&str]| {
        let mut c = bin();
        c.args(["--redis", &url, "--prefix", "shop"]).args(args);
        support::run(c, b"")
    };
    as_user(&["topic", "create", "orders", "--kind", "priority"]).success();
    as_user(&["send", "orders", "hello", "--key", "k1"]).success();
    let got = as_user(&["--json", "consume", "orders", "--max", "1"]).success();
    assert_eq!(got.json()[0]["payload"], "hello");
    // Another prefix is off limits.
    let mut c = bin();
    c.args(["--redis", &url, "--prefix", "other", "topic", "list"]);
    let denied = support::run(c, b"");
    assert_ne!(denied.code, 0);
    assert!(
        denied.stderr.contains("NOPERM") || denied.stderr.contains("permission"),
        "{denied:?}"
    );
}

#[test]
fn credentials_come_from_the_environment_and_are_never_printed() {
    let server = support::RedisServer::start();
    let set = std::process::Command::new("redis-cli")
        .args([
            "-p",
            &server.port().to_string(),
            "CONFIG",
            "SET",
            "requirepass",
            "s3cret-pw",
        ])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&set.stdout).contains("OK"));
    let url = server.url();
    let mut c = bin();
    c.args(["--redis", &url, "topic", "list"])
        .env("REDIS_PASSWORD", "s3cret-pw");
    support::run(c, b"").success();
    // A wrong password: one line, and neither password appears.
    let mut c = bin();
    c.args(["--redis", &url, "-vv", "topic", "list"])
        .env("REDIS_PASSWORD", "wrong-pw");
    let r = support::run(c, b"");
    assert_ne!(r.code, 0);
    assert!(
        !r.stderr.contains("wrong-pw") && !r.stdout.contains("wrong-pw"),
        "{r:?}"
    );
    // In the URL, the same.
    let mut c = bin();
    c.args([
        "--redis",
        &format!("redis://default:wrong-pw@127.0.0.1:{}", server.port()),
        "-vv",
        "topic",
        "list",
    ]);
    let r = support::run(c, b"");
    assert_ne!(r.code, 0);
    assert!(!r.stderr.contains("wrong-pw"), "{r:?}");
}

#[test]
fn tls_flags_are_checked_and_never_fall_back_to_plaintext() {
    let env = Env::new();
    let r = env.rmq(&["--tls-ca", "/nonexistent/ca.pem", "topic", "list"]);
    assert!(r.one_error(2).contains("cannot read /nonexistent/ca.pem"));
    let ca = std::env::temp_dir().join(format!("rmq-cli-ca-{}.pem", std::process::id()));
    std::fs::write(&ca, "not used").unwrap();
    let r = env.rmq(&["--tls-ca", ca.to_str().unwrap(), "topic", "list"]);
    assert!(
        r.one_error(2).contains("never falls back to plaintext"),
        "{r:?}"
    );
    let r = env.rmq(&["--tls-cert", ca.to_str().unwrap(), "topic", "list"]);
    assert_ne!(r.code, 0, "--tls-cert needs --tls-key");
    let _ = std::fs::remove_file(ca);
}

#[test]
fn locked_down_mode_from_the_cli() {
    let env = Env::new();
    // An admin loads the library; a tenant with FCALL only works with --functions.
    assert!(env
        .ok(&["functions", "load"])
        .stdout
        .contains("loaded the function library rmq_"));
    let line = bin()
        .args(["acl", "shop", "--user", "t", "--functions"])
        .output()
        .unwrap();
    let line = String::from_utf8(line.stdout).unwrap();
    assert!(
        line.contains("+fcall") && !line.contains("+evalsha") && !line.contains("script"),
        "{line}"
    );
    let mut args: Vec<String> = vec!["-p".into(), env.server.port().to_string()];
    args.extend(line.split_whitespace().map(String::from));
    args.extend(["on".into(), ">pw".into()]);
    let out = std::process::Command::new("redis-cli")
        .args(&args)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "OK");
    let url = format!("redis://t:pw@127.0.0.1:{}", env.server.port());
    let as_tenant = |args: &[&str]| {
        let mut c = bin();
        c.args(["--redis", &url, "--prefix", "shop", "--functions"])
            .args(args);
        support::run(c, b"")
    };
    as_tenant(&["topic", "create", "orders", "--kind", "priority"]).success();
    as_tenant(&["send", "orders", "hi"]).success();
    assert_eq!(
        as_tenant(&["--json", "consume", "orders", "--max", "1"])
            .success()
            .json()[0]["payload"],
        "hi"
    );
    // Without --functions the tenant cannot load scripts: one clear line.
    let mut c = bin();
    c.args(["--redis", &url, "--prefix", "shop", "topic", "list"]);
    let r = support::run(c, b"");
    assert_ne!(r.code, 0);
    assert!(
        r.stderr.contains("NOPERM") || r.stderr.contains("permission"),
        "{r:?}"
    );
}

/// Printing in batches (one write per batch of deliveries handed out
/// together) keeps `--max` exact and ends every printed message; a reader
/// that goes away leaves nothing in flight: what was not printed is given
/// back untouched, so pending + acked is everything sent.
#[test]
fn batched_printing_keeps_max_exact_and_a_closed_reader_loses_nothing() {
    let env = Env::new();
    create(&env, "p", "priority", &["--slots", "4"]);
    let lines: String = (0..2000)
        .map(|i| format!("{{\"payload\":\"m{i}\"}}\n"))
        .collect();
    env.rmq_in(&["send", "p", "--batch"], lines.as_bytes())
        .success();

    let r = env.ok(&[
        "--json",
        "consume",
        "p",
        "--max",
        "7",
        "--concurrency",
        "64",
    ]);
    assert_eq!(r.json().len(), 7, "{r:?}");
    let st = env.stats("p");
    assert_eq!(
        (st["acked"].as_u64(), st["pending"].as_u64()),
        (Some(7), Some(1993))
    );

    let piped = format!(
        "{} --redis {} --json consume p --concurrency 64 --idle-exit 3000 | head -n 5",
        env!("CARGO_BIN_EXE_rmq"),
        env.url
    );
    let out = std::process::Command::new("sh")
        .args(["-c", &piped])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 5);
    assert!(eventually(Duration::from_secs(10), || {
        let st = env.stats("p");
        st["in_flight"] == 0
            && st["acked"].as_u64().unwrap_or(0) + st["pending"].as_u64().unwrap_or(0) == 2000
    }));
}

/// Switches set from the environment take what shells use: 1/0, yes/no,
/// on/off, true/false; anything else is refused with a clear error.
#[test]
fn environment_switches_take_1_0_yes_no_on_off() {
    let env = Env::new();
    let with = |value: &str| {
        let mut c = env.cmd(&["topic", "create", "x", "--kind", "priority"]);
        c.env("RMQ_FUNCTIONS", value);
        support::run(c, b"")
    };
    // On: locked-down mode, and this Redis has no function library loaded.
    for on in ["1", "yes", "on", "true", "TRUE"] {
        let r = with(on);
        assert!(
            r.stderr.contains("function library"),
            "RMQ_FUNCTIONS={on}: {r:?}"
        );
    }
    for off in ["0", "no", "off", "false", ""] {
        let r = with(off);
        assert_eq!(r.code, 0, "RMQ_FUNCTIONS={off}: {r:?}");
    }
    let r = with("maybe");
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("invalid value 'maybe'"), "{r:?}");
}

//! `rmq send --batch --json`: one result per input line, in input order,
//! saying what Redis holds for it afterwards (merged or new, its priority
//! or due time, the server's clock), then the summary as the last line.
//! Each result is checked against `rmq get` of its key.

mod support;

use serde_json::Value;
use support::Env;

fn create(env: &Env, topic: &str, kind: &str, extra: &[&str]) {
    let mut args = vec!["topic", "create", topic, "--kind", kind];
    args.extend_from_slice(extra);
    env.ok(&args);
}

/// What `rmq get` says of a key now.
fn get(env: &Env, topic: &str, key: &str) -> Value {
    env.ok(&["--json", "get", topic, "--key", key]).json()[0].clone()
}

fn now_ms() -> i64 {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// The per-line results and the summary (the last line, which holds
/// `counted`) of a batch.
fn results_and_summary(out: Vec<Value>, lines: usize, counted: &str) -> (Vec<Value>, Value) {
    assert_eq!(out.len(), lines + 1, "{out:?}");
    let summary = out[lines].clone();
    assert!(
        summary.get(counted).is_some(),
        "the summary comes last: {summary}"
    );
    assert!(
        out[..lines].iter().all(|l| l.get(counted).is_none()),
        "{out:?}"
    );
    (out[..lines].to_vec(), summary)
}

#[test]
fn each_line_of_a_fixed_time_batch_says_what_redis_holds_for_it() {
    let env = Env::new();
    create(&env, "f", "fixed-time", &["--slots", "4"]);
    let far = now_ms() + 3_600_000;
    let input = format!(
        "{{\"payload\":\"a\",\"key\":\"k1\",\"at\":{far}}}\n\
         \n\
         {{\"payload\":\"b\",\"key\":\"k1\",\"delay\":60000}}\n\
         {{\"payload\":\"late\",\"key\":\"k2\",\"at\":1000}}\n\
         {{\"payload\":\"c\",\"key\":\"k3\",\"delay\":5000}}\n"
    );
    let r = env.rmq_in(&["--json", "send", "f", "--batch"], input.as_bytes());
    assert_eq!(r.code, 2, "one line was refused: {r:?}");
    let (lines, summary) = results_and_summary(r.json(), 4, "sent");
    assert_eq!(
        (&summary["new"], &summary["merged"], &summary["refused"]),
        (&Value::from(2), &Value::from(1), &Value::from(1))
    );

    // Input order, by input line number (the blank line 2 is skipped).
    let numbers: Vec<u64> = lines.iter().map(|l| l["line"].as_u64().unwrap()).collect();
    assert_eq!(numbers, [1, 3, 4, 5]);
    let outcomes: Vec<&str> = lines
        .iter()
        .map(|l| l["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["new", "merged", "refused", "new"]);
    let keys: Vec<&str> = lines.iter().map(|l| l["key"].as_str().unwrap()).collect();
    assert_eq!(keys, ["k1", "k1", "k2", "k3"]);

    // Line 1 got its time; line 3 merged and moved it to 60 s after the
    // server's clock; line 5 is 5 s after it.
    assert_eq!(lines[0]["due_ms"], far);
    let server = lines[1]["server_ms"].as_i64().unwrap();
    assert_eq!(lines[1]["due_ms"].as_i64(), Some(server + 60_000));
    assert_eq!(lines[3]["due_ms"].as_i64(), Some(server + 5_000));
    assert!(lines.iter().all(|l| l.get("priority").is_none()));
    // The refused line says why and has no place.
    let refused = &lines[2];
    assert!(
        refused["reason"].as_str().unwrap().contains("past"),
        "{refused}"
    );
    assert!(refused.get("due_ms").is_none() && refused.get("server_ms").is_none());

    // What Redis holds agrees, slot included.
    for (line, key) in [(&lines[1], "k1"), (&lines[3], "k3")] {
        let held = get(&env, "f", key);
        assert_eq!(held["state"], "pending", "{held}");
        assert_eq!(held["due_ms"], line["due_ms"], "{key}");
        assert_eq!(held["slot"], line["slot"], "{key}");
    }
    assert_eq!(get(&env, "f", "k1")["payload"], "b");
    let k2 = get(&env, "f", "k2");
    assert_eq!(k2["state"], "absent", "{k2}");
    assert_eq!(k2["slot"], lines[2]["slot"]);
}

#[test]
fn a_priority_batch_says_each_priority_and_a_range_batch_keeps_the_first_due_time() {
    let env = Env::new();
    create(&env, "p", "priority", &[]);
    let input = "{\"payload\":\"a\",\"key\":\"x\",\"priority\":5}\n\
                 {\"payload\":\"a2\",\"key\":\"x\",\"priority\":9}\n\
                 {\"payload\":\"b\",\"key\":\"y\"}\n";
    let r = env
        .rmq_in(&["--json", "send", "p", "--batch"], input.as_bytes())
        .success();
    let (lines, _) = results_and_summary(r.json(), 3, "sent");
    let told: Vec<(&str, u64)> = lines
        .iter()
        .map(|l| {
            (
                l["outcome"].as_str().unwrap(),
                l["priority"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(told, [("new", 5), ("merged", 9), ("new", 0)]);
    assert!(lines.iter().all(|l| l.get("due_ms").is_none()));
    assert_eq!(get(&env, "p", "x")["priority"], 9);
    assert_eq!(get(&env, "p", "y")["priority"], 0);

    create(&env, "r", "range-merge", &[]);
    let input = "{\"payload\":\"1\",\"key\":\"z\"}\n{\"payload\":\"2\",\"key\":\"z\"}\n";
    let r = env
        .rmq_in(
            &["--json", "send", "r", "--batch", "--range", "60000"],
            input.as_bytes(),
        )
        .success();
    let (lines, _) = results_and_summary(r.json(), 2, "sent");
    let first = lines[0]["due_ms"].as_i64().unwrap();
    assert_eq!(
        Some(first),
        lines[0]["server_ms"].as_i64().map(|s| s + 60_000)
    );
    assert_eq!(lines[1]["outcome"], "merged");
    assert_eq!(
        lines[1]["due_ms"].as_i64(),
        Some(first),
        "a range merge keeps the first due time"
    );
    assert_eq!(get(&env, "r", "z")["due_ms"].as_i64(), Some(first));
}

#[test]
fn a_single_send_says_the_same_and_a_batch_without_json_prints_only_the_summary() {
    let env = Env::new();
    create(&env, "f", "fixed-time", &[]);
    let one = env
        .ok(&["--json", "send", "f", "x", "--delay", "30000"])
        .json();
    assert_eq!(one.len(), 1);
    let server = one[0]["server_ms"].as_i64().unwrap();
    assert_eq!(one[0]["due_ms"].as_i64(), Some(server + 30_000));
    assert_eq!(get(&env, "f", "x")["due_ms"], one[0]["due_ms"]);

    let text = env
        .rmq_in(
            &["send", "f", "--batch", "--delay", "1000"],
            b"{\"payload\":\"y\"}\n",
        )
        .success();
    assert_eq!(text.stdout.lines().count(), 1, "{text:?}");
    assert!(text.stdout.starts_with("sent 1:"), "{text:?}");
}

#[test]
fn a_dead_requeue_says_what_became_of_each_letter() {
    let env = Env::new();
    create(&env, "f", "fixed-time", &["--slots", "4"]);
    env.rmq_in(
        &["send", "f", "--batch", "--delay", "0"],
        b"{\"payload\":\"1\",\"key\":\"d1\"}\n{\"payload\":\"2\",\"key\":\"d2\"}\n",
    )
    .success();
    let taken = env.ok(&["--json", "take", "f", "2"]).json();
    assert_eq!(taken.len(), 2, "{taken:?}");
    for t in &taken {
        let receipt = t["receipt"].as_str().unwrap();
        env.ok(&["nack", "f", "--dead", receipt]);
    }
    // d2 pending again (sent anew): its letter merges into it.
    env.ok(&["send", "f", "fresh", "--key", "d2", "--delay", "600000"]);

    let out = env.ok(&["--json", "dead", "requeue", "f", "--all"]).json();
    let (mut lines, summary) = results_and_summary(out, 2, "requeued");
    assert_eq!(
        (&summary["requeued"], &summary["merged"]),
        (&Value::from(1), &Value::from(1))
    );
    lines.sort_by_key(|l| l["key"].as_str().unwrap_or_default().to_string());
    let d1 = &lines[0];
    assert_eq!(
        (&d1["key"], &d1["outcome"]),
        (&Value::from("d1"), &Value::from("requeued"))
    );
    assert_eq!(
        d1["due_ms"], d1["server_ms"],
        "a requeued letter is due at once"
    );
    let d2 = &lines[1];
    assert_eq!(
        (&d2["key"], &d2["outcome"]),
        (&Value::from("d2"), &Value::from("merged"))
    );
    for (line, key) in [(d1, "d1"), (d2, "d2")] {
        let held = get(&env, "f", key);
        assert_eq!(held["state"], "pending", "{held}");
        assert_eq!(held["due_ms"], line["due_ms"], "{key}");
        assert_eq!(held["slot"], line["slot"], "{key}");
    }
    assert_eq!(get(&env, "f", "d2")["payload"], "fresh");
}

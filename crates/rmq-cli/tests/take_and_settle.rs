//! `rmq take` then `rmq ack|nack|extend` by receipt: two-phase handling
//! across commands. Each receipt settles its delivery once, what Redis
//! holds afterwards is what the outcome lines said, a receipt of another
//! topic or a changed one settles nothing (exit 2), and a receipt whose
//! lease ran out answers `stale` (exit 1) and changes nothing.
#![allow(clippy::unwrap_used)]
mod support;

use std::time::Duration;

use serde_json::Value;
use support::*;

fn setup() -> Env {
    let env = Env::new();
    env.ok(&["topic", "create", "t", "--kind", "priority", "--slots", "4"]);
    env.ok(&["topic", "create", "u", "--kind", "priority", "--slots", "1"]);
    for i in 0..5 {
        env.ok(&["send", "t", &format!("p{i}"), "--key", &format!("k{i}")]);
    }
    env
}

fn receipts(taken: &[Value]) -> Vec<String> {
    taken
        .iter()
        .map(|d| d["receipt"].as_str().unwrap().to_string())
        .collect()
}

fn totals(env: &Env) -> (u64, u64, u64) {
    let s = env.stats("t");
    let n = |f: &str| s[f].as_u64().unwrap_or_else(|| panic!("{f} in {s}"));
    (n("pending"), n("in_flight"), n("dead"))
}

#[test]
fn taken_messages_are_settled_by_receipt_from_arguments_or_stdin() {
    let env = setup();
    let taken = env.ok(&["--json", "take", "t", "3"]).json();
    assert_eq!(taken.len(), 3);
    for d in &taken {
        assert_eq!(d["attempt"], 1);
        assert!(d["key"].as_str().unwrap().starts_with('k'));
    }
    assert_eq!(totals(&env), (2, 3, 0));
    let r = receipts(&taken);
    let acked = env.ok(&["ack", "t", &r[0], &r[1]]);
    assert_eq!(acked.stdout.lines().collect::<Vec<_>>(), ["acked", "acked"]);
    let dead = env
        .rmq_in(
            &["--json", "nack", "t", "--dead", "--error", "bad"],
            format!("{}\n", r[2]).as_bytes(),
        )
        .success()
        .json();
    assert_eq!(dead[0]["outcome"], "dead");
    assert_eq!(totals(&env), (2, 0, 1));
    // A second ack of the same receipt: stale, exit 1, nothing changed.
    let again = env.rmq(&["ack", "t", &r[0]]);
    assert_eq!((again.code, again.stdout.trim()), (1, "stale"));
    assert_eq!(totals(&env), (2, 0, 1));
}

#[test]
fn nack_retries_after_its_delay_and_extend_outlives_the_lease() {
    let env = setup();
    let taken = env
        .ok(&["--json", "take", "t", "2", "--lease", "500"])
        .json();
    let r = receipts(&taken);
    let n = env.ok(&["nack", "t", "--retry-after", "60000", &r[0]]);
    assert_eq!(n.stdout.trim(), "retrying");
    let e = env.ok(&["extend", "t", "--lease", "60000", &r[1]]);
    assert_eq!(e.stdout.trim(), "extended");
    std::thread::sleep(Duration::from_millis(1_200));
    // Past the first lease: the extended one is still in flight, so the
    // next take gets only the three never taken.
    let next = env.ok(&["--json", "take", "t", "10"]).json();
    assert_eq!(next.len(), 3);
    let key = taken[0]["key"].as_str().unwrap();
    let got = env.ok(&["--json", "get", "t", key]).json();
    assert_eq!(got[0]["state"], "retry-waiting", "{:?}", got);
    assert_eq!(env.ok(&["ack", "t", &r[1]]).stdout.trim(), "acked");
}

#[test]
fn a_receipt_of_another_topic_or_changed_settles_nothing() {
    let env = setup();
    let taken = env.ok(&["--json", "take", "t", "2"]).json();
    let r = receipts(&taken);
    let other = env.rmq(&["ack", "u", &r[0]]);
    assert_eq!(other.code, 2, "{other:?}");
    assert!(
        other.stderr.contains("not a receipt of this topic"),
        "{other:?}"
    );
    let mut forged = r[1].clone().into_bytes();
    forged[9] = if forged[9] == b'A' { b'B' } else { b'A' };
    let forged = String::from_utf8(forged).unwrap();
    // One good and one forged: neither is settled.
    let mixed = env.rmq(&["ack", "t", &r[0], &forged]);
    assert_eq!(mixed.code, 2, "{mixed:?}");
    assert_eq!(totals(&env), (3, 2, 0));
    let none = env.rmq(&["ack", "t"]);
    assert_eq!(none.code, 2, "no receipts at all: {none:?}");
}

#[test]
fn a_receipt_whose_lease_ran_out_is_stale() {
    let env = setup();
    let taken = env
        .ok(&["--json", "take", "t", "1", "--lease", "200"])
        .json();
    std::thread::sleep(Duration::from_millis(600));
    // The next take rolls the expired lease back (a failed attempt).
    env.ok(&["--json", "take", "t", "10"]);
    let r = receipts(&taken);
    let late = env.rmq(&["ack", "t", &r[0]]);
    assert_eq!((late.code, late.stdout.trim()), (1, "stale"), "{late:?}");
    let key = taken[0]["key"].as_str().unwrap();
    let got = env.ok(&["--json", "get", "t", key]).json();
    assert_ne!(
        got[0]["state"], "absent",
        "the late ack removed nothing: {got:?}"
    );
}

#[test]
fn take_waits_for_a_message_when_asked() {
    let env = setup();
    env.ok(&["--json", "take", "t", "5"]);
    let empty = env.ok(&["--json", "take", "t", "5"]);
    assert!(empty.stdout.is_empty());
    let mut waiting = env
        .cmd(&["--json", "take", "t", "1", "--wait", "15000"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    env.ok(&["send", "t", "late", "--key", "late"]);
    let status = wait_limited(&mut waiting, Duration::from_secs(14)).expect("answered");
    assert!(status.success());
    let mut out = String::new();
    std::io::Read::read_to_string(&mut waiting.stdout.take().unwrap(), &mut out).unwrap();
    assert!(out.contains("\"key\":\"late\""), "{out}");
}

#[test]
fn consume_max_takes_exactly_what_it_handles() {
    let env = Env::new();
    env.ok(&["topic", "create", "m", "--kind", "priority", "--slots", "4"]);
    let lines: String = (0..40)
        .map(|i| format!("{{\"payload\":\"p{i}\",\"key\":\"k{i}\"}}\n"))
        .collect();
    env.rmq_in(&["send", "m", "--batch"], lines.as_bytes())
        .success();
    let mut handled = 0;
    for (max, concurrency) in [("5", "4"), ("3", "16"), ("7", "64")] {
        env.ok(&[
            "consume",
            "m",
            "--max",
            max,
            "--concurrency",
            concurrency,
            "--exec",
            "cat >/dev/null",
        ]);
        handled += max.parse::<u64>().unwrap();
        let s = env.stats("m");
        assert_eq!(
            (s["delivered"].as_u64(), s["acked"].as_u64()),
            (Some(handled), Some(handled)),
            "--max {max} --concurrency {concurrency}: nothing taken beyond it: {s}"
        );
    }
    let printed = env.ok(&[
        "--json",
        "consume",
        "m",
        "--max",
        "4",
        "--concurrency",
        "32",
    ]);
    assert_eq!(printed.json().len(), 4);
    assert_eq!(env.stats("m")["delivered"].as_u64(), Some(handled + 4));
}

#[test]
fn keys_of_any_bytes_are_named_by_key_key_hex_and_key_base64() {
    let env = Env::new();
    env.ok(&["topic", "create", "b", "--kind", "priority", "--slots", "2"]);
    // A key that starts with '-', and one with NUL and a byte that is not UTF-8.
    env.ok(&["send", "b", "p1", "--key", "-dash"]);
    let sent = env
        .ok(&["--json", "send", "b", "p2", "--key-hex", "00ff41"])
        .json();
    assert_eq!(sent[0]["key_base64"], "AP9B", "{sent:?}");
    let state = |form: &[&str]| {
        let mut args = vec!["--json", "get", "b"];
        args.extend(form);
        env.ok(&args).json()[0]["state"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(state(&["--key", "-dash"]), "pending");
    assert_eq!(state(&["--key-hex", "00FF41"]), "pending");
    assert_eq!(state(&["--key-base64", "AP9B"]), "pending");
    let moved = env
        .ok(&[
            "--json",
            "reschedule",
            "b",
            "--key-base64",
            "AP9B",
            "--priority",
            "7",
        ])
        .json();
    assert_eq!(
        (
            moved[0]["key_base64"].as_str(),
            moved[0]["priority"].as_u64()
        ),
        (Some("AP9B"), Some(7))
    );
    let cancelled = env
        .ok(&[
            "--json",
            "cancel",
            "b",
            "--key",
            "-dash",
            "--key-hex",
            "00ff41",
        ])
        .json();
    assert_eq!(cancelled.len(), 2);
    assert!(
        cancelled.iter().all(|c| c["cancelled"] == true),
        "{cancelled:?}"
    );
    assert_eq!(state(&["--key-hex", "00ff41"]), "absent");
    // A dead letter of a binary key is requeued by it.
    env.ok(&["send", "b", "p3", "--key-hex", "0001"]);
    let taken = env.ok(&["--json", "take", "b", "1"]).json();
    let r = taken[0]["receipt"].as_str().unwrap().to_string();
    env.ok(&["nack", "b", "--dead", &r]);
    assert_eq!(state(&["--key-hex", "0001"]), "dead");
    env.ok(&["dead", "requeue", "b", "--key-hex", "0001"]);
    assert_eq!(state(&["--key-base64", "AAE="]), "pending");
    // Bad forms, or two at once: refused, nothing changed.
    for bad in [
        &["get", "b", "--key-hex", "0"][..],
        &["get", "b", "--key-base64", "!!"],
        &["get", "b", "k", "--key", "k"],
        &["cancel", "b", "--key-hex", "zz"],
        &["send", "b", "p", "--key", "k", "--key-hex", "00"],
    ] {
        assert_eq!(env.rmq(bad).code, 2, "{bad:?}");
    }
    assert_eq!(state(&["--key-hex", "0001"]), "pending");
}

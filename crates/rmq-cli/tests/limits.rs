//! Limits told, not guessed: each command's `--help` states the limits of
//! its flags (the library's, `rmq::limits`), and the CLI accepts a value
//! at the limit and refuses one past it, exit 2, with nothing changed.

mod support;

use rmq::limits::*;
use support::{bin, Env};

fn help(args: &[&str]) -> String {
    let mut c = bin();
    c.args(args).arg("--help");
    let r = support::run(c, b"");
    assert_eq!(r.code, 0, "{r:?}");
    // Clap wraps lines: judge the words, not the layout.
    r.stdout.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[test]
fn every_limit_a_flag_has_is_in_its_help() {
    let cases: [(&[&str], Vec<u64>); 6] = [
        (
            &["topic", "create"],
            vec![
                u64::from(MAX_SLOTS),
                MAX_LEASE_MS,
                u64::from(MAX_ATTEMPTS),
                MAX_BACKOFF_MS,
                MAX_PAYLOAD_LIMIT_BYTES,
                MAX_PAST_TOLERANCE_MS,
                u64::from(MAX_RATE),
                u64::from(MAX_IN_FLIGHT),
                MAX_PENDING,
                MAX_HANDLER_TIMEOUT_MS,
            ],
        ),
        (
            &["send"],
            vec![
                u64::from(MAX_PRIORITY),
                MAX_TIME_MS.unsigned_abs(),
                MAX_SPAN_MS,
            ],
        ),
        (&["take"], vec![MAX_TAKE as u64, MAX_LEASE_MS, 3_600_000]),
        (&["extend"], vec![MAX_LEASE_MS]),
        (&["nack"], vec![MAX_RETRY_DELAY_MS]),
        (&["consume"], vec![MAX_HANDLER_TIMEOUT_MS]),
    ];
    for (command, limits) in cases {
        let text = help(command);
        for limit in limits {
            assert!(
                text.contains(&limit.to_string()),
                "`rmq {} --help` does not state {limit}",
                command.join(" ")
            );
        }
    }
}

#[test]
fn a_value_at_a_limit_is_taken_and_one_past_it_refused() {
    let env = Env::new();
    let at = |v: u64| v.to_string();
    let past = |v: u64| (v + 1).to_string();
    // Topic settings: the library's checks.
    for (flag, limit) in [
        ("--lease", MAX_LEASE_MS),
        ("--past-tolerance", MAX_PAST_TOLERANCE_MS),
        ("--max-attempts", u64::from(MAX_ATTEMPTS)),
        ("--backoff-max", MAX_BACKOFF_MS),
        ("--max-payload", MAX_PAYLOAD_LIMIT_BYTES),
        ("--handler-timeout", MAX_HANDLER_TIMEOUT_MS),
        ("--max-in-flight", u64::from(MAX_IN_FLIGHT)),
        ("--max-pending", MAX_PENDING),
    ] {
        let name = format!("t{}", flag.replace('-', ""));
        let refused = env.rmq(&[
            "topic",
            "create",
            &name,
            "--kind",
            "fixed-time",
            flag,
            &past(limit),
        ]);
        assert_eq!(refused.code, 2, "{flag} past its limit: {refused:?}");
        assert!(
            env.rmq(&["topic", "show", &name]).code != 0,
            "{flag}: nothing created"
        );
        env.ok(&[
            "topic",
            "create",
            &name,
            "--kind",
            "fixed-time",
            flag,
            &at(limit),
        ]);
    }
    // Message timing.
    env.ok(&["topic", "create", "f", "--kind", "fixed-time"]);
    env.ok(&["topic", "create", "r", "--kind", "range-merge"]);
    env.ok(&["topic", "create", "p", "--kind", "priority"]);
    for (topic, flag, limit) in [
        ("f", "--delay", MAX_SPAN_MS),
        ("r", "--range", MAX_SPAN_MS),
        ("p", "--priority", u64::from(MAX_PRIORITY)),
    ] {
        let refused = env.rmq(&["send", topic, "x", "--key", "past", flag, &past(limit)]);
        assert_eq!(refused.code, 2, "{flag} past its limit: {refused:?}");
        env.ok(&["send", topic, "x", "--key", "at", flag, &at(limit)]);
    }
    for topic in ["f", "r", "p"] {
        assert_eq!(
            env.stats(topic)["sent"],
            1,
            "{topic}: only the one at the limit"
        );
    }
    // Leases and retry delays by receipt: refused before anything is sent.
    for args in [
        vec!["take", "p", "1", "--lease", &past(MAX_LEASE_MS)],
        vec!["take", "p", &past(MAX_TAKE as u64)],
        vec!["extend", "p", "--lease", &past(MAX_LEASE_MS), "r"],
        vec!["nack", "p", "--retry-after", &past(MAX_RETRY_DELAY_MS), "r"],
    ] {
        let refused = env.rmq(&args);
        assert_eq!(refused.code, 2, "{args:?}: {refused:?}");
    }
    let taken = env
        .ok(&["--json", "take", "p", "1", "--lease", &at(MAX_LEASE_MS)])
        .json();
    let receipt = taken[0]["receipt"].as_str().unwrap().to_string();
    env.ok(&["extend", "p", "--lease", &at(MAX_LEASE_MS), &receipt]);
    env.ok(&[
        "nack",
        "p",
        "--retry-after",
        &at(MAX_RETRY_DELAY_MS),
        &receipt,
    ]);
}

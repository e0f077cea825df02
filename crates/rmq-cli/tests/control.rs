//! Steering a live queue across OS processes: `rmq cancel --batch` racing
//! `rmq consume` processes over thousands of keys, and `rmq topic pause`
//! with busy consumers in several processes. Each test checks a history
//! (what every consumer printed, what every cancel answered) key by key.
#![allow(clippy::unwrap_used)]
mod support;

use std::collections::{BTreeMap, HashSet};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::*;

/// Starts `rmq --json consume ...` with stdout to a file; returns the child.
fn consumer(
    env: &Env,
    dir: &std::path::Path,
    name: &str,
    args: &[&str],
) -> (Child, std::path::PathBuf) {
    let path = dir.join(name);
    let file = std::fs::File::create(&path).unwrap();
    let mut all = vec!["--json", "consume"];
    all.extend_from_slice(args);
    let child = env
        .cmd(&all)
        .stdout(Stdio::from(file))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    (child, path)
}

fn json_lines(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn str_of<'a>(v: &'a Value, field: &str) -> &'a str {
    v[field]
        .as_str()
        .unwrap_or_else(|| panic!("no {field} in {v}"))
}

#[test]
fn cancel_racing_consumers_ends_every_key_delivered_once_or_never_and_never_retried() {
    const KEYS: usize = 2000;
    let env = Env::new();
    env.ok(&[
        "topic",
        "create",
        "c",
        "--kind",
        "priority",
        "--slots",
        "16",
        "--backoff",
        "20",
        "--backoff-max",
        "40",
        "--max-attempts",
        "5",
    ]);
    let lines: String = (0..KEYS)
        .map(|i| format!("{{\"payload\":\"v\",\"key\":\"k{i}\"}}\n"))
        .collect();
    env.rmq_in(&["send", "c", "--batch"], lines.as_bytes())
        .success();
    let dir = tempfile::tempdir().unwrap();
    // Every key fails its first attempt and succeeds on its second.
    let handler = "cat >/dev/null; [ \"$RMQ_ATTEMPT\" -ge 2 ]";
    let args = [
        "c",
        "--exec",
        handler,
        "--concurrency",
        "16",
        "--idle-exit",
        "1500",
    ];
    let mut consumers: Vec<_> = (0..2)
        .map(|n| consumer(&env, dir.path(), &format!("consumer{n}"), &args))
        .collect();
    // Three keys of four are cancelled, in a scrambled order, in chunks
    // while the consumers work: the cancels meet every state.
    let mut order: Vec<usize> = (0..KEYS).filter(|i| i % 4 != 3).collect();
    let mut x = 7usize;
    for i in (1..order.len()).rev() {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        order.swap(i, (x >> 33) % (i + 1));
    }
    let mut answers: BTreeMap<String, Value> = BTreeMap::new();
    for chunk in order.chunks(250) {
        std::thread::sleep(Duration::from_millis(150));
        let input: String = chunk.iter().map(|i| format!("k{i}\n")).collect();
        let r = env
            .rmq_in(&["--json", "cancel", "c", "--batch"], input.as_bytes())
            .success();
        for v in r.json() {
            answers.insert(str_of(&v, "key").to_string(), v);
        }
    }
    for (child, _) in &mut consumers {
        let status = wait_limited(child, Duration::from_secs(120)).expect("consumers exit");
        assert!(status.success());
    }
    // The history: every delivery's end, per key, by attempt.
    let mut ends: BTreeMap<String, Vec<(u64, String)>> = BTreeMap::new();
    for (_, path) in &consumers {
        for v in json_lines(path) {
            let key = str_of(&v, "key").to_string();
            let attempt = v["attempt"].as_u64().unwrap();
            ends.entry(key)
                .or_default()
                .push((attempt, str_of(&v, "outcome").to_string()));
        }
    }
    let mut tally: BTreeMap<String, usize> = BTreeMap::new();
    for i in 0..KEYS {
        let key = format!("k{i}");
        let mut e = ends.remove(&key).unwrap_or_default();
        e.sort();
        let story: Vec<String> = e.iter().map(|(a, o)| format!("{a}:{o}")).collect();
        let story = story.join(" ");
        let answer = answers.get(&key).map(|v| str_of(v, "outcome").to_string());
        let state = answers.get(&key).map(|v| str_of(v, "state").to_string());
        let allowed: &[&str] = match (answer.as_deref(), state.as_deref()) {
            // Never cancelled: the failure, then the success.
            (None, _) => &["1:retried 2:acked"],
            // Taken out while waiting: never delivered, or delivered once
            // (the failed attempt) and never again.
            (Some("cancelled"), Some("pending")) => &["", "1:retried"],
            (Some("cancelled"), Some("retry-waiting")) => &["1:retried"],
            // In flight: that delivery was the last (its nack ended it).
            (Some("will-not-retry"), _) => &["1:cancelled", "1:retried 2:acked"],
            // Done before the cancel came.
            (Some("absent"), _) => &["1:retried 2:acked"],
            (a, s) => panic!("{key}: unexpected answer {a:?} from state {s:?}"),
        };
        assert!(
            allowed.contains(&story.as_str()),
            "{key}: cancel said {answer:?} (was {state:?}), but the history is {story:?}"
        );
        *tally
            .entry(format!("{answer:?}/{state:?} -> {story}"))
            .or_default() += 1;
    }
    assert!(ends.is_empty(), "deliveries of unknown keys: {ends:?}");
    eprintln!("outcomes: {tally:#?}");
    // The race met more than one state (else the test proves little).
    let answered: HashSet<&str> = answers.values().map(|v| str_of(v, "state")).collect();
    assert!(answered.len() >= 2, "cancels met only {answered:?}");
    let s = env.stats("c");
    for field in [
        "pending",
        "in_flight",
        "retry_waiting",
        "behind_in_flight",
        "dead",
    ] {
        assert_eq!(s[field], 0, "{field}: {s}");
    }
}

#[test]
fn no_delivery_starts_after_pause_returned_by_the_server_clock() {
    const MESSAGES: usize = 20_000;
    let env = Env::new();
    env.ok(&[
        "topic", "create", "p", "--kind", "priority", "--slots", "16",
    ]);
    let lines: String = (0..MESSAGES)
        .map(|i| format!("{{\"payload\":\"m{i}\"}}\n"))
        .collect();
    env.rmq_in(&["send", "p", "--batch"], lines.as_bytes())
        .success();
    let dir = tempfile::tempdir().unwrap();
    let args = ["p", "--concurrency", "8", "--idle-exit", "1500"];
    let mut consumers: Vec<_> = (0..3)
        .map(|n| consumer(&env, dir.path(), &format!("busy{n}"), &args))
        .collect();
    // Pause once they are busy.
    assert!(eventually(Duration::from_secs(20), || {
        env.stats("p")["acked"].as_u64().unwrap() > 500
    }));
    let paused = env.ok(&["--json", "topic", "pause", "p"]).json();
    let paused_at = paused[0]["server_ms"].as_i64().unwrap();
    for (child, _) in &mut consumers {
        let status = wait_limited(child, Duration::from_secs(60)).expect("idle consumers exit");
        assert!(status.success());
    }
    let mut seen: HashSet<String> = HashSet::new();
    for (_, path) in &consumers {
        for v in json_lines(path) {
            let taken = v["taken_ms"].as_i64().unwrap();
            assert!(
                taken <= paused_at,
                "a delivery started at {taken}, after pause returned at {paused_at}"
            );
            assert!(
                seen.insert(str_of(&v, "payload").to_string()),
                "delivered twice: {v}"
            );
        }
    }
    let before = env.stats("p");
    assert!(
        before["pending"].as_u64().unwrap() > 0,
        "the pause stopped them: {before}"
    );
    assert_eq!(before["paused_slots"], 16);
    // Resume: an idle consumer takes again within one wake-up.
    let (mut waiting, path) = consumer(&env, dir.path(), "after", &args);
    std::thread::sleep(Duration::from_millis(500));
    let started = Instant::now();
    let resumed = env.ok(&["--json", "topic", "resume", "p"]).json();
    let resumed_at = resumed[0]["server_ms"].as_i64().unwrap();
    let status = wait_limited(&mut waiting, Duration::from_secs(60)).expect("drained");
    assert!(status.success());
    let after = json_lines(&path);
    let first = after
        .iter()
        .map(|v| v["taken_ms"].as_i64().unwrap())
        .min()
        .unwrap();
    eprintln!(
        "first delivery {} ms after resume returned (server clock); drained in {:?}",
        first - resumed_at,
        started.elapsed()
    );
    assert!(
        first - resumed_at < 1_000,
        "resume woke the idle consumer at once"
    );
    for v in &after {
        assert!(
            seen.insert(str_of(v, "payload").to_string()),
            "delivered twice: {v}"
        );
    }
    assert_eq!(seen.len(), MESSAGES, "every message exactly once");
    assert_eq!(env.stats("p")["paused_slots"], 0);
}

#[test]
fn get_cancel_and_reschedule_from_the_command_line() {
    let env = Env::new();
    env.ok(&[
        "topic",
        "create",
        "f",
        "--kind",
        "fixed-time",
        "--slots",
        "4",
    ]);
    env.ok(&["send", "f", "pay", "--key", "order-1", "--delay", "3600000"]);
    let got = env.ok(&["--json", "get", "f", "order-1"]).json();
    assert_eq!(got.len(), 1);
    let v = &got[0];
    assert_eq!(
        (str_of(v, "state"), str_of(v, "payload")),
        ("pending", "pay")
    );
    assert!(v["due_ms"].as_i64().unwrap() > v["server_ms"].as_i64().unwrap() + 3_500_000);
    let text = env.ok(&["get", "f", "order-1"]).stdout;
    assert!(
        text.contains("state:") && text.contains("pending"),
        "{text}"
    );

    let r = env
        .ok(&["--json", "reschedule", "f", "order-1", "--delay", "60000"])
        .json();
    assert_eq!(str_of(&r[0], "moved"), "pending");
    let due = env.ok(&["--json", "get", "f", "order-1"]).json()[0]["due_ms"]
        .as_i64()
        .unwrap();
    assert_eq!(Some(due), r[0]["due_ms"].as_i64());
    // Refusals: exit 2, one line, nothing changed.
    for args in [
        &["reschedule", "f", "order-1", "--priority", "3"][..],
        &["reschedule", "f", "order-1", "--at", "1000"],
        &["reschedule", "f", "nobody", "--delay", "5"],
        &["get", "f", ""],
        &["cancel", "f", ""],
        &["cancel", "nope", "k"],
    ] {
        let r = env.rmq(args);
        r.one_error(2);
    }
    // No new time at all: clap's usage error, also exit 2.
    assert_eq!(env.rmq(&["reschedule", "f", "order-1"]).code, 2);
    let after = env.ok(&["--json", "get", "f", "order-1"]).json();
    assert_eq!(after[0]["due_ms"].as_i64(), Some(due));

    let c = env
        .ok(&["--json", "cancel", "f", "order-1", "nobody"])
        .json();
    assert_eq!(c.len(), 2);
    assert_eq!(
        (c[0]["cancelled"].as_bool(), str_of(&c[0], "state")),
        (Some(true), "pending")
    );
    assert_eq!(
        (c[1]["cancelled"].as_bool(), str_of(&c[1], "state")),
        (Some(false), "absent")
    );
    let text = env.ok(&["cancel", "f", "order-1"]).stdout;
    assert!(text.contains("absent"), "{text}");
    assert_eq!(
        str_of(
            &env.ok(&["--json", "get", "f", "order-1"]).json()[0],
            "state"
        ),
        "absent"
    );
    // A bad --batch line: exit 2, nothing cancelled.
    env.ok(&["send", "f", "x", "--key", "k2", "--delay", "60000"]);
    let r = env.rmq_in(&["cancel", "f", "--batch"], b"k2\n{\"key\": 5}\n");
    r.one_error(2);
    assert_eq!(
        str_of(&env.ok(&["--json", "get", "f", "k2"]).json()[0], "state"),
        "pending"
    );
}

#[test]
fn topic_pause_shows_in_stats_and_show() {
    let env = Env::new();
    env.ok(&["topic", "create", "t", "--kind", "priority", "--slots", "2"]);
    let text = env.ok(&["topic", "pause", "t"]).stdout;
    assert!(text.contains("paused topic"), "{text}");
    let again = env.ok(&["topic", "pause", "t"]).stdout;
    assert!(again.contains("already paused"), "{again}");
    let show = env.ok(&["topic", "show", "t"]).stdout;
    assert!(show.contains("paused:") && show.contains("yes"), "{show}");
    env.ok(&["send", "t", "m"]);
    let r = env.ok(&["--json", "consume", "t", "--idle-exit", "300"]);
    assert!(r.json().is_empty(), "nothing while paused: {r:?}");
    let text = env.ok(&["topic", "resume", "t"]).stdout;
    assert!(text.contains("resumed"), "{text}");
    let r = env.ok(&["--json", "consume", "t", "--max", "1"]);
    assert_eq!(r.json().len(), 1);
}

#[test]
fn topic_update_and_delete_from_the_command_line() {
    let env = Env::new();
    env.ok(&["topic", "create", "u", "--kind", "priority", "--slots", "4"]);
    let r = env.ok(&[
        "--json",
        "topic",
        "update",
        "u",
        "--max-attempts",
        "3",
        "--dead-letter-ttl",
        "60000",
    ]);
    let v = &r.json()[0];
    assert_eq!(
        (v["max_attempts"].as_u64(), v["dead_letter_ttl_ms"].as_u64()),
        (Some(3), Some(60000))
    );
    let show = env.ok(&["topic", "show", "u"]).stdout;
    assert!(show.contains("after 60000 ms"), "{show}");
    // The kind and slot count never change; a bad value changes nothing.
    for args in [
        &["topic", "update", "u", "--slots", "8"][..],
        &["topic", "update", "u", "--kind", "fixed-time"],
        &["topic", "update", "u", "--lease", "0"],
        &["topic", "update", "u"],
        &["topic", "update", "nope", "--max-attempts", "2"],
    ] {
        env.rmq(args).one_error(2);
    }
    let v = &env.ok(&["--json", "topic", "show", "u"]).json()[0];
    assert_eq!(v["max_attempts"].as_u64(), Some(3));

    env.ok(&["send", "u", "m"]);
    let refused = env.rmq(&["topic", "delete", "u"]).one_error(2);
    assert!(refused.contains("holds 1 messages"), "{refused}");
    let r = env
        .ok(&["--json", "topic", "delete", "u", "--force"])
        .json();
    assert_eq!(
        (r[0]["deleted"].as_bool(), r[0]["messages"].as_u64()),
        (Some(true), Some(1))
    );
    env.rmq(&["topic", "show", "u"]).one_error(2);
    env.rmq(&["topic", "delete", "u"]).one_error(2);
}

#[test]
fn reschedule_racing_consumers_never_delivers_before_the_new_time_nor_twice() {
    const KEYS: usize = 2000;
    let env = Env::new();
    env.ok(&[
        "topic",
        "create",
        "r",
        "--kind",
        "fixed-time",
        "--slots",
        "16",
    ]);
    // The first half due over the next four seconds (the race), the second half
    // a minute away (surely still waiting when the reschedule comes).
    let lines: String = (0..KEYS)
        .map(|i| {
            let delay = if i < KEYS / 2 { 4 * i } else { 60_000 };
            format!("{{\"payload\":\"v\",\"key\":\"k{i}\",\"delay\":{delay}}}\n")
        })
        .collect();
    env.rmq_in(&["send", "r", "--batch"], lines.as_bytes())
        .success();
    let dir = tempfile::tempdir().unwrap();
    let args = ["r", "--concurrency", "16", "--idle-exit", "2500"];
    let mut consumers: Vec<_> = (0..2)
        .map(|n| consumer(&env, dir.path(), &format!("consumer{n}"), &args))
        .collect();
    // Every key pushed 500 ms past now, once the consumers have taken some:
    // those still waiting move, those already taken are refused. Waiting on
    // deliveries rather than on a clock keeps both sides of the race met on
    // a slow machine.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while consumers
        .iter()
        .map(|(_, path)| {
            std::fs::read_to_string(path)
                .unwrap_or_default()
                .lines()
                .count()
        })
        .sum::<usize>()
        < 50
    {
        assert!(
            std::time::Instant::now() < deadline,
            "no deliveries in 60 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let input: String = (0..KEYS)
        .map(|i| format!("{{\"key\":\"k{i}\",\"delay\":500}}\n"))
        .collect();
    let r = env
        .rmq_in(&["--json", "reschedule", "r", "--batch"], input.as_bytes())
        .success();
    let answers: BTreeMap<String, Value> = r
        .json()
        .into_iter()
        .map(|v| (str_of(&v, "key").to_string(), v))
        .collect();
    assert_eq!(answers.len(), KEYS);
    for (child, _) in &mut consumers {
        let status = wait_limited(child, Duration::from_secs(60)).expect("consumers exit");
        assert!(status.success());
    }
    let mut taken: BTreeMap<String, i64> = BTreeMap::new();
    for (_, path) in &consumers {
        for v in json_lines(path) {
            let key = str_of(&v, "key").to_string();
            let at = v["taken_ms"].as_i64().unwrap();
            assert!(
                taken.insert(key.clone(), at).is_none(),
                "{key} delivered twice"
            );
        }
    }
    assert_eq!(taken.len(), KEYS, "every key delivered once");
    let (mut moved, mut refused) = (0, 0);
    for (key, a) in &answers {
        if a["rescheduled"].as_bool() == Some(true) {
            moved += 1;
            let due = a["due_ms"].as_i64().unwrap();
            assert!(
                taken[key] >= due,
                "{key} taken at {} before its new due time {due}",
                taken[key]
            );
        } else {
            refused += 1;
            assert!(
                str_of(a, "error").contains("in flight") || str_of(a, "error").contains("waiting"),
                "{a}"
            );
        }
    }
    eprintln!("rescheduled {moved}, refused {refused} (already taken)");
    assert!(
        moved > 0 && refused > 0,
        "the race met both sides: {moved} moved, {refused} refused"
    );
}

/// One HTTP/1.1 request on a fresh connection; the status line and body.
#[test]
fn serve_answers_the_api_and_metrics_and_refuses_actions_without_the_token() {
    use std::io::{BufRead, BufReader};
    let env = Env::new();
    env.ok(&["topic", "create", "s", "--kind", "priority", "--slots", "2"]);
    env.ok(&["send", "s", "hello", "--key", "k"]);
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "0123456789abcdef-token\n").unwrap();
    // Readable by everyone: served, with a warning after the address.
    std::fs::set_permissions(&token, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let mut child = env
        .cmd(&[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--token-file",
            token.to_str().unwrap(),
        ])
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    stderr.read_line(&mut line).unwrap();
    let mut warning = String::new();
    stderr.read_line(&mut warning).unwrap();
    assert!(warning.contains("readable by every user"), "{warning:?}");
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_string();
    let get =
        |path: &str| format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    let (status, body) = http(&addr, &get("/api/v1/topics/s/messages/k"));
    assert!(status.contains("200"), "{status} {body}");
    assert!(body.contains("\"payload\":\"hello\""), "{body}");
    let (status, body) = http(&addr, &get("/metrics"));
    assert!(
        status.contains("200") && body.contains("rmq_sent_total{topic=\"s\"} 1"),
        "{body}"
    );
    let pause = |auth: &str| {
        format!("POST /api/v1/topics/s/pause HTTP/1.1\r\nHost: {addr}\r\n{auth}Content-Length: 0\r\nConnection: close\r\n\r\n")
    };
    let (status, _) = http(&addr, &pause(""));
    assert!(status.contains("401"), "{status}");
    let (status, _) = http(
        &addr,
        &pause("Authorization: Bearer 0123456789abcdef-token\r\n"),
    );
    assert!(status.contains("200"), "{status}");
    assert_eq!(env.stats("s")["paused_slots"], 2);
    // A client holding a half-sent request does not keep it from stopping
    // (within --shutdown-grace, 5 s by default).
    let mut held = std::net::TcpStream::connect(&addr).unwrap();
    std::io::Write::write_all(
        &mut held,
        format!(
            "POST /api/v1/topics HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer 0123456789abcdef-token\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{"
        )
        .as_bytes(),
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    kill("-TERM", &child.id().to_string());
    let status = wait_limited(&mut child, Duration::from_secs(10)).expect("stops on SIGTERM");
    assert!(status.success());
    drop(held);
    // A short token is refused before anything listens.
    std::fs::write(&token, "short\n").unwrap();
    env.rmq(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--token-file",
        token.to_str().unwrap(),
    ])
    .one_error(2);
    // So is one that no header could carry (not printable ASCII).
    std::fs::write(&token, "0123456789abcdéf-token\n").unwrap();
    env.rmq(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--token-file",
        token.to_str().unwrap(),
    ])
    .one_error(2);
}

#[test]
fn consume_serves_its_metrics_for_prometheus() {
    let env = Env::new();
    env.ok(&[
        "topic",
        "create",
        "m",
        "--kind",
        "fixed-time",
        "--slots",
        "2",
    ]);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let mut child = env
        .cmd(&[
            "consume",
            "m",
            "--metrics-listen",
            &addr,
            "--idle-exit",
            "5000",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let lines: String = (0..5)
        .map(|i| format!("{{\"payload\":\"v\",\"key\":\"k{i}\",\"delay\":0}}\n"))
        .collect();
    env.rmq_in(&["send", "m", "--batch"], lines.as_bytes())
        .success();
    let get = "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".to_string();
    let mut body = String::new();
    let scraped = eventually(Duration::from_secs(10), || {
        if std::net::TcpStream::connect(&addr).is_err() {
            return false;
        }
        body = http(&addr, &get).1;
        // A delivery is counted when taken, its outcome once its handler
        // ended: a scrape between the two sees 5 and 4.
        body.contains("rmq_deliveries_total{topic=\"m\"} 5")
            && body.contains("rmq_handler_outcomes_total{topic=\"m\",outcome=\"acked\"} 5")
    });
    assert!(scraped, "{body}");
    assert!(body.contains("rmq_delivery_lateness_seconds"), "{body}");
    kill("-TERM", &child.id().to_string());
    assert!(wait_limited(&mut child, Duration::from_secs(10)).is_some());
}

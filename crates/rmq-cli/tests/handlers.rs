//! `rmq consume --exec` handlers never outlive what entitles them to run
//! (I5): a handler whose serial slot lease is lost is killed before the
//! slot's new owner starts the message, even while Redis is unreachable;
//! and a handler dies with its consumer however the consumer dies (SIGHUP,
//! SIGKILL), before its message's lease runs out and it is redelivered.
#![allow(clippy::unwrap_used)]
mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rmq_test_support::Proxy;
use support::*;

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// Reads a PID a handler wrote, waiting for it.
fn pid_in(file: &Path) -> u32 {
    let mut pid = None;
    assert!(
        eventually(Duration::from_secs(15), || {
            pid = std::fs::read_to_string(file)
                .ok()
                .and_then(|s| s.trim().parse().ok());
            pid.is_some()
        }),
        "the handler did not start ({file:?})"
    );
    pid.unwrap()
}

fn spawn_quiet(mut cmd: std::process::Command, err: &Path) -> Child {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(err).unwrap())
        .spawn()
        .unwrap()
}

/// Handler starts: `(shell pid, start ns, fence)` from its log.
fn starts(log: &Path) -> Vec<(u32, u128, u64)> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            match f.as_slice() {
                ["S", pid, ns, fence] => {
                    Some((pid.parse().ok()?, ns.parse().ok()?, fence.parse().ok()?))
                }
                _ => None,
            }
        })
        .collect()
}

#[test]
fn a_handler_whose_slot_lease_is_lost_is_killed_before_the_new_owner_starts_its_message() {
    lease_lost_stops_the_handler(false);
}

#[test]
fn a_worker_whose_slot_lease_is_lost_is_killed_before_the_new_owner_starts_its_message() {
    lease_lost_stops_the_handler(true);
}

/// `--exec` handler or (`worker`) long-lived `--worker`: its start is
/// logged as `S <pid> <ns> <fence>`, then it hangs.
fn lease_lost_stops_the_handler(worker: bool) {
    let env = Env::new();
    env.ok(&[
        "topic",
        "create",
        "h",
        "--kind",
        "fixed-time",
        "--slots",
        "1",
        "--lease",
        "3000",
    ]);
    env.ok(&["send", "h", "m1", "--delay", "0"]);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let handler = if worker {
        format!(
            "while read line; do \
             f=$(printf '%s' \"$line\" | sed 's/.*\"fence\":\\([0-9]*\\).*/\\1/'); \
             echo \"S $$ $(date +%s%N) $f\" >> {}; sleep 10; done",
            log.display()
        )
    } else {
        format!(
            "echo \"S $$ $(date +%s%N) $RMQ_FENCE\" >> {}; sleep 10",
            log.display()
        )
    };
    let mode = if worker { "--worker" } else { "--exec" };
    let serial = |url: &str| {
        let mut c = bin();
        c.args([
            "--redis",
            url,
            "consume",
            "h",
            "--serial",
            "--group",
            "g",
            "--slot-lease",
            "3000",
            "--member-timeout",
            "3000",
            mode,
            &handler,
        ]);
        c
    };
    // A reaches Redis through a proxy that will freeze.
    let proxy = Proxy::start(env.server.addr());
    let mut a = spawn_quiet(serial(&proxy.url()), &dir.path().join("a.err"));
    assert!(
        eventually(Duration::from_secs(15), || starts(&log).len() == 1),
        "A never started the message"
    );
    let (a_pid, _, a_fence) = starts(&log)[0];
    proxy.freeze();
    let frozen_at = Instant::now();
    // Watch A's handler: when did it stop?
    let a_gone: Arc<Mutex<Option<u128>>> = Arc::default();
    let watching = Arc::new(AtomicBool::new(true));
    let watcher = {
        let (gone, watching) = (a_gone.clone(), watching.clone());
        std::thread::spawn(move || {
            while watching.load(Ordering::Relaxed) {
                if !alive(a_pid) {
                    *gone.lock().unwrap() = Some(now_ns());
                    return;
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        })
    };
    let mut b = spawn_quiet(serial(&env.url), &dir.path().join("b.err"));
    let took_over = eventually(Duration::from_secs(20), || starts(&log).len() >= 2);
    watching.store(false, Ordering::Relaxed);
    let _ = watcher.join();
    proxy.thaw();
    for c in [&mut a, &mut b] {
        kill("-TERM", &c.id().to_string());
        wait_limited(c, Duration::from_secs(15)).expect("consumer stops on SIGTERM");
    }
    assert!(took_over, "B never took the slot over: {:?}", starts(&log));
    let (_, b_start, b_fence) = starts(&log)[1];
    assert!(b_fence > a_fence, "the new owner has a newer fence");
    let gone = *a_gone.lock().unwrap();
    let gone = gone.unwrap_or_else(|| {
        panic!(
            "A's handler still ran when B started the same message ({:?} after the freeze)",
            frozen_at.elapsed()
        )
    });
    assert!(
        gone < b_start,
        "A's handler stopped {} ms after B started the same message",
        (gone - b_start) / 1_000_000
    );
}

/// A consumer running one slow handler that records its shell's PID and
/// the PID of a process the shell started; the topic's lease is long (20 s)
/// so that the message cannot be redelivered while the test looks.
struct Running {
    env: Env,
    consumer: Child,
    shell: u32,
    grandchild: u32,
    _dir: tempfile::TempDir,
}

fn running_handler() -> Running {
    let env = Env::new();
    env.ok(&[
        "topic", "create", "k", "--kind", "priority", "--lease", "20000",
    ]);
    env.ok(&["send", "k", "m1"]);
    let dir = tempfile::tempdir().unwrap();
    let (shell_pid, sleep_pid): (PathBuf, PathBuf) =
        (dir.path().join("shell"), dir.path().join("sleep"));
    let handler = format!(
        "sleep 30 & echo $! > {}; echo $$ > {}; wait",
        sleep_pid.display(),
        shell_pid.display()
    );
    let consumer = spawn_quiet(
        env.cmd(&["consume", "k", "--exec", &handler]),
        &dir.path().join("err"),
    );
    let shell = pid_in(&shell_pid);
    let grandchild = pid_in(&sleep_pid);
    assert!(alive(shell) && alive(grandchild));
    Running {
        env,
        consumer,
        shell,
        grandchild,
        _dir: dir,
    }
}

fn handler_gone(r: &Running) -> bool {
    eventually(Duration::from_secs(3), || {
        !alive(r.shell) && !alive(r.grandchild)
    })
}

#[test]
fn sighup_stops_the_consumer_like_sigterm_and_its_handler_with_it() {
    let mut r = running_handler();
    kill("-HUP", &r.consumer.id().to_string());
    let status = wait_limited(&mut r.consumer, Duration::from_secs(10));
    let gone = handler_gone(&r);
    kill("-9", &r.shell.to_string());
    kill("-9", &r.grandchild.to_string());
    assert!(gone, "the handler outlived a SIGHUP of its consumer");
    assert_eq!(status.and_then(|s| s.code()), Some(0), "a clean stop");
    // Given back untouched, as on SIGTERM.
    let st = r.env.stats("k");
    assert_eq!(
        (
            st["pending"].as_u64(),
            st["in_flight"].as_u64(),
            st["retried"].as_u64()
        ),
        (Some(1), Some(0), Some(0)),
        "{st}"
    );
}

#[test]
fn a_killed_consumer_takes_its_handler_down_before_the_lease_runs_out() {
    let mut r = running_handler();
    let killed = Instant::now();
    kill("-9", &r.consumer.id().to_string());
    let _ = r.consumer.wait();
    let gone = handler_gone(&r);
    let took = killed.elapsed();
    kill("-9", &r.shell.to_string());
    kill("-9", &r.grandchild.to_string());
    assert!(gone, "the handler outlived a SIGKILL of its consumer");
    assert!(took < Duration::from_secs(20), "gone within the lease");
}

#[test]
fn the_longest_merge_key_reaches_an_exec_handler_and_a_longer_one_is_refused_at_send() {
    // Linux caps one environment string at 128 KiB: a key must fit in
    // RMQ_KEY, or it could never be handled and would end as a dead letter.
    let env = Env::new();
    env.ok(&[
        "topic",
        "create",
        "k",
        "--kind",
        "priority",
        "--max-payload",
        "1048576",
    ]);
    let longest = "k".repeat(rmq::MAX_KEY_BYTES);
    env.ok(&["send", "k", "p", "--key", &longest]);
    let too_long = format!("{longest}k");
    let r = env.rmq(&["send", "k", "p", "--key", &too_long]);
    let line = r.one_error(2);
    assert!(line.contains("65536"), "{line}");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("len");
    let handler = format!("printf %s \"$RMQ_KEY\" | wc -c > {}", out.display());
    let r = env.ok(&["consume", "k", "--max", "1", "--exec", &handler]);
    assert!(r.stdout.contains("acked"), "{r:?}");
    let len: usize = std::fs::read_to_string(&out)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(len, rmq::MAX_KEY_BYTES);
    assert_eq!(env.stats("k")["acked"].as_u64(), Some(1));
}

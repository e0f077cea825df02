//! Serial mode across OS processes (I5): several `rmq consume --serial`
//! processes in one group, each running a shell handler that logs its start
//! and end; the log proves that no two handlers of one slot overlapped, that
//! fencing tokens only grew, and that every message was handled — also while
//! members join, leave, are SIGKILLed or frozen past their lease.
#![allow(clippy::unwrap_used)]
mod support;

use std::collections::{BTreeMap, HashMap};
use std::process::{Child, Stdio};
use std::time::Duration;

use support::*;

const ENTITIES: usize = 60;
const PER_ENTITY: usize = 5;

struct Group {
    env: Env,
    dir: tempfile::TempDir,
}

impl Group {
    fn new() -> Group {
        let env = Env::new();
        env.ok(&[
            "topic",
            "create",
            "s",
            "--kind",
            "fixed-time",
            "--slots",
            "16",
            "--lease",
            "1500",
            "--backoff",
            "20",
            "--backoff-max",
            "50",
        ]);
        let mut lines = String::new();
        for seq in 0..PER_ENTITY {
            for e in 0..ENTITIES {
                lines.push_str(&format!(
                    "{{\"payload\":\"e{e}#{seq}\",\"slot_basis\":\"e{e}\",\"delay\":{}}}\n",
                    seq * 3
                ));
            }
        }
        env.rmq_in(&["send", "s", "--batch"], lines.as_bytes())
            .success();
        let dir = tempfile::tempdir().unwrap();
        let handler = dir.path().join("handler.sh");
        std::fs::write(
            &handler,
            "log=\"$1\"\n\
             p=$(cat)\n\
             [ -n \"$p\" ] || p=-\n\
             echo \"S $RMQ_SLOT $RMQ_FENCE $p $(date +%s%N)\" >> \"$log\"\n\
             r=$(od -An -N1 -tu1 /dev/urandom)\n\
             sleep 0.0$(( r % 3 + 1 ))\n\
             echo \"E $RMQ_SLOT $RMQ_FENCE x $(date +%s%N)\" >> \"$log\"\n",
        )
        .unwrap();
        Group { env, dir }
    }

    fn consumer(&self) -> Child {
        let exec = format!(
            "sh {} {}",
            self.dir.path().join("handler.sh").display(),
            self.dir.path().join("log").display()
        );
        self.env
            .cmd(&[
                "consume",
                "s",
                "--serial",
                "--group",
                "g",
                "--member-timeout",
                "600",
                "--slot-lease",
                "600",
                "--concurrency",
                "4",
                "--exec",
                &exec,
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(self.dir.path().join("consumers.err"))
                    .unwrap(),
            )
            .spawn()
            .unwrap()
    }

    fn wait_all_acked(&self) {
        let total = (ENTITIES * PER_ENTITY) as u64;
        assert!(
            eventually(Duration::from_secs(60), || self.env.stats("s")["acked"]
                .as_u64()
                == Some(total)),
            "not all messages were acked: {}",
            self.env.stats("s")
        );
    }

    /// Checks the handler log; returns how many handler runs it holds.
    fn check(&self, keep_order: bool) -> usize {
        let log = std::fs::read_to_string(self.dir.path().join("log")).unwrap();
        // Pair each start with the next end of the same slot and fence.
        let mut open: HashMap<(u32, u64), (String, u128)> = HashMap::new();
        let mut runs: BTreeMap<u32, Vec<(u128, u128, u64, String)>> = BTreeMap::new();
        for line in log.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(f.len(), 5, "bad log line {line:?}");
            let (slot, fence, ts): (u32, u64, u128) = (
                f[1].parse().unwrap(),
                f[2].parse().unwrap(),
                f[4].parse().unwrap(),
            );
            if f[0] == "S" {
                let prev = open.insert((slot, fence), (f[3].to_string(), ts));
                assert!(prev.is_none(), "slot {slot} fence {fence}: a second handler started before the first ended (line {line:?}, log in {:?})", self.dir.path());
            } else if let Some((payload, start)) = open.remove(&(slot, fence)) {
                runs.entry(slot)
                    .or_default()
                    .push((start, ts, fence, payload));
            }
        }
        let mut seen: HashMap<String, Vec<usize>> = HashMap::new();
        let mut n = 0;
        for (slot, mut rs) in runs {
            rs.sort();
            for w in rs.windows(2) {
                assert!(
                    w[0].1 <= w[1].0,
                    "slot {slot}: handlers overlapped: {:?} and {:?}",
                    w[0],
                    w[1]
                );
                assert!(w[0].2 <= w[1].2, "slot {slot}: fencing token went down");
            }
            for (_, _, _, p) in rs {
                // "-": the consumer died before it wrote the payload (the
                // handler ran on without it); that message is delivered again.
                let Some((e, seq)) = p.split_once('#') else {
                    assert_eq!(p, "-", "bad payload {p:?}");
                    continue;
                };
                seen.entry(e.to_string())
                    .or_default()
                    .push(seq.parse().unwrap());
                n += 1;
            }
        }
        assert_eq!(seen.len(), ENTITIES, "every entity handled");
        for (e, seqs) in &seen {
            let mut uniq = seqs.clone();
            uniq.dedup();
            if keep_order {
                assert_eq!(
                    uniq,
                    (0..PER_ENTITY).collect::<Vec<_>>(),
                    "{e}: one at a time, in order"
                );
            } else {
                let mut all = uniq.clone();
                all.sort();
                all.dedup();
                assert_eq!(
                    all,
                    (0..PER_ENTITY).collect::<Vec<_>>(),
                    "{e}: every message handled"
                );
            }
        }
        n
    }
}

fn stop(mut c: Child) {
    kill("-TERM", &c.id().to_string());
    wait_limited(&mut c, Duration::from_secs(15)).expect("consumer stops on SIGTERM");
}

#[test]
fn serial_consumer_processes_never_overlap_a_slot_and_keep_entity_order() {
    let g = Group::new();
    let cs: Vec<Child> = (0..3).map(|_| g.consumer()).collect();
    g.wait_all_acked();
    for c in cs {
        stop(c);
    }
    assert_eq!(
        g.check(true),
        ENTITIES * PER_ENTITY,
        "each message handled once"
    );
    let st = g.env.stats("s");
    assert_eq!(
        (
            st["pending"].as_u64(),
            st["in_flight"].as_u64(),
            st["dead"].as_u64()
        ),
        (Some(0), Some(0), Some(0))
    );
}

#[test]
fn joins_leaves_crashes_and_a_frozen_member_never_overlap_a_slot() {
    let g = Group::new();
    let a = g.consumer();
    let b = g.consumer();
    let c = g.consumer();
    std::thread::sleep(Duration::from_millis(400));
    let d = g.consumer(); // joins
    std::thread::sleep(Duration::from_millis(300));
    // Freeze b past its slot lease and its message lease, then let it go on.
    kill("-STOP", &b.id().to_string());
    let mut a = a;
    kill("-9", &a.id().to_string()); // crashes
    let _ = a.wait();
    std::thread::sleep(Duration::from_millis(2_000));
    kill("-CONT", &b.id().to_string());
    stop(c); // leaves gracefully
    let e = g.consumer(); // joins late
    g.wait_all_acked();
    for x in [b, d, e] {
        stop(x);
    }
    let runs = g.check(false);
    assert!(runs >= ENTITIES * PER_ENTITY);
    let st = g.env.stats("s");
    assert_eq!(
        (
            st["pending"].as_u64(),
            st["in_flight"].as_u64(),
            st["dead"].as_u64()
        ),
        (Some(0), Some(0), Some(0))
    );
}

#[test]
fn a_member_that_owns_no_slot_renews_nothing_and_stays_quiet() {
    // Two members, one slot: one of them owns nothing. Its lease keeper has
    // nothing to renew and must not fail at every tick (that noise would
    // hide a real renewal failure).
    let env = Env::new();
    env.ok(&[
        "topic",
        "create",
        "one",
        "--kind",
        "fixed-time",
        "--slots",
        "1",
    ]);
    let dir = tempfile::tempdir().unwrap();
    let members: Vec<(Child, std::path::PathBuf)> = (0..2)
        .map(|i| {
            let err = dir.path().join(format!("m{i}.err"));
            let child = env
                .cmd(&[
                    "consume",
                    "one",
                    "--serial",
                    "--group",
                    "g",
                    "--member-timeout",
                    "600",
                    "--slot-lease",
                    "600",
                    "--idle-exit",
                    "2000",
                ])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&err).unwrap())
                .spawn()
                .unwrap();
            (child, err)
        })
        .collect();
    for (mut child, err) in members {
        let status = wait_limited(&mut child, Duration::from_secs(15)).expect("idle exit");
        let said = std::fs::read_to_string(err).unwrap();
        assert!(status.success(), "{said}");
        assert!(
            !said.contains("slot leases failed") && !said.contains("empty command"),
            "a member with nothing to renew reported failures:\n{said}"
        );
    }
}

//! A serial consumer group of `rmq consume --serial` processes over one
//! topic of 300 messages (60 entities × 5, due over 12 s), each running a
//! shell handler that logs its start and end, and the check of that log:
//! no two handlers of one slot overlapped, fencing tokens only grew, every
//! message was handled (and, where nothing failed, once and in order).
//! Shared by the Redis-coordinated and the ZooKeeper-coordinated tests.

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, HashMap};
use std::process::{Child, Stdio};
use std::time::Duration;

use super::*;

pub const ENTITIES: usize = 60;
pub const PER_ENTITY: usize = 5;

pub struct Group {
    pub env: Env,
    pub dir: tempfile::TempDir,
    /// The consumers' membership flags (coordinator, timeouts).
    membership: Vec<String>,
    /// Handlers as long-lived `--worker`s instead of `--exec`.
    workers: bool,
}

impl Group {
    /// Redis membership, a 600 ms member timeout and slot lease.
    pub fn new() -> Group {
        Group::with(&["--member-timeout", "600", "--slot-lease", "600"])
    }

    /// `membership`: the consumers' coordinator and timeout flags.
    pub fn with(membership: &[&str]) -> Group {
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
        // The same log from a long-lived worker (`--worker`): one line in,
        // one result out, one O_APPEND write per log line.
        std::fs::write(
            dir.path().join("worker.py"),
            "import json, os, random, sys, time\n\
             log = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND | os.O_CREAT)\n\
             def note(kind, m, p):\n\
             \x20   os.write(log, f\"{kind} {m['slot']} {m['fence']} {p} {time.time_ns()}\\n\".encode())\n\
             for line in sys.stdin:\n\
             \x20   m = json.loads(line)\n\
             \x20   note('S', m, m.get('payload') or '-')\n\
             \x20   time.sleep(random.randint(1, 3) / 100)\n\
             \x20   note('E', m, 'x')\n\
             \x20   print(json.dumps({'id': m['id'], 'outcome': 'ack'}), flush=True)\n",
        )
        .unwrap();
        Group {
            env,
            dir,
            membership: membership.iter().map(|s| s.to_string()).collect(),
            workers: false,
        }
    }

    /// Redis membership as [`Group::new`], handlers as `--worker`s.
    pub fn with_workers() -> Group {
        Group {
            workers: true,
            ..Group::new()
        }
    }

    /// Starts a member; what it logs goes to `consumers.err`.
    pub fn consumer(&self) -> Child {
        let exec = format!(
            "sh {} {}",
            self.dir.path().join("handler.sh").display(),
            self.dir.path().join("log").display()
        );
        let worker = format!(
            "python3 {} {}",
            self.dir.path().join("worker.py").display(),
            self.dir.path().join("log").display()
        );
        let mut args = vec!["consume", "s", "--serial", "--group", "g"];
        args.extend(self.membership.iter().map(String::as_str));
        args.extend(["--concurrency", "4"]);
        if self.workers {
            args.extend(["--worker", &worker, "--workers", "2"]);
        } else {
            args.extend(["--exec", &exec]);
        }
        self.env
            .cmd(&args)
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

    pub fn wait_all_acked(&self) {
        let total = (ENTITIES * PER_ENTITY) as u64;
        assert!(
            eventually(Duration::from_secs(60), || self.env.stats("s")["acked"]
                .as_u64()
                == Some(total)),
            "not all messages were acked: {}",
            self.env.stats("s")
        );
    }

    /// What the members logged (stderr).
    pub fn said(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("consumers.err")).unwrap_or_default()
    }

    /// Messages acked so far.
    pub fn acked(&self) -> u64 {
        self.env.stats("s")["acked"].as_u64().unwrap_or(0)
    }

    /// Asserts nothing is left: no message pending, in flight or dead.
    pub fn assert_drained(&self) {
        let st = self.env.stats("s");
        assert_eq!(
            (
                st["pending"].as_u64(),
                st["in_flight"].as_u64(),
                st["dead"].as_u64()
            ),
            (Some(0), Some(0), Some(0))
        );
    }

    /// Checks the handler log; returns how many handler runs it holds.
    /// `keep_order`: each message was handled once, in order per entity
    /// (true where no member died or froze).
    pub fn check(&self, keep_order: bool) -> usize {
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

/// SIGTERM, and waits for the member to leave.
pub fn stop(mut c: Child) {
    kill("-TERM", &c.id().to_string());
    wait_limited(&mut c, Duration::from_secs(15)).expect("consumer stops on SIGTERM");
}

//! I5 at a handover, across OS processes: the owner of a slot is frozen
//! (SIGSTOP of its process group, handler included: a GC pause, a VM stall)
//! while it handles an entity's first message. The member that takes the
//! slot over must handle that message first (its second attempt), then the
//! entity's later messages, in order: never a later one while the older
//! delivery is in flight, and never the older one behind a retry backoff.
//! On one Redis, on a Redis Cluster, and with the ZooKeeper coordinator.
#![allow(clippy::unwrap_used)]
mod support;

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use rmq_test_support::{RedisCluster, RedisServer, ZooKeeperServer};
use support::*;

/// Where the processes find Redis, and how their members meet.
struct Setup {
    redis: Vec<String>,
    membership: Vec<String>,
    dir: tempfile::TempDir,
}

impl Setup {
    fn new(redis: &[&str], membership: &[&str]) -> Setup {
        Setup {
            redis: redis.iter().map(|s| s.to_string()).collect(),
            membership: membership.iter().map(|s| s.to_string()).collect(),
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = bin();
        c.args(&self.redis).args(args);
        c
    }

    fn ok(&self, args: &[&str], input: &[u8]) -> Run {
        run(self.cmd(args), input).success()
    }

    fn log(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.path().join("log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// A serial member in a process group of its own; its handler logs
    /// "payload attempt" and hangs on the first attempt of `e-0`.
    fn member(&self) -> Child {
        let log = self.dir.path().join("log");
        let handler = format!(
            "p=$(cat); echo \"$p $RMQ_ATTEMPT\" >> {}; \
             if [ \"$p\" = e-0 ] && [ \"$RMQ_ATTEMPT\" = 1 ]; then sleep 1000; fi",
            log.display()
        );
        let mut args = vec!["consume", "t", "--serial", "--group", "g"];
        args.extend(self.membership.iter().map(String::as_str));
        args.extend([
            "--slot-lease",
            "1500",
            "--member-timeout",
            "1500",
            "--exec",
            &handler,
        ]);
        let mut c = self.cmd(&args);
        c.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0);
        c.spawn().unwrap()
    }
}

fn the_next_owner_handles_the_frozen_owners_message_first(s: &Setup) {
    // One slot, a message lease of 4 s, and a retry backoff (20 s) that
    // would put a retried message behind all the others.
    s.ok(
        &[
            "topic",
            "create",
            "t",
            "--kind",
            "priority",
            "--slots",
            "1",
            "--lease",
            "4000",
            "--backoff",
            "20000",
            "--backoff-max",
            "20000",
        ],
        b"",
    );
    let batch: String = (0..5)
        .map(|i| format!("{{\"payload\":\"e-{i}\",\"slot_basis\":\"e\"}}\n"))
        .collect();
    s.ok(&["send", "t", "--batch"], batch.as_bytes());
    let mut a = s.member();
    assert!(
        eventually(Duration::from_secs(60), || s.log().len() == 1),
        "the first member starts e-0"
    );
    let group = format!("-{}", a.id());
    kill("-STOP", &group);
    let mut b = s.member();
    let all_handled = eventually(Duration::from_secs(60), || s.log().len() >= 6);
    kill("-KILL", &group);
    kill("-CONT", &group);
    let _ = a.wait();
    kill("-TERM", &b.id().to_string());
    wait_limited(&mut b, Duration::from_secs(15)).expect("the second member stops on SIGTERM");
    assert!(all_handled, "every message handled: {:?}", s.log());
    assert_eq!(
        s.log(),
        ["e-0 1", "e-0 2", "e-1 1", "e-2 1", "e-3 1", "e-4 1"],
        "the new owner handles the entity's messages in order"
    );
}

#[test]
fn on_one_redis_the_next_owner_handles_a_frozen_owners_message_first() {
    let server = RedisServer::start();
    let s = Setup::new(&["--redis", &server.url()], &[]);
    the_next_owner_handles_the_frozen_owners_message_first(&s);
}

#[test]
fn on_a_cluster_the_next_owner_handles_a_frozen_owners_message_first() {
    let cluster = RedisCluster::builder().replicas(0).start();
    let seeds = cluster.urls().join(",");
    let s = Setup::new(&["--cluster", "--redis", &seeds], &[]);
    the_next_owner_handles_the_frozen_owners_message_first(&s);
}

#[test]
fn with_zookeeper_the_next_owner_handles_a_frozen_owners_message_first() {
    let server = RedisServer::start();
    let zk = ZooKeeperServer::start();
    let s = Setup::new(
        &["--redis", &server.url()],
        &["--coordinator", &zk.address("rmq")],
    );
    the_next_owner_handles_the_frozen_owners_message_first(&s);
}

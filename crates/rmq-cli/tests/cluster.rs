//! The CLI on a Redis Cluster: `--cluster` makes `--redis` the seed nodes
//! (comma-separated), and every subcommand works as on one node.

mod support;

use rmq_test_support::RedisCluster;
use support::{bin, run, Run};

fn rmq(seeds: &str, args: &[&str]) -> Run {
    let mut c = bin();
    c.arg("--cluster").arg("--redis").arg(seeds).args(args);
    run(c, b"")
}

#[test]
fn every_subcommand_works_on_a_cluster() {
    let cluster = RedisCluster::builder().replicas(0).start();
    let urls = cluster.urls();
    let seeds = format!("{},{}", urls[1], urls[2]);
    rmq(
        &seeds,
        &[
            "topic", "create", "jobs", "--kind", "priority", "--slots", "16",
        ],
    )
    .success();
    let input: String = (0..50)
        .map(|i| format!("{{\"payload\":\"job-{i}\",\"priority\":{}}}\n", i % 3))
        .collect();
    let mut c = bin();
    c.args(["--cluster", "--redis", &seeds, "send", "jobs", "--batch"]);
    run(c, input.as_bytes()).success();
    let stats = rmq(&seeds, &["--json", "stats", "jobs"]).success().json();
    assert_eq!(stats[0]["pending"], 50, "{stats:?}");
    // The topic's keys live on every master.
    for m in cluster.master_indices() {
        assert!(cluster.dbsize(m) > 0, "master {m} holds part of the topic");
    }
    let consumed = rmq(&seeds, &["--json", "consume", "jobs", "--max", "50"])
        .success()
        .json();
    assert_eq!(consumed.len(), 50);
    let stats = rmq(&seeds, &["--json", "stats", "jobs"]).success().json();
    assert_eq!(
        (stats[0]["pending"].clone(), stats[0]["acked"].clone()),
        (0.into(), 50.into())
    );

    let demo = rmq(&urls[0], &["demo"]).success();
    assert!(
        demo.stdout.contains("1000 sends merged into 3 messages"),
        "{demo:?}"
    );
    assert!(demo.stdout.contains("deleted the demo's"), "{demo:?}");
    // Only the user's topic is left.
    let topics = rmq(&seeds, &["--json", "topic", "list"]).success().json();
    assert_eq!(topics.len(), 1, "{topics:?}");
}

#[test]
fn a_plain_node_given_as_a_cluster_is_one_clear_error() {
    let server = rmq_test_support::RedisServer::start();
    let r = rmq(&server.url(), &["topic", "list"]);
    assert_ne!(r.code, 0);
    assert!(r.stderr.contains("cluster"), "{r:?}");
    assert_eq!(r.stderr.trim().lines().count(), 1, "{r:?}");
}

#[test]
fn a_consumer_started_while_the_topic_registrys_master_fails_over_waits_and_consumes() {
    // The master that holds the topic registry (`rmq:topics`) is killed;
    // a consumer started a moment later must ride out the failover (node
    // timeout plus election) rather than exit with a redirect error, and
    // say what it has to say about the servers once, not per node or retry.
    // A 5 s node time-out: the failover (~7 s) outlasts the Redis client's
    // own burst of retries (~5 s), and stays inside rmq's 15 s window.
    let mut cluster = RedisCluster::builder()
        .replicas(1)
        .node_timeout_ms(5000)
        .start();
    let urls = cluster.urls();
    let all = urls.join(",");
    rmq(
        &all,
        &[
            "topic", "create", "jobs", "--kind", "priority", "--slots", "4",
        ],
    )
    .success();
    let input: String = (0..20)
        .map(|i| format!("{{\"payload\":\"job-{i}\"}}\n"))
        .collect();
    let mut c = bin();
    c.args(["--cluster", "--redis", &all, "send", "jobs", "--batch"]);
    run(c, input.as_bytes()).success();
    let slot: u16 = cluster
        .cli(0, &["CLUSTER", "KEYSLOT", "rmq:topics"])
        .trim()
        .parse()
        .expect("a hash slot");
    let m = cluster.master_of_slot(slot).expect("a master serves it");
    // Its replica has the registry before the master goes: it holds as
    // many keys as the master (a replica can be listed, and its link up,
    // before the writes reached it on a loaded machine).
    let replicas = cluster.replicas_of(m, std::time::Duration::from_secs(10));
    assert!(!replicas.is_empty());
    let in_sync = support::eventually(std::time::Duration::from_secs(10), || {
        let want = cluster.cli(m, &["DBSIZE"]);
        replicas
            .iter()
            .all(|&r| cluster.cli(r, &["DBSIZE"]) == want)
    });
    assert!(in_sync, "the replicas never caught up with their master");
    let seeds: Vec<String> = urls
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != m)
        .map(|(_, u)| u.clone())
        .collect();
    cluster.kill(m);
    let r = rmq(
        &seeds.join(","),
        &[
            "--failover-window",
            "15000",
            "consume",
            "jobs",
            "--max",
            "20",
        ],
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.stdout.lines().count(), 20, "{r:?}");
    assert!(!r.stderr.contains("error"), "{r:?}");
    let warnings = r.stderr.matches("no persistence").count();
    assert!(warnings <= 1, "one warning per process: {r:?}");
    assert!(r.stderr.lines().count() <= 4, "a quiet failover: {r:?}");
}

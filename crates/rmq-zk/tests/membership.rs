//! The ZooKeeper coordinator against a real ZooKeeper and a real Redis,
//! both started by the test: members appear as ephemeral znodes, the
//! watch hands slots over at once on a join or a graceful leave (well
//! within a lease round, which these tests make 10 s long), and an
//! ensemble that cannot be reached is a clear error at start.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmq::{CancellationToken, Client, Deliveries, Topic, TopicKind, TopicSpec};
use rmq_test_support::{RedisServer, ZooKeeperServer};
use rmq_zk::{ZkError, ZooKeeper};

const SLOTS: u32 = 16;
/// Member timeout and slot lease: a lease round (a tick) every 10 s, so a
/// handover within a second can only come from the watch.
const LONG: Duration = Duration::from_secs(40);
const AT_ONCE: Duration = Duration::from_millis(1_500);

async fn topic(redis: &RedisServer) -> Topic {
    let client = Client::connect(&redis.url()).await.unwrap();
    client
        .define_topic(TopicSpec::new("t", TopicKind::Priority).slots(SLOTS))
        .await
        .unwrap()
}

/// A member with a ZooKeeper session of its own, as a process would have.
async fn member(topic: &Topic, address: &str) -> Deliveries {
    member_with(topic, address, Duration::from_secs(10), LONG).await
}

async fn member_with(
    topic: &Topic,
    address: &str,
    session: Duration,
    lease: Duration,
) -> Deliveries {
    let zk = ZooKeeper::connect(address, session).await.unwrap();
    topic
        .consumer()
        .serial("g")
        .member_timeout(session)
        .slot_lease(lease)
        .coordinator(Arc::new(zk))
        .stream(CancellationToken::new())
}

/// Owner → number of slots whose lease it holds.
async fn owners(topic: &Topic) -> BTreeMap<String, usize> {
    let view = topic.serial_groups().await.unwrap();
    let mut out = BTreeMap::new();
    for lease in view.leases {
        if let Some(owner) = lease.owner {
            *out.entry(owner).or_insert(0) += 1;
        }
    }
    out
}

/// How long until `f` holds of the slot owners (None: not within 20 s).
async fn until(topic: &Topic, f: impl Fn(&BTreeMap<String, usize>) -> bool) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(20) {
        if f(&owners(topic).await) {
            return Some(start.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    None
}

#[tokio::test]
async fn joins_and_graceful_leaves_hand_slots_over_at_once_through_the_watch() {
    let (redis, zk) = (RedisServer::start(), ZooKeeperServer::start());
    let topic = topic(&redis).await;
    let address = zk.address("rmq");

    let a = member(&topic, &address).await;
    let took_all = until(&topic, |o| o.len() == 1 && o.values().sum::<usize>() == 16).await;
    assert!(took_all.is_some(), "the first member takes every slot");

    for round in 0..2 {
        // A join: the first member's watch fires, it releases the
        // newcomer's slots, the newcomer takes them.
        let b = member(&topic, &address).await;
        let joined = until(&topic, |o| o.len() == 2 && o.values().sum::<usize>() == 16).await;
        assert!(
            joined.is_some_and(|d| d < AT_ONCE),
            "round {round}: join handed over in {joined:?}, not at once"
        );
        // A graceful leave: the leaver deletes its znode and releases its
        // leases; the watch makes the other take them.
        b.close().await;
        let left = until(&topic, |o| o.len() == 1 && o.values().sum::<usize>() == 16).await;
        assert!(
            left.is_some_and(|d| d < AT_ONCE),
            "round {round}: leave handed over in {left:?}, not at once"
        );
    }
    assert_eq!(member_znodes(&zk), 1, "the leavers' znodes are gone");
    a.close().await;
    assert_eq!(member_znodes(&zk), 0, "the last member's znode is gone");
    assert!(owners(&topic).await.is_empty(), "every lease released");
}

/// The number of ephemeral znodes ZooKeeper holds, from `mntr` (the
/// members are the only ephemerals of these tests; a session the server
/// has not expired yet still counts its own).
fn member_znodes(zk: &ZooKeeperServer) -> usize {
    zk.monitor()
        .get("zk_ephemerals_count")
        .and_then(|v| v.parse().ok())
        .unwrap()
}

#[tokio::test]
async fn an_unreachable_ensemble_is_a_clear_error_at_start() {
    let port = rmq_test_support::free_port();
    let start = Instant::now();
    let err = ZooKeeper::connect(
        &format!("zk://127.0.0.1:{port}/rmq"),
        Duration::from_secs(2),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&err, ZkError::Unreachable { hosts, .. } if *hosts == format!("127.0.0.1:{port}")),
        "{err}"
    );
    assert!(err.to_string().contains("is unreachable"), "{err}");
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
    let bad = ZooKeeper::connect("zk://127.0.0.1:1", Duration::from_secs(2))
        .await
        .unwrap_err();
    assert!(matches!(bad, ZkError::BadAddress(_)), "{bad}");
}

#[tokio::test]
async fn members_keep_their_slots_through_a_zookeeper_outage_longer_than_their_session() {
    // Sessions of 1 s: after 1.4 s without a server the client gives the
    // session up. The members must still keep the slots whose leases they
    // hold (renewed in Redis), take nothing new, and join again with new
    // sessions once ZooKeeper is back.
    let (redis, mut zk) = (RedisServer::start(), ZooKeeperServer::start());
    let topic = topic(&redis).await;
    let address = zk.address("rmq");
    let (session, lease) = (Duration::from_secs(1), Duration::from_millis(800));
    let a = member_with(&topic, &address, session, lease).await;
    let b = member_with(&topic, &address, session, lease).await;
    let split = until(&topic, |o| o.len() == 2 && o.values().sum::<usize>() == 16).await;
    assert!(split.is_some(), "two members split the slots");
    let before = owners(&topic).await;

    zk.kill();
    for _ in 0..8 {
        // 4 s: well past 1.4 sessions and 5 leases.
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(
            owners(&topic).await,
            before,
            "the members keep their slots while ZooKeeper is down"
        );
    }
    zk.restart();
    // The old sessions come back with the server and expire 1 s later
    // (their znodes with them); the members' new sessions stay.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let rejoined = {
        let start = Instant::now();
        loop {
            if member_znodes(&zk) == 2 || start.elapsed() > Duration::from_secs(20) {
                break member_znodes(&zk);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    assert_eq!(rejoined, 2, "both members joined again");
    assert_eq!(owners(&topic).await, before, "and kept their slots");
    a.close().await;
    b.close().await;
}

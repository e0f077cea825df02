//! Shared by the integration tests: a throwaway Redis per test and helpers
//! that take messages by hand (to drive the two phases step by step).
#![allow(dead_code, unreachable_pub, clippy::unwrap_used)]

use std::time::Duration;

use futures::StreamExt;
use rmq::{
    CancellationToken, Client, ClientOptions, Deliveries, Delivery, Topic, TopicKind, TopicSpec,
};
pub use rmq_test_support::{Proxy, RedisCluster, RedisServer};

/// What the semantics tests run against: one throwaway node, or (with
/// `RMQ_TEST_CLUSTER=1`) a throwaway 3-master Redis Cluster, so that the
/// same tests prove the same invariants on both.
pub enum Backend {
    Single(RedisServer),
    Cluster(RedisCluster),
}

impl Backend {
    pub fn start() -> Backend {
        if std::env::var("RMQ_TEST_CLUSTER").is_ok_and(|v| v == "1") {
            Backend::Cluster(RedisCluster::builder().replicas(0).start())
        } else {
            Backend::Single(RedisServer::start())
        }
    }

    pub async fn connect(&self) -> Client {
        match self {
            Backend::Single(s) => match std::env::var("RMQ_TEST_ACL").as_deref() {
                Ok("1") => least_privilege(s, false).await,
                Ok("functions") => least_privilege(s, true).await,
                _ => Client::connect(&s.url()).await.expect("connect"),
            },
            Backend::Cluster(c) => {
                let urls = c.urls();
                Client::connect_cluster(&[urls[0].as_str()], ClientOptions::default())
                    .await
                    .expect("connect to cluster")
            }
        }
    }
}

/// With `RMQ_TEST_ACL=1` the semantics tests connect as a user holding only
/// `rmq::acl::setuser_line("rmq", ..)`; with `RMQ_TEST_ACL=functions`, as
/// an FCALL-only user of the locked-down mode (the admin loads the library).
async fn least_privilege(server: &RedisServer, functions: bool) -> Client {
    let admin = redis::Client::open(server.url()).unwrap();
    let mut conn = admin.get_multiplexed_async_connection().await.unwrap();
    let line = if functions {
        rmq::acl::setuser_line_locked_down("rmq", "rmq-test").unwrap()
    } else {
        rmq::acl::setuser_line("rmq", "rmq-test").unwrap()
    };
    let mut cmd = redis::cmd("ACL");
    for w in line.split_whitespace().skip(1).chain(["on", ">test-pw"]) {
        cmd.arg(w);
    }
    let _: () = cmd.query_async(&mut conn).await.unwrap();
    if functions {
        Client::connect(&server.url())
            .await
            .unwrap()
            .load_functions()
            .await
            .unwrap();
    }
    let url = format!("redis://rmq-test:test-pw@127.0.0.1:{}", server.port());
    let client = Client::connect_with(&url, ClientOptions::default().functions(functions))
        .await
        .expect("connect as the least-privilege user");
    // Proof that it is the restricted user: CONFIG GET was refused.
    assert!(client
        .warnings()
        .contains(&rmq::ServerWarning::ConfigUnreadable));
    client
}

/// Runs a raw command: by key on a cluster (SCRIPT and other keyless
/// commands go to every node), on the one node otherwise.
pub async fn raw(backend: &Backend, args: &[&str]) -> redis::Value {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    match backend {
        Backend::Single(s) => {
            let client = redis::Client::open(s.url()).unwrap();
            let mut c = client.get_multiplexed_async_connection().await.unwrap();
            cmd.query_async(&mut c).await.unwrap()
        }
        Backend::Cluster(cl) => {
            let client = redis::cluster::ClusterClient::new(cl.urls()).unwrap();
            let mut c = client.get_async_connection().await.unwrap();
            cmd.query_async(&mut c).await.unwrap()
        }
    }
}

pub async fn setup(kind: TopicKind, slots: u32) -> (Backend, Client, Topic) {
    setup_with(
        TopicSpec::new("t", kind)
            .slots(slots)
            .backoff(Duration::from_millis(20), Duration::from_millis(100)),
    )
    .await
}

pub async fn setup_with(spec: TopicSpec) -> (Backend, Client, Topic) {
    let backend = Backend::start();
    let client = backend.connect().await;
    let topic = client.define_topic(spec).await.expect("define");
    (backend, client, topic)
}

/// A stream consumer whose deliveries are ended by hand.
pub fn stream(topic: &Topic, concurrency: usize) -> (Deliveries, CancellationToken) {
    let stop = CancellationToken::new();
    let s = topic
        .consumer()
        .concurrency(concurrency)
        .batch(concurrency)
        .rescan(Duration::from_millis(200))
        .stream(stop.clone());
    (s, stop)
}

/// The next delivery within `secs`, or None.
pub async fn next(s: &mut Deliveries, secs: u64) -> Option<Delivery> {
    tokio::time::timeout(Duration::from_secs(secs), s.next())
        .await
        .ok()
        .flatten()
}

/// Takes every delivery that arrives within `quiet` of the previous one.
pub async fn drain(s: &mut Deliveries, quiet: Duration) -> Vec<Delivery> {
    let mut out = Vec::new();
    while let Ok(Some(d)) = tokio::time::timeout(quiet, s.next()).await {
        out.push(d);
    }
    out
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Makes a server started with `cluster-enabled yes` a one-node cluster
/// that serves all 16384 hash slots, and waits until it does.
pub async fn serve_every_hash_slot(server: &RedisServer) {
    let admin = redis::Client::open(server.url()).unwrap();
    let mut c = admin.get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("CLUSTER")
        .arg("ADDSLOTSRANGE")
        .arg(0)
        .arg(16383)
        .query_async(&mut c)
        .await
        .unwrap();
    for _ in 0..500 {
        let info: String = redis::cmd("CLUSTER")
            .arg("INFO")
            .query_async(&mut c)
            .await
            .unwrap();
        if info.contains("cluster_state:ok") {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the one-node cluster never became ready");
}

/// A one-node Redis Cluster (it serves all 16384 hash slots) that
/// announces a proxy's port as its own: a cluster client reaches it only
/// through the proxy, and meets the proxy's faults (a cut connection makes
/// the cluster client send a command again).
pub struct ProxiedCluster {
    pub server: RedisServer,
    pub proxy: Proxy,
}

impl ProxiedCluster {
    pub async fn start() -> ProxiedCluster {
        let port = rmq_test_support::free_port();
        let server = RedisServer::builder()
            .arg("cluster-enabled", "yes")
            .arg("cluster-port", &rmq_test_support::free_port().to_string())
            .arg("cluster-config-file", "nodes.conf")
            .arg("cluster-announce-ip", "127.0.0.1")
            .arg("cluster-announce-port", &port.to_string())
            .start();
        let proxy = Proxy::start_on(port, server.addr());
        serve_every_hash_slot(&server).await;
        ProxiedCluster { server, proxy }
    }

    /// A cluster client that goes through the proxy.
    pub async fn connect(&self) -> Client {
        Client::connect_cluster(&[self.proxy.url().as_str()], ClientOptions::default())
            .await
            .expect("connect to the proxied cluster")
    }
}

/// Script calls so far, summed over every node.
pub async fn calls(backend: &Backend) -> u64 {
    command_calls(backend, SCRIPT_CALLS).await
}

/// The commands an idle consumer calls Redis with: scripts, and waits on
/// the marks.
const SCRIPT_CALLS: &[&str] = &["evalsha", "fcall", "bzmpop"];

/// Calls of `commands` (lower case; those a script makes count too) so
/// far, summed over every node.
pub async fn command_calls(backend: &Backend, commands: &[&str]) -> u64 {
    let urls = match backend {
        Backend::Single(s) => vec![s.url()],
        Backend::Cluster(c) => c.urls(),
    };
    let mut total = 0;
    for url in urls {
        total += command_calls_on(&url, commands).await;
    }
    total
}

/// Script calls, and waits on the marks (the calls an idle consumer makes).
pub async fn calls_on(url: &str) -> u64 {
    command_calls_on(url, SCRIPT_CALLS).await
}

/// Calls of `commands` on one server so far (`INFO commandstats`).
pub async fn command_calls_on(url: &str, commands: &[&str]) -> u64 {
    let client = redis::Client::open(url).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut c)
        .await
        .unwrap();
    info.lines()
        .filter(|l| {
            commands.iter().any(|c| {
                l.strip_prefix("cmdstat_")
                    .and_then(|l| l.strip_prefix(c))
                    .is_some_and(|l| l.starts_with(':'))
            })
        })
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// Pop calls on topic `topic` since the last reading of `snap` (the
/// library's `rmq_pops_total`; a reading resets the counters, and other
/// tests of the binary run meanwhile, on other topics).
pub fn pops_since_last(snap: &metrics_util::debugging::Snapshotter, topic: &str) -> u64 {
    use metrics_util::debugging::DebugValue;
    snap.snapshot()
        .into_vec()
        .into_iter()
        .filter(|(key, ..)| {
            key.key().name() == "rmq_pops_total"
                && key
                    .key()
                    .labels()
                    .any(|l| l.key() == "topic" && l.value() == topic)
        })
        .map(|(.., value)| match value {
            DebugValue::Counter(n) => n,
            _ => 0,
        })
        .sum()
}

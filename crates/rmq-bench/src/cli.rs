//! Command-line arguments. Kept apart so the flags and their help text can be
//! read (and changed) without wading through the scenarios.

use clap::Parser;

#[derive(Parser, Debug)]
#[command(
    name = "rmq-bench",
    about = "Benchmarks rmq against a real redis-server"
)]
pub(crate) struct Args {
    /// Redis URL to use instead of a throwaway redis-server (with
    /// --cluster: seed node URLs, comma-separated).
    #[arg(long)]
    pub(crate) redis: Option<String>,
    /// Run on a Redis Cluster: the --redis seeds, or a throwaway cluster of
    /// 3 masters (no replicas). Runs the send and consume scenarios.
    #[arg(long)]
    pub(crate) cluster: bool,
    /// Multiplies every message count (1.0: 200k for send/consume, 100k for
    /// consume_mode, 1M for merge_heavy and memory).
    #[arg(long, default_value_t = 1.0)]
    pub(crate) scale: f64,
    /// Tiny counts for CI: every scenario, a few seconds in all.
    #[arg(long)]
    pub(crate) smoke: bool,
    /// Count Redis instructions per message instead of timing: a
    /// throwaway redis-server runs under valgrind's callgrind (repeatable
    /// whatever else the machine does) for a fixed workload in phases
    /// (send and consume, batched and not; 20,000 messages each at scale
    /// 1). Needs valgrind; ignores --redis, --cluster and --only.
    #[arg(long)]
    pub(crate) instructions: bool,
    /// Measure forwarding to brokers instead (throwaway nats-server and
    /// RabbitMQ node): a plain client's confirmed publish rate (the
    /// ceiling), the forwarder's rate, and due-to-confirmed lateness
    /// (50,000 messages at scale 1). Ignores --redis, --cluster and --only.
    #[arg(long, conflicts_with = "instructions")]
    pub(crate) forward: bool,
    /// Measure serial groups coordinated by Redis and by ZooKeeper side by
    /// side instead (a throwaway ZooKeeper): handover after a graceful stop
    /// and after a SIGKILL, and the idle load of 8 and 130 members over
    /// 1,024 slots on Redis, on ZooKeeper and on a Redis Cluster (Redis
    /// membership). --only picks cases by their label (e.g.
    /// "backend=cluster"); ignores --redis and --cluster.
    #[arg(long, conflicts_with_all = ["instructions", "forward"])]
    pub(crate) coordination: bool,
    /// Measure the PostgreSQL message store instead (a throwaway PostgreSQL
    /// and Redis): outbox sends, relay throughput, commit-to-handler
    /// latency, and Redis memory for 10M messages due over 30 days (at
    /// scale 1) in Redis alone and through the store. Ignores --redis,
    /// --cluster and --only.
    #[arg(long, conflicts_with_all = ["instructions", "forward", "coordination"])]
    pub(crate) store: bool,
    /// Measure fleets of parallel consumers instead (a throwaway Redis, then
    /// a throwaway 3-master Redis Cluster for a few sizes, "backend=cluster"):
    /// 1, 16 and 130 consumers (each a client of its own) over 16, 1,024
    /// and 65,536 slots, with the head index and without: script calls
    /// and Redis CPU at start, idle and at 1k msg/s, pop calls per
    /// delivered message, lateness, and a backlog's drain rate; then 16
    /// and 64 consumers as processes of their own ("processes=true").
    /// --only picks cases by their label (e.g. "slots=65536"); ignores
    /// --redis and --cluster.
    #[arg(long, conflicts_with_all = ["instructions", "forward", "coordination", "store"])]
    pub(crate) fleet: bool,
    /// (Started by --fleet.) Be one consumer of a fleet in a process of
    /// its own, on --redis (with --cluster: its seeds), driven over stdin.
    #[arg(long, hide = true, requires_all = ["redis", "member_prefix"])]
    pub(crate) fleet_member: bool,
    /// (--fleet-member) The fleet's key prefix.
    #[arg(long, hide = true)]
    pub(crate) member_prefix: Option<String>,
    /// (--fleet-member) Whether the member keeps the head index.
    #[arg(long, hide = true, default_value_t = true, action = clap::ArgAction::Set)]
    pub(crate) member_head_index: bool,
    /// Run only the scenarios whose name contains one of these (comma separated);
    /// "NAME PARAMS" (e.g. "consume concurrency=128 batch=64") runs one case.
    #[arg(long, value_delimiter = ',')]
    pub(crate) only: Vec<String>,
}

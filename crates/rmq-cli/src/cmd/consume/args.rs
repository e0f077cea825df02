//! `rmq consume`'s flags, and the checks of the pool's share flags that
//! clap cannot express (they must name the topics consumed).

use clap::Args;

use crate::{CliError, CliResult};

#[derive(Debug, Args)]
pub struct ConsumeArgs {
    /// Topic name, or several comma-separated: one pool over them, each
    /// topic's share adapted to how its handler keeps up (see --no-adaptive)
    pub topic: String,
    /// Stop after N deliveries were ended. Never takes more than N: no
    /// message beyond them is moved or given back
    #[arg(long, value_name = "N")]
    pub max: Option<u64>,
    /// Stop after MS milliseconds with nothing received or running
    #[arg(long, value_name = "MS")]
    pub idle_exit: Option<u64>,
    /// Messages handled at once
    #[arg(long, value_name = "C", default_value_t = 1,
          value_parser = clap::value_parser!(u16).range(1..))]
    pub concurrency: u16,
    /// Run `sh -c CMD` per message: payload on stdin; env RMQ_KEY, RMQ_ATTEMPT,
    /// RMQ_TOPIC, RMQ_SLOT, RMQ_FENCE (serial), RMQ_PRIORITY or RMQ_DUE_MS.
    /// Exit 0 acks; 65 (EX_DATAERR) sends the message to the dead letters at
    /// once; 75 (EX_TEMPFAIL) or any other status retries it, after the
    /// topic's backoff or after N ms if the last line on stdout is
    /// {"retry_after_ms": N}. The error kept with the message is the status
    /// and the last 4 KiB of stderr
    #[arg(long, value_name = "CMD")]
    pub exec: Option<String>,
    /// Start N (--workers) long-lived `sh -c CMD` workers and hand them the
    /// messages as JSON lines on stdin: {"id", "topic", "key" | "key_base64",
    /// "payload" | "payload_base64" (base64 when not UTF-8), "attempt",
    /// "slot", "taken_ms", "fence"?, "priority"?, "due_ms"?}. A worker answers
    /// each with a line on stdout, in any order: {"id", "outcome": "ack" |
    /// "retry" | "dead", "error"?, "retry_after_ms"?}. Write logs to stderr
    /// (shown as [worker N]): any other stdout line restarts the worker. A
    /// worker that exits is started again; what it held is retried. Serial
    /// mode: a worker holding a delivery whose slot lease is lost is killed
    #[arg(long, value_name = "CMD", conflicts_with_all = ["exec", "fail"])]
    pub worker: Option<String>,
    /// --worker: how many workers run
    #[arg(long, value_name = "N", default_value_t = 1, requires = "worker",
          value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub workers: u16,
    /// --worker: deliveries a worker holds at once (its results may come back
    /// in any order)
    #[arg(long, value_name = "K", default_value_t = 1, requires = "worker",
          value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub worker_concurrency: u16,
    /// --exec, --worker: a handler still running after MS milliseconds is
    /// stopped (--exec: its process group killed; --worker: the worker is
    /// restarted, what else it held is retried too) and its message retried
    /// ("timed out after ..."); 1 to 604800000 (7 days) [default: the
    /// topic's --handler-timeout, else none]
    #[arg(long, value_name = "MS",
          value_parser = clap::value_parser!(u64).range(1..=rmq::limits::MAX_HANDLER_TIMEOUT_MS))]
    pub timeout: Option<u64>,
    /// Nack every message (a drill for retries and dead letters)
    #[arg(long, conflicts_with = "exec")]
    pub fail: bool,
    /// Serial mode: each slot is owned by one member of the group at a time
    /// and its messages are handled one at a time (RMQ_FENCE has the lease epoch)
    #[arg(long)]
    pub serial: bool,
    /// Serial mode: the consumer group
    #[arg(long, value_name = "G", default_value = "default", requires = "serial")]
    pub group: String,
    /// Serial mode: a member silent this long is gone
    #[arg(long, value_name = "MS", default_value_t = 6000, requires = "serial")]
    pub member_timeout: u64,
    /// Serial mode: how long a slot lease lasts unless renewed
    #[arg(long, value_name = "MS", default_value_t = 6000, requires = "serial")]
    pub slot_lease: u64,
    /// Serial mode: where members meet: `redis` (a heartbeat next to the
    /// topic), or ZooKeeper as `zk://HOST:PORT[,HOST:PORT...]/ROOT` (its
    /// session timeout is --member-timeout); fencing stays in Redis
    #[arg(long, value_name = "URL", default_value = "redis", requires = "serial")]
    pub coordinator: String,
    /// Serial mode with ZooKeeper: how long to keep trying to reach it at
    /// start (a whole-cluster reboot starts it with the consumers) before
    /// failing [default: --member-timeout]
    #[arg(long, value_name = "MS", requires = "serial")]
    pub coordinator_wait: Option<u64>,
    /// Several topics: fixed shares instead of adaptive ones (the pool split
    /// by --share-weight, each topic capped at its --share-max)
    #[arg(long)]
    pub no_adaptive: bool,
    /// Several topics: a topic's weight when the pool is contended, as
    /// TOPIC=N (repeatable) [default: 1]
    #[arg(long, value_name = "TOPIC=N", value_parser = parse_share)]
    pub share_weight: Vec<(String, usize)>,
    /// Several topics: deliveries of a topic that may always run, as
    /// TOPIC=N (repeatable) [default: 1]
    #[arg(long, value_name = "TOPIC=N", value_parser = parse_share)]
    pub share_min: Vec<(String, usize)>,
    /// Several topics: deliveries of a topic that may run at most, as
    /// TOPIC=N (repeatable) [default: the whole pool]
    #[arg(long, value_name = "TOPIC=N", value_parser = parse_share)]
    pub share_max: Vec<(String, usize)>,
    /// Serve this process's metrics (deliveries, lateness, handler duration
    /// and outcomes, ...) for Prometheus at http://ADDR/metrics
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// The message store under the topic (`rmq store`): report each ack and
    /// dead letter to it (batched), so it knows what finished
    #[arg(long, value_name = "URL", env = "RMQ_PG_URL", hide_env_values = true)]
    pub store_pg: Option<String>,
}

/// `TOPIC=N`.
fn parse_share(s: &str) -> Result<(String, usize), String> {
    let (t, n) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?}: use TOPIC=N"))?;
    let n = n
        .parse()
        .map_err(|_| format!("{s:?}: {n:?} is not a whole number"))?;
    Ok((t.to_string(), n))
}

/// `--timeout` times a handler: `--exec` or `--worker`.
pub(super) fn check_handler_flags(a: &ConsumeArgs) -> CliResult {
    if a.timeout.is_some() && a.exec.is_none() && a.worker.is_none() {
        return Err(CliError::usage(
            "--timeout applies to a handler: use it with --exec or --worker",
        ));
    }
    Ok(())
}

/// The share flags name topics of the pool, and only with several topics.
pub(super) fn check_shares(a: &ConsumeArgs, names: &[&str]) -> CliResult {
    let named = a
        .share_weight
        .iter()
        .chain(&a.share_min)
        .chain(&a.share_max)
        .map(|(t, _)| t.as_str());
    let flags = a.no_adaptive || named.clone().next().is_some();
    if names.len() < 2 && flags {
        return Err(CliError::usage(
            "--no-adaptive and --share-* apply to a pool over several topics (TOPIC1,TOPIC2,...)",
        ));
    }
    for t in named {
        if !names.contains(&t) {
            return Err(CliError::usage(format!(
                "--share-* names {t:?}, which is not one of the topics consumed ({})",
                names.join(",")
            )));
        }
    }
    let mut seen = std::collections::HashSet::new();
    if let Some(dup) = names.iter().find(|n| !seen.insert(**n)) {
        return Err(CliError::usage(format!("topic {dup:?} is named twice")));
    }
    Ok(())
}

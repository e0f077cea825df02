//! `rmq forward TOPIC --to URL`: hand a topic's due messages to a broker
//! (RabbitMQ or NATS JetStream), acking each in rmq only after the broker
//! confirmed it (`rmq-forward`).
//!
//! The target is checked before anything is consumed: a bad address exits
//! with 2, an exchange, queue or stream that does not exist with 2, an
//! unreachable broker with 1. Later outages do not stop it: publishes
//! fail, their messages are retried after the topic's backoff, and the
//! connection is made again. SIGINT, SIGTERM or SIGHUP stop taking
//! messages, let the publishes in flight finish, and print what was done;
//! a second signal exits at once (130).

use clap::Args;
use rmq::CancellationToken;
use rmq_forward::{Forwarder, Target, TargetError, DEFAULT_BATCH, DEFAULT_CONCURRENCY};
use serde::Serialize;
use tokio::signal::unix::{signal, SignalKind};

use crate::{connect, CliError, CliResult, Global};

/// Serial mode with ZooKeeper: the session timeout (the consumers' default
/// member timeout).
const MEMBER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(6);

#[derive(Debug, Args)]
pub struct ForwardArgs {
    /// Topic name
    pub topic: String,
    /// Where to: amqp://HOST:PORT/VHOST?exchange=X&routing_key=Y (exchange
    /// may be empty: routing_key is then a queue) or nats://HOST:PORT?subject=S
    #[arg(long, value_name = "URL")]
    pub to: String,
    /// Publishes in flight, each awaiting the broker's confirm
    #[arg(long, value_name = "C", default_value_t = DEFAULT_CONCURRENCY as u16,
          value_parser = clap::value_parser!(u16).range(1..))]
    pub concurrency: u16,
    /// Messages taken per pop
    #[arg(long, value_name = "N", default_value_t = DEFAULT_BATCH as u16,
          value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub batch: u16,
    /// Serial mode: one message of a slot in flight at a time, so each
    /// entity's messages reach the broker in order
    #[arg(long)]
    pub serial: bool,
    /// Serial mode: the consumer group
    #[arg(long, value_name = "G", default_value = "forward", requires = "serial")]
    pub group: String,
    /// Serial mode: where members meet: `redis` (a heartbeat next to the
    /// topic), or ZooKeeper as `zk://HOST:PORT[,HOST:PORT...]/ROOT` (a 6 s
    /// session); fencing stays in Redis
    #[arg(long, value_name = "URL", default_value = "redis", requires = "serial")]
    pub coordinator: String,
    /// Serial mode with ZooKeeper: how long to keep trying to reach it at
    /// start (a whole-cluster reboot starts it with the forwarders) before
    /// failing
    #[arg(long, value_name = "MS", default_value_t = 6000, requires = "serial")]
    pub coordinator_wait: u64,
    /// Serve this process's metrics (deliveries, due-to-taken lateness,
    /// publish duration and outcomes) for Prometheus at http://ADDR/metrics
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<std::net::SocketAddr>,
}

/// What `rmq forward` prints when it stops.
#[derive(Debug, Serialize)]
struct Summary {
    topic: String,
    to: String,
    forwarded: u64,
    duplicates: u64,
    retried: u64,
    dead: u64,
    released: u64,
    failed_settles: u64,
}

impl Summary {
    fn print(&self, json: bool) -> CliResult {
        if json {
            let line = serde_json::to_string(self).map_err(|e| CliError::runtime(e.to_string()))?;
            println!("{line}");
        } else {
            println!(
                "forwarded {} from {} to {} ({} already there), {} retried, {} dead, {} released, {} acks not recorded (published again)",
                self.forwarded,
                self.topic,
                self.to,
                self.duplicates,
                self.retried,
                self.dead,
                self.released,
                self.failed_settles
            );
        }
        Ok(())
    }
}

pub async fn run(g: &Global, args: ForwardArgs) -> CliResult {
    let target = Target::parse(&args.to).map_err(|e| CliError::usage(e.to_string()))?;
    // Caught from the start: a signal while connecting stops it cleanly too.
    let stop = stop_on_signals()?;
    if let Some(addr) = args.metrics_listen {
        crate::scrape::listen(addr)?;
    }
    let (_client, topic) = connect::topic(g, &args.topic).await?;
    let connected = tokio::select! {
        c = target.connect() => c,
        () = stop.cancelled() => return Ok(()),
    };
    let sink = connected.map_err(|e| match e {
        TargetError::Unreachable(_) => CliError::runtime(e.to_string()),
        TargetError::Invalid(_) | TargetError::Missing(_) => CliError::usage(e.to_string()),
    })?;
    tracing::info!(topic = %args.topic, to = %target, "forwarding");
    let coordinator = crate::coordinator::open(
        args.serial,
        &args.coordinator,
        MEMBER_TIMEOUT,
        std::time::Duration::from_millis(args.coordinator_wait),
    )
    .await?;

    let mut forwarder = Forwarder::new(topic, sink)
        .concurrency(usize::from(args.concurrency))
        .batch(usize::from(args.batch));
    if args.serial {
        forwarder = forwarder.serial(args.group);
        if let Some(c) = coordinator {
            forwarder = forwarder.coordinator(c);
        }
    }
    let report = forwarder.run(stop).await?;
    Summary {
        topic: args.topic,
        to: target.to_string(),
        forwarded: report.forwarded,
        duplicates: report.duplicates,
        retried: report.retried,
        dead: report.dead,
        released: report.released,
        failed_settles: report.failed_settles,
    }
    .print(g.json)?;
    Ok(())
}

/// A token cancelled by the first SIGINT, SIGTERM or SIGHUP.
pub(crate) fn stop_on_signals() -> CliResult<CancellationToken> {
    let stop = CancellationToken::new();
    let on_signal = stop.clone();
    let mut signals = Vec::new();
    for kind in [
        SignalKind::interrupt(),
        SignalKind::terminate(),
        SignalKind::hangup(),
    ] {
        signals.push(
            signal(kind).map_err(|e| CliError::runtime(format!("cannot catch signals: {e}")))?,
        );
    }
    tokio::spawn(async move {
        let waits = signals.iter_mut().map(|s| Box::pin(s.recv()));
        futures::future::select_all(waits).await;
        on_signal.cancel();
        // A second signal does not wait for the publishes in flight: their
        // messages come back after their lease.
        let waits = signals.iter_mut().map(|s| Box::pin(s.recv()));
        futures::future::select_all(waits).await;
        crate::output::error_line(
            "stopped at once: messages in flight come back after their lease",
        );
        std::process::exit(130);
    });
    Ok(stop)
}

//! `rmq`: the command-line tool of the rmq queue library.
//!
//! A thin layer: every subcommand (one file each under `cmd/`) parses its
//! arguments with clap, calls the library and prints what it got, as a
//! table for people or, with `--json`, one JSON object per line for
//! programs (`output.rs`). Nothing here knows how messages are stored.
//!
//! Errors never panic: each one prints a single `error: <message>` line on
//! stderr (the library's messages already say what to do) and the process
//! exits with 2 for bad input (a wrong argument, an unknown topic, a
//! conflicting definition, a message the server refused), 75 when a bounded
//! topic is full (EX_TEMPFAIL: retry later), or 1 for a runtime failure
//! (Redis unreachable, Redis errors, a failed child process).
//! clap reports its own usage errors, also with exit code 2.

mod cmd;
mod connect;
mod coordinator;
mod output;
mod reaper;
mod scrape;
mod throwaway;

use std::process::ExitCode;

use clap::{ArgAction, Parser, Subcommand};

/// The default Redis URL when neither `--redis` nor `REDIS_URL` is given.
pub const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379";

/// rmq: a Redis queue that merges duplicates, consumes by priority or at an
/// exact time, and retries with backoff into dead letters.
#[derive(Debug, Parser)]
#[command(name = "rmq", version, about, propagate_version = true)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

/// Options every subcommand takes.
#[derive(Debug, Clone, clap::Args)]
pub struct Global {
    /// Redis URL [default: env REDIS_URL, else redis://127.0.0.1:6379]
    #[arg(
        long = "redis",
        value_name = "URL",
        env = "REDIS_URL",
        hide_env_values = true,
        global = true
    )]
    pub redis: Option<String>,
    /// Treat --redis as the seed node(s) of a Redis Cluster (one URL, or
    /// several separated by commas). Like every switch set from the
    /// environment, RMQ_CLUSTER takes 1/0, true/false, yes/no or on/off
    #[arg(long, env = "RMQ_CLUSTER", global = true, value_parser = switch)]
    pub cluster: bool,
    /// TLS (rediss:// URLs): trust this CA (PEM) instead of the system roots
    #[arg(long, value_name = "FILE", global = true)]
    pub tls_ca: Option<std::path::PathBuf>,
    /// mTLS: client certificate (PEM); needs --tls-key
    #[arg(long, value_name = "FILE", global = true, requires = "tls_key")]
    pub tls_cert: Option<std::path::PathBuf>,
    /// mTLS: the client certificate's key (PEM); needs --tls-cert
    #[arg(long, value_name = "FILE", global = true, requires = "tls_cert")]
    pub tls_key: Option<std::path::PathBuf>,
    /// Locked-down mode: call the Function library an admin loaded
    /// (`rmq functions load`) with FCALL; never load or send Lua
    #[arg(long, env = "RMQ_FUNCTIONS", global = true, value_parser = switch)]
    pub functions: bool,
    /// Do not keep the topics' head index and marks (one Redis): needed in
    /// every process of a prefix while processes of an rmq without them
    /// still send to it; consumers then look at every slot at each rescan
    /// and hear every notice
    #[arg(long, env = "RMQ_NO_HEAD_INDEX", global = true, value_parser = switch)]
    pub no_head_index: bool,
    /// Redis Cluster: how long a command keeps trying while a master fails
    /// over, before it gives up (ms; raise it with cluster-node-timeout)
    #[arg(
        long,
        value_name = "MS",
        env = "RMQ_FAILOVER_WINDOW",
        global = true,
        default_value_t = 15_000
    )]
    pub failover_window: u64,
    /// Key prefix (namespace) of the queues
    #[arg(long, value_name = "NS", default_value = "rmq", global = true)]
    pub prefix: String,
    /// Print one JSON object per line instead of text
    #[arg(long, global = true)]
    pub json: bool,
    /// Log to stderr (-v info, -vv debug, -vvv trace); default: warnings only
    #[arg(short, long, action = ArgAction::Count, global = true)]
    pub verbose: u8,
}

impl Global {
    /// The Redis URL to use.
    pub fn url(&self) -> &str {
        self.redis.as_deref().unwrap_or(DEFAULT_REDIS_URL)
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Define, list and show topics
    #[command(subcommand)]
    Topic(cmd::topic::TopicCmd),
    /// Send a message (or, with --batch, JSON lines from stdin)
    Send(cmd::send::SendArgs),
    /// Consume messages: print them, or run a command per message
    Consume(cmd::consume::ConsumeArgs),
    /// Take due messages by hand, each with a receipt to settle it later
    Take(cmd::take::TakeArgs),
    /// Ack deliveries by receipt (from rmq take or HTTP take)
    Ack(cmd::settle::AckArgs),
    /// Nack deliveries by receipt: retry later, or --dead
    Nack(cmd::settle::NackArgs),
    /// Extend deliveries' leases by receipt
    Extend(cmd::settle::ExtendArgs),
    /// Depth and counters per topic
    Stats(cmd::stats::StatsArgs),
    /// The next messages in consumption order, without taking them
    Peek(cmd::peek::PeekArgs),
    /// Where a message is, by merge key, and everything about it
    Get(cmd::get::GetArgs),
    /// Cancel messages by merge key (or, with --batch, keys from stdin)
    Cancel(cmd::cancel::CancelArgs),
    /// Give a waiting message a new due time or priority
    Reschedule(cmd::reschedule::RescheduleArgs),
    /// Hand due messages to RabbitMQ or NATS JetStream, acking each after the broker confirmed it
    Forward(cmd::forward::ForwardArgs),
    /// Serve the HTTP JSON API and Prometheus metrics
    Serve(cmd::serve::ServeArgs),
    /// List, requeue and purge dead letters
    #[command(subcommand)]
    Dead(cmd::dead::DeadCmd),
    /// The PostgreSQL message store under the queue: migrate, define, relay, recover, prune
    #[command(subcommand)]
    Store(cmd::store::StoreCmd),
    /// A guided tour on a throwaway redis-server (or on --redis)
    Demo(cmd::demo::DemoArgs),
    /// Print the least-privilege ACL SETUSER line for a key prefix
    Acl(cmd::acl::AclArgs),
    /// Locked-down mode: load or show rmq's Redis Function library
    #[command(subcommand)]
    Functions(cmd::functions::FunctionsCmd),
    /// Internal: kills `rmq consume --exec` handlers when their consumer dies
    #[command(hide = true, name = "reap-handlers")]
    ReapHandlers,
}

/// Exit code of a send refused because its bounded topic is full
/// (sysexits' EX_TEMPFAIL: a temporary failure, retry later).
pub const EXIT_FULL: u8 = 75;

/// An error that ends the process: one line on stderr and an exit code.
#[derive(Debug)]
pub struct CliError {
    /// 1 runtime failure, 2 bad input.
    pub code: u8,
    /// The message; `None` prints nothing (stdout was closed).
    pub message: Option<String>,
}

impl CliError {
    /// Bad input: exit code 2.
    pub fn usage(message: impl Into<String>) -> Self {
        CliError {
            code: 2,
            message: Some(message.into()),
        }
    }

    /// A runtime failure: exit code 1.
    pub fn runtime(message: impl Into<String>) -> Self {
        CliError {
            code: 1,
            message: Some(message.into()),
        }
    }

    /// Ends quietly with exit code 1 (the reader of stdout went away).
    pub fn quiet() -> Self {
        CliError {
            code: 1,
            message: None,
        }
    }
}

impl From<rmq::Error> for CliError {
    fn from(e: rmq::Error) -> Self {
        use rmq::ErrorKind as K;
        let code = match e.kind() {
            K::InvalidName
            | K::InvalidSlotCount
            | K::InvalidArgument
            | K::PayloadTooLarge
            | K::PastDue
            | K::UnknownTopic
            | K::TopicConflict
            | K::NotWaiting
            | K::TopicInUse
            | K::InvalidReceipt => 2,
            K::Full => EXIT_FULL,
            _ => 1,
        };
        CliError {
            code,
            message: Some(e.to_string()),
        }
    }
}

/// Result of a subcommand.
pub type CliResult<T = ()> = Result<T, CliError>;

fn init_tracing(verbose: u8) {
    use tracing_subscriber::EnvFilter;
    let filter = match verbose {
        // The Redis client's own reconnect chatter (a line per node and
        // try while a cluster fails over) and the AMQP client's line per
        // returned message (rmq forward) and the ZooKeeper client's line
        // per failed reconnect only with -v: rmq says what matters itself,
        // once.
        0 => EnvFilter::try_from_default_env().unwrap_or_else(|_| {
            EnvFilter::new("warn,redis=error,lapin=error,zookeeper_client=error")
        }),
        1 => EnvFilter::new("info"),
        2 => EnvFilter::new("debug"),
        _ => EnvFilter::new("trace"),
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(verbose > 1)
        // A log line that cannot be written (stderr closed by whoever
        // started us) is lost, not reported with eprintln!, which panics
        // on a closed stderr and would take the logging task down with it.
        .log_internal_errors(false)
        .try_init();
}

async fn run(cli: Cli) -> CliResult {
    let g = cli.global;
    match cli.command {
        Command::Topic(c) => cmd::topic::run(&g, c).await,
        Command::Send(a) => cmd::send::run(&g, a).await,
        Command::Consume(a) => cmd::consume::run(&g, a).await,
        Command::Stats(a) => cmd::stats::run(&g, a).await,
        Command::Forward(a) => cmd::forward::run(&g, a).await,
        Command::Peek(a) => cmd::peek::run(&g, a).await,
        Command::Take(a) => cmd::take::run(&g, a).await,
        Command::Ack(a) => cmd::settle::ack(&g, a).await,
        Command::Nack(a) => cmd::settle::nack(&g, a).await,
        Command::Extend(a) => cmd::settle::extend(&g, a).await,
        Command::Get(a) => cmd::get::run(&g, a).await,
        Command::Cancel(a) => cmd::cancel::run(&g, a).await,
        Command::Reschedule(a) => cmd::reschedule::run(&g, a).await,
        Command::Serve(a) => cmd::serve::run(&g, a).await,
        Command::Dead(c) => cmd::dead::run(&g, c).await,
        Command::Store(c) => cmd::store::run(&g, c).await,
        Command::Demo(a) => cmd::demo::run(&g, a).await,
        Command::Acl(a) => cmd::acl::run(&g, a),
        Command::Functions(c) => cmd::functions::run(&g, c).await,
        Command::ReapHandlers => reaper::run().await,
    }
}

fn main() -> ExitCode {
    let mut cli = Cli::parse();
    // An empty REDIS_URL (e.g. `REDIS_URL= rmq demo`) counts as unset.
    if cli
        .global
        .redis
        .as_deref()
        .is_some_and(|u| u.trim().is_empty())
    {
        cli.global.redis = None;
    }
    init_tracing(cli.global.verbose);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let result = runtime.block_on(run(cli));
    // Do not wait for background tasks (e.g. a consumer's wake-up listener).
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if let Some(m) = e.message {
                output::error_line(&m);
            }
            ExitCode::from(e.code)
        }
    }
}

/// A switch set from the environment: 1/0, true/false, yes/no, on/off
/// (any case); empty is off.
fn switch(value: &str) -> Result<bool, String> {
    match value.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" | "y" | "t" => Ok(true),
        "0" | "false" | "no" | "off" | "n" | "f" | "" => Ok(false),
        _ => Err("use 1/0, true/false, yes/no or on/off".into()),
    }
}

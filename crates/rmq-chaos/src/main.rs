//! rmq-chaos: a chaos suite that accounts for every message.
//!
//! `rmq-chaos run <scenario>` starts a throwaway Redis (never port 6379),
//! spawns producer and consumer processes (this same binary, subcommands
//! `produce` and `consume`) that append histories, injects faults from this
//! process, waits for the queues to drain, reads the final state and runs
//! the checker: one JSON object on stdout, one summary line on stderr, and
//! a non-zero exit when an invariant is broken. A worker process left
//! running at the end (see `procs`) breaks the run too.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod checker;
mod consumer;
mod faults;
mod history;
mod procs;
mod producer;
mod proxy;
mod scenario;
mod workload;

/// Where a worker connects.
#[derive(Debug, Clone, clap::Args)]
pub struct Conn {
    #[arg(long)]
    pub redis: String,
    #[arg(long, default_value = "chaos")]
    pub prefix: String,
    /// `--redis` lists seed nodes of a Redis Cluster.
    #[arg(long)]
    pub cluster: bool,
    /// The clock offset `faketime` gives this worker (history timestamps only).
    #[arg(long, default_value_t = 0, allow_hyphen_values = true)]
    pub skew_ms: i64,
}

impl Conn {
    pub async fn connect(&self) -> anyhow::Result<rmq::Client> {
        history::set_skew_ms(self.skew_ms);
        let opts = rmq::ClientOptions::default().prefix(self.prefix.clone());
        if self.cluster {
            let seeds: Vec<&str> = self.redis.split(',').collect();
            return Ok(rmq::Client::connect_cluster(&seeds, opts).await?);
        }
        Ok(rmq::Client::connect_with(&self.redis, opts).await?)
    }
}

#[derive(Parser)]
#[command(
    name = "rmq-chaos",
    about = "Chaos scenarios for rmq with a history checker"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Runs one scenario (see `list`) and checks it.
    Run(scenario::RunArgs),
    /// Lists the scenarios.
    List,
    /// Worker: sends a share of the seeded workload (used by `run`).
    #[command(hide = true)]
    Produce(producer::ProduceArgs),
    /// Worker: consumes every topic (used by `run`).
    #[command(hide = true)]
    Consume(consumer::ConsumeArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if matches!(cli.cmd, Cmd::Produce(_) | Cmd::Consume(_)) {
        // A worker outlives neither the harness nor a faketime above it.
        procs::term_when_orphaned(std::time::Duration::from_secs(10));
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = match cli.cmd {
        Cmd::Run(a) => rt.block_on(scenario::run(a)),
        Cmd::List => {
            for s in scenario::ALL {
                println!("{:<26} {}", s.name, s.about);
            }
            Ok(true)
        }
        Cmd::Produce(a) => rt.block_on(producer::run(a)).map(|()| true),
        Cmd::Consume(a) => rt.block_on(consumer::run(a)).map(|()| true),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("rmq-chaos: {e:#}");
            ExitCode::from(2)
        }
    }
}

//! rmq-bench: throughput, latency and memory of rmq against a real Redis.
//!
//! Prints one JSON line per measured case to stdout and a table to stderr.
//! Without `--redis` it starts a throwaway `redis-server` (never port 6379)
//! and may `FLUSHALL` it; with `--redis` it only deletes its own keys.
//!
//! `main` only parses the arguments, starts the server and runtime, runs the
//! suite and prints the summary; each scenario lives in its own module.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Parser;

mod backlog;
mod bounded;
mod cli;
mod consume;
mod consume_mode;
mod coordination;
mod env;
mod fleet;
mod forward;
mod handover;
mod instructions;
mod latency;
mod memory;
mod merge;
mod pool;
mod redis_stats;
mod report;
mod runner;
mod send;
mod store;
mod suite;
mod workload;

use cli::Args;
use env::{Env, Servers};
use report::table;
use runner::spawn_watchdog;
use suite::run_all;

/// Counts the process's heap allocations (`allocs_per_msg` in consume
/// rows); the system allocator does the work, as without it.
#[global_allocator]
static ALLOCATOR: &stats_alloc::StatsAlloc<std::alloc::System> = &stats_alloc::INSTRUMENTED_SYSTEM;

/// Heap allocations (and reallocations) made by this process so far.
pub(crate) fn allocations() -> u64 {
    let s = ALLOCATOR.stats();
    u64::try_from(s.allocations + s.reallocations).unwrap_or(u64::MAX)
}

/// A given cluster's nodes: the seeds stand for all of them (statistics
/// then cover the seeds only; pass every node to see all).
fn cluster_nodes_of(seeds: &str) -> Vec<String> {
    seeds.split(',').map(|s| s.trim().to_string()).collect()
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let scale = if args.smoke { 0.002 } else { args.scale };
    if !(scale > 0.0 && scale.is_finite()) {
        eprintln!("--scale must be a positive number");
        return std::process::ExitCode::from(2);
    }
    if args.fleet_member {
        return fleet_member(args);
    }
    if args.instructions {
        return count_instructions(scale, args.smoke);
    }
    if args.forward {
        return run_mode("--forward", forward::measure(scale));
    }
    if args.coordination {
        return run_mode(
            "--coordination",
            coordination::measure(scale, args.smoke, &args.only),
        );
    }
    if args.store {
        return run_mode("--store", store::measure(scale));
    }
    if args.fleet {
        return run_mode("--fleet", fleet::measure(scale, args.smoke, &args.only));
    }
    // The throwaway server lives until the end of main (dropping it kills it).
    let server = match (&args.redis, args.cluster) {
        (Some(_), _) => None,
        (None, false) => Some(Servers::One(rmq_test_support::RedisServer::start())),
        (None, true) => Some(Servers::Cluster(
            rmq_test_support::RedisCluster::builder()
                .replicas(0)
                .start(),
        )),
    };
    let (url, cluster_nodes) = match (&args.redis, &server) {
        (Some(u), _) if args.cluster => (u.clone(), Some(cluster_nodes_of(u))),
        (Some(u), _) => (u.clone(), None),
        (None, Some(Servers::One(s))) => (s.url(), None),
        (None, Some(Servers::Cluster(c))) => (c.urls().join(","), Some(c.urls())),
        (None, None) => unreachable!("a server was started"),
    };
    let owned = server.is_some();
    let server = Arc::new(Mutex::new(server));
    spawn_watchdog(server.clone());
    let env = Env {
        url,
        cluster_nodes,
        owned,
        scale,
        smoke: args.smoke,
        counter: AtomicU64::new(0),
    };
    eprintln!(
        "rmq-bench: redis {} ({}), scale {scale}{}",
        rmq::redact(&env.url),
        if env.owned { "throwaway" } else { "given" },
        if args.smoke { ", smoke" } else { "" }
    );
    let Some(rt) = runtime() else {
        return std::process::ExitCode::FAILURE;
    };
    let only: Vec<String> = if args.cluster && args.only.is_empty() {
        // The other scenarios read one server's memory and clients.
        vec!["send".into(), "consume".into()]
    } else {
        args.only.clone()
    };
    let out = rt.block_on(run_all(&env, &only));
    rt.shutdown_timeout(Duration::from_secs(5));
    eprintln!("\n{}", table(&out.rows));
    for s in &out.skipped {
        eprintln!("skipped: {s}");
    }
    drop(server.lock().unwrap_or_else(|p| p.into_inner()).take());
    if out.errors.is_empty() {
        std::process::ExitCode::SUCCESS
    } else {
        eprintln!("\n{} case(s) failed:", out.errors.len());
        for e in &out.errors {
            eprintln!("  {e}");
        }
        std::process::ExitCode::FAILURE
    }
}

/// `--instructions`: Redis instructions per message, phase by phase, with
/// redis-server under callgrind (see `instructions.rs`).
fn count_instructions(scale: f64, smoke: bool) -> std::process::ExitCode {
    let counted = match instructions::start() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("rmq-bench --instructions: {e:#}");
            return std::process::ExitCode::FAILURE;
        }
    };
    eprintln!(
        "rmq-bench: redis under callgrind ({}), scale {scale}",
        counted.server.url()
    );
    let env = Env::owned_single(counted.server.url(), scale, smoke);
    let Some(rt) = runtime() else {
        return std::process::ExitCode::FAILURE;
    };
    let result = rt.block_on(instructions::measure(&env, &counted));
    rt.shutdown_timeout(Duration::from_secs(5));
    match result {
        Ok(_) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rmq-bench --instructions: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// One consumer of a fleet, in a process of its own (`fleet/member.rs`),
/// on a runtime of one thread: 64 of them share this host's two cores.
fn fleet_member(args: Args) -> std::process::ExitCode {
    let (Some(url), Some(prefix)) = (args.redis, args.member_prefix) else {
        eprintln!("--fleet-member needs --redis and --member-prefix");
        return std::process::ExitCode::from(2);
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("rmq-bench --fleet-member: starting the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let member = fleet::member::MemberArgs {
        url,
        cluster: args.cluster,
        prefix,
        head_index: args.member_head_index,
    };
    match rt.block_on(fleet::member::run(member)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rmq-bench --fleet-member: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Runs one of the modes that measure something besides the queue
/// (`--coordination`, `--store`, `--forward`; see their modules) on a
/// runtime of its own; a failure is said on stderr under the mode's flag.
fn run_mode(
    flag: &str,
    measure: impl std::future::Future<Output = anyhow::Result<()>>,
) -> std::process::ExitCode {
    let Some(rt) = runtime() else {
        return std::process::ExitCode::FAILURE;
    };
    let result = rt.block_on(measure);
    rt.shutdown_timeout(Duration::from_secs(5));
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rmq-bench {flag}: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The multi-threaded runtime every mode runs on (None, said on stderr,
/// when it cannot start).
fn runtime() -> Option<tokio::runtime::Runtime> {
    match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => Some(rt),
        Err(e) => {
            eprintln!("cannot start the runtime: {e}");
            None
        }
    }
}

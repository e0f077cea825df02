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
mod cli;
mod consume;
mod consume_mode;
mod env;
mod handover;
mod latency;
mod memory;
mod merge;
mod redis_stats;
mod report;
mod runner;
mod send;
mod suite;
mod workload;

use cli::Args;
use env::Env;
use report::table;
use runner::spawn_watchdog;
use suite::run_all;

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let scale = if args.smoke { 0.002 } else { args.scale };
    if !(scale > 0.0 && scale.is_finite()) {
        eprintln!("--scale must be a positive number");
        return std::process::ExitCode::from(2);
    }
    // The throwaway server lives until the end of main (dropping it kills it).
    let server = match args.redis {
        Some(_) => None,
        None => Some(rmq_test_support::RedisServer::start()),
    };
    let url = match (&args.redis, &server) {
        (Some(u), _) => u.clone(),
        (None, Some(s)) => s.url(),
        (None, None) => unreachable!("a server was started"),
    };
    let owned = server.is_some();
    let server = Arc::new(Mutex::new(server));
    spawn_watchdog(server.clone());
    let env = Env {
        url,
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
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let out = rt.block_on(run_all(&env, &args.only));
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

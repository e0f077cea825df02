//! `rmq serve`: the web dashboard, the HTTP JSON API and Prometheus
//! metrics (`rmq-serve`)
//! over the prefix `--prefix` names.
//!
//! It binds loopback unless told otherwise. Actions (anything that changes
//! state) need `--token-file F` (then `Authorization: Bearer <token>`), or
//! `--allow-unauthenticated-actions` for a trusted network; `--read-only`
//! refuses them all. SIGINT/SIGTERM stop it gracefully, within
//! `--shutdown-grace`. Slow or silent clients are closed after
//! `--header-timeout` / `--idle-timeout`, and at most `--max-connections`
//! are served at once (see `rmq_serve::Limits`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use rmq_serve::{Access, Limits, Options};
use tokio::signal::unix::{signal, SignalKind};

use crate::output;
use crate::{connect, CliError, CliResult, Global};

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// File holding the bearer token that actions need (its first line)
    #[arg(long, value_name = "FILE", conflicts_with_all = ["read_only", "allow_unauthenticated_actions"])]
    pub token_file: Option<PathBuf>,
    /// Refuse every action (403): read and scrape only
    #[arg(long)]
    pub read_only: bool,
    /// Take actions from anyone who reaches the listener, without a token
    #[arg(long, conflicts_with = "read_only")]
    pub allow_unauthenticated_actions: bool,
    /// How long one metrics scrape's readings are reused, in ms
    #[arg(long, value_name = "MS", default_value_t = 5000)]
    pub scrape_cache: u64,
    /// How often the dashboard samples every topic (one stats reading per
    /// topic), in ms; an hour of samples is kept
    #[arg(long, value_name = "MS", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(100..))]
    pub sample_every: u64,
    /// A host name the dashboard and API answer for (repeatable); IP
    /// addresses and localhost always are (other names are refused against
    /// DNS rebinding)
    #[arg(long = "allowed-host", value_name = "NAME")]
    pub allowed_hosts: Vec<String>,
    /// How long a request's headers may take to arrive, in ms (also the
    /// longest a kept-alive connection waits for its next request)
    #[arg(long, value_name = "MS", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub header_timeout: u64,
    /// A connection on which no byte moves for this long is closed, in ms
    #[arg(long, value_name = "MS", default_value_t = 60_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub idle_timeout: u64,
    /// Connections served at once; beyond it the longest-idle connection is
    /// closed to make room, or the new one is refused (keep it well under
    /// the process's descriptor limit, `ulimit -n`)
    #[arg(long, value_name = "N", default_value_t = 512, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub max_connections: u64,
    /// After SIGINT/SIGTERM, how long requests being answered may still
    /// take before the server closes their connections and exits, in ms
    #[arg(long, value_name = "MS", default_value_t = 5_000)]
    pub shutdown_grace: u64,
    /// Expensive readings (topic list, stats, slots, peeks, dead-letter
    /// pages, serial groups) run at once; beyond it requests get 429 with
    /// Retry-After. Requests for a reading under way share it
    #[arg(long, value_name = "N", default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub max_expensive_reads: u64,
    /// A topic of more than 1,024 slots is read at most once per this many
    /// ms by all readers together (dashboard, /metrics, topic list, stats,
    /// slots); within it they answer from the last reading (its server_ms
    /// says when). 0 reads anew for each request
    #[arg(long, value_name = "MS", default_value_t = 5000)]
    pub large_topic_reuse: u64,
    /// The longest an HTTP take (POST /api/v1/topics/T/take) waits for a
    /// first message, whatever its wait_ms asks, in ms
    #[arg(long, value_name = "MS", default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(0..=30_000))]
    pub max_take_wait: u64,
}

/// Who may act, and a warning to print once the server listens (the
/// first line on stderr names the address).
fn access(a: &ServeArgs) -> CliResult<(Access, Option<String>)> {
    if let Some(path) = &a.token_file {
        let file = rmq_serve::read_token_file(path).map_err(|e| {
            CliError::usage(format!("the token file {} is refused: {e}", path.display()))
        })?;
        let warning = file.world_readable.then(|| {
            format!(
                "warning: the token file {} is readable by every user of this machine \
                 (chmod 600 it): anyone here could act through the server",
                path.display()
            )
        });
        return Ok((Access::Token(file.token), warning));
    }
    if a.allow_unauthenticated_actions {
        return Ok((Access::Unauthenticated, None));
    }
    if !a.read_only {
        output::note(
            "no --token-file: actions are refused (read-only); give a token file, or \
             --allow-unauthenticated-actions on a trusted network",
        );
    }
    Ok((Access::ReadOnly, None))
}

pub async fn run(g: &Global, a: ServeArgs) -> CliResult {
    let (access, warning) = access(&a)?;
    let client = connect::client(g).await?;
    let listener = tokio::net::TcpListener::bind(a.listen)
        .await
        .map_err(|e| CliError::runtime(format!("cannot listen on {}: {e}", a.listen)))?;
    let addr = listener
        .local_addr()
        .map_err(|e| CliError::runtime(format!("cannot read the listening address: {e}")))?;
    let mode = match &access {
        Access::ReadOnly => "read-only",
        Access::Token(_) => "actions with the bearer token",
        Access::Unauthenticated => "actions WITHOUT authentication",
    };
    output::note(&format!(
        "serving the dashboard at http://{addr}/, the API under /api/v1 and metrics at \
         /metrics ({mode}); Ctrl-C stops"
    ));
    if let Some(w) = warning {
        output::note(&w);
    }
    let options = Options {
        access,
        scrape_cache: Duration::from_millis(a.scrape_cache),
        sample_every: Duration::from_millis(a.sample_every),
        allowed_hosts: a.allowed_hosts,
        max_expensive_reads: usize::try_from(a.max_expensive_reads).unwrap_or(usize::MAX),
        large_topic_reuse: Duration::from_millis(a.large_topic_reuse),
        max_take_wait: Duration::from_millis(a.max_take_wait),
    };
    let mut term = signal(SignalKind::terminate())
        .map_err(|e| CliError::runtime(format!("cannot listen for SIGTERM: {e}")))?;
    let mut int = signal(SignalKind::interrupt())
        .map_err(|e| CliError::runtime(format!("cannot listen for SIGINT: {e}")))?;
    let shutdown = async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    };
    let limits = Limits {
        header_read_timeout: Duration::from_millis(a.header_timeout),
        idle_timeout: Duration::from_millis(a.idle_timeout),
        max_connections: usize::try_from(a.max_connections).unwrap_or(usize::MAX),
        shutdown_grace: Duration::from_millis(a.shutdown_grace),
    };
    rmq_serve::serve_with(
        listener,
        rmq_serve::router(client, options),
        shutdown,
        limits,
    )
    .await
    .map_err(|e| CliError::runtime(format!("the server failed: {e}")))
}

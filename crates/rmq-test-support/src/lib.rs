//! Test support for rmq: throwaway `redis-server` processes.
//!
//! [`RedisServer`] starts a real `redis-server` on a free loopback port
//! (never 6379, always bound to 127.0.0.1) with its own temporary directory
//! and log file, and stops it by PID when dropped. It can be killed,
//! gracefully stopped, restarted on the same port and directory (reloading
//! the AOF when enabled), and paused/resumed with `SIGSTOP`/`SIGCONT` to
//! simulate a hung server.
//!
//! Readiness is checked without any Redis client crate: a plain
//! [`std::net::TcpStream`] sends `PING` and waits for `+PONG`, then checks
//! with `INFO server` that the answering process is really our child.
//!
//! ```no_run
//! use rmq_test_support::RedisServer;
//!
//! let mut server = RedisServer::builder().appendonly_always().start();
//! let url = server.url(); // "redis://127.0.0.1:PORT"
//! server.kill();
//! server.restart(); // same port, AOF reloaded
//! # let _ = url;
//! ```
//!
//! If `redis-server` is missing, run `scripts/ensure-deps.sh`.

mod broker;
mod builder;
mod cluster;
mod launch;
mod port;
mod postgres;
mod probe;
mod proxy;
pub mod reap;
mod serial_check;
mod server;
mod signal;
mod spans;
mod zookeeper;

pub use broker::{NatsServer, RabbitServer};
pub use builder::RedisServerBuilder;
pub use cluster::{RedisCluster, RedisClusterBuilder};
pub use port::free_port;
pub use postgres::{PostgresServer, PG_USER};
pub use proxy::Proxy;
pub use serial_check::{check_serial_log, Handled};
pub use server::RedisServer;
pub use spans::densest;
pub use zookeeper::{ZooKeeperEnsemble, ZooKeeperServer};

#[cfg(test)]
mod tests;

//! Configuration of a throwaway server: [`RedisServerBuilder`].
//!
//! Every server gets a fixed base configuration (loopback bind, own temp
//! directory and log file, no RDB snapshots, no daemonizing, one I/O thread)
//! plus whatever the builder adds. Extra arguments come last, so they
//! override the base ones.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::server::RedisServer;

/// Name of the server log file inside the server's directory.
pub(crate) const LOG_FILE: &str = "redis.log";
/// Where the child's stdout/stderr go (config errors are only printed there).
pub(crate) const STDIO_FILE: &str = "stdio.log";

/// Everything needed to (re)launch a server; kept by [`RedisServer`].
#[derive(Debug, Clone)]
pub(crate) struct ServerConfig {
    pub(crate) binary: PathBuf,
    pub(crate) appendonly_always: bool,
    pub(crate) maxmemory: Option<u64>,
    pub(crate) maxmemory_policy: Option<String>,
    pub(crate) enable_debug_command: bool,
    pub(crate) extra: Vec<(String, String)>,
    pub(crate) startup_timeout: Duration,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            binary: PathBuf::from("redis-server"),
            appendonly_always: false,
            maxmemory: None,
            maxmemory_policy: None,
            enable_debug_command: false,
            extra: Vec::new(),
            startup_timeout: Duration::from_secs(10),
        }
    }
}

impl ServerConfig {
    /// Command-line arguments for a server on `port` living in `dir`.
    pub(crate) fn args(&self, port: u16, dir: &Path) -> Vec<OsString> {
        let mut args: Vec<OsString> = Vec::new();
        let mut push = |name: &str, value: OsString| {
            args.push(format!("--{name}").into());
            args.push(value);
        };
        push("port", port.to_string().into());
        push("bind", "127.0.0.1".into());
        push("dir", dir.into());
        push("logfile", dir.join(LOG_FILE).into());
        push("save", "".into());
        push("daemonize", "no".into());
        push("protected-mode", "no".into());
        push("io-threads", "1".into());
        if self.appendonly_always {
            push("appendonly", "yes".into());
            push("appendfsync", "always".into());
        } else {
            push("appendonly", "no".into());
        }
        if let Some(bytes) = self.maxmemory {
            push("maxmemory", bytes.to_string().into());
        }
        if let Some(policy) = &self.maxmemory_policy {
            push("maxmemory-policy", policy.into());
        }
        if self.enable_debug_command {
            push("enable-debug-command", "local".into());
        }
        for (name, value) in &self.extra {
            push(name, value.into());
        }
        args
    }
}

/// Builder for a [`RedisServer`]; see [`RedisServer::builder`].
#[derive(Debug, Clone, Default)]
#[must_use = "a builder does nothing until `start` is called"]
pub struct RedisServerBuilder {
    config: ServerConfig,
}

impl RedisServerBuilder {
    /// Enables the AOF with `--appendonly yes --appendfsync always`, so every
    /// acknowledged write survives [`RedisServer::kill`] + `restart`.
    pub fn appendonly_always(mut self) -> Self {
        self.config.appendonly_always = true;
        self
    }

    /// Sets `--maxmemory <bytes>`. The eviction policy stays Redis's default
    /// `noeviction` unless [`maxmemory_policy`](Self::maxmemory_policy) is set.
    pub fn maxmemory(mut self, bytes: u64) -> Self {
        self.config.maxmemory = Some(bytes);
        self
    }

    /// Sets `--maxmemory-policy <policy>`.
    pub fn maxmemory_policy(mut self, policy: &str) -> Self {
        self.config.maxmemory_policy = Some(policy.to_owned());
        self
    }

    /// Allows the `DEBUG` command from loopback (`--enable-debug-command local`).
    pub fn enable_debug_command(mut self) -> Self {
        self.config.enable_debug_command = true;
        self
    }

    /// Adds any `--<name> <value>` argument (`name` without the dashes).
    /// Added last, so it overrides the defaults.
    pub fn arg(mut self, name: &str, value: &str) -> Self {
        let name = name.trim_start_matches('-').to_owned();
        self.config.extra.push((name, value.to_owned()));
        self
    }

    /// Uses another server binary (default: `redis-server` on `PATH`).
    pub fn binary(mut self, path: impl Into<PathBuf>) -> Self {
        self.config.binary = path.into();
        self
    }

    /// How long one start-up may take until the server answers `PING`
    /// (default 10 s). Time spent answering `-LOADING` does not count.
    pub fn startup_timeout(mut self, timeout: Duration) -> Self {
        self.config.startup_timeout = timeout;
        self
    }

    /// Starts the server on a free loopback port and waits until it is ready.
    ///
    /// # Panics
    ///
    /// Panics with the server log if it cannot start after retries (each
    /// retry uses a new port), or at once if the binary cannot be run.
    pub fn start(self) -> RedisServer {
        RedisServer::start_with(self.config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_contain_base_and_extras_last() {
        let config = RedisServerBuilder::default()
            .appendonly_always()
            .maxmemory(1 << 20)
            .enable_debug_command()
            .arg("--hz", "100")
            .config;
        let args: Vec<String> = config
            .args(12345, Path::new("/tmp/x"))
            .into_iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let joined = args.join(" ");
        assert!(joined.contains("--port 12345 --bind 127.0.0.1 --dir /tmp/x"));
        assert!(joined.contains("--appendonly yes --appendfsync always"));
        assert!(joined.contains("--maxmemory 1048576"));
        assert!(joined.contains("--enable-debug-command local"));
        assert!(joined.ends_with("--hz 100"));
        let save = args.iter().position(|a| a == "--save").expect("--save");
        assert_eq!(args[save + 1], "");
    }
}

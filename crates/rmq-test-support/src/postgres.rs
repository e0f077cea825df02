//! Throwaway PostgreSQL servers for the message store's tests: Debian's
//! `postgresql` package, `initdb` into a temporary directory and
//! `postgres` on a free loopback port, never the machine's own server
//! (5432 is left alone). Trust authentication on 127.0.0.1 only, a Unix
//! socket in the temporary directory only, `fsync` off (the tests kill the
//! server, never the machine).
//!
//! PostgreSQL refuses to run as root; when the tests run as root the
//! server runs as the `postgres` user that the package creates, and the
//! temporary directory is handed to it. The server is a process group of
//! its own (the postmaster and its backends), stopped by PID.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::broker::{new_dir, Broker};
use crate::port::free_port;

/// The database user the tests connect as (a superuser of the throwaway
/// cluster).
pub const PG_USER: &str = "rmq";

/// The newest `/usr/lib/postgresql/<version>/bin` that has `initdb`.
fn bin_dir() -> Result<PathBuf, String> {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .map_err(|e| format!("/usr/lib/postgresql: {e} (run scripts/ensure-deps.sh)"))?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let v = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((v, bin))
        })
        .collect();
    found.sort();
    found
        .pop()
        .map(|(_, b)| b)
        .ok_or_else(|| "no PostgreSQL server programs (run scripts/ensure-deps.sh)".to_string())
}

/// The uid and gid to run PostgreSQL as: ours, or the `postgres` user's
/// when we are root.
fn run_as() -> Result<Option<(u32, u32)>, String> {
    use std::os::unix::fs::MetadataExt;
    let me = std::fs::metadata("/proc/self")
        .map_err(|e| e.to_string())?
        .uid();
    if me != 0 {
        return Ok(None);
    }
    let passwd = std::fs::read_to_string("/etc/passwd").map_err(|e| e.to_string())?;
    passwd
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.len() > 3 && f[0] == "postgres")
                .then(|| Some((f[2].parse().ok()?, f[3].parse().ok()?)))
                .flatten()
        })
        .map(Some)
        .ok_or_else(|| "running as root and there is no postgres user to run PostgreSQL as (run scripts/ensure-deps.sh)".to_string())
}

fn chown_tree(path: &Path, uid: u32, gid: u32) -> Result<(), String> {
    std::os::unix::fs::chown(path, Some(uid), Some(gid))
        .map_err(|e| format!("chown {}: {e}", path.display()))?;
    if path.is_dir() {
        for e in std::fs::read_dir(path).map_err(|e| e.to_string())? {
            let e = e.map_err(|e| e.to_string())?;
            chown_tree(&e.path(), uid, gid)?;
        }
    }
    Ok(())
}

fn is_ready(bin: &Path, port: u16) -> bool {
    Command::new(bin.join("pg_isready"))
        .args([
            "-q",
            "-h",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-U",
            PG_USER,
        ])
        .status()
        .is_ok_and(|s| s.success())
}

/// A `postgres` of its own on a free loopback port.
pub struct PostgresServer {
    broker: Broker,
}

impl PostgresServer {
    /// Runs `initdb` and starts the server, retrying on a port taken
    /// meanwhile.
    ///
    /// # Panics
    ///
    /// Panics if PostgreSQL is missing or cannot be started.
    pub fn start() -> PostgresServer {
        match Self::try_start(false) {
            Ok(s) => s,
            Err(e) => panic!("cannot start PostgreSQL: {e}"),
        }
    }

    /// Like [`PostgresServer::start`], but with `fsync` on (PostgreSQL's
    /// default): commits wait for the disk, as in production. For
    /// benchmarks.
    ///
    /// # Panics
    ///
    /// Panics if PostgreSQL is missing or cannot be started.
    pub fn start_durable() -> PostgresServer {
        match Self::try_start(true) {
            Ok(s) => s,
            Err(e) => panic!("cannot start PostgreSQL: {e}"),
        }
    }

    fn try_start(durable: bool) -> Result<PostgresServer, String> {
        use std::os::unix::process::CommandExt;
        let bin = bin_dir()?;
        let owner = run_as()?;
        let dir = new_dir("postgres");
        let data = dir.path().join("data");
        if let Some((uid, gid)) = owner {
            chown_tree(dir.path(), uid, gid)?;
        }
        let mut initdb = Command::new(bin.join("initdb"));
        initdb.arg("-D").arg(&data).args([
            "-U",
            PG_USER,
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
            "--no-instructions",
        ]);
        if let Some((uid, gid)) = owner {
            initdb.uid(uid).gid(gid);
        }
        let out = initdb
            .output()
            .map_err(|e| format!("cannot run initdb: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "initdb failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let mut last = String::new();
        let mut broker = Broker {
            name: "postgres",
            dir,
            port: 0,
            child: None,
            command: Box::new(|_| Command::new("true")),
            ready: |_| false,
        };
        for _ in 0..5 {
            let port = free_port();
            let (server, data) = (bin.join("postgres"), data.clone());
            broker.port = port;
            broker.command = Box::new(move |dir: &Path| {
                let mut c = Command::new(&server);
                c.arg("-D").arg(&data).args([
                    "-p",
                    &port.to_string(),
                    "-c",
                    "listen_addresses=127.0.0.1",
                    "-c",
                    if durable { "fsync=on" } else { "fsync=off" },
                    "-c",
                    "max_connections=200",
                    "-c",
                    "log_min_messages=warning",
                ]);
                c.arg("-c")
                    .arg(format!("unix_socket_directories={}", dir.display()));
                if let Some((uid, gid)) = owner {
                    c.uid(uid).gid(gid);
                }
                c
            });
            let _ = READY_BIN.set(bin.clone());
            broker.ready = |port| READY_BIN.get().is_some_and(|b| is_ready(b, port));
            if let Some((uid, gid)) = owner {
                // The output log is created by us; the server only inherits it.
                let _ = chown_tree(broker.dir.path(), uid, gid);
            }
            match broker.start() {
                Ok(()) => return Ok(PostgresServer { broker }),
                Err(e) => last = format!("{e}\n{}", broker.log()),
            }
        }
        Err(last)
    }

    /// The port it listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.broker.port
    }

    /// A connection string for `tokio-postgres` (key=value form).
    pub fn conninfo(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user={PG_USER} dbname=postgres",
            self.broker.port
        )
    }

    /// A `postgres://` URL for the CLI.
    pub fn url(&self) -> String {
        format!(
            "postgres://{PG_USER}@127.0.0.1:{}/postgres",
            self.broker.port
        )
    }

    /// SIGKILL of the postmaster and its backends: what was committed is
    /// replayed from the WAL at the next start.
    pub fn kill(&mut self) {
        self.broker.kill();
    }

    /// A fast shutdown (SIGINT: backends are ended, then a checkpoint).
    pub fn stop(&mut self) {
        self.broker.signal("INT");
        self.broker.stop();
    }

    /// Starts it again on the same port and data directory.
    ///
    /// # Panics
    ///
    /// Panics if it does not come back.
    pub fn restart(&mut self) {
        self.broker.kill();
        if let Err(e) = self.broker.start() {
            panic!("postgres did not restart: {e}\n{}", self.broker.log());
        }
    }

    /// The last lines it printed.
    pub fn log(&self) -> String {
        self.broker.log()
    }
}

/// Where `pg_isready` is, for the readiness check (a plain `fn`).
static READY_BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

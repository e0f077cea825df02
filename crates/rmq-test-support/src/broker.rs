//! Throwaway message brokers for the forwarder's tests: a `nats-server`
//! with JetStream and a RabbitMQ node, each on free loopback ports with
//! its own temporary directory, never the machine's own brokers (4222,
//! 5672 and the system's epmd are left alone).
//!
//! Each server runs in a process group of its own, so stopping it reaches
//! every process it started (RabbitMQ's `beam.smp`, `erl_child_setup`,
//! `inet_gethost`) and nothing else. A server can be killed, stopped
//! gracefully and restarted on the same port and data directory: what it
//! had written to disk (JetStream's store, RabbitMQ's durable queues) is
//! still there.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::launch::tail;
use crate::port::free_port;
use crate::reap::{group, signal_group, signal_pid, wait_until_none};

/// How long a broker may take to answer on its port.
const STARTUP: Duration = Duration::from_secs(60);
/// How long a graceful stop may take before the group is killed.
const STOP_WAIT: Duration = Duration::from_secs(30);
const OUTPUT: &str = "output.log";

/// One broker process group: how to start it, and the child that leads it.
pub(crate) struct Broker {
    pub(crate) name: &'static str,
    pub(crate) dir: tempfile::TempDir,
    pub(crate) port: u16,
    pub(crate) child: Option<Child>,
    pub(crate) command: Box<dyn Fn(&Path) -> Command + Send + Sync>,
    /// Whether the port answers the way this broker does.
    pub(crate) ready: fn(u16) -> bool,
}

impl Broker {
    /// Starts it and waits until it answers.
    pub(crate) fn start(&mut self) -> Result<(), String> {
        self.spawn()?;
        self.wait_ready()
    }

    /// Starts the process group, without waiting for it to answer.
    pub(crate) fn spawn(&mut self) -> Result<(), String> {
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join(OUTPUT))
            .map_err(|e| format!("cannot open the {} log: {e}", self.name))?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        let child = (self.command)(self.dir.path())
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0)
            .spawn()
            .map_err(|e| format!("cannot run {}: {e} (run scripts/ensure-deps.sh)", self.name))?;
        self.child = Some(child);
        Ok(())
    }

    /// Waits until the port answers the way this broker does; kills it if
    /// it exits or does not answer within [`STARTUP`].
    pub(crate) fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + STARTUP;
        loop {
            let exited = match &mut self.child {
                Some(c) => c.try_wait().ok().flatten(),
                None => return Err(format!("{} was not started", self.name)),
            };
            if let Some(status) = exited {
                self.kill();
                return Err(format!("{} exited early ({status})", self.name));
            }
            if (self.ready)(self.port) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                self.kill();
                return Err(format!("{} not ready after {STARTUP:?}", self.name));
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// Signals the group while its leader is ours and unreaped (its PGID
    /// then cannot belong to anyone else), else its members still alive.
    pub(crate) fn signal(&mut self, signal: &str) {
        if let Some(c) = &mut self.child {
            let pgid = c.id();
            if matches!(c.try_wait(), Ok(None)) || !group(pgid).is_empty() {
                signal_group(pgid, signal);
            }
        }
    }

    /// SIGKILLs the whole group and reaps the leader.
    pub(crate) fn kill(&mut self) {
        self.signal("KILL");
        if let Some(mut c) = self.child.take() {
            let pgid = c.id();
            let _ = c.wait();
            let left = wait_until_none(Duration::from_secs(10), || group(pgid));
            for p in left {
                signal_pid(p.pid, "KILL");
            }
        }
    }

    /// SIGTERM (a clean shutdown: both brokers flush and close), then a
    /// kill of whatever is left after [`STOP_WAIT`].
    pub(crate) fn stop(&mut self) {
        self.signal("TERM");
        if let Some(c) = &mut self.child {
            let deadline = Instant::now() + STOP_WAIT;
            while Instant::now() < deadline && matches!(c.try_wait(), Ok(None)) {
                thread::sleep(Duration::from_millis(50));
            }
        }
        self.kill();
    }

    pub(crate) fn log(&self) -> String {
        tail(self.dir.path(), OUTPUT, 40)
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.kill();
    }
}

pub(crate) fn new_dir(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("rmq-{name}-"))
        .tempdir()
        .unwrap_or_else(|e| panic!("cannot create a temp dir for {name}: {e}"))
}

/// Whether `port` answers with what `hello` expects after `send`.
pub(crate) fn answers(port: u16, send: &[u8], hello: fn(&[u8]) -> bool) -> bool {
    let Ok(mut s) = TcpStream::connect_timeout(
        &(Ipv4Addr::LOCALHOST, port).into(),
        Duration::from_millis(200),
    ) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    if !send.is_empty() && s.write_all(send).is_err() {
        return false;
    }
    let mut buf = [0u8; 16];
    matches!(s.read(&mut buf), Ok(n) if n > 0 && hello(&buf[..n]))
}

/// A `nats-server -js` on a free loopback port, its JetStream store in a
/// temporary directory.
pub struct NatsServer {
    broker: Broker,
}

impl NatsServer {
    /// Starts one, retrying on a port taken meanwhile.
    ///
    /// # Panics
    ///
    /// Panics if `nats-server` cannot be started.
    pub fn start() -> NatsServer {
        let mut last = String::new();
        for _ in 0..5 {
            let port = free_port();
            let mut broker = Broker {
                name: "nats-server",
                dir: new_dir("nats"),
                port,
                child: None,
                command: Box::new(move |dir: &Path| {
                    let mut c = Command::new("nats-server");
                    c.args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
                        .arg(dir.join("js"));
                    c
                }),
                ready: |port| answers(port, b"", |b| b.starts_with(b"INFO")),
            };
            match broker.start() {
                Ok(()) => return NatsServer { broker },
                Err(e) => last = format!("{e}\n{}", broker.log()),
            }
        }
        panic!("cannot start nats-server: {last}");
    }

    /// The client port.
    pub fn port(&self) -> u16 {
        self.broker.port
    }

    /// `nats://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.broker.port)
    }

    /// SIGKILL: JetStream keeps what it had synced to its store.
    pub fn kill(&mut self) {
        self.broker.kill();
    }

    /// A clean shutdown (SIGTERM).
    pub fn stop(&mut self) {
        self.broker.stop();
    }

    /// Starts it again on the same port and store.
    ///
    /// # Panics
    ///
    /// Panics if it does not come back.
    pub fn restart(&mut self) {
        self.broker.kill();
        if let Err(e) = self.broker.start() {
            panic!("nats-server did not restart: {e}\n{}", self.broker.log());
        }
    }

    /// The last lines it printed.
    pub fn log(&self) -> String {
        self.broker.log()
    }
}

/// A RabbitMQ node of its own: node name `rmqtest<port>@localhost`, AMQP
/// on a free loopback port, its own epmd on another free port (the
/// machine's epmd is not used), distribution port, cookie (a `HOME` in the
/// temp dir), database and logs in a temporary directory, no plugins and
/// not clustered. Starting one takes 5 to 10 seconds.
pub struct RabbitServer {
    broker: Broker,
    epmd: Broker,
}

impl RabbitServer {
    /// Starts an epmd and a node.
    ///
    /// # Panics
    ///
    /// Panics if either cannot be started.
    pub fn start() -> RabbitServer {
        let mut last = String::new();
        for _ in 0..3 {
            let epmd_port = free_port();
            let mut epmd = Broker {
                name: "epmd",
                dir: new_dir("epmd"),
                port: epmd_port,
                child: None,
                command: Box::new(move |_: &Path| {
                    let mut c = Command::new(epmd_binary());
                    c.args(["-port", &epmd_port.to_string(), "-address", "127.0.0.1"])
                        .env("RMQ_TEST_EPMD_PORT", epmd_port.to_string());
                    c
                }),
                ready: connects,
            };
            if let Err(e) = epmd.start() {
                last = e;
                continue;
            }
            let port = free_port();
            let dist = free_port();
            let dir = new_dir("rabbitmq");
            let base = dir.path().to_path_buf();
            if let Err(e) = prepare_rabbit_dir(&base) {
                panic!("cannot prepare RabbitMQ's directory: {e}");
            }
            let mut broker = Broker {
                name: "rabbitmq-server",
                dir,
                port,
                child: None,
                command: Box::new(move |dir: &Path| rabbit_command(dir, port, dist, epmd_port)),
                // AMQP 0-9-1: after the protocol header the server sends
                // connection.start, a method frame (type 1).
                ready: |port| answers(port, b"AMQP\x00\x00\x09\x01", |b| b[0] == 1),
            };
            match broker.start() {
                Ok(()) => return RabbitServer { broker, epmd },
                Err(e) => last = format!("{e}\n{}", broker.log()),
            }
        }
        panic!("cannot start rabbitmq-server: {last}");
    }

    /// `amqp://guest:guest@127.0.0.1:PORT/%2f` (guest may log in over
    /// loopback).
    pub fn url(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}/%2f", self.broker.port)
    }

    /// The AMQP port.
    pub fn port(&self) -> u16 {
        self.broker.port
    }

    /// The port of its own epmd.
    pub fn epmd_port(&self) -> u16 {
        self.epmd.port
    }

    /// SIGKILL of the node (its epmd stays).
    pub fn kill(&mut self) {
        self.broker.kill();
    }

    /// A clean shutdown (SIGTERM).
    pub fn stop(&mut self) {
        self.broker.stop();
    }

    /// SIGSTOP: the node keeps its connections open and answers nothing.
    pub fn pause(&mut self) {
        self.broker.signal("STOP");
    }

    /// SIGCONT after [`RabbitServer::pause`].
    pub fn resume(&mut self) {
        self.broker.signal("CONT");
    }

    /// Starts the node again on the same port and database.
    ///
    /// # Panics
    ///
    /// Panics if it does not come back.
    pub fn restart(&mut self) {
        self.broker.kill();
        if let Err(e) = self.broker.start() {
            panic!(
                "rabbitmq-server did not restart: {e}\n{}",
                self.broker.log()
            );
        }
    }

    /// The last lines it printed.
    pub fn log(&self) -> String {
        self.broker.log()
    }
}

impl Drop for RabbitServer {
    fn drop(&mut self) {
        self.broker.kill();
        self.epmd.kill();
    }
}

fn connects(port: u16) -> bool {
    TcpStream::connect_timeout(
        &(Ipv4Addr::LOCALHOST, port).into(),
        Duration::from_millis(200),
    )
    .is_ok()
}

fn epmd_binary() -> PathBuf {
    // Debian puts epmd on the PATH only through erlang-base's links; the
    // ERTS copy is always there.
    let erts = Path::new("/usr/lib/erlang");
    std::fs::read_dir(erts)
        .ok()
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin/epmd"))
        .find(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from("epmd"))
}

fn prepare_rabbit_dir(base: &Path) -> std::io::Result<()> {
    for d in ["home", "mnesia", "log"] {
        std::fs::create_dir_all(base.join(d))?;
    }
    std::fs::write(base.join("enabled_plugins"), "[].\n")?;
    // Empty: the machine's /etc/rabbitmq files must not name our node.
    std::fs::write(base.join("rabbitmq-env.conf"), "")?;
    std::fs::write(base.join("rabbitmq.conf"), "")
}

fn rabbit_command(dir: &Path, port: u16, dist: u16, epmd: u16) -> Command {
    // The server script itself, not Debian's wrapper in /usr/sbin (which
    // switches to the rabbitmq user, who cannot write our temp dir).
    let mut c = Command::new("/usr/lib/rabbitmq/bin/rabbitmq-server");
    c.env("HOME", dir.join("home"))
        .env("RABBITMQ_CONF_ENV_FILE", dir.join("rabbitmq-env.conf"))
        .env("RABBITMQ_CONFIG_FILE", dir.join("rabbitmq.conf"))
        .env("RABBITMQ_NODENAME", format!("rmqtest{port}@localhost"))
        .env("RABBITMQ_NODE_IP_ADDRESS", "127.0.0.1")
        .env("RABBITMQ_NODE_PORT", port.to_string())
        .env("RABBITMQ_DIST_PORT", dist.to_string())
        .env("ERL_EPMD_PORT", epmd.to_string())
        .env("ERL_EPMD_ADDRESS", "127.0.0.1")
        .env("RABBITMQ_MNESIA_BASE", dir.join("mnesia"))
        .env("RABBITMQ_LOG_BASE", dir.join("log"))
        .env("RABBITMQ_ENABLED_PLUGINS_FILE", dir.join("enabled_plugins"))
        .env("RABBITMQ_LOGS", "-");
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reap::with_env;

    /// Every process a broker started is gone once it is dropped, and
    /// nothing else was touched: the node's processes carry its port in
    /// their environment, its epmd a marker of its own.
    #[test]
    fn a_dropped_rabbitmq_node_leaves_no_process_behind() {
        let mut rabbit = RabbitServer::start();
        let (port, epmd) = (rabbit.port().to_string(), rabbit.epmd_port().to_string());
        assert!(!with_env("RABBITMQ_NODE_PORT", &port).is_empty());
        rabbit.restart();
        assert!(connects(rabbit.port()), "{}", rabbit.log());
        drop(rabbit);
        let left = wait_until_none(Duration::from_secs(10), || {
            let mut l = with_env("RABBITMQ_NODE_PORT", &port);
            l.extend(with_env("RMQ_TEST_EPMD_PORT", &epmd));
            l
        });
        assert!(left.is_empty(), "left running: {left:?}");
    }

    #[test]
    fn a_nats_server_restarts_on_its_port_and_is_gone_when_dropped() {
        let mut nats = NatsServer::start();
        let port = nats.port();
        nats.kill();
        assert!(!connects(port));
        nats.restart();
        assert!(connects(port), "{}", nats.log());
        drop(nats);
        assert!(!connects(port));
    }
}

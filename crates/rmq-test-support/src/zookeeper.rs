//! Throwaway ZooKeeper servers for the ZooKeeper coordinator's tests:
//! Debian's `zookeeper` package (3.8) run as
//! `java -cp /etc/zookeeper/conf:/usr/share/java/zookeeper.jar …` on free
//! loopback ports with a data directory in a temporary directory, never the
//! machine's own ZooKeeper (2181 is left alone).
//!
//! [`ZooKeeperServer`] is a standalone server; [`ZooKeeperEnsemble`] is a
//! three-server quorum whose leader can be found and killed. Both use a
//! 100 ms tick so that sessions may be as short as 200 ms, allow any
//! number of connections from one address (every test client is on
//! 127.0.0.1; the default is 60), and allow the four-letter words `ruok`,
//! `srvr` and `mntr` (readiness, role, load).
//! Each server is a process group of its own, stopped by PID.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::path::Path;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use crate::broker::{new_dir, Broker};
use crate::port::free_port;

const JAR: &str = "/usr/share/java/zookeeper.jar";
/// Debian's ZooKeeper has no logging binding (it logs nothing); with this
/// one (package libslf4j-java, which it depends on) it logs to its output
/// file, which a failed start prints.
const LOGGER: &str = "/usr/share/java/slf4j-simple.jar";
const CONF_DIR: &str = "/etc/zookeeper/conf";
const STANDALONE_MAIN: &str = "org.apache.zookeeper.server.ZooKeeperServerMain";
const QUORUM_MAIN: &str = "org.apache.zookeeper.server.quorum.QuorumPeerMain";

/// Sends a four-letter word and returns the whole answer.
pub fn four_letter_word(port: u16, word: &str) -> Option<String> {
    let mut s = TcpStream::connect_timeout(
        &(Ipv4Addr::LOCALHOST, port).into(),
        Duration::from_millis(300),
    )
    .ok()?;
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    s.write_all(word.as_bytes()).ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}

/// `mntr`'s figures (`zk_packets_received`, `zk_znode_count`, …).
pub fn monitor(port: u16) -> HashMap<String, String> {
    four_letter_word(port, "mntr")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_once('\t'))
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect()
}

/// The server's role from `srvr`: `standalone`, `leader` or `follower`
/// (None while it does not serve).
pub fn mode(port: u16) -> Option<String> {
    four_letter_word(port, "srvr")?
        .lines()
        .find_map(|l| l.strip_prefix("Mode: "))
        .map(|m| m.trim().to_string())
}

fn serving(port: u16) -> bool {
    mode(port).is_some()
}

fn config(dir: &Path, port: u16, peers: &[(u16, u16)]) -> String {
    let mut cfg = format!(
        "tickTime=100\n\
         initLimit=50\n\
         syncLimit=20\n\
         dataDir={}\n\
         clientPort={port}\n\
         clientPortAddress=127.0.0.1\n\
         minSessionTimeout=200\n\
         maxSessionTimeout=60000\n\
         admin.enableServer=false\n\
         maxClientCnxns=0\n\
         4lw.commands.whitelist=ruok,srvr,mntr\n",
        dir.join("data").display()
    );
    for (i, (quorum, election)) in peers.iter().enumerate() {
        cfg.push_str(&format!("server.{}=127.0.0.1:{quorum}:{election}\n", i + 1));
    }
    cfg
}

fn java(dir: &Path, main: &str) -> Command {
    let mut classpath = format!("{CONF_DIR}:{JAR}");
    if Path::new(LOGGER).exists() {
        classpath.push(':');
        classpath.push_str(LOGGER);
    }
    let mut c = Command::new("java");
    c.args([
        "-Xmx128m",
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",
        "-Dzookeeper.admin.enableServer=false",
        "-Dorg.slf4j.simpleLogger.showDateTime=true",
        "-cp",
        &classpath,
        main,
    ])
    .arg(dir.join("zoo.cfg"));
    c
}

/// One server of ours: its directory holds `zoo.cfg`, `data/` (and `myid`).
fn server(name: &'static str, port: u16, peers: &[(u16, u16)], id: usize) -> Broker {
    let dir = new_dir(name);
    let data = dir.path().join("data");
    let written = std::fs::create_dir_all(&data)
        .and_then(|()| std::fs::write(dir.path().join("zoo.cfg"), config(dir.path(), port, peers)))
        .and_then(|()| {
            if peers.is_empty() {
                Ok(())
            } else {
                std::fs::write(data.join("myid"), format!("{id}\n"))
            }
        });
    if let Err(e) = written {
        panic!("cannot prepare ZooKeeper's directory: {e}");
    }
    let main = if peers.is_empty() {
        STANDALONE_MAIN
    } else {
        QUORUM_MAIN
    };
    Broker {
        name,
        dir,
        port,
        child: None,
        command: Box::new(move |dir: &Path| java(dir, main)),
        ready: serving,
    }
}

/// A standalone ZooKeeper on a free loopback port.
pub struct ZooKeeperServer {
    broker: Broker,
}

impl ZooKeeperServer {
    /// Starts one (about half a second), retrying on a port taken meanwhile.
    ///
    /// # Panics
    ///
    /// Panics if it cannot be started (run `scripts/ensure-deps.sh`).
    pub fn start() -> ZooKeeperServer {
        let mut last = String::new();
        for _ in 0..3 {
            let mut broker = server("zookeeper", free_port(), &[], 0);
            match broker.start() {
                Ok(()) => return ZooKeeperServer { broker },
                Err(e) => last = format!("{e}\n{}", broker.log()),
            }
        }
        panic!("cannot start ZooKeeper: {last}");
    }

    /// The client port.
    pub fn port(&self) -> u16 {
        self.broker.port
    }

    /// `127.0.0.1:PORT`, a connect string.
    pub fn hosts(&self) -> String {
        format!("127.0.0.1:{}", self.broker.port)
    }

    /// `zk://127.0.0.1:PORT/<root>`, the coordinator's address.
    pub fn address(&self, root: &str) -> String {
        format!("zk://127.0.0.1:{}/{root}", self.broker.port)
    }

    /// SIGKILL: sessions and znodes come back from its log on restart.
    pub fn kill(&mut self) {
        self.broker.kill();
    }

    /// SIGSTOP: it keeps its connections and answers nothing.
    pub fn pause(&mut self) {
        self.broker.signal("STOP");
    }

    /// SIGCONT after [`ZooKeeperServer::pause`].
    pub fn resume(&mut self) {
        self.broker.signal("CONT");
    }

    /// Starts it again on the same port and data directory.
    ///
    /// # Panics
    ///
    /// Panics if it does not come back.
    pub fn restart(&mut self) {
        self.broker.kill();
        if let Err(e) = self.broker.start() {
            panic!("ZooKeeper did not restart: {e}\n{}", self.broker.log());
        }
    }

    /// `mntr`'s figures.
    pub fn monitor(&self) -> HashMap<String, String> {
        monitor(self.broker.port)
    }
}

/// Three ZooKeeper servers in one quorum, each on free loopback ports.
pub struct ZooKeeperEnsemble {
    servers: Vec<Broker>,
}

impl ZooKeeperEnsemble {
    /// Starts three servers and waits until each serves (a leader was
    /// elected and the followers synced), retrying on ports taken meanwhile.
    ///
    /// # Panics
    ///
    /// Panics if the quorum does not form.
    pub fn start() -> ZooKeeperEnsemble {
        let mut last = String::new();
        for _ in 0..3 {
            match Self::try_start() {
                Ok(e) => return e,
                Err(e) => last = e,
            }
        }
        panic!("the ZooKeeper ensemble did not form: {last}");
    }

    fn try_start() -> Result<ZooKeeperEnsemble, String> {
        let peers: Vec<(u16, u16)> = (0..3).map(|_| (free_port(), free_port())).collect();
        let mut servers: Vec<Broker> = (0..3)
            .map(|i| server("zookeeper-ensemble", free_port(), &peers, i + 1))
            .collect();
        for s in &mut servers {
            s.spawn()?;
        }
        for s in &mut servers {
            // Dropping `servers` on an error stops every one of them.
            s.wait_ready().map_err(|e| format!("{e}\n{}", s.log()))?;
        }
        Ok(ZooKeeperEnsemble { servers })
    }

    /// `127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3`.
    pub fn hosts(&self) -> String {
        self.servers
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// `zk://…all three…/<root>`.
    pub fn address(&self, root: &str) -> String {
        format!("zk://{}/{root}", self.hosts())
    }

    /// The index of the current leader, waiting up to `within` for one.
    pub fn leader(&self, within: Duration) -> Option<usize> {
        let deadline = Instant::now() + within;
        loop {
            let leader = self
                .servers
                .iter()
                .position(|s| s.child.is_some() && mode(s.port).as_deref() == Some("leader"));
            if leader.is_some() || Instant::now() >= deadline {
                return leader;
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGKILLs server `i`.
    pub fn kill(&mut self, i: usize) {
        self.servers[i].kill();
    }

    /// Starts server `i` again on its ports and data directory.
    ///
    /// # Panics
    ///
    /// Panics if it does not come back.
    pub fn restart(&mut self, i: usize) {
        let s = &mut self.servers[i];
        s.kill();
        if let Err(e) = s.start() {
            panic!("a ZooKeeper server did not restart: {e}\n{}", s.log());
        }
    }

    /// `mntr`'s figures of server `i`.
    pub fn monitor(&self, i: usize) -> HashMap<String, String> {
        monitor(self.servers[i].port)
    }
}

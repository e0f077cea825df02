//! [`RedisCluster`]: a throwaway Redis Cluster of real `redis-server` nodes.
//!
//! Each node is a [`RedisServer`] started with `--cluster-enabled yes`, its
//! own bus port (`--cluster-port`, never assumed to be port + 10000) and
//! `--repl-diskless-sync-delay 0` (the default delays every replica's first
//! sync by 5 s). `redis-cli --cluster create` joins them; the cluster is
//! ready when every node says `cluster_state:ok`, agrees on the masters, and
//! every replica's link to its master is up. Nodes are stopped by PID when
//! the cluster is dropped.
//!
//! Commands go through `redis-cli` (it ships with `redis-server` in Debian's
//! `redis-tools`), so this crate stays free of any Redis client library.

use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::port::free_port;
use crate::server::RedisServer;

/// Builder for a [`RedisCluster`]; see [`RedisCluster::builder`].
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `start` is called"]
pub struct RedisClusterBuilder {
    masters: usize,
    replicas: usize,
    node_timeout_ms: u64,
    appendonly_always: bool,
    extra: Vec<(String, String)>,
    /// TLS: (certificate, key, CA) files for every node.
    tls: Option<(String, String, String)>,
}

impl Default for RedisClusterBuilder {
    fn default() -> Self {
        RedisClusterBuilder {
            masters: 3,
            replicas: 1,
            node_timeout_ms: 1000,
            appendonly_always: false,
            extra: Vec::new(),
            tls: None,
        }
    }
}

impl RedisClusterBuilder {
    /// Number of masters (default 3, at least 3 for `redis-cli --cluster create`).
    pub fn masters(mut self, n: usize) -> Self {
        self.masters = n;
        self
    }

    /// Replicas per master (default 1).
    pub fn replicas(mut self, n: usize) -> Self {
        self.replicas = n;
        self
    }

    /// `cluster-node-timeout` in ms (default 1000: a failover takes ~2 s).
    pub fn node_timeout_ms(mut self, ms: u64) -> Self {
        self.node_timeout_ms = ms;
        self
    }

    /// AOF with `appendfsync always` on every node.
    pub fn appendonly_always(mut self) -> Self {
        self.appendonly_always = true;
        self
    }

    /// TLS on every node: a `tls-port` each (plus the plaintext port, which
    /// the harness uses), TLS on the cluster bus and for replication, with
    /// these PEM files. Clients find the TLS ports with [`RedisCluster::tls_urls`].
    pub fn tls(mut self, cert: &str, key: &str, ca: &str) -> Self {
        self.tls = Some((cert.into(), key.into(), ca.into()));
        self
    }

    /// Adds `--<name> <value>` to every node.
    pub fn arg(mut self, name: &str, value: &str) -> Self {
        self.extra
            .push((name.trim_start_matches('-').to_owned(), value.to_owned()));
        self
    }

    /// Starts the nodes, creates the cluster and waits until it is ready.
    ///
    /// # Panics
    ///
    /// Panics with the nodes' logs if the cluster does not form.
    pub fn start(self) -> RedisCluster {
        let count = self.masters * (1 + self.replicas);
        let mut tls_ports = Vec::new();
        let nodes: Vec<RedisServer> = (0..count)
            .map(|_| {
                let mut b = RedisServer::builder()
                    .arg("cluster-enabled", "yes")
                    .arg("cluster-port", &free_port().to_string())
                    .arg("cluster-config-file", "nodes.conf")
                    .arg("cluster-node-timeout", &self.node_timeout_ms.to_string())
                    .arg("repl-diskless-sync-delay", "0")
                    .arg("cluster-allow-replica-migration", "no");
                if self.appendonly_always {
                    b = b.appendonly_always();
                }
                if let Some((cert, key, ca)) = &self.tls {
                    let port = free_port();
                    tls_ports.push(port);
                    b = b
                        .arg("tls-port", &port.to_string())
                        .arg("tls-cert-file", cert)
                        .arg("tls-key-file", key)
                        .arg("tls-ca-cert-file", ca)
                        .arg("tls-auth-clients", "no")
                        .arg("tls-cluster", "yes")
                        .arg("tls-replication", "yes");
                }
                for (k, v) in &self.extra {
                    b = b.arg(k, v);
                }
                b.start()
            })
            .collect();
        let mut create = vec!["--cluster".to_string(), "create".to_string()];
        create.extend(nodes.iter().map(|n| format!("127.0.0.1:{}", n.port())));
        create.extend([
            "--cluster-replicas".into(),
            self.replicas.to_string(),
            "--cluster-yes".into(),
        ]);
        let cluster = RedisCluster {
            nodes,
            masters: self.masters,
            tls_ports,
        };
        let out = cli_raw(&create);
        if !out.ok {
            cluster.panic_with_logs(&format!("redis-cli --cluster create failed: {}", out.text));
        }
        cluster.wait_ready(Duration::from_secs(30));
        cluster
    }
}

/// A Redis Cluster on loopback; dropped = every node SIGKILLed.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
    masters: usize,
    tls_ports: Vec<u16>,
}

/// The output of one `redis-cli` run.
struct CliOutput {
    ok: bool,
    text: String,
}

fn cli_raw(args: &[String]) -> CliOutput {
    let out = Command::new("redis-cli")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run redis-cli: {e} (install redis-tools: scripts/ensure-deps.sh)")
        });
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    CliOutput {
        ok: out.status.success(),
        text,
    }
}

impl RedisCluster {
    /// A builder (3 masters, 1 replica each, node timeout 1 s).
    pub fn builder() -> RedisClusterBuilder {
        RedisClusterBuilder::default()
    }

    /// Starts 3 masters with one replica each.
    pub fn start() -> RedisCluster {
        Self::builder().start()
    }

    /// Every node's URL, `redis://127.0.0.1:<port>`.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.url()).collect()
    }

    /// With TLS: every node's `rediss://127.0.0.1:<tls-port>` (empty without).
    pub fn tls_urls(&self) -> Vec<String> {
        self.tls_ports
            .iter()
            .map(|p| format!("rediss://127.0.0.1:{p}"))
            .collect()
    }

    /// The nodes, in creation order (the first `masters` were created as masters).
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// Mutable access to node `i` (kill, pause, restart).
    pub fn node_mut(&mut self, i: usize) -> &mut RedisServer {
        &mut self.nodes[i]
    }

    /// Runs `redis-cli -p <port of node i> <args...>` and returns its output
    /// (trimmed). Panics if redis-cli cannot run.
    pub fn cli(&self, i: usize, args: &[&str]) -> String {
        let mut all = vec!["-p".to_string(), self.nodes[i].port().to_string()];
        all.extend(args.iter().map(|s| s.to_string()));
        cli_raw(&all).text.trim().to_string()
    }

    /// The node ID of node `i`.
    pub fn node_id(&self, i: usize) -> String {
        self.cli(i, &["CLUSTER", "MYID"])
    }

    /// Indices of the nodes that are running masters right now (as node `i`
    /// sees itself in `ROLE`).
    pub fn master_indices(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| self.nodes[i].is_running() && self.nodes[i].ping())
            .filter(|&i| self.cli(i, &["ROLE"]).lines().next() == Some("master"))
            .collect()
    }

    /// The index of the node serving Redis Cluster hash slot `slot` as master.
    pub fn master_of_slot(&self, slot: u16) -> Option<usize> {
        self.master_indices().into_iter().find(|&i| {
            self.slot_ranges(i)
                .iter()
                .any(|&(a, b)| (a..=b).contains(&slot))
        })
    }

    /// The replicas of master node `master`: nodes whose `ROLE` says they
    /// replicate its port and are connected. Waits up to `timeout` for at
    /// least one (replication links come up after the cluster is created).
    pub fn replicas_of(&self, master: usize, timeout: Duration) -> Vec<usize> {
        let port = self.nodes[master].port().to_string();
        let deadline = Instant::now() + timeout;
        loop {
            let found: Vec<usize> = (0..self.nodes.len())
                .filter(|&i| i != master && self.nodes[i].is_running())
                .filter(|&i| {
                    let role = self.cli(i, &["ROLE"]);
                    let lines: Vec<&str> = role.lines().map(str::trim).collect();
                    lines.first() == Some(&"slave")
                        && lines.get(2) == Some(&port.as_str())
                        && lines.get(3) == Some(&"connected")
                })
                .collect();
            if !found.is_empty() || Instant::now() >= deadline {
                return found;
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// Number of keys node `i` holds (`DBSIZE`).
    pub fn dbsize(&self, i: usize) -> u64 {
        self.cli(i, &["DBSIZE"]).parse().unwrap_or(0)
    }

    /// The hash-slot ranges node `i` serves, from its own `CLUSTER NODES` line.
    pub fn slot_ranges(&self, i: usize) -> Vec<(u16, u16)> {
        let nodes = self.cli(i, &["CLUSTER", "NODES"]);
        let Some(line) = nodes.lines().find(|l| l.contains("myself")) else {
            return Vec::new();
        };
        line.split_whitespace()
            .skip(8)
            .filter(|r| !r.starts_with('['))
            .filter_map(|r| match r.split_once('-') {
                Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
                None => r.parse().ok().map(|s| (s, s)),
            })
            .collect()
    }

    /// SIGKILLs node `i`.
    pub fn kill(&mut self, i: usize) {
        self.nodes[i].kill();
    }

    /// Waits until a replica of the killed master has taken over: every
    /// running node reports `cluster_state:ok` and there are `masters`
    /// running masters. Returns how long it took.
    pub fn wait_failover(&self, timeout: Duration) -> Duration {
        let start = Instant::now();
        while start.elapsed() < timeout {
            if self.master_indices().len() == self.masters && self.all_ok() {
                return start.elapsed();
            }
            thread::sleep(Duration::from_millis(50));
        }
        self.panic_with_logs("no failover within the timeout");
    }

    /// Moves `count` hash slots from the master node `from` to the master
    /// node `to` with `redis-cli --cluster reshard` (keys migrate with
    /// MIGRATE while clients keep working, seeing ASK and MOVED).
    pub fn reshard(&self, from: usize, to: usize, count: u32) {
        let out = cli_raw(&[
            "--cluster".into(),
            "reshard".into(),
            format!("127.0.0.1:{}", self.nodes[from].port()),
            "--cluster-from".into(),
            self.node_id(from),
            "--cluster-to".into(),
            self.node_id(to),
            "--cluster-slots".into(),
            count.to_string(),
            "--cluster-yes".into(),
            "--cluster-pipeline".into(),
            "100".into(),
        ]);
        if !out.ok || out.text.contains("[ERR]") {
            self.panic_with_logs(&format!("reshard failed: {}", out.text));
        }
    }

    /// Moves one hash slot to the master node `to` by hand, the way
    /// `redis-cli --cluster reshard` does (IMPORTING/MIGRATING, MIGRATE,
    /// SETSLOT NODE), but one key at a time with `pause` between keys, so
    /// that clients meet a half-moved slot (ASK, TRYAGAIN) for a while.
    /// Returns the number of keys moved.
    pub fn move_hash_slot(&self, slot: u16, to: usize, pause: Duration) -> usize {
        let Some(from) = self.master_of_slot(slot) else {
            self.panic_with_logs(&format!("no master serves hash slot {slot}"));
        };
        if from == to {
            return 0;
        }
        let (from_id, to_id) = (self.node_id(from), self.node_id(to));
        let s = slot.to_string();
        let expect_ok = |i: usize, args: &[&str]| {
            let out = self.cli(i, args);
            if out != "OK" {
                self.panic_with_logs(&format!("{args:?} on node {i}: {out}"));
            }
        };
        expect_ok(to, &["CLUSTER", "SETSLOT", &s, "IMPORTING", &from_id]);
        expect_ok(from, &["CLUSTER", "SETSLOT", &s, "MIGRATING", &to_id]);
        let to_port = self.nodes[to].port().to_string();
        let mut moved = 0;
        loop {
            let keys = self.cli(from, &["CLUSTER", "GETKEYSINSLOT", &s, "1"]);
            let Some(key) = keys.lines().next().filter(|k| !k.is_empty()) else {
                break;
            };
            let out = self.cli(from, &["MIGRATE", "127.0.0.1", &to_port, key, "0", "5000"]);
            if out != "OK" && out != "NOKEY" {
                self.panic_with_logs(&format!("MIGRATE {key}: {out}"));
            }
            moved += 1;
            thread::sleep(pause);
        }
        // The new owner first, then the old one, then every other master.
        expect_ok(to, &["CLUSTER", "SETSLOT", &s, "NODE", &to_id]);
        expect_ok(from, &["CLUSTER", "SETSLOT", &s, "NODE", &to_id]);
        for i in self.master_indices() {
            if i != to && i != from {
                expect_ok(i, &["CLUSTER", "SETSLOT", &s, "NODE", &to_id]);
            }
        }
        moved
    }

    fn all_ok(&self) -> bool {
        self.nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.is_running())
            .all(|(i, _)| {
                self.cli(i, &["CLUSTER", "INFO"])
                    .contains("cluster_state:ok")
            })
    }

    fn wait_ready(&self, timeout: Duration) {
        let start = Instant::now();
        while start.elapsed() < timeout {
            let replicas_up = (0..self.nodes.len()).all(|i| {
                let role = self.cli(i, &["ROLE"]);
                match role.lines().next() {
                    Some("master") => true,
                    Some("slave") => self
                        .cli(i, &["INFO", "replication"])
                        .contains("master_link_status:up"),
                    _ => false,
                }
            });
            if replicas_up && self.all_ok() && self.master_indices().len() == self.masters {
                return;
            }
            thread::sleep(Duration::from_millis(50));
        }
        self.panic_with_logs("cluster not ready after 30 s");
    }

    fn panic_with_logs(&self, why: &str) -> ! {
        let mut logs = String::new();
        for n in &self.nodes {
            let log = n.log();
            let lines: Vec<&str> = log.lines().collect();
            logs.push_str(&format!(
                "--- node {} ---\n{}\n",
                n.port(),
                lines[lines.len().saturating_sub(15)..].join("\n")
            ));
        }
        panic!("{why}\n{logs}");
    }
}

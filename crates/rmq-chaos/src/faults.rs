//! Fault injectors, each a blocking call that causes one fault, waits it
//! out, and returns a description. All of them work on one machine without
//! Docker or `tc`: signals, Redis admin commands, restarts from the AOF,
//! the TCP proxy.

use std::thread;
use std::time::Duration;

use rand::Rng;
use rmq_test_support::RedisServer;

use crate::procs::Supervised;
use crate::proxy::Proxy;

/// Every kind of fault, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// SIGKILL a consumer (the supervisor starts a new one).
    KillConsumer,
    /// SIGSTOP a consumer for longer than the lease, then SIGCONT.
    StopConsumer,
    /// SIGKILL redis-server, restart it from its AOF.
    KillRedis,
    /// `CLIENT KILL TYPE normal`: every client connection dropped.
    ClientKill,
    /// `CLIENT PAUSE <ms> WRITE`.
    ClientPause,
    /// `maxmemory` just above what is used, for a moment.
    OutOfMemory,
    /// `SCRIPT FLUSH`.
    ScriptFlush,
    /// A string planted at an empty queue key of one slot, then removed.
    WrongType,
    /// The proxy adds latency.
    ProxyDelay,
    /// The proxy holds every byte for a while.
    ProxyBlackhole,
    /// The proxy cuts every connection mid-stream.
    ProxyCut,
    /// Cluster: a hash slot of a topic moves to another master, key by key.
    Reshard,
}

pub const SINGLE_NODE_MIX: [Fault; 11] = [
    Fault::KillConsumer,
    Fault::StopConsumer,
    Fault::KillRedis,
    Fault::ClientKill,
    Fault::ClientPause,
    Fault::OutOfMemory,
    Fault::ScriptFlush,
    Fault::WrongType,
    Fault::ProxyDelay,
    Fault::ProxyBlackhole,
    Fault::ProxyCut,
];

impl Fault {
    pub fn name(self) -> &'static str {
        match self {
            Fault::KillConsumer => "kill_consumer",
            Fault::StopConsumer => "stop_consumer",
            Fault::KillRedis => "kill_redis",
            Fault::ClientKill => "client_kill",
            Fault::ClientPause => "client_pause",
            Fault::OutOfMemory => "out_of_memory",
            Fault::ScriptFlush => "script_flush",
            Fault::WrongType => "wrong_type",
            Fault::ProxyDelay => "proxy_delay",
            Fault::ProxyBlackhole => "proxy_blackhole",
            Fault::ProxyCut => "proxy_cut",
            Fault::Reshard => "reshard",
        }
    }
}

/// What faults act on.
pub struct Targets<'a> {
    pub server: &'a mut RedisServer,
    pub consumers: &'a [Supervised],
    pub proxy: Option<&'a Proxy>,
    /// Keys a wrong-type fault may plant at (queue keys of some slots).
    pub plant_keys: &'a [String],
    /// The topics' message lease.
    pub lease: Duration,
}

fn admin(server: &RedisServer) -> redis::RedisResult<redis::Connection> {
    redis::Client::open(server.url())?.get_connection_with_timeout(Duration::from_secs(2))
}

fn cmd(server: &RedisServer, args: &[&str]) -> String {
    let run = || -> redis::RedisResult<redis::Value> {
        let mut c = admin(server)?;
        let mut cmd = redis::cmd(args[0]);
        for a in &args[1..] {
            cmd.arg(*a);
        }
        cmd.query(&mut c)
    };
    match run() {
        Ok(v) => format!("{v:?}"),
        Err(e) => format!("error: {e}"),
    }
}

/// Causes `fault`, waits it out, returns what was done.
pub fn inject(fault: Fault, t: &mut Targets<'_>, rng: &mut impl Rng) -> String {
    match fault {
        Fault::KillConsumer => {
            let i = rng.random_range(0..t.consumers.len());
            t.consumers[i].signal("KILL");
            format!("consumer {i} SIGKILL")
        }
        Fault::StopConsumer => {
            let i = rng.random_range(0..t.consumers.len());
            let pause = t.lease + Duration::from_millis(500);
            t.consumers[i].signal("STOP");
            thread::sleep(pause);
            t.consumers[i].signal("CONT");
            format!("consumer {i} SIGSTOP for {} ms", pause.as_millis())
        }
        Fault::KillRedis => {
            t.server.kill();
            thread::sleep(Duration::from_millis(300));
            t.server.restart();
            "redis-server SIGKILL, restarted from its AOF".into()
        }
        Fault::ClientKill => {
            let r = cmd(
                t.server,
                &["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"],
            );
            let p = cmd(t.server, &["CLIENT", "KILL", "TYPE", "pubsub"]);
            format!("CLIENT KILL normal: {r}, pubsub: {p}")
        }
        Fault::ClientPause => {
            let r = cmd(t.server, &["CLIENT", "PAUSE", "800", "WRITE"]);
            thread::sleep(Duration::from_millis(800));
            format!("CLIENT PAUSE 800 WRITE: {r}")
        }
        Fault::OutOfMemory => {
            let used = used_memory(t.server);
            let limit = (used + 256 * 1024).to_string();
            let r = cmd(t.server, &["CONFIG", "SET", "maxmemory", &limit]);
            thread::sleep(Duration::from_millis(1000));
            cmd(t.server, &["CONFIG", "SET", "maxmemory", "0"]);
            format!("maxmemory {limit} for 1 s: {r}")
        }
        Fault::ScriptFlush => format!("SCRIPT FLUSH: {}", cmd(t.server, &["SCRIPT", "FLUSH"])),
        Fault::WrongType => {
            if t.plant_keys.is_empty() {
                return "no key to plant at".into();
            }
            let key = &t.plant_keys[rng.random_range(0..t.plant_keys.len())];
            let set = cmd(t.server, &["SET", key, "chaos-planted", "NX"]);
            thread::sleep(Duration::from_millis(600));
            // Remove it only if it is still our string.
            let got = cmd(t.server, &["GET", key]);
            if got.contains("chaos-planted") {
                cmd(t.server, &["DEL", key]);
            }
            format!("planted a string at {key} for 600 ms: {set}")
        }
        Fault::ProxyDelay => match t.proxy {
            Some(p) => {
                p.delay(150);
                thread::sleep(Duration::from_millis(1500));
                p.pass();
                "proxy +150 ms per chunk for 1.5 s".into()
            }
            None => "no proxy".into(),
        },
        Fault::ProxyBlackhole => match t.proxy {
            Some(p) => {
                p.blackhole();
                thread::sleep(Duration::from_millis(1500));
                p.pass();
                "proxy black hole for 1.5 s".into()
            }
            None => "no proxy".into(),
        },
        Fault::Reshard => "resharding needs a cluster".into(),
        Fault::ProxyCut => match t.proxy {
            Some(p) => {
                p.cut();
                "proxy cut every connection".into()
            }
            None => "no proxy".into(),
        },
    }
}

fn used_memory(server: &RedisServer) -> u64 {
    let info: redis::RedisResult<String> =
        admin(server).and_then(|mut c| redis::cmd("INFO").arg("memory").query(&mut c));
    info.ok()
        .and_then(|i| {
            i.lines()
                .find_map(|l| l.strip_prefix("used_memory:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(50 * 1024 * 1024)
}

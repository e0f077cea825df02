//! Unit tests against real `redis-server` processes, spoken to over raw TCP.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

use crate::RedisServer;

/// A raw connection that sends inline commands and reads reply lines.
struct Raw {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Raw {
    fn connect(server: &RedisServer) -> Raw {
        let stream = TcpStream::connect(server.addr()).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(2)))
            .expect("timeout");
        let writer = stream.try_clone().expect("clone");
        Raw {
            reader: BufReader::new(stream),
            writer,
        }
    }

    fn send(&mut self, command: &str) {
        self.writer
            .write_all(format!("{command}\r\n").as_bytes())
            .expect("write");
    }

    fn line(&mut self) -> String {
        let mut line = String::new();
        self.reader.read_line(&mut line).expect("read");
        line.trim_end().to_owned()
    }

    fn cmd(&mut self, command: &str) -> String {
        self.send(command);
        self.line()
    }
}

#[test]
fn start_and_ping_over_raw_tcp() {
    let server = RedisServer::start();
    assert_ne!(server.port(), 6379);
    assert_eq!(server.url(), format!("redis://127.0.0.1:{}", server.port()));
    assert!(server.is_running());
    assert!(server.pid().is_some());
    assert!(server.dir().is_dir());
    assert!(server.ping());

    let mut raw = Raw::connect(&server);
    assert_eq!(raw.cmd("PING"), "+PONG");
    raw.send("CONFIG GET bind");
    assert_eq!(raw.line(), "*2");
    raw.line();
    raw.line();
    raw.line();
    assert_eq!(raw.line(), "127.0.0.1");
    assert!(server.log().contains("Ready to accept connections"));
}

#[test]
fn restart_with_aof_keeps_port_and_data() {
    let mut server = RedisServer::builder().appendonly_always().start();
    let port = server.port();
    let first_pid = server.pid();
    assert_eq!(Raw::connect(&server).cmd("SET k v"), "+OK");

    server.kill();
    assert!(!server.is_running());
    assert_eq!(server.pid(), None);
    assert!(!server.ping());

    server.restart();
    assert_eq!(server.port(), port);
    assert!(server.is_running());
    assert_ne!(server.pid(), first_pid);
    let mut raw = Raw::connect(&server);
    assert_eq!(raw.cmd("GET k"), "$1");
    assert_eq!(raw.line(), "v");
    assert!(server.dir().join("appendonlydir").is_dir());
}

#[test]
fn stop_is_graceful_and_restart_works_without_aof() {
    let mut server = RedisServer::start();
    server.stop();
    assert!(!server.is_running());
    assert!(server.log().contains("ready to exit, bye bye"));
    server.restart();
    assert!(server.ping());
}

#[test]
fn pause_and_resume() {
    let server = RedisServer::start();
    let mut raw = Raw::connect(&server);
    server.pause();
    assert!(server.is_running());
    raw.reader
        .get_ref()
        .set_read_timeout(Some(Duration::from_millis(150)))
        .expect("timeout");
    raw.send("PING");
    let mut byte = [0u8; 1];
    assert!(
        raw.reader.read(&mut byte).is_err(),
        "paused server answered"
    );

    server.resume();
    raw.reader
        .get_ref()
        .set_read_timeout(Some(Duration::from_secs(2)))
        .expect("timeout");
    assert_eq!(raw.line(), "+PONG");
}

#[test]
fn stop_works_on_a_paused_server() {
    let mut server = RedisServer::start();
    server.pause();
    server.stop();
    assert!(!server.is_running());
}

#[test]
fn builder_options_reach_the_server() {
    let server = RedisServer::builder()
        .maxmemory(10 << 20)
        .maxmemory_policy("allkeys-lru")
        .enable_debug_command()
        .arg("hz", "50")
        .start();
    let mut raw = Raw::connect(&server);
    for (name, value) in [
        ("maxmemory", "10485760"),
        ("maxmemory-policy", "allkeys-lru"),
        ("hz", "50"),
        ("save", ""),
        ("appendonly", "no"),
    ] {
        raw.send(&format!("CONFIG GET {name}"));
        assert_eq!(raw.line(), "*2", "{name}");
        raw.line();
        raw.line();
        raw.line();
        assert_eq!(raw.line(), value, "{name}");
    }
    assert_eq!(raw.cmd("DEBUG SLEEP 0"), "+OK");
}

#[test]
fn drop_kills_the_process() {
    let server = RedisServer::start();
    let pid = server.pid().expect("pid");
    let dir = server.dir().to_owned();
    drop(server);
    assert!(!Path::new(&format!("/proc/{pid}")).exists());
    assert!(!dir.exists());
}

#[test]
#[should_panic(expected = "cannot run")]
fn missing_binary_panics_clearly() {
    RedisServer::builder()
        .binary("/nonexistent/redis-server")
        .start();
}

#[test]
#[should_panic(expected = "did not start")]
fn bad_config_panics_with_log() {
    RedisServer::builder().arg("no-such-option", "1").start();
}

#[test]
fn launch_on_a_taken_port_fails_instead_of_using_the_other_server() {
    use crate::builder::ServerConfig;
    use crate::launch::{launch, LaunchError};

    let other = RedisServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    match launch(&ServerConfig::default(), other.port(), dir.path()) {
        Ok(_) => panic!("launch succeeded on a port owned by another server"),
        Err(LaunchError::Spawn(e)) => panic!("unexpected spawn error: {e}"),
        Err(LaunchError::NotReady(e)) => {
            assert!(
                e.contains("exited early") || e.contains("another process"),
                "{e}"
            )
        }
    }
    assert!(other.ping());
}

#[test]
fn a_cluster_forms_fails_over_and_reshards() {
    use crate::RedisCluster;
    use std::time::Duration;

    let mut cluster = RedisCluster::start();
    assert_eq!(cluster.nodes().len(), 6);
    let masters = cluster.master_indices();
    assert_eq!(masters.len(), 3, "{masters:?}");
    let covered: u32 = masters
        .iter()
        .flat_map(|&m| cluster.slot_ranges(m))
        .map(|(a, b)| u32::from(b - a) + 1)
        .sum();
    assert_eq!(covered, 16384);

    // Move a few hash slots between two masters.
    let (from, to) = (masters[0], masters[1]);
    let first = cluster.slot_ranges(from)[0].0;
    cluster.reshard(from, to, 5);
    assert_eq!(cluster.master_of_slot(first), Some(to));

    // Kill a master: its replica takes over.
    let victim = masters[2];
    let slot = cluster.slot_ranges(victim)[0].0;
    cluster.kill(victim);
    let took = cluster.wait_failover(Duration::from_secs(30));
    let new_master = cluster.master_of_slot(slot).expect("slot served again");
    assert_ne!(new_master, victim);
    assert!(took < Duration::from_secs(30));
}

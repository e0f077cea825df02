//! Runs the built `rmq` binary against a throwaway redis-server (never 6379)
//! with a time limit, and reads what it printed.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

pub use rmq_test_support::RedisServer;
use serde_json::Value;

/// The longest any one `rmq` run may take in these tests.
pub const RUN_LIMIT: Duration = Duration::from_secs(20);

/// A throwaway server and the binary pointed at it.
pub struct Env {
    pub server: RedisServer,
    pub url: String,
}

/// What one run printed and how it exited.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

pub fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_rmq"));
    c.env_remove("REDIS_URL").env_remove("RUST_LOG");
    c
}

impl Env {
    pub fn new() -> Env {
        let server = RedisServer::start();
        let url = server.url();
        Env { server, url }
    }

    /// `rmq --redis URL <args>`, not started.
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = bin();
        c.arg("--redis").arg(&self.url).args(args);
        c
    }

    /// Runs `rmq --redis URL <args>` with empty stdin.
    pub fn rmq(&self, args: &[&str]) -> Run {
        run(self.cmd(args), b"")
    }

    /// Runs `rmq --redis URL <args>` with `input` on stdin.
    pub fn rmq_in(&self, args: &[&str], input: &[u8]) -> Run {
        run(self.cmd(args), input)
    }

    /// Runs and asserts exit 0.
    pub fn ok(&self, args: &[&str]) -> Run {
        self.rmq(args).success()
    }

    /// The totals of `rmq stats TOPIC --json`.
    pub fn stats(&self, topic: &str) -> Value {
        let r = self.ok(&["--json", "stats", topic]);
        let mut v = r.json();
        assert_eq!(v.len(), 1, "{r:?}");
        v.remove(0)
    }
}

/// Runs `cmd` to the end (killing it after [`RUN_LIMIT`]).
pub fn run(mut cmd: Command, input: &[u8]) -> Run {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn rmq");
    let mut stdin = child.stdin.take().expect("stdin");
    let input = input.to_vec();
    let writer = thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let out = reader(child.stdout.take().expect("stdout"));
    let err = reader(child.stderr.take().expect("stderr"));
    let status = wait_limited(&mut child, RUN_LIMIT);
    let _ = writer.join();
    let stdout = out.join().expect("stdout reader");
    let stderr = err.join().expect("stderr reader");
    let Some(status) = status else {
        panic!(
            "rmq {:?} ran longer than {RUN_LIMIT:?}\nstdout: {stdout}\nstderr: {stderr}",
            cmd.get_args().collect::<Vec<_>>()
        );
    };
    Run {
        code: status.code().unwrap_or(-1),
        stdout,
        stderr,
    }
}

fn reader(mut r: impl Read + Send + 'static) -> thread::JoinHandle<String> {
    thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = r.read_to_end(&mut buf);
        String::from_utf8_lossy(&buf).into_owned()
    })
}

/// Waits up to `limit`; on timeout kills the child and returns None.
pub fn wait_limited(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(s) = child.try_wait().expect("try_wait") {
            return Some(s);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        thread::sleep(Duration::from_millis(10));
    }
}

/// Polls `f` every 20 ms until it is true or `limit` passes.
pub fn eventually(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        thread::sleep(Duration::from_millis(20));
    }
    false
}

impl Run {
    /// Asserts exit 0.
    pub fn success(self) -> Run {
        assert_eq!(self.code, 0, "expected success: {self:?}");
        self
    }

    /// Asserts a failure with exactly one `error: ...` line on stderr (and
    /// no panic), and returns that line.
    pub fn one_error(&self, code: i32) -> String {
        assert_eq!(self.code, code, "exit code: {self:?}");
        assert!(!self.stderr.contains("panicked"), "panic: {self:?}");
        assert!(
            !self.stderr.contains("RUST_BACKTRACE"),
            "backtrace: {self:?}"
        );
        let lines: Vec<&str> = self.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "one stderr line expected: {self:?}");
        assert!(lines[0].starts_with("error: "), "{self:?}");
        lines[0].to_string()
    }

    /// Every stdout line as JSON (each must be one object).
    pub fn json(&self) -> Vec<Value> {
        self.stdout
            .lines()
            .map(|l| {
                let v: Value = serde_json::from_str(l)
                    .unwrap_or_else(|e| panic!("not JSON ({e}): {l:?} in {self:?}"));
                assert!(v.is_object(), "not an object: {l}");
                v
            })
            .collect()
    }
}

/// The sorted keys of a JSON object.
pub fn keys(v: &Value) -> Vec<String> {
    let mut k: Vec<String> = v.as_object().expect("object").keys().cloned().collect();
    k.sort();
    k
}

/// Sorted field names from a list.
pub fn names(list: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = list.iter().map(|s| s.to_string()).collect();
    v.sort();
    v
}

/// Direct children of a process, from /proc.
pub fn children_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for t in tasks.flatten() {
        if let Ok(s) = std::fs::read_to_string(t.path().join("children")) {
            out.extend(s.split_whitespace().filter_map(|p| p.parse::<u32>().ok()));
        }
    }
    out
}

/// Sends `signal` (e.g. "-9", "-INT") to a PID or, negative, a process group.
pub fn kill(signal: &str, target: &str) {
    let _ = Command::new("kill")
        .arg(signal)
        .arg("--")
        .arg(target)
        .stderr(Stdio::null())
        .status();
}

/// Sends a raw HTTP/1.1 request; returns the status line and the body.
pub fn http(addr: &str, request: &str) -> (String, String) {
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("read timeout");
    s.write_all(request.as_bytes()).expect("send the request");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("read the answer");
    let status = out.lines().next().unwrap_or_default().to_string();
    let body = out.split("\r\n\r\n").nth(1).unwrap_or_default().to_string();
    (status, body)
}

/// The body of `GET /metrics` from `addr`, or None while nothing listens.
pub fn scrape(addr: &str) -> Option<String> {
    std::net::TcpStream::connect(addr).ok()?;
    let get = "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    Some(http(addr, get).1)
}
pub mod serial;

/// Whether a process runs (a zombie, killed but not yet reaped, does not).
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z')),
        Err(_) => false,
    }
}

/// A child process killed (and reaped) when the test ends, also when it
/// panics before stopping it.
pub struct Reaped(pub Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

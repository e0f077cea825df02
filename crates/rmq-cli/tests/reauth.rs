//! Long-running processes survive a refused reconnect: Redis's password
//! changes while their connections are cut (their reconnect is refused),
//! then changes back. Each process must work again without a restart:
//! `rmq consume` handles what is sent afterwards, `rmq serve` answers its
//! Redis-backed routes again, `rmq forward` forwards and `rmq store relay`
//! moves rows again.
#![allow(clippy::unwrap_used)]
mod support;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use rmq_test_support::{NatsServer, PostgresServer, RedisServer};
use support::*;

const PASS: &str = "the-old-pass";

/// A Redis with a password; `rmq` reaches it with the password in its URL.
struct Guarded {
    server: RedisServer,
    url: String,
}

impl Guarded {
    fn start() -> Guarded {
        let server = RedisServer::start();
        let g = Guarded {
            url: format!("redis://:{PASS}@127.0.0.1:{}", server.port()),
            server,
        };
        g.cli(None, &["CONFIG", "SET", "requirepass", PASS]);
        g
    }

    fn cli(&self, pass: Option<&str>, args: &[&str]) -> String {
        let mut c = Command::new("redis-cli");
        c.args(["-p", &self.server.port().to_string(), "--no-auth-warning"]);
        if let Some(p) = pass {
            c.args(["-a", p]);
        }
        let out = c.args(args).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn stats(&self, topic: &str) -> serde_json::Value {
        let r = self.rmq(&["--json", "stats", topic], b"").success();
        r.json().remove(0)
    }

    fn rmq(&self, args: &[&str], input: &[u8]) -> Run {
        let mut c = bin();
        c.arg("--redis").arg(&self.url).args(args);
        run(c, input)
    }

    fn spawn(&self, args: &[&str]) -> Command {
        let mut c = bin();
        c.arg("--redis").arg(&self.url).args(args);
        c
    }

    /// Starts a long-running `rmq` that prints to nowhere.
    fn start_quiet(&self, args: &[&str]) -> Child {
        self.spawn(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    }

    /// New password, every client cut off (their reconnects are refused),
    /// a while like that (`meanwhile` runs every 200 ms: it makes the
    /// process call Redis), then the old password again.
    fn flip_the_password(&self, mut meanwhile: impl FnMut()) {
        assert!(self
            .cli(Some(PASS), &["CONFIG", "SET", "requirepass", "another"])
            .contains("OK"));
        self.cli(
            Some("another"),
            &["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"],
        );
        let until = std::time::Instant::now() + Duration::from_millis(2_500);
        while std::time::Instant::now() < until {
            meanwhile();
            std::thread::sleep(Duration::from_millis(200));
        }
        assert!(self
            .cli(Some("another"), &["CONFIG", "SET", "requirepass", PASS])
            .contains("OK"));
    }
}

fn stop(mut child: Child) {
    kill("-TERM", &child.id().to_string());
    wait_limited(&mut child, Duration::from_secs(15)).expect("stops on SIGTERM");
}

#[test]
fn a_consumer_handles_what_is_sent_after_a_refused_reconnect() {
    let g = Guarded::start();
    g.rmq(
        &[
            "topic",
            "create",
            "t",
            "--kind",
            "fixed-time",
            "--slots",
            "2",
        ],
        b"",
    )
    .success();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let exec = format!("cat >> {}; echo >> {}", log.display(), log.display());
    let consumer = g.start_quiet(&["consume", "t", "--exec", &exec]);
    let logged = || std::fs::read_to_string(&log).unwrap_or_default();
    g.rmq(&["send", "t", "before", "--delay", "0"], b"")
        .success();
    assert!(
        eventually(Duration::from_secs(30), || logged().contains("before")),
        "the consumer works at first"
    );
    // Due while the password is changed: the consumer's pop meets the cut
    // connection, and its reconnect is refused.
    g.rmq(&["send", "t", "during", "--delay", "1000"], b"")
        .success();
    g.flip_the_password(|| {});
    g.rmq(&["send", "t", "after", "--delay", "0"], b"")
        .success();
    let handled = eventually(Duration::from_secs(30), || {
        logged().contains("after") && logged().contains("during")
    });
    stop(consumer);
    assert!(handled, "the consumer handles messages again: {}", logged());
}

#[test]
fn serve_answers_again_after_a_refused_reconnect() {
    let g = Guarded::start();
    g.rmq(
        &["topic", "create", "t", "--kind", "priority", "--slots", "2"],
        b"",
    )
    .success();
    let mut child = g
        .spawn(&["serve", "--listen", "127.0.0.1:0", "--read-only"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Its first line, then its stderr is closed (as a supervisor may):
    // the warnings it logs meanwhile must not break it.
    let mut line = String::new();
    BufReader::new(child.stderr.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_string();
    let topics = || {
        http(
            &addr,
            &format!("GET /api/v1/topics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"),
        )
    };
    let (status, body) = topics();
    assert!(status.contains("200"), "{status} {body}");
    // Requests meanwhile make serve call Redis: its reconnect is refused.
    g.flip_the_password(|| {
        topics();
    });
    let mut last = (String::new(), String::new());
    let answered = eventually(Duration::from_secs(30), || {
        last = topics();
        last.0.contains("200")
    });
    stop(child);
    assert!(answered, "serve answers again: {last:?}");
}

#[test]
fn a_forwarder_forwards_again_after_a_refused_reconnect() {
    let g = Guarded::start();
    g.rmq(
        &[
            "topic",
            "create",
            "t",
            "--kind",
            "fixed-time",
            "--slots",
            "2",
        ],
        b"",
    )
    .success();
    let nats = NatsServer::start();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let js = async_nats::jetstream::new(async_nats::connect(nats.url()).await.unwrap());
        js.create_stream(async_nats::jetstream::stream::Config {
            name: "DUE".into(),
            subjects: vec!["due.jobs".into()],
            ..Default::default()
        })
        .await
        .unwrap();
    });
    let to = format!("{}?subject=due.jobs", nats.url());
    let forwarder = g.start_quiet(&["forward", "t", "--to", &to]);
    let acked = || g.stats("t")["acked"].as_u64().unwrap_or(0);
    g.rmq(&["send", "t", "before", "--delay", "0"], b"")
        .success();
    assert!(
        eventually(Duration::from_secs(30), || acked() == 1),
        "the forwarder works at first"
    );
    g.rmq(&["send", "t", "during", "--delay", "1000"], b"")
        .success();
    g.flip_the_password(|| {});
    g.rmq(&["send", "t", "after", "--delay", "0"], b"")
        .success();
    let forwarded = eventually(Duration::from_secs(30), || acked() == 3);
    stop(forwarder);
    assert!(forwarded, "the forwarder forwards again: {}", g.stats("t"));
}

#[test]
fn a_relay_moves_rows_again_after_a_refused_reconnect() {
    let g = Guarded::start();
    let pg = PostgresServer::start();
    let url = pg.url();
    g.rmq(&["store", "migrate", "--pg", &url], b"").success();
    g.rmq(
        &["topic", "create", "t", "--kind", "priority", "--slots", "2"],
        b"",
    )
    .success();
    g.rmq(&["store", "define", "t", "--pg", &url], b"")
        .success();
    let relay = g.start_quiet(&["store", "relay", "--pg", &url, "--poll-ms", "100"]);
    let sent = || g.stats("t")["sent"].as_u64().unwrap_or(0);
    let store_send = |payload: &str| {
        g.rmq(
            &[
                "store", "send", "t", payload, "--key", payload, "--pg", &url,
            ],
            b"",
        )
        .success();
    };
    store_send("before");
    assert!(
        eventually(Duration::from_secs(30), || sent() == 1),
        "the relay works at first"
    );
    // The relay polls every 100 ms: its calls meet the cut connection.
    g.flip_the_password(|| {});
    store_send("after");
    let moved = eventually(Duration::from_secs(30), || sent() == 2);
    stop(relay);
    assert!(moved, "the relay moves rows again: {}", g.stats("t"));
}

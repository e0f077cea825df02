//! Histories: every process appends one JSON event per line to its own
//! file, written with one `write` per line so that a SIGKILL loses at most
//! the line being written (the reader skips a torn last line).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

static SKEW_MS: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);

/// A worker run under `faketime` is told its offset, so that its history
/// stays on the common clock (rmq itself is told nothing).
pub fn set_skew_ms(ms: i64) {
    SKEW_MS.store(ms, std::sync::atomic::Ordering::Relaxed);
}

/// Wall-clock milliseconds on the machine's clock, the same for every
/// process (corrected for a worker's known skew).
pub fn now_ms() -> i64 {
    let local = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0);
    local - SKEW_MS.load(std::sync::atomic::Ordering::Relaxed)
}

/// One thing a process did or saw.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "e", rename_all = "snake_case")]
pub enum Event {
    /// A send of `id` to `topic` is about to be made.
    SendInvoke { id: String, topic: String, at: i64 },
    /// The send returned Ok: the message is accepted.
    SendOk {
        id: String,
        at: i64,
        replicas: Option<u32>,
    },
    /// The send failed; `unknown` when it may have been written anyway
    /// (connection lost, not replicated, ...), false for a definite refusal.
    SendErr {
        id: String,
        at: i64,
        unknown: bool,
        error: String,
    },
    /// A delivery started in a consumer.
    Deliver {
        id: String,
        topic: String,
        slot: u32,
        attempt: u32,
        token: u64,
        fence: Option<u64>,
        /// Server time when it was taken.
        taken_ms: i64,
        due_ms: Option<i64>,
        priority: Option<u32>,
        /// Local time when the handler started.
        start: i64,
        pid: u32,
    },
    /// A delivery ended; `result` is the settle outcome: "ack" (accepted),
    /// "stale", "fenced", "error", "nack", "dead".
    End {
        id: String,
        token: u64,
        /// Local time just before the settle call was made.
        settle_at: i64,
        slot: u32,
        topic: String,
        result: String,
        end: i64,
        pid: u32,
    },
    /// A fault the injector caused, from `at` to `until`.
    Fault {
        kind: String,
        at: i64,
        until: i64,
        detail: String,
    },
}

/// Appends events to one file.
pub struct Writer {
    file: File,
}

impl Writer {
    pub fn create(path: &Path) -> anyhow::Result<Writer> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Writer { file })
    }

    pub fn write(&mut self, e: &Event) {
        if let Ok(mut line) = serde_json::to_vec(e) {
            line.push(b'\n');
            // One write per line: a kill tears at most this line.
            let _ = self.file.write_all(&line);
        }
    }
}

/// Every event of every `*.jsonl` file in `dir`; torn lines are skipped.
pub fn read_dir(dir: &Path) -> anyhow::Result<Vec<Event>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().and_then(|e| e.to_str()) != Some("jsonl") {
            continue;
        }
        let text = std::fs::read_to_string(&path)?;
        out.extend(
            text.lines()
                .filter_map(|l| serde_json::from_str::<Event>(l).ok()),
        );
    }
    Ok(out)
}

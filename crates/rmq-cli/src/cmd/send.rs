//! `rmq send`: one message from the argument or stdin, or with `--batch`
//! many messages from JSON lines on stdin.
//!
//! A batch is all or nothing as far as input goes: every line is parsed and
//! checked against the topic before the first message is sent, so a typo on
//! line 9000 does not leave 8999 messages sent. (The library checks each
//! `send_batch` call only; the CLI sends in chunks of 1000 to show progress,
//! so it repeats the library's checks here, see `check` below.) What the server
//! alone can refuse (a due time in the past by its clock) is reported per
//! message after sending: with `--json`, every line gets its result (what
//! Redis now holds for it: merged or new, its priority or due time, the
//! server's clock), so a script needs no `get` per key.

use std::io::{IsTerminal, Read};
use std::time::Duration;

use clap::Args;
use rmq::{Message, Sent, TopicSpec};
use serde::{Deserialize, Serialize};

use super::key_arg;
use super::placed::PlaceJson;
use crate::output::{self, Out};
use crate::{connect, CliError, CliResult, Global};
use rmq_serve::views::KeyField;

/// Messages per `send_batch` call.
const CHUNK: usize = 1000;

#[derive(Debug, Args)]
pub struct SendArgs {
    /// Topic name
    pub topic: String,
    /// Payload (default: all of stdin)
    #[arg(conflicts_with = "batch")]
    pub payload: Option<String>,
    /// Merge key (default: the payload); with --batch, for lines without one
    #[arg(long, value_name = "K", allow_hyphen_values = true, conflicts_with_all = ["key_hex", "key_base64"])]
    pub key: Option<String>,
    #[arg(long, value_name = "HEX", help = key_arg::HEX_HELP, conflicts_with_all = ["batch", "key_base64"])]
    pub key_hex: Option<String>,
    #[arg(long, value_name = "B64", help = key_arg::BASE64_HELP, conflicts_with = "batch")]
    pub key_base64: Option<String>,
    /// Slot basis (default: the merge key); with --batch, for lines without one
    #[arg(long, value_name = "B")]
    pub slot_basis: Option<String>,
    /// Priority topics: 0..=2097151, bigger first [default: 0]
    #[arg(long, value_name = "P", group = "timing")]
    pub priority: Option<u32>,
    /// Fixed-time topics: due at this Unix time in ms (server clock), 0 to
    /// 9007199254740991, not further in the past than the topic's past
    /// tolerance
    #[arg(
        long,
        value_name = "UNIX_MS",
        group = "timing",
        allow_negative_numbers = true
    )]
    pub at: Option<i64>,
    /// Fixed-time topics: due this many ms from now, at most 3153600000000
    /// (100 years)
    #[arg(long, value_name = "MS", group = "timing")]
    pub delay: Option<u64>,
    /// Range-merge topics: due this many ms after the first send of the
    /// key, 1 to 3153600000000 (100 years)
    #[arg(long, value_name = "MS", group = "timing")]
    pub range: Option<u64>,
    /// Read JSON lines from stdin: {"payload": "..", "key": .., "slot_basis": ..,
    /// "priority": .., "at": .., "delay": .., "range": ..}; the options above
    /// apply to lines that leave them out. With --json, prints one result
    /// per input line, in input order ({"line", "key", "slot", "outcome":
    /// new|merged|refused, "reason" when refused, "behind_in_flight",
    /// "priority" or "due_ms" as stored, "server_ms"}), then the summary
    #[arg(long)]
    pub batch: bool,
}

/// One line of `--batch` input.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    payload: String,
    key: Option<String>,
    slot_basis: Option<String>,
    priority: Option<u32>,
    at: Option<i64>,
    delay: Option<u64>,
    range: Option<u64>,
}

/// The timing flags of a send (shared with `rmq store send`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Timing {
    None,
    Priority(u32),
    At(i64),
    Delay(u64),
    Range(u64),
}

impl Timing {
    pub(crate) fn from_opts(
        priority: Option<u32>,
        at: Option<i64>,
        delay: Option<u64>,
        range: Option<u64>,
    ) -> Result<Timing, String> {
        let given = [
            priority.map(Timing::Priority),
            at.map(Timing::At),
            delay.map(Timing::Delay),
            range.map(Timing::Range),
        ];
        let mut it = given.into_iter().flatten();
        let first = it.next().unwrap_or(Timing::None);
        if it.next().is_some() {
            return Err("give at most one of priority, at, delay and range".into());
        }
        Ok(first)
    }

    pub(crate) fn apply(self, m: Message) -> Message {
        match self {
            Timing::None => m,
            Timing::Priority(p) => m.priority(p),
            Timing::At(ms) => m.at_ms(ms),
            Timing::Delay(ms) => m.delay(Duration::from_millis(ms)),
            Timing::Range(ms) => m.range(Duration::from_millis(ms)),
        }
    }
}

/// A message and where it came from.
struct Item {
    line: usize,
    message: Message,
}

/// What one send did, in JSON.
#[derive(Serialize)]
struct SentJson {
    #[serde(flatten)]
    key: KeyField,
    slot: u32,
    merged: bool,
    behind_in_flight: bool,
    #[serde(flatten)]
    place: PlaceJson,
}

impl SentJson {
    fn of(key: KeyField, s: &Sent) -> SentJson {
        SentJson {
            key,
            slot: s.slot,
            merged: s.merged,
            behind_in_flight: s.behind_in_flight,
            place: PlaceJson::of_sent(s),
        }
    }
}

/// What a batch did with one input line, in JSON (`--batch --json`).
#[derive(Serialize)]
struct LineJson {
    line: usize,
    #[serde(flatten)]
    key: KeyField,
    slot: u32,
    /// new | merged | refused
    outcome: &'static str,
    /// Why it was refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    behind_in_flight: Option<bool>,
    /// None when refused.
    #[serde(flatten)]
    place: Option<PlaceJson>,
}

impl LineJson {
    fn of(item: &Item, topic: &rmq::Topic, result: &rmq::Result<Sent>) -> LineJson {
        let mut line = LineJson {
            line: item.line,
            key: KeyField::of(item.message.merge_key()),
            slot: topic.slot_of(item.message.basis()),
            outcome: "refused",
            reason: None,
            behind_in_flight: None,
            place: None,
        };
        match result {
            Ok(s) => {
                line.slot = s.slot;
                line.outcome = if s.merged { "merged" } else { "new" };
                line.behind_in_flight = Some(s.behind_in_flight);
                line.place = Some(PlaceJson::of_sent(s));
            }
            Err(e) => line.reason = Some(e.to_string()),
        }
        line
    }
}

#[derive(Serialize, Default)]
struct Summary {
    sent: usize,
    new: usize,
    merged: usize,
    refused: usize,
    /// Of the refused, those refused because the bounded topic was full
    /// (retryable).
    full: usize,
}

impl Summary {
    fn count(&mut self, r: &rmq::Result<rmq::Sent>) {
        match r {
            Ok(s) if s.merged => self.merged += 1,
            Ok(_) => self.new += 1,
            Err(e) => {
                self.refused += 1;
                self.full += usize::from(e.kind() == rmq::ErrorKind::Full);
            }
        }
        self.sent = self.new + self.merged;
    }

    /// Prints the summary; refusals make the exit status (only full
    /// refusals: `EXIT_FULL`, a retry later can succeed; else 2). Each
    /// refusal already has its error line.
    fn report(&self, out: Out) -> CliResult {
        out.either(self, || {
            let full = match self.full {
                0 => String::new(),
                n => format!(" ({n} because the topic is full: send them again later)"),
            };
            format!(
                "sent {}: {} new, {} merged into waiting messages, {} refused{full}",
                self.sent, self.new, self.merged, self.refused
            )
        })?;
        if self.refused == 0 {
            return Ok(());
        }
        let code = if self.full == self.refused {
            crate::EXIT_FULL
        } else {
            2
        };
        Err(CliError {
            code,
            message: None,
        })
    }
}

pub async fn run(g: &Global, a: SendArgs) -> CliResult {
    let out = Out { json: g.json };
    let timing = Timing::from_opts(a.priority, a.at, a.delay, a.range).map_err(CliError::usage)?;
    // Open the topic first: a wrong name or an unreachable Redis is
    // reported before waiting for stdin.
    let (_client, topic) = connect::topic(g, &a.topic).await?;
    if a.batch {
        let input = read_stdin(false)?;
        let items = parse_lines(&input, &a, timing, &topic.spec())?;
        return send_batch(out, &topic, &items).await;
    }
    let payload = match a.payload {
        Some(p) => p.into_bytes(),
        None => read_stdin(true)?,
    };
    let mut m = Message::new(payload);
    if let Some(k) = key_arg::key_bytes(
        a.key.as_deref(),
        a.key_hex.as_deref(),
        a.key_base64.as_deref(),
    )? {
        m = m.key(k);
    }
    if let Some(b) = a.slot_basis {
        m = m.slot_basis(b);
    }
    let m = timing.apply(m);
    let key = KeyField::of(m.merge_key());
    let sent = topic.send(m).await?;
    out.either(&SentJson::of(key, &sent), || describe(&sent))
}

fn describe(s: &Sent) -> String {
    match (s.merged, s.behind_in_flight) {
        (false, false) => format!("sent new to slot {}", s.slot),
        (true, false) => format!("merged into a waiting message (slot {})", s.slot),
        (false, true) => format!(
            "sent new to slot {}; it waits for the in-flight delivery of its key to end",
            s.slot
        ),
        (true, true) => format!(
            "merged into a message waiting for the in-flight delivery of its key (slot {})",
            s.slot
        ),
    }
}

fn read_stdin(payload: bool) -> CliResult<Vec<u8>> {
    let mut stdin = std::io::stdin();
    if stdin.is_terminal() {
        output::note(if payload {
            "reading the payload from stdin; end it with Ctrl-D"
        } else {
            "reading JSON lines from stdin; end them with Ctrl-D"
        });
    }
    let mut buf = Vec::new();
    stdin
        .read_to_end(&mut buf)
        .map_err(|e| CliError::runtime(format!("cannot read stdin: {e}")))?;
    Ok(buf)
}

/// Parses and checks every line; the first bad one is the error.
fn parse_lines(
    input: &[u8],
    a: &SendArgs,
    timing: Timing,
    spec: &TopicSpec,
) -> CliResult<Vec<Item>> {
    let mut items = Vec::new();
    for (i, raw) in input.split(|&b| b == b'\n').enumerate() {
        let n = i + 1;
        if raw.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let bad = |m: String| CliError::usage(format!("line {n}: {m}; nothing was sent"));
        let l: Line = serde_json::from_slice(raw).map_err(|e| bad(json_error(&e)))?;
        let t = match Timing::from_opts(l.priority, l.at, l.delay, l.range).map_err(&bad)? {
            Timing::None => timing,
            t => t,
        };
        let key = l.key.or_else(|| a.key.clone());
        let basis = l.slot_basis.or_else(|| a.slot_basis.clone());
        let payload = l.payload.into_bytes();
        let mut m = Message::new(payload);
        if let Some(k) = key {
            m = m.key(k);
        }
        if let Some(b) = basis {
            m = m.slot_basis(b);
        }
        let m = t.apply(m);
        m.check(spec).map_err(|e| bad(e.to_string()))?;
        items.push(Item {
            line: n,
            message: m,
        });
    }
    Ok(items)
}

/// serde's message without its "at line 1 column N" (every input line is
/// parsed alone, so its line would always be 1).
fn json_error(e: &serde_json::Error) -> String {
    let msg = e.to_string();
    let msg = match msg.rfind(" at line ") {
        Some(i) => &msg[..i],
        None => &msg,
    };
    format!("not a valid message (column {}): {msg}", e.column())
}

async fn send_batch(out: Out, topic: &rmq::Topic, items: &[Item]) -> CliResult {
    let bar = progress(items.len() as u64);
    let mut sum = Summary::default();
    for chunk in items.chunks(CHUNK) {
        let messages: Vec<Message> = chunk.iter().map(|i| i.message.clone()).collect();
        let report = match topic.send_batch(&messages).await {
            Ok(r) => r,
            Err(e) => {
                bar.abandon();
                let done = sum.sent + sum.refused;
                let first = chunk.first().map_or(0, |i| i.line);
                return Err(CliError {
                    message: Some(format!(
                        "{e} (at line {first}; {done} of {} messages were sent before)",
                        items.len()
                    )),
                    ..CliError::from(e)
                });
            }
        };
        for (item, r) in chunk.iter().zip(&report.results) {
            if out.json {
                out.json(&LineJson::of(item, topic, r))?;
            }
            if let Err(e) = r {
                bar.suspend(|| output::error_line(&format!("line {}: {e}", item.line)));
            }
            sum.count(r);
        }
        bar.inc(chunk.len() as u64);
    }
    bar.finish_and_clear();
    sum.report(out)
}

/// A progress bar on stderr when it is a terminal, else a hidden one.
fn progress(len: u64) -> indicatif::ProgressBar {
    if !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::with_draw_target(
        Some(len),
        indicatif::ProgressDrawTarget::stderr(),
    );
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{bar:40} {pos}/{len} messages ({per_sec}, {eta} left)",
    ) {
        bar.set_style(style);
    }
    bar
}

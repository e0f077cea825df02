//! `rmq topic create|list|show|update|delete|pause|resume`: topic
//! definitions, their settings and end, and stopping and starting
//! deliveries of a whole topic.
//!
//! `create` is idempotent: defining a topic exactly as it already is succeeds
//! (so deploy scripts can run it every time), while a different definition
//! under the same name is refused by the library and changes nothing.
//! Options not given keep the library's defaults ([`TopicSpec::new`]).

use std::time::Duration;

use clap::{Args, Subcommand, ValueEnum};
use rmq::{ErrorKind, Stats, Topic, TopicKind, TopicSpec};
use serde::Serialize;

use crate::output::{self, Out};
use crate::{connect, CliError, CliResult, Global};

#[derive(Debug, Subcommand)]
pub enum TopicCmd {
    /// Define a topic (succeeds when it already exists exactly so)
    Create(CreateArgs),
    /// Every topic under the prefix, with its counts
    List,
    /// One topic's definition and counts
    Show {
        /// Topic name
        topic: String,
    },
    /// Stop every consumer (any process) from starting new deliveries;
    /// in-flight ones finish, sends go on
    Pause {
        /// Topic name
        topic: String,
    },
    /// Let consumers take again (idle ones wake at once)
    Resume {
        /// Topic name
        topic: String,
    },
    /// Change settings (running consumers follow within seconds); the kind
    /// and slot count never change
    Update(UpdateArgs),
    /// Count a bounded topic's messages again and make that its bound's
    /// count (when processes died between reserving room and sending, the
    /// count stays too high and the topic refuses early)
    Recount {
        /// Topic name
        topic: String,
    },
    /// Delete a topic and every message it holds (refused while it holds
    /// messages or has consumers, unless --force)
    Delete {
        /// Topic name
        topic: String,
        /// Delete even with messages or live consumers (they stop)
        #[arg(long)]
        force: bool,
    },
}

#[derive(Debug, Args)]
pub struct UpdateArgs {
    /// Topic name
    pub topic: String,
    #[command(flatten)]
    pub settings: Settings,
    /// Refused: a topic's kind never changes (create a new topic)
    #[arg(long, value_name = "KIND", hide = true)]
    pub kind: Option<String>,
    /// Refused: a topic's slot count never changes (create a new topic)
    #[arg(long, value_name = "N", hide = true)]
    pub slots: Option<u32>,
}

/// The topic kinds, as the command line spells them.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum KindArg {
    /// Highest priority first, FIFO among equals
    Priority,
    /// Due at an exact time
    FixedTime,
    /// Due a range after the first send; duplicates merge until then
    RangeMerge,
}

impl From<KindArg> for TopicKind {
    fn from(k: KindArg) -> Self {
        match k {
            KindArg::Priority => TopicKind::Priority,
            KindArg::FixedTime => TopicKind::FixedTime,
            KindArg::RangeMerge => TopicKind::RangeMerge,
        }
    }
}

#[derive(Debug, Args)]
pub struct CreateArgs {
    /// Topic name (letters, digits, '_', '.', '-')
    pub topic: String,
    /// How the topic orders and merges messages
    #[arg(long, value_enum)]
    pub kind: KindArg,
    /// Slot count, a power of two [default: 16]
    #[arg(long, value_name = "N")]
    pub slots: Option<u32>,
    #[command(flatten)]
    pub settings: Settings,
}

/// The settings that may change after creation (`topic update`).
#[derive(Debug, Args)]
pub struct Settings {
    /// Lease of a delivery in ms [default: 30000]
    #[arg(long, value_name = "MS")]
    pub lease: Option<u64>,
    /// Deliveries before a message becomes a dead letter [default: 16]
    #[arg(long, value_name = "N")]
    pub max_attempts: Option<u32>,
    /// First retry delay in ms, doubling per attempt [default: 1000]
    #[arg(long, value_name = "MS")]
    pub backoff: Option<u64>,
    /// Longest retry delay in ms [default: 600000]
    #[arg(long, value_name = "MS")]
    pub backoff_max: Option<u64>,
    /// Largest payload in bytes [default: 1048576]
    #[arg(long, value_name = "BYTES")]
    pub max_payload: Option<u64>,
    /// Fixed-time topics: how far in the past a due time may be and still
    /// be accepted (as due at once), in ms [default: 1000]
    #[arg(long, value_name = "MS")]
    pub past_tolerance: Option<u64>,
    /// Dead letters kept per slot, the oldest dropped (and counted) beyond;
    /// 0 keeps all [default: 10000]
    #[arg(long, value_name = "N")]
    pub dead_letters_per_slot: Option<u64>,
    /// Dead letters older than this (ms) are dropped; 0 keeps them (up to
    /// the count) [default: 0]
    #[arg(long, value_name = "MS")]
    pub dead_letter_ttl: Option<u64>,
    /// Global rate limit: deliveries a second across all consumers, as N
    /// or N/s; 0 removes it [default: none]
    #[arg(long, value_name = "N/s", value_parser = parse_rate)]
    pub rate: Option<u32>,
    /// Deliveries the rate limit lets through at once after a quiet spell
    /// [default: a tenth of the rate, at least 1]
    #[arg(long, value_name = "N", requires = "rate")]
    pub burst: Option<u32>,
    /// Global in-flight cap: deliveries in flight at once across all
    /// consumers; 0 removes it [default: none]
    #[arg(long, value_name = "N")]
    pub max_in_flight: Option<u32>,
    /// Bound: messages the topic may hold at once, waiting or in flight; a
    /// send of a new message beyond it is refused (exit code 75, retry
    /// later); merges always succeed; 0 removes it [default: none]
    #[arg(long, value_name = "N")]
    pub max_pending: Option<u64>,
    /// How long a handler (`rmq consume --exec`, a library consumer's
    /// `run`) may run on one delivery, in ms: past it the handler is
    /// stopped and the message retried ("timed out after ..."); a
    /// consumer's own --timeout comes first; 0 removes it [default: none]
    #[arg(long, value_name = "MS")]
    pub handler_timeout: Option<u64>,
}

/// `500`, `500/s`, `30000/min`: deliveries a second.
fn parse_rate(s: &str) -> Result<u32, String> {
    let (n, per) = s.split_once('/').unwrap_or((s, "s"));
    let n: u32 = n
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a rate: use N, N/s or N/min"))?;
    match per.trim() {
        "s" | "sec" => Ok(n),
        "m" | "min" if n.is_multiple_of(60) => Ok(n / 60),
        "m" | "min" => Err(format!("{s:?}: a rate per minute must be a multiple of 60")),
        other => Err(format!("{s:?}: unknown unit {other:?}: use /s or /min")),
    }
}

impl Settings {
    /// `spec` with the settings given here.
    pub fn apply(&self, mut spec: TopicSpec) -> TopicSpec {
        let ms = Duration::from_millis;
        if let Some(v) = self.lease {
            spec = spec.lease(ms(v));
        }
        if let Some(n) = self.max_attempts {
            spec = spec.max_attempts(n);
        }
        if self.backoff.is_some() || self.backoff_max.is_some() {
            let first = self.backoff.unwrap_or(spec.backoff_ms);
            let max = self.backoff_max.unwrap_or(spec.backoff_max_ms);
            spec = spec.backoff(ms(first), ms(max));
        }
        if let Some(n) = self.max_payload {
            spec = spec.max_payload_bytes(n);
        }
        if let Some(v) = self.past_tolerance {
            spec = spec.past_tolerance(ms(v));
        }
        if let Some(n) = self.dead_letters_per_slot {
            spec = spec.dead_letters_per_slot(n);
        }
        if let Some(v) = self.dead_letter_ttl {
            spec = spec.dead_letter_ttl(ms(v));
        }
        if let Some(rate) = self.rate {
            let burst = self.burst.unwrap_or((rate / 10).max(1));
            spec = spec.rate_limit(rate, burst);
        }
        if let Some(n) = self.max_in_flight {
            spec = spec.max_in_flight(n);
        }
        if let Some(n) = self.max_pending {
            spec = spec.max_pending(n);
        }
        if let Some(v) = self.handler_timeout {
            spec = spec.handler_timeout(ms(v));
        }
        spec
    }

    fn any(&self) -> bool {
        self.lease.is_some()
            || self.max_attempts.is_some()
            || self.backoff.is_some()
            || self.backoff_max.is_some()
            || self.max_payload.is_some()
            || self.past_tolerance.is_some()
            || self.dead_letters_per_slot.is_some()
            || self.dead_letter_ttl.is_some()
            || self.rate.is_some()
            || self.max_in_flight.is_some()
            || self.max_pending.is_some()
            || self.handler_timeout.is_some()
    }
}

impl CreateArgs {
    /// The definition these options ask for.
    pub fn spec(&self) -> TopicSpec {
        let mut spec = TopicSpec::new(self.topic.clone(), self.kind.into());
        if let Some(n) = self.slots {
            spec = spec.slots(n);
        }
        self.settings.apply(spec)
    }
}

/// A topic as `show`/`list` print it in JSON: the definition's fields plus
/// the totals.
#[derive(Serialize)]
struct TopicView<'a> {
    #[serde(flatten)]
    spec: &'a TopicSpec,
    stats: Stats,
    /// Messages counted against the bound now (bounded topics only).
    #[serde(skip_serializing_if = "Option::is_none")]
    bound_held: Option<u64>,
}

pub async fn run(g: &Global, cmd: TopicCmd) -> CliResult {
    let out = Out { json: g.json };
    match cmd {
        TopicCmd::Create(a) => create(g, out, a).await,
        TopicCmd::List => list(g, out).await,
        TopicCmd::Show { topic } => show(g, out, &topic).await,
        TopicCmd::Update(a) => update(g, out, a).await,
        TopicCmd::Delete { topic, force } => delete(g, out, &topic, force).await,
        TopicCmd::Pause { topic } => pause(g, out, &topic, true).await,
        TopicCmd::Resume { topic } => pause(g, out, &topic, false).await,
        TopicCmd::Recount { topic } => recount(g, out, &topic).await,
    }
}

async fn recount(g: &Global, out: Out, name: &str) -> CliResult {
    let (_client, topic) = connect::topic(g, name).await?;
    let before = topic.bound_usage().await?;
    let Some((after, bound)) = topic.recount_bound().await? else {
        return Err(CliError::usage(format!(
            "topic {name:?} is not bounded (set one with `rmq topic update {name} --max-pending N`); nothing was changed"
        )));
    };
    #[derive(Serialize)]
    struct RecountJson {
        before: Option<u64>,
        after: u64,
        bound: u64,
    }
    let before = before.map(|(held, _)| held);
    out.either(
        &RecountJson {
            before,
            after,
            bound,
        },
        || {
            format!(
                "topic {name:?}: {after} messages counted against its bound of {bound} (was {})",
                before.map_or_else(|| "none".to_string(), |b| b.to_string())
            )
        },
    )
}

async fn update(g: &Global, out: Out, a: UpdateArgs) -> CliResult {
    if a.kind.is_some() || a.slots.is_some() {
        return Err(CliError::usage(format!(
            "the kind and slot count of topic {:?} never change (they decide where every \
             message lives): create a new topic instead; nothing was changed",
            a.topic
        )));
    }
    if !a.settings.any() {
        return Err(CliError::usage(
            "give at least one setting to change (see `rmq topic update --help`)",
        ));
    }
    let client = connect::client(g).await?;
    let topic = client
        .update_topic(&a.topic, |s| a.settings.apply(s))
        .await?;
    let s = topic.spec();
    out.either(&*s, || {
        format!(
            "updated topic {:?}: {} (running consumers follow within seconds)",
            s.name,
            describe(&s)
        )
    })
}

async fn delete(g: &Global, out: Out, name: &str, force: bool) -> CliResult {
    let client = connect::client(g).await?;
    let d = client.delete_topic(name, force).await?;
    #[derive(Serialize)]
    struct DeletedJson<'a> {
        topic: &'a str,
        deleted: bool,
        messages: u64,
        slots: u32,
    }
    out.either(
        &DeletedJson {
            topic: name,
            deleted: true,
            messages: d.messages,
            slots: d.slots,
        },
        || {
            format!(
                "deleted topic {name:?} ({} slots, {} messages removed)",
                d.slots, d.messages
            )
        },
    )
}

async fn pause(g: &Global, out: Out, name: &str, pause: bool) -> CliResult {
    let (_client, topic) = connect::topic(g, name).await?;
    let r = if pause {
        topic.pause().await?
    } else {
        topic.resume().await?
    };
    #[derive(Serialize)]
    struct Paused<'a> {
        topic: &'a str,
        paused: bool,
        slots: u32,
        were_paused: u32,
        server_ms: i64,
    }
    out.either(
        &Paused {
            topic: name,
            paused: pause,
            slots: r.slots,
            were_paused: r.were_paused,
            server_ms: r.server_ms,
        },
        || match (pause, r.were_paused == r.slots, r.were_paused) {
            (true, true, _) => format!("topic {name:?} was already paused (all {} slots)", r.slots),
            (true, false, _) => format!(
                "paused topic {name:?} ({} slots): no consumer starts a new delivery until \
                 `rmq topic resume {name}`; deliveries in flight finish, sends go on",
                r.slots
            ),
            (false, _, 0) => format!("topic {name:?} was not paused"),
            (false, _, _) => format!(
                "resumed topic {name:?} ({} of {} slots were paused): consumers take again",
                r.were_paused, r.slots
            ),
        },
    )
}

async fn create(g: &Global, out: Out, a: CreateArgs) -> CliResult {
    let spec = a.spec();
    // Check locally first: a bad definition is refused before connecting.
    spec.validate()?;
    let client = connect::client(g).await?;
    // Only to say "created" or "already defined": define_topic does not tell.
    let existed = match client.topic(&spec.name).await {
        Ok(_) => true,
        Err(e) if e.kind() == ErrorKind::UnknownTopic => false,
        Err(e) => return Err(e.into()),
    };
    let topic = client.define_topic(spec).await?;
    let s = topic.spec();
    #[derive(Serialize)]
    struct Created<'a> {
        created: bool,
        #[serde(flatten)]
        spec: &'a TopicSpec,
    }
    out.either(
        &Created {
            created: !existed,
            spec: &s,
        },
        || {
            if existed {
                format!(
                    "topic {:?} already exists exactly so (unchanged): {}",
                    s.name,
                    describe(&s)
                )
            } else {
                format!("created topic {:?}: {}", s.name, describe(&s))
            }
        },
    )
}

/// Whether the topic is paused: "no", "yes", or how many slots are (a
/// pause or resume that was cut off half way).
pub fn paused_text(stats: &Stats, slots: u32) -> String {
    match stats.paused_slots {
        0 => "no".into(),
        n if n == u64::from(slots) => "yes (`rmq topic resume` to take again)".into(),
        n => format!("{n} of {slots} slots (run `rmq topic pause` or `resume` again)"),
    }
}

/// The definition on one line.
pub fn describe(s: &TopicSpec) -> String {
    let mut text = format!(
        "{}, {} slots, lease {} ms, max attempts {}, backoff {}..{} ms, max payload {} bytes",
        s.kind,
        s.slots,
        s.lease_ms,
        s.max_attempts,
        s.backoff_ms,
        s.backoff_max_ms,
        s.max_payload_bytes
    );
    if s.rate_per_sec > 0 {
        text += &format!(", rate {}/s (bursts of {})", s.rate_per_sec, s.rate_burst);
    }
    if s.max_in_flight > 0 {
        text += &format!(", at most {} in flight", s.max_in_flight);
    }
    if s.max_pending > 0 {
        text += &format!(", bounded at {} messages", s.max_pending);
    }
    text
}

async fn list(g: &Global, out: Out) -> CliResult {
    let client = connect::client(g).await?;
    let specs = client.topics().await?;
    let mut rows = Vec::new();
    for spec in specs {
        let name = spec.name.clone();
        let topic: Topic = client.topic(&name).await?;
        let stats = topic.stats().await?.total;
        if out.json {
            let bound_held = match topic.spec().max_pending {
                0 => None,
                _ => topic.bound_usage().await?.map(|(held, _)| held),
            };
            out.json(&TopicView {
                spec: &topic.spec(),
                stats,
                bound_held,
            })?;
        } else {
            let s = topic.spec();
            rows.push(vec![
                name,
                s.kind.to_string(),
                s.slots.to_string(),
                stats.pending.to_string(),
                stats.in_flight.to_string(),
                stats.dead.to_string(),
                s.lease_ms.to_string(),
                s.max_attempts.to_string(),
            ]);
        }
    }
    if !out.json {
        if rows.is_empty() {
            output::note(&format!(
                "no topics under prefix {:?} (create one with `rmq topic create`)",
                g.prefix
            ));
            return Ok(());
        }
        output::table(
            &[
                "TOPIC",
                "KIND",
                "SLOTS",
                "PENDING",
                "IN FLIGHT",
                "DEAD",
                "LEASE MS",
                "MAX ATTEMPTS",
            ],
            &rows,
        )?;
    }
    Ok(())
}

async fn show(g: &Global, out: Out, name: &str) -> CliResult {
    let (_client, topic) = connect::topic(g, name).await?;
    let stats = topic.stats().await?.total;
    let s = topic.spec();
    if out.json {
        let bound_held = topic.bound_usage().await?.map(|(held, _)| held);
        return out.json(&TopicView {
            spec: &s,
            stats,
            bound_held,
        });
    }
    let rows: Vec<Vec<String>> = [
        ("topic", s.name.clone()),
        ("kind", s.kind.to_string()),
        ("slots", s.slots.to_string()),
        ("lease", format!("{} ms", s.lease_ms)),
        ("max attempts", s.max_attempts.to_string()),
        (
            "backoff",
            format!("{} ms doubling up to {} ms", s.backoff_ms, s.backoff_max_ms),
        ),
        ("max payload", format!("{} bytes", s.max_payload_bytes)),
        (
            "rate limit",
            match s.rate_per_sec {
                0 => "none".into(),
                r => format!("{r}/s across all consumers, bursts of {}", s.rate_burst),
            },
        ),
        (
            "in-flight cap",
            match s.max_in_flight {
                0 => "none".into(),
                c => format!(
                    "{c} at once across all consumers ({} held now)",
                    topic.in_flight_permits().await?
                ),
            },
        ),
        (
            "bound",
            match topic.bound_usage().await? {
                None => "none".into(),
                Some((held, bound)) => format!(
                    "{bound} messages waiting or in flight ({held} counted now); new sends beyond it are refused"
                ),
            },
        ),
        (
            "handler timeout",
            match s.handler_timeout_ms {
                0 => "none".into(),
                ms => format!("{ms} ms (then the handler is stopped and its message retried)"),
            },
        ),
        (
            "dead letters expire",
            match s.dead_letter_ttl_ms {
                0 => "never (only the count limit)".into(),
                ms => format!("after {ms} ms"),
            },
        ),
        ("past tolerance", format!("{} ms", s.past_tolerance_ms)),
        (
            "dead letters kept",
            if s.dead_letters_per_slot == 0 {
                "all".into()
            } else {
                format!("{} per slot", s.dead_letters_per_slot)
            },
        ),
        ("paused", paused_text(&stats, s.slots)),
        ("pending", stats.pending.to_string()),
        ("  due now", stats.due_now.to_string()),
        ("  scheduled", stats.scheduled.to_string()),
        ("retry waiting", stats.retry_waiting.to_string()),
        ("in flight", stats.in_flight.to_string()),
        ("behind in flight", stats.behind_in_flight.to_string()),
        ("dead", stats.dead.to_string()),
        ("sent", stats.sent.to_string()),
        ("merged", stats.merged.to_string()),
        ("delivered", stats.delivered.to_string()),
        ("acked", stats.acked.to_string()),
        ("retried", stats.retried.to_string()),
        ("dead-lettered", stats.dead_lettered.to_string()),
        ("cancelled", stats.cancelled.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| vec![format!("{k}:"), v])
    .collect();
    let mut text = String::new();
    let w = rows.iter().map(|r| r[0].len()).max().unwrap_or(0);
    for r in &rows {
        text.push_str(&format!("{:<w$} {}\n", r[0], r[1]));
    }
    output::raw(&text)
}

#[cfg(test)]
mod rate_tests {
    use super::parse_rate;

    #[test]
    fn rates_read_per_second_or_per_minute_and_refuse_the_rest() {
        assert_eq!(parse_rate("500"), Ok(500));
        assert_eq!(parse_rate("500/s"), Ok(500));
        assert_eq!(parse_rate("600/min"), Ok(10));
        for bad in ["", "fast", "-1/s", "10/h", "61/min", "5000000000"] {
            assert!(parse_rate(bad).is_err(), "{bad:?}");
        }
    }
}

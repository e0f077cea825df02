//! `rmq topic create|list|show`: topic definitions.
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
use crate::{connect, CliResult, Global};

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
    /// Dead letters kept per slot, the oldest dropped (and counted) beyond;
    /// 0 keeps all [default: 10000]
    #[arg(long, value_name = "N")]
    pub dead_letters_per_slot: Option<u64>,
}

impl CreateArgs {
    /// The definition these options ask for.
    pub fn spec(&self) -> TopicSpec {
        let mut spec = TopicSpec::new(self.topic.clone(), self.kind.into());
        if let Some(n) = self.slots {
            spec = spec.slots(n);
        }
        if let Some(ms) = self.lease {
            spec = spec.lease(Duration::from_millis(ms));
        }
        if let Some(n) = self.dead_letters_per_slot {
            spec = spec.dead_letters_per_slot(n);
        }
        if let Some(n) = self.max_attempts {
            spec = spec.max_attempts(n);
        }
        if self.backoff.is_some() || self.backoff_max.is_some() {
            let first = self.backoff.unwrap_or(spec.backoff_ms);
            let max = self.backoff_max.unwrap_or(spec.backoff_max_ms);
            spec = spec.backoff(Duration::from_millis(first), Duration::from_millis(max));
        }
        if let Some(n) = self.max_payload {
            spec = spec.max_payload_bytes(n);
        }
        spec
    }
}

/// A topic as `show`/`list` print it in JSON: the definition's fields plus
/// the totals.
#[derive(Serialize)]
struct TopicView<'a> {
    #[serde(flatten)]
    spec: &'a TopicSpec,
    stats: Stats,
}

pub async fn run(g: &Global, cmd: TopicCmd) -> CliResult {
    let out = Out { json: g.json };
    match cmd {
        TopicCmd::Create(a) => create(g, out, a).await,
        TopicCmd::List => list(g, out).await,
        TopicCmd::Show { topic } => show(g, out, &topic).await,
    }
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
            spec: s,
        },
        || {
            if existed {
                format!(
                    "topic {:?} already exists exactly so (unchanged): {}",
                    s.name,
                    describe(s)
                )
            } else {
                format!("created topic {:?}: {}", s.name, describe(s))
            }
        },
    )
}

/// The definition on one line.
pub fn describe(s: &TopicSpec) -> String {
    format!(
        "{}, {} slots, lease {} ms, max attempts {}, backoff {}..{} ms, max payload {} bytes",
        s.kind,
        s.slots,
        s.lease_ms,
        s.max_attempts,
        s.backoff_ms,
        s.backoff_max_ms,
        s.max_payload_bytes
    )
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
            out.json(&TopicView {
                spec: topic.spec(),
                stats,
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
        return out.json(&TopicView { spec: s, stats });
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
        ("past tolerance", format!("{} ms", s.past_tolerance_ms)),
        (
            "dead letters kept",
            if s.dead_letters_per_slot == 0 {
                "all".into()
            } else {
                format!("{} per slot", s.dead_letters_per_slot)
            },
        ),
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

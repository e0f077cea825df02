//! `rmq dead list|requeue|purge`: the dead letters of a topic.
//!
//! Requeue and purge take exactly one of `--key K` or `--all`, so that a
//! forgotten argument never purges everything. Requeued messages start
//! again with no attempts counted.
//!
//! `--key` finds a dead letter in the slot of its key: a message that was
//! sent with a different slot basis lives in another slot, and only `--all`
//! reaches it (the library's `DeadSelection::Key` takes no slot).

use clap::{ArgGroup, Args, Subcommand};
use rmq::DeadSelection;
use serde::Serialize;

use super::key_arg;
use super::placed::PlaceJson;
use crate::output::{self, Out};
use crate::{connect, CliResult, Global};
use rmq_serve::views::KeyField;

#[derive(Debug, Subcommand)]
pub enum DeadCmd {
    /// List dead letters, oldest death first
    List {
        /// Topic name
        topic: String,
        /// How many at most
        #[arg(long, value_name = "N", default_value_t = 100)]
        limit: usize,
    },
    /// Give dead letters a fresh start (with --json: one line per letter, its
    /// outcome requeued|merged and its priority or due time as stored, then
    /// the counts)
    Requeue(Select),
    /// Delete dead letters for good
    Purge(Select),
}

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("which").required(true).args(["key", "key_hex", "key_base64", "all", "older_than"])))]
pub struct Select {
    /// Topic name
    pub topic: String,
    /// The dead letter of this merge key (text, also one that starts with '-')
    #[arg(long, value_name = "K", allow_hyphen_values = true)]
    pub key: Option<String>,
    #[arg(long, value_name = "HEX", help = key_arg::HEX_HELP)]
    pub key_hex: Option<String>,
    #[arg(long, value_name = "B64", help = key_arg::BASE64_HELP)]
    pub key_base64: Option<String>,
    /// Every dead letter of the topic
    #[arg(long)]
    pub all: bool,
    /// Purge: the dead letters that died more than MS ago (server clock)
    #[arg(long, value_name = "MS")]
    pub older_than: Option<u64>,
}

impl Select {
    fn which(&self) -> CliResult<DeadSelection> {
        let key = key_arg::key_bytes(
            self.key.as_deref(),
            self.key_hex.as_deref(),
            self.key_base64.as_deref(),
        )?;
        Ok(match (key, self.older_than) {
            (Some(k), _) => DeadSelection::Key(k),
            (None, Some(ms)) => DeadSelection::OlderThan(std::time::Duration::from_millis(ms)),
            (None, None) => DeadSelection::All,
        })
    }
}

#[derive(Serialize)]
struct DeadJson {
    key: String,
    payload: String,
    slot: u32,
    attempts: u32,
    error: String,
    dead_at_ms: i64,
    deaths: u32,
}

/// What a requeue did with one letter (`dead requeue --json`).
#[derive(Serialize)]
struct LetterJson {
    #[serde(flatten)]
    key: KeyField,
    slot: u32,
    /// requeued | merged (into the waiting message of its key)
    outcome: &'static str,
    behind_in_flight: bool,
    #[serde(flatten)]
    place: PlaceJson,
}

impl LetterJson {
    fn of(l: &rmq::RequeuedLetter) -> LetterJson {
        LetterJson {
            key: KeyField::of(&l.key),
            slot: l.slot,
            outcome: if l.merged { "merged" } else { "requeued" },
            behind_in_flight: l.behind_in_flight,
            place: PlaceJson::of_letter(l),
        }
    }
}

#[derive(Serialize)]
struct Requeued {
    requeued: u64,
    merged: u64,
}

#[derive(Serialize)]
struct Purged {
    purged: u64,
}

pub async fn run(g: &Global, cmd: DeadCmd) -> CliResult {
    let out = Out { json: g.json };
    match cmd {
        DeadCmd::List { topic, limit } => list(g, out, &topic, limit).await,
        DeadCmd::Requeue(s) => {
            let (_client, topic) = connect::topic(g, &s.topic).await?;
            let (requeued, merged) = match out.json {
                // One line per letter, then the counts.
                true => {
                    let letters = topic.requeue_dead_each(s.which()?).await?;
                    for l in &letters {
                        out.json(&LetterJson::of(l))?;
                    }
                    let merged = letters.iter().filter(|l| l.merged).count() as u64;
                    (letters.len() as u64 - merged, merged)
                }
                false => topic.requeue_dead(s.which()?).await?,
            };
            out.either(&Requeued { requeued, merged }, || {
                let mut t = format!(
                    "requeued {} dead letter{}",
                    requeued + merged,
                    if requeued + merged == 1 { "" } else { "s" }
                );
                if merged > 0 {
                    t.push_str(&format!(
                        " ({merged} merged into a waiting message of the same key)"
                    ));
                }
                t
            })?;
            not_found_hint(&s, requeued + merged);
            Ok(())
        }
        DeadCmd::Purge(s) => {
            let (_client, topic) = connect::topic(g, &s.topic).await?;
            let purged = topic.purge_dead(s.which()?).await?;
            out.either(&Purged { purged }, || {
                format!(
                    "purged {purged} dead letter{}",
                    if purged == 1 { "" } else { "s" }
                )
            })?;
            not_found_hint(&s, purged);
            Ok(())
        }
    }
}

fn not_found_hint(s: &Select, n: u64) {
    if let (Some(k), 0) = (&s.key, n) {
        output::note(&format!(
            "note: no dead letter with key {k:?} in the slot of that key \
             (a message sent with another --slot-basis is only reached with --all)"
        ));
    }
}

async fn list(g: &Global, out: Out, name: &str, limit: usize) -> CliResult {
    let (_client, topic) = connect::topic(g, name).await?;
    let dead = topic.dead_letters(limit).await?;
    if out.json {
        for d in &dead {
            out.json(&DeadJson {
                key: output::lossy(&d.key),
                payload: output::lossy(&d.payload),
                slot: d.slot,
                attempts: d.attempts,
                error: d.error.clone(),
                dead_at_ms: d.dead_at_ms,
                deaths: d.deaths,
            })?;
        }
        return Ok(());
    }
    if dead.is_empty() {
        output::note(&format!("topic {name:?} has no dead letters"));
        return Ok(());
    }
    let rows: Vec<Vec<String>> = dead
        .iter()
        .map(|d| {
            vec![
                output::cell(&d.key, 40),
                d.slot.to_string(),
                d.attempts.to_string(),
                d.deaths.to_string(),
                output::clock(d.dead_at_ms),
                output::cell(d.error.as_bytes(), 60),
                output::cell(&d.payload, 40),
            ]
        })
        .collect();
    output::table(
        &[
            "KEY", "SLOT", "ATTEMPTS", "DEATHS", "DIED AT", "ERROR", "PAYLOAD",
        ],
        &rows,
    )
}

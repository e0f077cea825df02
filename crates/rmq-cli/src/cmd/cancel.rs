//! `rmq cancel`: cancel messages by merge key.
//!
//! A waiting message (pending or retry-waiting) is removed. A message in
//! flight cannot be taken back from its handler: it is marked so that it
//! ends with its current delivery (a nack or a lease expiry ends it instead
//! of retrying it; its ack still works) and any duplicate parked behind it
//! is dropped. Cancelling twice is harmless. With `--batch`, keys come from
//! stdin, one per line, or as JSON lines: a string, or
//! `{"key": "..", "slot_basis": ".."}`. Every line is read and checked
//! before anything is cancelled.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Read};

use clap::Args;
use rmq::CancelOutcome;
use serde::{Deserialize, Serialize};

use super::key_arg;
use crate::output::{self, Out};
use crate::{connect, CliError, CliResult, Global};
use rmq_serve::views::KeyField;

/// Keys per library call (each call is one pipeline of per-slot scripts).
const CHUNK: usize = 10_000;

#[derive(Debug, Args)]
pub struct CancelArgs {
    /// Topic name
    pub topic: String,
    /// Merge keys to cancel (or --key, --key-hex, --key-base64, each
    /// repeatable)
    #[arg(conflicts_with = "batch")]
    pub keys: Vec<String>,
    /// A merge key as text, also one that starts with '-' (repeatable)
    #[arg(
        long = "key",
        id = "key_text",
        value_name = "K",
        allow_hyphen_values = true,
        conflicts_with = "batch"
    )]
    pub key_text: Vec<String>,
    #[arg(long, value_name = "HEX", help = key_arg::HEX_HELP, conflicts_with = "batch")]
    pub key_hex: Vec<String>,
    #[arg(long, value_name = "B64", help = key_arg::BASE64_HELP, conflicts_with = "batch")]
    pub key_base64: Vec<String>,
    /// Slot basis the messages were sent with (default: each merge key);
    /// with --batch, for lines without one
    #[arg(long, value_name = "B")]
    pub slot_basis: Option<String>,
    /// Read the keys from stdin: one per line, or JSON lines (a string, or
    /// {"key": .., "slot_basis": ..})
    #[arg(long)]
    pub batch: bool,
}

/// One JSON line of `--batch` input.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Line {
    Key(String),
    Full(KeyLine),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyLine {
    key: String,
    slot_basis: Option<String>,
}

#[derive(Serialize)]
struct CancelJson {
    #[serde(flatten)]
    key: KeyField,
    cancelled: bool,
    /// The state before the cancel.
    state: &'static str,
    /// cancelled | will-not-retry | dead (left alone) | absent
    outcome: &'static str,
}

fn outcome_name(o: CancelOutcome) -> &'static str {
    match o {
        CancelOutcome::Cancelled(_) => "cancelled",
        CancelOutcome::WillNotRetry { .. } => "will-not-retry",
        CancelOutcome::Dead => "dead",
        CancelOutcome::Absent => "absent",
    }
}

pub async fn run(g: &Global, a: CancelArgs) -> CliResult {
    let out = Out { json: g.json };
    let items: Vec<(Vec<u8>, Option<String>)> = if a.batch {
        parse_lines(&read_stdin()?, a.slot_basis.as_deref())?
            .into_iter()
            .map(|(k, b)| (k.into_bytes(), b))
            .collect()
    } else {
        let mut keys: Vec<Vec<u8>> = a
            .keys
            .iter()
            .chain(&a.key_text)
            .map(|k| k.clone().into_bytes())
            .collect();
        for h in &a.key_hex {
            keys.extend(key_arg::key_bytes(None, Some(h), None)?);
        }
        for b in &a.key_base64 {
            keys.extend(key_arg::key_bytes(None, None, Some(b))?);
        }
        if keys.is_empty() {
            return Err(CliError::usage(
                "name the keys (arguments, --key, --key-hex, --key-base64) or give --batch",
            ));
        }
        keys.into_iter()
            .map(|k| (k, a.slot_basis.clone()))
            .collect()
    };
    if let Some((i, _)) = items.iter().enumerate().find(|(_, (k, _))| k.is_empty()) {
        return Err(CliError::usage(format!(
            "key {} is empty; nothing was cancelled",
            i + 1
        )));
    }
    let (_client, topic) = connect::topic(g, &a.topic).await?;
    let mut outcomes = Vec::with_capacity(items.len());
    for chunk in items.chunks(CHUNK) {
        outcomes.extend(cancel_chunk(&topic, chunk).await?);
    }
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for ((key, _), o) in items.iter().zip(&outcomes) {
        *counts.entry(outcome_name(*o)).or_default() += 1;
        if out.json {
            out.json(&CancelJson {
                key: KeyField::of(key),
                cancelled: o.cancelled(),
                state: o.state_before().name(),
                outcome: outcome_name(*o),
            })?;
        } else if items.len() <= 20 {
            output::line(&format!("{}: {}", output::cell(key, 80), describe(*o)))?;
        }
    }
    if !out.json && items.len() > 20 {
        let summary: Vec<String> = counts.iter().map(|(k, n)| format!("{n} {k}")).collect();
        output::line(&format!("{} keys: {}", items.len(), summary.join(", ")))?;
    }
    Ok(())
}

fn describe(o: CancelOutcome) -> String {
    match o {
        CancelOutcome::Cancelled(s) => format!("cancelled (was {})", s.name()),
        CancelOutcome::WillNotRetry { already: false } => {
            "in flight: it ends with this delivery and will not be retried".into()
        }
        CancelOutcome::WillNotRetry { already: true } => {
            "in flight, already cancelled: it will not be retried".into()
        }
        CancelOutcome::Dead => "only a dead letter: left alone (see `rmq dead purge --key`)".into(),
        CancelOutcome::Absent => "absent: nothing to cancel".into(),
    }
}

/// Cancels one chunk, grouping keys by slot basis; outcomes in input order.
async fn cancel_chunk(
    topic: &rmq::Topic,
    chunk: &[(Vec<u8>, Option<String>)],
) -> CliResult<Vec<CancelOutcome>> {
    let mut by_basis: BTreeMap<Option<&str>, Vec<usize>> = BTreeMap::new();
    for (i, (_, basis)) in chunk.iter().enumerate() {
        by_basis.entry(basis.as_deref()).or_default().push(i);
    }
    let mut out = vec![CancelOutcome::Absent; chunk.len()];
    for (basis, idxs) in by_basis {
        let keys: Vec<&[u8]> = idxs.iter().map(|&i| &chunk[i].0[..]).collect();
        let got = match basis {
            Some(b) => topic.cancel_in(&keys, b.as_bytes()).await?,
            None => topic.cancel(&keys).await?,
        };
        for (&i, o) in idxs.iter().zip(got) {
            out[i] = o;
        }
    }
    Ok(out)
}

fn read_stdin() -> CliResult<String> {
    let mut stdin = std::io::stdin();
    if stdin.is_terminal() {
        output::note("reading keys from stdin (one per line; Ctrl-D to end)");
    }
    let mut s = String::new();
    stdin
        .read_to_string(&mut s)
        .map_err(|e| CliError::usage(format!("could not read stdin as UTF-8 text: {e}")))?;
    Ok(s)
}

/// Keys (and slot bases) from `--batch` input; blank lines are skipped.
fn parse_lines(
    input: &str,
    default_basis: Option<&str>,
) -> CliResult<Vec<(String, Option<String>)>> {
    let mut items = Vec::new();
    for (n, line) in input.lines().enumerate() {
        let t = line.trim();
        if t.is_empty() {
            continue;
        }
        let (key, basis) = if t.starts_with('{') || t.starts_with('"') {
            match serde_json::from_str::<Line>(t) {
                Ok(Line::Key(k)) => (k, None),
                Ok(Line::Full(KeyLine { key, slot_basis })) => (key, slot_basis),
                Err(e) => {
                    return Err(CliError::usage(format!(
                        "line {}: not a key: {e} (give a key per line, a JSON string, or \
                         {{\"key\": .., \"slot_basis\": ..}}); nothing was cancelled",
                        n + 1
                    )))
                }
            }
        } else {
            (line.to_string(), None)
        };
        items.push((key, basis.or_else(|| default_basis.map(str::to_string))));
    }
    if items.is_empty() {
        return Err(CliError::usage("no keys on stdin; nothing was cancelled"));
    }
    Ok(items)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_lines_are_plain_keys_json_strings_or_objects() {
        let input = "a\n\n\"b c\"\n{\"key\": \"d\", \"slot_basis\": \"m\"}\n{\"key\": \"e\"}\n";
        let got = parse_lines(input, Some("z")).unwrap();
        let want = [
            ("a", Some("z")),
            ("b c", Some("z")),
            ("d", Some("m")),
            ("e", Some("z")),
        ];
        assert_eq!(got.len(), want.len());
        for ((k, b), (wk, wb)) in got.iter().zip(want) {
            assert_eq!((k.as_str(), b.as_deref()), (wk, wb));
        }
        assert!(parse_lines("{\"kee\": 1}\n", None).is_err());
        assert!(parse_lines("{\"key\": \"k\", \"slot\": 1}\n", None).is_err());
        assert!(parse_lines("\n\n", None).is_err());
    }
}

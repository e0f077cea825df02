//! `rmq stats`: depth per state and counters, per topic (all topics of the
//! prefix when none is named), optionally per slot, once or every second.
//!
//! Text mode prints two tables, depth (what is where now) and counters
//! (what happened since the topic was created), because one table with
//! thirteen number columns does not fit a terminal. `--slots` adds a row
//! per slot that holds or ever held anything (a topic may have 65536 slots,
//! most of them empty). `--watch` redraws every second and shows each
//! counter's rate per second, computed from the server clock of two
//! readings.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::time::Duration;

use clap::Args;
use rmq::{Client, Stats, Topic, TopicStats};
use serde::Serialize;
use tokio::signal::unix::{signal, SignalKind};

use crate::output::{self, Out};
use crate::{connect, CliError, CliResult, Global};

#[derive(Debug, Args)]
pub struct StatsArgs {
    /// Topic name (default: every topic under the prefix)
    pub topic: Option<String>,
    /// Add a row per slot that holds or ever held anything
    #[arg(long)]
    pub slots: bool,
    /// Refresh every second, with rates per second, until Ctrl-C
    #[arg(long)]
    pub watch: bool,
}

/// Counter rates per second.
#[derive(Debug, Clone, Copy, Default, Serialize)]
struct Rates {
    sent: f64,
    merged: f64,
    delivered: f64,
    acked: f64,
    retried: f64,
    dead_lettered: f64,
}

impl Rates {
    fn between(old: &Stats, old_ms: i64, new: &Stats, new_ms: i64) -> Option<Rates> {
        let secs = (new_ms - old_ms) as f64 / 1000.0;
        if secs <= 0.0 {
            return None;
        }
        let r = |a: u64, b: u64| b.saturating_sub(a) as f64 / secs;
        Some(Rates {
            sent: r(old.sent, new.sent),
            merged: r(old.merged, new.merged),
            delivered: r(old.delivered, new.delivered),
            acked: r(old.acked, new.acked),
            retried: r(old.retried, new.retried),
            dead_lettered: r(old.dead_lettered, new.dead_lettered),
        })
    }
}

#[derive(Serialize)]
struct SlotJson {
    slot: u32,
    #[serde(flatten)]
    stats: Stats,
}

#[derive(Serialize)]
struct TopicJson<'a> {
    topic: &'a str,
    kind: String,
    slots: u32,
    #[serde(flatten)]
    stats: Stats,
    #[serde(skip_serializing_if = "Option::is_none")]
    per_slot: Option<Vec<SlotJson>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rates: Option<Rates>,
    #[serde(skip_serializing_if = "Option::is_none")]
    server_ms: Option<i64>,
}

/// One reading of one topic.
struct Reading {
    topic: Topic,
    stats: TopicStats,
    rates: Option<Rates>,
}

pub async fn run(g: &Global, a: StatsArgs) -> CliResult {
    let out = Out { json: g.json };
    let client = connect::client(g).await?;
    if !a.watch {
        let readings = read(&client, a.topic.as_deref(), &mut HashMap::new(), false).await?;
        return print(out, &a, &readings);
    }
    let mut sigint = signal(SignalKind::interrupt())
        .map_err(|e| CliError::runtime(format!("cannot listen for SIGINT: {e}")))?;
    let mut sigterm = signal(SignalKind::terminate())
        .map_err(|e| CliError::runtime(format!("cannot listen for SIGTERM: {e}")))?;
    let clear = !out.json && std::io::stdout().is_terminal();
    let mut prev = HashMap::new();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = sigint.recv() => return Ok(()),
            _ = sigterm.recv() => return Ok(()),
        }
        let readings = read(&client, a.topic.as_deref(), &mut prev, true).await?;
        if clear {
            output::raw("\x1b[2J\x1b[H")?;
        } else if !out.json {
            output::line("")?;
        }
        if !out.json {
            let server_ms = readings.first().map_or(0, |r| r.stats.server_ms);
            output::line(&format!(
                "{} (server time; every 1 s; Ctrl-C stops)",
                output::clock(server_ms)
            ))?;
        }
        print(out, &a, &readings)?;
    }
}

async fn read(
    client: &Client,
    name: Option<&str>,
    prev: &mut HashMap<String, (Stats, i64)>,
    rates: bool,
) -> CliResult<Vec<Reading>> {
    let names: Vec<String> = match name {
        Some(n) => vec![n.to_string()],
        None => client.topics().await?.into_iter().map(|s| s.name).collect(),
    };
    let mut out = Vec::with_capacity(names.len());
    for n in names {
        let topic = client.topic(&n).await?;
        let stats = topic.stats().await?;
        let rates = if rates {
            let r = prev
                .get(&n)
                .and_then(|(s, ms)| Rates::between(s, *ms, &stats.total, stats.server_ms));
            prev.insert(n, (stats.total, stats.server_ms));
            Some(r.unwrap_or_default())
        } else {
            None
        };
        out.push(Reading {
            topic,
            stats,
            rates,
        });
    }
    Ok(out)
}

fn nonempty_slots(s: &TopicStats) -> impl Iterator<Item = (u32, &Stats)> {
    s.slots
        .iter()
        .enumerate()
        .filter(|(_, st)| **st != Stats::default())
        .map(|(i, st)| (i as u32, st))
}

fn print(out: Out, a: &StatsArgs, readings: &[Reading]) -> CliResult {
    if out.json {
        for r in readings {
            let spec = r.topic.spec();
            out.json(&TopicJson {
                topic: &spec.name,
                kind: spec.kind.to_string(),
                slots: spec.slots,
                stats: r.stats.total,
                per_slot: a.slots.then(|| {
                    nonempty_slots(&r.stats)
                        .map(|(slot, s)| SlotJson { slot, stats: *s })
                        .collect()
                }),
                rates: r.rates,
                server_ms: a.watch.then_some(r.stats.server_ms),
            })?;
        }
        return Ok(());
    }
    if readings.is_empty() {
        output::note("no topics under this prefix (create one with `rmq topic create`)");
        return Ok(());
    }
    let mut depth = Vec::new();
    let mut counters = Vec::new();
    for r in readings {
        let spec = r.topic.spec();
        // A paused topic says so by its name (`topic show` says how many slots).
        let name = match r.stats.total.paused_slots {
            0 => spec.name.clone(),
            n if n == u64::from(spec.slots) => format!("{} (paused)", spec.name),
            n => format!("{} ({n}/{} slots paused)", spec.name, spec.slots),
        };
        let mut rows: Vec<(String, &Stats)> = vec![(name, &r.stats.total)];
        if a.slots {
            rows.extend(nonempty_slots(&r.stats).map(|(i, s)| (format!("  slot {i}"), s)));
        }
        for (i, (label, s)) in rows.into_iter().enumerate() {
            let top = i == 0;
            depth.push(vec![
                label.clone(),
                if top {
                    spec.kind.to_string()
                } else {
                    String::new()
                },
                if top {
                    spec.slots.to_string()
                } else {
                    String::new()
                },
                s.pending.to_string(),
                s.due_now.to_string(),
                s.scheduled.to_string(),
                s.retry_waiting.to_string(),
                s.in_flight.to_string(),
                s.behind_in_flight.to_string(),
                s.dead.to_string(),
            ]);
            let rate = |n: u64, f: fn(&Rates) -> f64| match (&r.rates, top) {
                (Some(rt), true) => format!("{n} (+{:.1}/s)", f(rt)),
                _ => n.to_string(),
            };
            counters.push(vec![
                label,
                rate(s.sent, |r| r.sent),
                rate(s.merged, |r| r.merged),
                rate(s.delivered, |r| r.delivered),
                rate(s.acked, |r| r.acked),
                rate(s.retried, |r| r.retried),
                rate(s.dead_lettered, |r| r.dead_lettered),
            ]);
        }
    }
    output::table(
        &[
            "TOPIC",
            "KIND",
            "SLOTS",
            "PENDING",
            "DUE NOW",
            "SCHEDULED",
            "RETRY WAITING",
            "IN FLIGHT",
            "BEHIND IN FLIGHT",
            "DEAD",
        ],
        &depth,
    )?;
    output::line("")?;
    output::table(
        &[
            "TOPIC",
            "SENT",
            "MERGED",
            "DELIVERED",
            "ACKED",
            "RETRIED",
            "DEAD-LETTERED",
        ],
        &counters,
    )
}

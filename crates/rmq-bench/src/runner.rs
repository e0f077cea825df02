//! Running one case safely: fresh prefix, time budget, cleanup, error and
//! skip lines, and a watchdog thread for a runtime that stops responding.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Result;
use rmq::{Client, TopicKind};
use serde_json::json;

use crate::env::Env;
use crate::report::Row;

/// Collects rows, errors and skipped cases.
#[derive(Default)]
pub(crate) struct Results {
    pub(crate) rows: Vec<Row>,
    pub(crate) errors: Vec<String>,
    pub(crate) skipped: Vec<String>,
}

impl Results {
    pub(crate) fn skip(&mut self, scenario: &str, kind: TopicKind, label: &str, why: String) {
        let line =
            json!({"scenario": scenario, "kind": kind.as_str(), "params": label, "skipped": why});
        println!("{line}");
        eprintln!("SKIPPED {scenario} {} {label}: {why}", kind.as_str());
        self.skipped
            .push(format!("{scenario} {} {label}: {why}", kind.as_str()));
    }

    pub(crate) fn fail(&mut self, scenario: &str, kind: TopicKind, label: &str, error: String) {
        let line =
            json!({"scenario": scenario, "kind": kind.as_str(), "params": label, "error": error});
        println!("{line}");
        eprintln!("ERROR {scenario} {} {label}: {error}", kind.as_str());
        self.errors
            .push(format!("{scenario} {} {label}: {error}", kind.as_str()));
    }
}

/// The case running now and when the watchdog gives up on it.
pub(crate) static CURRENT: Mutex<Option<(Instant, String)>> = Mutex::new(None);

pub(crate) fn set_current(v: Option<(Instant, String)>) {
    *CURRENT.lock().unwrap_or_else(|p| p.into_inner()) = v;
}

/// A plain thread that ends the process when a case overruns its budget by
/// far: the in-runtime timeouts cannot fire if a library bug blocks every
/// runtime worker. Kills the throwaway server first.
pub(crate) fn spawn_watchdog(server: Arc<Mutex<Option<crate::env::Servers>>>) {
    std::thread::spawn(move || loop {
        std::thread::sleep(Duration::from_millis(500));
        let overdue = CURRENT
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .filter(|(deadline, _)| Instant::now() > *deadline)
            .map(|(_, name)| name.clone());
        if let Some(name) = overdue {
            let error = format!("{name}: hung (runtime unresponsive); watchdog abort");
            println!("{}", json!({"scenario": name, "error": error}));
            eprintln!("ERROR {error}");
            drop(server.lock().unwrap_or_else(|p| p.into_inner()).take());
            std::process::exit(3);
        }
    });
}

/// Runs one case with a fresh prefix, a time budget and a cleanup.
pub(crate) async fn run_case<F, Fut>(
    env: &Env,
    out: &mut Results,
    (scenario, kind, label): (&'static str, TopicKind, String),
    msgs: u64,
    f: F,
) where
    F: FnOnce(Client) -> Fut,
    Fut: Future<Output = Result<Row>>,
{
    let budget = env.budget(msgs);
    set_current(Some((
        Instant::now() + budget + Duration::from_secs(120),
        format!("{scenario} {} {label}", kind.as_str()),
    )));
    let client = match tokio::time::timeout(Duration::from_secs(20), env.client()).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => return out.fail(scenario, kind, &label, format!("{e:#}")),
        Err(_) => return out.fail(scenario, kind, &label, "connect timed out".into()),
    };
    let result = tokio::time::timeout(budget, f(client.clone())).await;
    match tokio::time::timeout(Duration::from_secs(60), env.cleanup(&client)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => eprintln!("warning: cleanup of {} failed: {e:#}", client.prefix()),
        Err(_) => eprintln!("warning: cleanup of {} timed out", client.prefix()),
    }
    set_current(None);
    match result {
        Ok(Ok(row)) => {
            println!("{}", row.to_json());
            out.rows.push(row);
        }
        Ok(Err(e)) => out.fail(scenario, kind, &label, format!("{e:#}")),
        Err(_) => out.fail(
            scenario,
            kind,
            &label,
            format!("timed out after {} s", budget.as_secs()),
        ),
    }
}

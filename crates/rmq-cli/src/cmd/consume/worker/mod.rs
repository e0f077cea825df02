//! `--worker CMD --workers N`: N long-lived processes of `sh -c CMD` take
//! the deliveries, so a handler in any language pays for its start once,
//! not once per message as with `--exec`. Each delivery goes to the worker
//! with the fewest in hand as one JSON line on its stdin; the worker
//! answers with one result line on its stdout, in any order, up to
//! `--worker-concurrency` deliveries in hand at once (`lines` has the
//! protocol, `process` the worker's life).
//!
//! While a worker holds a delivery its lease is extended. A worker that
//! exits or is killed, or writes a line that is not a result, is started
//! again, and the deliveries it held are **retried** (the attempt counts:
//! it may have done part of the work). A delivery past its timeout
//! (`--timeout`, else the topic's) is retried and its worker killed and
//! started again, since a hung handler cannot be stopped otherwise; the
//! other deliveries it held are retried too. In serial mode, a worker that
//! holds a delivery whose slot lease is lost is killed (and waited for)
//! before the message goes back, so no handler runs on while another
//! member handles the slot. On SIGINT/SIGTERM/SIGHUP the deliveries in
//! hand are released and the workers killed.

mod lines;
mod process;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rmq::{Delivery, LeaseLost};

use super::verdict::Verdict;
use super::{release, report_outcome, Ctx, Ended};
use crate::output;
use process::{Counted, Worker};

/// The running workers.
pub(super) struct Workers {
    all: Vec<Arc<Worker>>,
    supervisors: Vec<tokio::task::JoinHandle<()>>,
    next_id: AtomicU64,
}

/// How long stopping waits for the workers to be reaped.
const STOP_WAIT: Duration = Duration::from_secs(5);

impl Workers {
    /// Starts `n` workers of `cmd`.
    pub(super) fn start(cmd: &str, n: usize, ctx: &Arc<Ctx>) -> Workers {
        let (all, supervisors) = (1..=n.max(1))
            .map(|i| Worker::start(i, cmd.to_string(), ctx.clone()))
            .unzip();
        Workers {
            all,
            supervisors,
            next_id: AtomicU64::new(1),
        }
    }

    /// Stops the workers (once every delivery has ended: nothing holds a
    /// worker then) and waits for them to be reaped.
    pub(super) async fn stop(self) {
        drop(self.all);
        let reaped = futures::future::join_all(self.supervisors);
        if tokio::time::timeout(STOP_WAIT, reaped).await.is_err() {
            output::warn_line("the workers did not stop within 5 s");
        }
    }

    /// The worker with the fewest deliveries in hand (the first such;
    /// None only for a pool of none, which `start` never makes).
    fn least_busy(&self) -> Option<Arc<Worker>> {
        self.all
            .iter()
            .min_by_key(|w| w.in_flight.load(Ordering::Relaxed))
            .cloned()
    }
}

/// Hands `d` to a worker and ends it by the worker's result.
pub(super) async fn handle_worker(ctx: &Ctx, d: Delivery, workers: &Workers) -> Ended {
    let m = d.message().clone();
    let Some(worker) = workers.least_busy().map(Counted::new) else {
        return super::nack(ctx, d, "no worker is running").await;
    };
    let id = workers.next_id.fetch_add(1, Ordering::Relaxed).to_string();
    let line = lines::delivery(&id, &m);
    let (handed, answer) = worker.0.deliver(id, line);
    let limit = ctx.handler_timeout_of(&m.topic);
    // Counted from when the worker has it (not while one is started).
    let timed_out = async {
        match (limit, handed.await) {
            (Some(limit), Ok(())) => tokio::time::sleep(limit).await,
            _ => std::future::pending().await,
        }
    };
    let verdict = tokio::select! {
        r = d.while_held(answer, ctx.lease_of(&m.topic), true) => match r {
            Ok(Ok(Ok(verdict))) => verdict,
            Ok(Ok(Err(why))) => Verdict::retry(why),
            Ok(Err(_)) => Verdict::retry(format!("worker {} stopped", worker.0.number)),
            Err(LeaseLost) => {
                // Serial mode: another member may take the slot's message
                // now. A worker cannot be told to drop one delivery: it is
                // killed (and waited for) before the message goes back;
                // the others it held are retried.
                worker
                    .0
                    .kill_and_wait(format!("was killed: the lease of slot {} was lost", m.slot))
                    .await;
                output::warn_line(&format!(
                    "slot {} lease lost: worker {} killed",
                    m.slot, worker.0.number
                ));
                return Ended::Failed;
            }
        },
        () = ctx.kill.cancelled() => {
            let ended = release(d).await;
            report_outcome(ctx, &m, &ended, None);
            return ended;
        }
        () = timed_out => {
            let error = format!("timed out after {:?}", limit.unwrap_or_default());
            output::warn_line(&format!(
                "a delivery at worker {} {error}: the worker is restarted",
                worker.0.number
            ));
            worker.0.kill(format!("killed: a delivery it held {error}"));
            Verdict::retry(error)
        }
    };
    let (ended, error) = verdict.end(ctx, d).await;
    report_outcome(ctx, &m, &ended, error.as_deref());
    ended
}

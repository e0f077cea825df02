//! Phase two, batched: acks, nacks, dead-letterings, extensions and
//! releases from all deliveries of a consumer go through one task that
//! drains whatever has queued up, groups it by slot and sends one script
//! call per slot, all in one pipeline. Under load this turns many settles
//! into one round trip; when idle it adds no delay.
//!
//! The same task frees in-flight cap permits (see `flow/inflight.rs`), after the
//! settles queued before them: a permit is given back only once its
//! delivery's end is recorded. On a bounded topic it also gives back one
//! unit of room per message that ended (acked, dead, superseded by its
//! duplicate, cancelled), in the same round trip as the frees.
//!
//! A consumer's ends may also take (`chain.rs`): a delivery that ends hands
//! its room for one message (and in serial mode its claim on the slot) to
//! its settle, whose call then takes the slot's next due messages too
//! (`settle_take.lua`). Those are handed out as deliveries from here, so a
//! consumer at concurrency 1 makes one round trip per message. What a
//! call takes for a handler of [`ConsumerBuilder::run`] goes back to that
//! handler's task with the settle's answer, which handles it next.
//!
//! A settle that could not join a batch anyway (the consumer has no other
//! delivery in flight and nothing is queued here) skips this task: the
//! ending delivery makes the call itself, so a lone handler's message
//! costs one task hand-off each way (Redis's reply to the handler, the
//! handler's call to Redis) instead of three.
//!
//! [`ConsumerBuilder::run`]: crate::consumer::ConsumerBuilder::run

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::sync::{mpsc, oneshot};

use super::Delivery;
use crate::consumer::flow::inflight::{Permits, MARGIN_MS};
use chain::{Chain, Taker};

use crate::error::{Error, ErrorKind, Result};
use crate::group::Fence;
use crate::keys;
use crate::scripts::settle::{self, SettleRequest};
use crate::scripts::{inflight, room};
use crate::topic::Topic;

/// Settles drained per pipeline at most.
const MAX_DRAIN: usize = 4_096;
/// Scheduler turns to wait for more settles when the batch is small.
const GATHER_TURNS: usize = 3;
/// A batch this big is sent at once.
const FULL_ENOUGH: usize = 64;
/// Operations per script call at most.
const PER_CALL: usize = 500;

/// Owner and epoch of a serial-mode settle, as a grouping key.
type FenceKey = (std::sync::Arc<str>, u64);

pub(crate) use crate::outcome::Settled;

pub(crate) use crate::scripts::settle::Op;

pub(in crate::consumer) mod chain;
mod task;

use task::{flush, run};

pub(crate) struct Request {
    pub(crate) slot: u32,
    /// The delivery id (see `Received::id`).
    pub(crate) id: Vec<u8>,
    pub(crate) fence: Option<Fence>,
    pub(crate) op: Op,
    pub(crate) reply: Option<oneshot::Sender<Answer>>,
    /// Room (and serial mode's claim) for a message taken in the same call.
    pub(crate) take: Option<Taker>,
}

/// A settle's outcome; its taker back when the call failed (the delivery
/// keeps its room and claim while it tries again); and the delivery the
/// call took for it, when its taker asked for it back
/// ([`Taker::back`]).
pub(crate) struct Answer {
    pub(crate) outcome: Result<Settled>,
    pub(crate) taker: Option<Taker>,
    pub(crate) next: Next,
}

impl Answer {
    fn failed(e: Error, taker: Option<Taker>) -> Answer {
        Answer {
            outcome: Err(e),
            taker,
            next: Next(None),
        }
    }

    /// Tells the waiting settle; when it is gone (its task was dropped),
    /// what the call took for it goes back untouched (see [`Next`]).
    fn send(self, to: oneshot::Sender<Answer>) {
        let _ = to.send(self);
    }
}

/// The delivery a call took for an ending delivery's task. Dropped before
/// that task took it in hand (the task was aborted while the answer was
/// on its way), it goes back untouched, as one still in the consumer's
/// stream does when the stream is dropped: no attempt is counted.
pub(crate) struct Next(Option<Delivery>);

impl Next {
    /// The delivery, now in the hands of the caller.
    pub(crate) fn take(mut self) -> Option<Delivery> {
        self.0.take()
    }
}

impl Drop for Next {
    fn drop(&mut self) {
        if let Some(d) = self.0.take() {
            d.release_detached();
        }
    }
}

/// How busy a settler is: deliveries that may still settle through it,
/// and jobs sent to its task that it has not finished. Both zero: a
/// settle would make a batch of one, so it skips the task.
#[derive(Default)]
pub(crate) struct Load {
    live: AtomicUsize,
    queued: AtomicUsize,
}

impl Load {
    fn alone(&self) -> bool {
        self.live.load(Ordering::Acquire) == 0 && self.queued.load(Ordering::Acquire) == 0
    }

    /// Waits, up to `limit`, until every job sent to the settling task so
    /// far is done: a consumer that stops returns once the settles and
    /// permit frees of its last deliveries are recorded, not while they
    /// are still on their way.
    pub(crate) async fn drained(&self, limit: std::time::Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        while self.queued.load(Ordering::Acquire) > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }
}

/// A delivery not yet ended, counted in its settler's [`Load`] until it
/// is dropped (when it starts its end, or with the delivery).
pub(crate) struct Live(Arc<Load>);

impl Drop for Live {
    fn drop(&mut self) {
        self.0.live.fetch_sub(1, Ordering::AcqRel);
    }
}

/// What the settling task is asked to do.
enum Job {
    Settle(Request),
    /// Free these in-flight cap permits (after the settles before them).
    Free(Vec<String>),
}

/// Handle to the settling task; clone it into every delivery.
#[derive(Clone)]
pub(crate) struct Settler {
    tx: mpsc::UnboundedSender<Job>,
    topic: Topic,
    permits: Arc<Permits>,
    /// A consumer's settler: where the messages its ends take go.
    chain: Option<Arc<Chain>>,
    load: Arc<Load>,
}

impl Settler {
    /// A settler whose ends take nothing (taking by hand, `life/take.rs`).
    pub(crate) fn spawn(topic: Topic, permits: Arc<Permits>) -> Settler {
        Settler::spawn_with(topic, permits, None)
    }

    /// A consumer's settler: ends may take the slot's next messages and
    /// hand them out through `chain`.
    pub(crate) fn spawn_with(
        topic: Topic,
        permits: Arc<Permits>,
        chain: Option<Arc<Chain>>,
    ) -> Settler {
        let (tx, rx) = mpsc::unbounded_channel();
        let settler = Settler {
            tx,
            topic,
            permits,
            chain,
            load: Arc::default(),
        };
        // The task makes deliveries of what the ends took, each with a
        // handle like this one; a weak one, so that the task still ends
        // once every handle is gone.
        tokio::spawn(run(settler.weak(), rx));
        settler
    }

    fn weak(&self) -> WeakSettler {
        WeakSettler {
            tx: self.tx.downgrade(),
            topic: self.topic.clone(),
            permits: self.permits.clone(),
            chain: self.chain.clone(),
            load: self.load.clone(),
        }
    }

    /// What this settler has in hand (see [`Load::drained`]).
    pub(crate) fn load(&self) -> Arc<Load> {
        self.load.clone()
    }

    /// Counts a new delivery in this settler's load until the guard drops.
    pub(crate) fn live(&self) -> Live {
        self.load.live.fetch_add(1, Ordering::AcqRel);
        Live(self.load.clone())
    }

    /// Sends a job to the settling task, counted in its load until done;
    /// the job comes back when the task is gone.
    fn send(&self, job: Job) -> Option<Job> {
        self.load.queued.fetch_add(1, Ordering::AcqRel);
        let e = self.tx.send(job).err()?;
        self.load.queued.fetch_sub(1, Ordering::AcqRel);
        Some(e.0)
    }

    /// Whether an end of a delivery may take the slot's next messages in
    /// the same call now (`chain.rs` says when).
    pub(crate) fn may_take(&self) -> bool {
        self.chain.as_ref().is_some_and(|c| c.open(&self.topic))
    }

    /// The topic it settles for.
    pub(crate) fn topic(&self) -> &Topic {
        &self.topic
    }

    /// This consumer's in-flight cap permits.
    pub(crate) fn permits(&self) -> &Arc<Permits> {
        &self.permits
    }

    /// Frees in-flight cap permits once the settles queued before them
    /// are recorded (in the background).
    pub(crate) fn free_permits(&self, tokens: Vec<String>) {
        if !tokens.is_empty() {
            let _ = self.send(Job::Free(tokens));
        }
    }

    /// Pushes a permit's deadline to `lease_ms` (plus the margin) from now,
    /// after its delivery's lease was extended by as much.
    pub(crate) async fn extend_permit(&self, token: &str, lease_ms: u64) -> Result<()> {
        let (id, cmd) = inflight::extend(self.permits.keys(), lease_ms + MARGIN_MS, &[token]);
        self.topic.redis().run_one(id, cmd).await.map(|_| ())
    }

    /// Settles and waits for the outcome.
    pub(crate) async fn settle(
        &self,
        slot: u32,
        id: Vec<u8>,
        fence: Option<Fence>,
        op: Op,
    ) -> Result<Settled> {
        self.settle_taking(slot, id, fence, op, None, false)
            .await
            .outcome
    }

    /// Settles, the call taking the slot's next message for `take` when it
    /// may (see `chain.rs`), and waits for the outcome; the taker comes back
    /// when the call failed. With `inline`, a settle that would be alone in
    /// its batch makes the call itself (see the module docs); it runs to
    /// its end even if the caller stops waiting, as one sent to the
    /// settling task does. (A delivery holding an in-flight cap permit
    /// never settles inline: its permit is freed through the settling
    /// task, after the settles queued before it.)
    pub(crate) async fn settle_taking(
        &self,
        slot: u32,
        id: Vec<u8>,
        fence: Option<Fence>,
        op: Op,
        take: Option<Taker>,
        inline: bool,
    ) -> Answer {
        let stopped = || Error::new(ErrorKind::Shutdown, "the consumer has stopped");
        let (reply, rx) = oneshot::channel();
        let request = Request {
            slot,
            id,
            fence,
            op,
            reply: Some(reply),
            take,
        };
        if inline && self.load.alone() {
            // A handle of its own keeps the settling task and the means
            // to end what the call takes, whoever else is gone by then.
            let (me, handle) = (self.weak(), self.clone());
            ToTheEnd::new(async move {
                let ended = flush(&me, vec![request]).await;
                // Given back before the end returns, as the settling task
                // does before its next batch: a process that exits right
                // after its last ack still gives back that message's room.
                handle.topic.give_back_room(ended).await;
                // Dropped here, whole (the block would otherwise keep only
                // the field it reads).
                drop(handle);
            })
            .await;
        } else if let Some(job) = self.send(Job::Settle(request)) {
            let taker = match job {
                Job::Settle(r) => r.take,
                Job::Free(_) => None,
            };
            return Answer::failed(stopped(), taker);
        }
        rx.await.unwrap_or_else(|_| Answer::failed(stopped(), None))
    }

    /// Settles without waiting (used on drop, where nothing can be awaited).
    pub(crate) fn settle_detached(&self, slot: u32, id: Vec<u8>, fence: Option<Fence>, op: Op) {
        let _ = self.send(Job::Settle(Request {
            slot,
            id,
            fence,
            op,
            reply: None,
            take: None,
        }));
    }
}

/// An inline settle's call, which finishes in the background if its
/// caller drops it before it has: an end that began is never cut short
/// (a handler task aborted mid-ack, an ack under a timeout), so its
/// message is settled, and what it took is given back, as when it goes
/// through the settling task.
///
/// The call sits behind a mutex only so that the future stays `Sync`, as an
/// end's future was before (`get_mut`: it is never locked). It is taken
/// out while polled, so a call that panicked is not run again on drop.
struct ToTheEnd(std::sync::Mutex<Option<Call>>);

type Call = Pin<Box<dyn Future<Output = ()> + Send>>;

impl ToTheEnd {
    fn new(call: impl Future<Output = ()> + Send + 'static) -> ToTheEnd {
        ToTheEnd(std::sync::Mutex::new(Some(Box::pin(call))))
    }

    fn call(&mut self) -> &mut Option<Call> {
        self.0
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Future for ToTheEnd {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let Some(mut call) = self.call().take() else {
            return Poll::Ready(());
        };
        let done = call.as_mut().poll(cx);
        if done.is_pending() {
            *self.call() = Some(call);
        }
        done
    }
}

impl Drop for ToTheEnd {
    fn drop(&mut self) {
        if let (Some(call), Ok(rt)) = (self.call().take(), tokio::runtime::Handle::try_current()) {
            rt.spawn(call);
        }
    }
}

/// The settling task's own handle: a settler that does not keep the task
/// alive, upgraded to a [`Settler`] for each delivery it makes.
pub(crate) struct WeakSettler {
    tx: mpsc::WeakUnboundedSender<Job>,
    pub(crate) topic: Topic,
    permits: Arc<Permits>,
    pub(crate) chain: Option<Arc<Chain>>,
    load: Arc<Load>,
}

impl WeakSettler {
    /// A handle for a new delivery (None once every other handle is gone:
    /// then nobody could end it).
    pub(crate) fn upgrade(&self) -> Option<Settler> {
        Some(Settler {
            tx: self.tx.upgrade()?,
            topic: self.topic.clone(),
            permits: self.permits.clone(),
            chain: self.chain.clone(),
            load: self.load.clone(),
        })
    }
}

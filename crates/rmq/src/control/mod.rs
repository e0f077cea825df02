//! Steering a live queue by merge key: look a key up ([`Topic::get`](crate::Topic::get)),
//! cancel messages ([`Topic::cancel`](crate::Topic::cancel)), give a waiting message a new due
//! time or priority ([`Topic::reschedule`](crate::Topic::reschedule)), and pause or resume a whole
//! topic ([`Topic::pause`](crate::Topic::pause), [`Topic::resume`](crate::Topic::resume)).
//!
//! Each is one script call per slot, atomic there, on the server's clock: a
//! cancel racing a consumer's pop ends either before the pop (never
//! delivered) or after it (delivered once, never retried). A key lives in
//! the slot of its slot basis, which is the key itself unless the message
//! was sent with [`Message::slot_basis`](crate::Message::slot_basis): the
//! `_in` variants take that basis.
//!
//! One file per operation: `lookup.rs`, `cancel.rs`, `reschedule.rs`,
//! `pause.rs`, and `groups.rs` (who serves a topic in serial mode); the
//! types they answer with are here.

mod cancel;
mod groups;
mod lookup;
mod pause;
mod reschedule;

pub(crate) use groups::group_names;
pub use groups::{GroupMember, SerialGroup, SerialView};

use crate::error::{Error, ErrorKind, Result};
use crate::message::MAX_KEY_BYTES;
use crate::outcome::Moved;

/// Slots per pipeline in the operations that visit many slots.
const SLOTS_PER_ROUND: usize = 256;

/// Where a message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Waiting to be taken (due or not).
    Pending,
    /// Waiting after a failed attempt, until its backoff ends.
    RetryWaiting,
    /// Being handled.
    InFlight,
    /// Only a dead letter of the key is left.
    Dead,
    /// No message of the key.
    Absent,
}

impl State {
    /// The name the CLI and the JSON use (`pending`, `retry-waiting`, ...).
    pub fn name(self) -> &'static str {
        match self {
            State::Pending => "pending",
            State::RetryWaiting => "retry-waiting",
            State::InFlight => "in-flight",
            State::Dead => "dead",
            State::Absent => "absent",
        }
    }
}

/// A duplicate that arrived while its key was in flight and waits behind
/// the delivery (it becomes pending when the delivery ends).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parked {
    /// Its payload.
    pub payload: Vec<u8>,
    /// Priority topics: its priority.
    pub priority: Option<u32>,
    /// Time-based topics: its due time (Unix ms).
    pub due_ms: Option<i64>,
}

/// A key's dead letter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadInfo {
    /// Its payload.
    pub payload: Vec<u8>,
    /// Deliveries it had.
    pub attempts: u32,
    /// The last error.
    pub error: String,
    /// When it died (Unix ms, server clock).
    pub dead_at_ms: i64,
    /// How many times the key died.
    pub deaths: u32,
}

/// Everything about one merge key, at one moment of the server's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lookup {
    /// The merge key.
    pub key: Vec<u8>,
    /// Where it is.
    pub state: State,
    /// The slot it lives in.
    pub slot: u32,
    /// Its payload (None when absent or dead: see `dead`).
    pub payload: Option<Vec<u8>>,
    /// Deliveries so far (in flight: this delivery's number).
    pub attempts: u32,
    /// Priority topics: its priority.
    pub priority: Option<u32>,
    /// Time-based topics: its due time (Unix ms).
    pub due_ms: Option<i64>,
    /// Retry-waiting: when it may be taken again (Unix ms).
    pub next_attempt_ms: Option<i64>,
    /// In flight: when its lease ends (Unix ms).
    pub lease_until_ms: Option<i64>,
    /// In flight in serial mode: the slot lease's fencing epoch.
    pub fence: Option<u64>,
    /// The last failed attempt's error (retry-waiting, or pending again
    /// after a failure).
    pub error: Option<String>,
    /// In flight: it was cancelled, and will not be retried.
    pub cancelled: bool,
    /// In flight: the duplicate waiting behind it.
    pub parked: Option<Parked>,
    /// The key's dead letter, if it has one (also beside a live message of
    /// the key sent after its death).
    pub dead: Option<DeadInfo>,
    /// Server time of the reading (Unix ms).
    pub server_ms: i64,
}

/// What a cancel did to one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelOutcome {
    /// Removed; it was pending or retry-waiting.
    Cancelled(State),
    /// In flight: it cannot be taken back from its handler, but it ends
    /// with its current delivery (a nack or a lease expiry ends it, an ack
    /// still works) and any duplicate parked behind it was dropped.
    /// `already`: an earlier cancel had marked it.
    WillNotRetry {
        /// An earlier cancel had marked it.
        already: bool,
    },
    /// Only a dead letter of the key exists; it was left alone (see
    /// [`Topic::purge_dead`](crate::Topic::purge_dead)).
    Dead,
    /// No message of the key.
    Absent,
}

impl CancelOutcome {
    /// Whether a message was removed.
    pub fn cancelled(self) -> bool {
        matches!(self, CancelOutcome::Cancelled(_))
    }

    /// The state the key was in before the cancel.
    pub fn state_before(self) -> State {
        match self {
            CancelOutcome::Cancelled(s) => s,
            CancelOutcome::WillNotRetry { .. } => State::InFlight,
            CancelOutcome::Dead => State::Dead,
            CancelOutcome::Absent => State::Absent,
        }
    }
}

/// A waiting message's new place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reschedule {
    /// Time-based topics: due at this Unix time (ms, server clock).
    At(i64),
    /// Time-based topics: due this many ms from now (server clock).
    Delay(u64),
    /// Priority topics: this priority (at the back of its FIFO).
    Priority(u32),
}

/// What a reschedule changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rescheduled {
    /// The slot of the key.
    pub slot: u32,
    /// Which message moved.
    pub moved: Moved,
    /// Priority topics: its new priority.
    pub priority: Option<u32>,
    /// Time-based topics: its new due time (Unix ms).
    pub due_ms: Option<i64>,
}

/// What a pause or resume found: how many slots were paused before it,
/// of how many, and the server time when the last slot was done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PauseReport {
    /// Slots that were paused before the call.
    pub were_paused: u32,
    /// The topic's slot count.
    pub slots: u32,
    /// Server time (Unix ms) when the call had done every slot: no
    /// delivery of the topic starts after it (pause) / may start from then (resume).
    pub server_ms: i64,
}

fn unexpected(script: &str) -> Error {
    Error::new(
        ErrorKind::Redis,
        format!("unexpected reply from {script}: is this server running another rmq version?"),
    )
}

fn check_key(key: &[u8]) -> Result<()> {
    if key.is_empty() {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            "the merge key is empty; nothing was changed",
        ));
    }
    if key.len() > MAX_KEY_BYTES {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            format!(
                "the merge key has {} bytes, more than rmq allows ({MAX_KEY_BYTES}); nothing was changed",
                key.len()
            ),
        ));
    }
    Ok(())
}

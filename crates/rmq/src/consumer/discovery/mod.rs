//! Where work is, and when to look again.
//!
//! A consumer keeps a schedule of the topic's slots (`schedule/`: when
//! each may next hold something due, and on priority topics its best
//! score), shared with every duty that changes it (`shared.rs`). It
//! learns of work four ways: a look through the head index at start and
//! at every rescan (`heads.rs`), the wake-up notices that send and settle
//! publish (`wake.rs`), on a single node the marks (`marks.rs`: Redis
//! hands each new head to one waiting consumer, not to all) and on a
//! cluster slot affinity (`affinity.rs`: the slots split among the
//! consumers). Each pop's reply also tells the slot's new head
//! (`pop.rs`, which also surveys slots with pops of count 0).
//!
//! Nothing here decides how much to take (`flow/`) or what becomes of a
//! message once taken (`life/`): this wing imports neither.

pub(in crate::consumer) mod affinity;
pub(in crate::consumer) mod heads;
pub(in crate::consumer) mod marks;
pub(in crate::consumer) mod pop;
pub(in crate::consumer) mod schedule;
mod shared;
pub(in crate::consumer) mod wake;

pub(crate) use shared::Shared;

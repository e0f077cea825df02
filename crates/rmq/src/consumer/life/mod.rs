//! A delivery from pop to settle.
//!
//! Phase one, the fetch loop (`fetcher/`), pops due messages from the
//! slots that `discovery/` points to, as many as `flow/` allows, and
//! hands each out as a [`Delivery`] (`delivery/`), which ends it by ack,
//! nack, dead letter or release. Phase two, the settler
//! (`delivery/settler/`), batches those ends into one script call per
//! slot; its calls may also take the slot's next messages
//! (`delivery/settler/chain.rs`), so that a busy consumer takes as many
//! messages as it ends, in the calls that end them. The handler API
//! (`runner.rs`) runs a handler per delivery.
//!
//! Taking by hand, without a fetch loop: a tool's `take` (`take.rs`),
//! receipts that settle a delivery later or elsewhere (`receipt/`), the
//! on-demand engine behind HTTP's long-polling `take` (`on_demand/`), and
//! a serial member that takes for remote clients (`serial_member.rs`).

pub(in crate::consumer) mod delivery;
pub(in crate::consumer) mod fetcher;
mod on_demand;
mod receipt;
mod runner;
mod serial_member;
mod take;

pub(crate) use delivery::settler::{Load, Settler};
pub use delivery::{Delivery, LeaseLost};
pub use on_demand::OnDemand;
pub use receipt::{Ending, Receipt, ReceiptKey};
pub use runner::{Outcome, RunReport};
pub use serial_member::SerialMember;

//! One module per subcommand: its clap arguments and its `run`.

pub mod acl;
pub mod cancel;
pub mod consume;
pub mod dead;
pub mod demo;
pub mod forward;
pub mod functions;
pub mod get;
pub mod key_arg;
pub mod peek;
mod placed;
pub mod reschedule;
pub mod send;
pub mod serve;
pub mod settle;
pub mod stats;
pub mod store;
pub mod take;
pub mod topic;

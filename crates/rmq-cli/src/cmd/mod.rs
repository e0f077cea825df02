//! One module per subcommand: its clap arguments and its `run`.

pub mod acl;
pub mod consume;
pub mod dead;
pub mod demo;
pub mod functions;
pub mod peek;
pub mod send;
pub mod stats;
pub mod topic;

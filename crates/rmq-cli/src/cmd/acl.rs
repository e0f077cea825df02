//! `rmq acl PREFIX`: prints the least-privilege `ACL SETUSER` line for one
//! key prefix (no password in it: append `on >password`). Needs no Redis.

use crate::output;
use crate::{CliError, CliResult, Global};

#[derive(Debug, clap::Args)]
pub struct AclArgs {
    /// The key prefix the user is confined to (its keys and channels)
    pub prefix: String,
    /// The ACL user name
    #[arg(long, default_value = "rmq")]
    pub user: String,
    /// For the locked-down mode: FCALL instead of EVALSHA and SCRIPT LOAD
    #[arg(long)]
    pub functions: bool,
}

pub fn run(g: &Global, a: AclArgs) -> CliResult {
    let line = if a.functions {
        rmq::acl::setuser_line_locked_down(&a.prefix, &a.user)
    } else {
        rmq::acl::setuser_line(&a.prefix, &a.user)
    }
    .map_err(|e| CliError::usage(e.to_string()))?;
    if g.json {
        let json = serde_json::json!({
            "user": a.user,
            "prefix": a.prefix,
            "commands": if a.functions { rmq::acl::locked_down_commands() } else { rmq::acl::commands() },
            "line": line,
        });
        output::line(&json.to_string())
    } else {
        output::line(&line)
    }
}

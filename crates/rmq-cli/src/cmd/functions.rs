//! `rmq functions load|show`: the locked-down mode's admin step. `load`
//! puts rmq's Function library on the server (every master of a cluster);
//! tenants then connect with `--functions` and need only FCALL
//! (`rmq acl PREFIX --functions`).

use clap::Subcommand;

use crate::{connect, output, CliResult, Global};

#[derive(Debug, Subcommand)]
pub enum FunctionsCmd {
    /// Load (or replace) the library; needs FUNCTION LOAD rights
    Load,
    /// Print the library's name and Lua source
    Show,
}

pub async fn run(g: &Global, c: FunctionsCmd) -> CliResult {
    match c {
        FunctionsCmd::Load => {
            let client = connect::client(g).await?;
            let name = client.load_functions().await?;
            if g.json {
                output::line(&serde_json::json!({ "loaded": name }).to_string())
            } else {
                output::line(&format!("loaded the function library {name}"))
            }
        }
        FunctionsCmd::Show => {
            let (name, code) = rmq::Client::functions_library();
            if g.json {
                output::line(&serde_json::json!({ "name": name, "code": code }).to_string())
            } else {
                output::line(code)
            }
        }
    }
}

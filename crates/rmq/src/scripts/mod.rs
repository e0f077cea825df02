//! The Lua scripts, built once and called by SHA.
//!
//! Each server operation is one `.lua` file under `lua/` with a contract
//! header. Slot scripts get `common.lua` prepended (Lua has no includes) and
//! open with a `#!lua` line, so Redis refuses any key they did not declare.
//! [`Redis::run`](crate::client::Redis::run) loads scripts on NOSCRIPT (after
//! a restart, a failover or `SCRIPT FLUSH`) and retries, also in pipelines.

use std::sync::OnceLock;

const COMMON: &str = include_str!("lua/common.lua");

/// Identifies one script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ScriptId {
    Send,
    Pop,
    Settle,
    Stats,
    Peek,
    DeadList,
    DeadRequeue,
    DeadPurge,
    DefineTopic,
    Lease,
    Membership,
}

impl ScriptId {
    pub(crate) const ALL: [ScriptId; 11] = [
        ScriptId::Send,
        ScriptId::Pop,
        ScriptId::Settle,
        ScriptId::Stats,
        ScriptId::Peek,
        ScriptId::DeadList,
        ScriptId::DeadRequeue,
        ScriptId::DeadPurge,
        ScriptId::DefineTopic,
        ScriptId::Lease,
        ScriptId::Membership,
    ];

    fn source(self) -> (&'static str, &'static str, bool) {
        // (flags line, body, with common helpers)
        match self {
            ScriptId::Send => ("#!lua", include_str!("lua/send.lua"), true),
            // Taking messages is how a full Redis drains: allowed at maxmemory.
            ScriptId::Pop => ("#!lua flags=allow-oom", include_str!("lua/pop.lua"), true),
            // Settling frees memory: it must work when Redis is at maxmemory.
            ScriptId::Settle => (
                "#!lua flags=allow-oom",
                include_str!("lua/settle.lua"),
                true,
            ),
            ScriptId::Stats => ("#!lua flags=no-writes", include_str!("lua/stats.lua"), true),
            ScriptId::Peek => ("#!lua flags=no-writes", include_str!("lua/peek.lua"), true),
            ScriptId::DeadList => (
                "#!lua flags=no-writes",
                include_str!("lua/dead_list.lua"),
                true,
            ),
            ScriptId::DeadRequeue => ("#!lua", include_str!("lua/dead_requeue.lua"), true),
            ScriptId::DeadPurge => (
                "#!lua flags=allow-oom",
                include_str!("lua/dead_purge.lua"),
                true,
            ),
            ScriptId::DefineTopic => ("#!lua", include_str!("lua/define_topic.lua"), false),
            // Renewing and releasing leases must work at maxmemory.
            ScriptId::Lease => ("#!lua flags=allow-oom", include_str!("lua/lease.lua"), true),
            ScriptId::Membership => (
                "#!lua flags=allow-oom",
                include_str!("lua/membership.lua"),
                false,
            ),
        }
    }
}

/// A built script: its full source and SHA1.
pub(crate) struct Built {
    pub(crate) code: String,
    pub(crate) sha: String,
}

fn build(id: ScriptId) -> Built {
    let (flags, body, common) = id.source();
    let code = if common {
        format!("{flags}\n{COMMON}\n{body}")
    } else {
        format!("{flags}\n{body}")
    };
    let sha = redis::Script::new(&code).get_hash().to_string();
    Built { code, sha }
}

/// The built script for `id` (built on first use, then cached).
pub(crate) fn get(id: ScriptId) -> &'static Built {
    static ALL: OnceLock<Vec<Built>> = OnceLock::new();
    let all = ALL.get_or_init(|| ScriptId::ALL.iter().map(|&i| build(i)).collect());
    let idx = ScriptId::ALL.iter().position(|&i| i == id).unwrap_or(0);
    &all[idx]
}

/// An EVALSHA call of `id` with these keys and arguments.
pub(crate) fn call(id: ScriptId, keys: &[String], args: &[&[u8]]) -> redis::Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(&get(id).sha).arg(keys.len()).arg(keys);
    for a in args {
        cmd.arg(*a);
    }
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_script_builds_with_a_shebang_and_distinct_sha() {
        let mut shas = std::collections::HashSet::new();
        for id in ScriptId::ALL {
            let b = get(id);
            assert!(b.code.starts_with("#!lua"), "{id:?}");
            assert!(shas.insert(b.sha.clone()), "{id:?}");
        }
    }

    #[test]
    fn scripts_never_build_key_names() {
        // Every key is declared in KEYS: no script concatenates a key name.
        for id in ScriptId::ALL {
            let code = &get(id).code;
            for line in code.lines() {
                let l = line.trim_start();
                if l.starts_with("--") {
                    continue;
                }
                assert!(
                    !(l.contains("redis.call(")
                        && l.contains("ARGV[")
                        && l.contains(" .. ")
                        && !l.contains("PUBLISH")),
                    "{id:?} may build a key: {line}"
                );
            }
        }
    }
}

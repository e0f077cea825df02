//! The Lua scripts, built once and called by SHA.
//!
//! Each server operation is one `.lua` file under `lua/` with a contract
//! header. Slot scripts get `common.lua` prepended (Lua has no includes) and
//! open with a `#!lua` line, so Redis refuses any key they did not declare.
//! [`Redis::run`](crate::client::Redis::run) loads scripts on NOSCRIPT (after
//! a restart, a failover or `SCRIPT FLUSH`) and retries, also in pipelines.

use std::sync::OnceLock;

pub(crate) mod functions;

const COMMON: &str = include_str!("lua/common.lua");
/// Wraps the body of a script that may run twice (see `lua/memo.lua`).
const MEMO: &str = include_str!("lua/memo.lua");

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

    pub(crate) fn source(self) -> (&'static str, &'static str, bool) {
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

impl ScriptId {
    /// Whether a second run of one call (same request key, KEYS[11])
    /// returns the first run's answer and changes nothing: the calls that
    /// write and must not be applied twice.
    pub(crate) fn memoized(self) -> bool {
        matches!(
            self,
            ScriptId::Send | ScriptId::Pop | ScriptId::Settle | ScriptId::Lease
        )
    }

    /// Whether the script writes nothing (a second run is harmless).
    pub(crate) fn read_only(self) -> bool {
        matches!(
            self,
            ScriptId::Stats
                | ScriptId::Peek
                | ScriptId::DeadList
                | ScriptId::DefineTopic
                | ScriptId::Membership
        )
    }

    /// What a memoized script keeps of its answer, when not all of it.
    fn memo_codec(self) -> &'static str {
        match self {
            ScriptId::Pop => include_str!("lua/pop_memo.lua"),
            _ => "",
        }
    }
}

/// A script's Lua text without its `#!lua` line: the common helpers (when
/// it uses them), then its body, run through the memo wrapper when the
/// script is memoized. Both the EVALSHA scripts and the Function library
/// are built from it.
pub(crate) fn text(id: ScriptId) -> String {
    let (_, body, common) = id.source();
    let common = if common { COMMON } else { "" };
    if id.memoized() {
        format!(
            "{common}\nlocal memo_pack, memo_unpack\n{}\nlocal function rmq_main()\n{body}\nend\n{MEMO}",
            id.memo_codec()
        )
    } else {
        format!("{common}\n{body}")
    }
}

/// A built script: its full source and SHA1.
pub(crate) struct Built {
    pub(crate) code: String,
    pub(crate) sha: String,
}

fn build(id: ScriptId) -> Built {
    let (flags, _, _) = id.source();
    let code = format!("{flags}\n{}", text(id));
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

/// An EVALSHA call of `id` with these keys and arguments. All keys of one
/// call must share one Redis Cluster hash slot (checked in debug builds, so
/// every test of the suite checks every call it makes): no script can then
/// ever fail with CROSSSLOT.
pub(crate) fn call(id: ScriptId, keys: &[String], args: &[&[u8]]) -> redis::Cmd {
    debug_assert!(
        one_hash_slot(keys),
        "{id:?} called with keys of several cluster slots: {keys:?}"
    );
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(&get(id).sha).arg(keys.len()).arg(keys);
    for a in args {
        cmd.arg(*a);
    }
    cmd
}

/// Whether all keys hash to one Redis Cluster slot.
pub(crate) fn one_hash_slot(keys: &[String]) -> bool {
    let mut slots = keys
        .iter()
        .map(|k| crate::keys::cluster_hash_slot(k.as_bytes()));
    match slots.next() {
        Some(first) => slots.all(|s| s == first),
        None => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_set_a_script_is_called_with_lies_in_one_cluster_slot() {
        // The three key sets scripts are called with: a slot's ten keys, the
        // topic index, a group's membership hash. Each lies in one slot...
        for slots in [1, 2, 64, 1024, 65536] {
            for slot in [0, 1, slots / 2, slots - 1] {
                let keys = crate::keys::slot_keys("rmq", "orders", slot, slots);
                assert!(one_hash_slot(&keys), "{keys:?}");
            }
        }
        assert!(one_hash_slot(&[crate::keys::topic_index("p")]));
        assert!(one_hash_slot(&[crate::keys::group_key("p", "t", "g")]));
        // ...and the check that guards every call does catch a mix.
        let mixed = [
            crate::keys::slot_keys("rmq", "t", 0, 2)[0].clone(),
            crate::keys::slot_keys("rmq", "t", 1, 2)[0].clone(),
        ];
        assert!(!one_hash_slot(&mixed));
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "several cluster slots")]
    fn a_cross_slot_call_is_refused_before_it_is_sent() {
        let mixed = [
            crate::keys::slot_keys("rmq", "t", 0, 2)[0].clone(),
            crate::keys::slot_keys("rmq", "t", 1, 2)[0].clone(),
        ];
        let _ = call(ScriptId::Send, &mixed, &[]);
    }

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

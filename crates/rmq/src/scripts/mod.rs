//! The Lua scripts, built once and called by SHA.
//!
//! Each server operation is one `.lua` file under `lua/` with a contract
//! header. Slot scripts name the shared helpers they use on an `-- Includes:`
//! line (`layout`; the pending set by operation: `pending` (its shape),
//! `pending_heads`, `pending_resize`, `pending_write`, `pending_take`,
//! `pending_read`; `records`, `notify`, `lifecycle`, `fence`), whose
//! statements the body reaches are put before it at build time (Lua has no
//! includes; `shake.rs`), and
//! open with a `#!lua` line, so a cluster refuses any key outside the hash
//! slot of the keys they declare. `settle_take.lua` runs settle's body
//! then pop's (the `ending` and `take` includes) in one call. One script is flagged
//! `allow-cross-slot-keys`: `renew.lua` renews one member's leases on one
//! master in one call (its header says how it stays safe).
//! [`Redis::run`](crate::conn::Redis::run) loads scripts on NOSCRIPT (after
//! a restart, a failover or `SCRIPT FLUSH`) and retries, also in pipelines.

use std::sync::OnceLock;

pub(crate) mod admin;
pub(crate) mod codes;
pub(crate) mod control;
pub(crate) mod functions;
pub(crate) mod heads;
pub(crate) mod inflight;
pub(crate) mod lease;
pub(crate) mod membership;
pub(crate) mod pop;
pub(crate) mod rate;
pub(crate) mod registry;
pub(crate) mod renew;
pub(crate) mod room;
pub(crate) mod secret;
pub(crate) mod send;
pub(crate) mod settle;
pub(crate) mod shake;

/// The helpers scripts share, one include per concern, in the order they
/// are put before a script's body (a later one may use an earlier one).
const INCLUDES: [(&str, &str); 13] = [
    ("layout", include_str!("lua/layout.lua")),
    ("pending", include_str!("lua/pending.lua")),
    ("pending_heads", include_str!("lua/pending_heads.lua")),
    ("pending_resize", include_str!("lua/pending_resize.lua")),
    ("pending_write", include_str!("lua/pending_write.lua")),
    ("pending_take", include_str!("lua/pending_take.lua")),
    ("pending_read", include_str!("lua/pending_read.lua")),
    ("records", include_str!("lua/records.lua")),
    ("notify", include_str!("lua/notify.lua")),
    ("lifecycle", include_str!("lua/lifecycle.lua")),
    ("fence", include_str!("lua/fence.lua")),
    ("take", include_str!("lua/take.lua")),
    ("ending", include_str!("lua/ending.lua")),
];
/// Wraps the body of a script that may run twice (see `lua/memo.lua`).
const MEMO: &str = include_str!("lua/memo.lua");

/// The topic settings every pop and settle call passes, as strings, made
/// once per topic.
#[derive(Debug, Clone)]
pub(crate) struct TopicArgs {
    pub(crate) kind: &'static str,
    pub(crate) lease: String,
    pub(crate) max_attempts: String,
    pub(crate) backoff: String,
    pub(crate) backoff_max: String,
    pub(crate) dead_max: String,
    pub(crate) dead_ttl: String,
}

/// A fresh jitter in [0, 1) for a script's retry backoff, as an argument.
pub(crate) fn jitter() -> String {
    rand::random::<f64>().to_string()
}

/// Serial mode's owner and epoch as script arguments ('' and '' in
/// parallel mode).
pub(crate) fn fence_args(fence: Option<(&str, u64)>) -> (&str, String) {
    match fence {
        Some((owner, epoch)) => (owner, epoch.to_string()),
        None => ("", String::new()),
    }
}

/// Identifies one script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ScriptId {
    Send,
    Pop,
    Settle,
    SettleTake,
    Stats,
    Peek,
    DeadList,
    DeadRequeue,
    DeadPurge,
    DefineTopic,
    Lease,
    Renew,
    Membership,
    Get,
    Cancel,
    Reschedule,
    Pause,
    ReplaceTopic,
    DropSlot,
    Groups,
    Rate,
    InFlight,
    Room,
    Heads,
    Firsts,
    Secret,
}

impl ScriptId {
    pub(crate) const ALL: [ScriptId; 26] = [
        ScriptId::Send,
        ScriptId::Pop,
        ScriptId::Settle,
        ScriptId::SettleTake,
        ScriptId::Stats,
        ScriptId::Peek,
        ScriptId::DeadList,
        ScriptId::DeadRequeue,
        ScriptId::DeadPurge,
        ScriptId::DefineTopic,
        ScriptId::Lease,
        ScriptId::Renew,
        ScriptId::Membership,
        ScriptId::Get,
        ScriptId::Cancel,
        ScriptId::Reschedule,
        ScriptId::Pause,
        ScriptId::ReplaceTopic,
        ScriptId::DropSlot,
        ScriptId::Groups,
        ScriptId::Rate,
        ScriptId::InFlight,
        ScriptId::Room,
        ScriptId::Heads,
        ScriptId::Firsts,
        ScriptId::Secret,
    ];

    pub(crate) fn source(self) -> (&'static str, &'static str) {
        // (flags line, body)
        match self {
            ScriptId::Send => ("#!lua", include_str!("lua/send.lua")),
            // Taking messages is how a full Redis drains: allowed at maxmemory.
            ScriptId::Pop => ("#!lua flags=allow-oom", include_str!("lua/pop.lua")),
            // Settling frees memory: it must work when Redis is at maxmemory.
            ScriptId::Settle => ("#!lua flags=allow-oom", include_str!("lua/settle.lua")),
            // A settle, then a pop: both are allowed at maxmemory.
            ScriptId::SettleTake => ("#!lua flags=allow-oom", include_str!("lua/settle_take.lua")),
            ScriptId::Stats => ("#!lua flags=no-writes", include_str!("lua/stats.lua")),
            ScriptId::Peek => ("#!lua flags=no-writes", include_str!("lua/peek.lua")),
            ScriptId::DeadList => ("#!lua flags=no-writes", include_str!("lua/dead_list.lua")),
            ScriptId::DeadRequeue => ("#!lua", include_str!("lua/dead_requeue.lua")),
            ScriptId::DeadPurge => ("#!lua flags=allow-oom", include_str!("lua/dead_purge.lua")),
            ScriptId::DefineTopic => ("#!lua", include_str!("lua/define_topic.lua")),
            // Renewing and releasing leases must work at maxmemory.
            ScriptId::Lease => ("#!lua flags=allow-oom", include_str!("lua/lease.lua")),
            // On a cluster it reaches the leases of several hash slots of
            // its own master, declaring one (see renew.lua).
            ScriptId::Renew => (
                "#!lua flags=allow-oom,allow-cross-slot-keys",
                include_str!("lua/renew.lua"),
            ),
            ScriptId::Membership => ("#!lua flags=allow-oom", include_str!("lua/membership.lua")),
            ScriptId::Get => ("#!lua flags=no-writes", include_str!("lua/get.lua")),
            // Cancelling frees memory; pausing is what an operator does when
            // things go wrong: both must work at maxmemory.
            ScriptId::Cancel => ("#!lua flags=allow-oom", include_str!("lua/cancel.lua")),
            ScriptId::Reschedule => ("#!lua", include_str!("lua/reschedule.lua")),
            ScriptId::Pause => ("#!lua flags=allow-oom", include_str!("lua/pause.lua")),
            ScriptId::ReplaceTopic => ("#!lua", include_str!("lua/replace_topic.lua")),
            // Deleting a topic frees memory: allowed at maxmemory.
            ScriptId::DropSlot => ("#!lua flags=allow-oom", include_str!("lua/drop_slot.lua")),
            ScriptId::Groups => ("#!lua flags=allow-oom", include_str!("lua/groups.lua")),
            // Taking tokens comes before taking messages: allowed at maxmemory.
            ScriptId::Rate => ("#!lua flags=allow-oom", include_str!("lua/rate.lua")),
            // Permits come before messages and go after them: freeing must
            // work at maxmemory, and so must taking (a full Redis drains).
            ScriptId::InFlight => ("#!lua flags=allow-oom", include_str!("lua/inflight.lua")),
            // Reserving room writes a count only; giving it back follows
            // settles, which work at maxmemory.
            ScriptId::Room => ("#!lua flags=allow-oom", include_str!("lua/room.lua")),
            // Consumers read the index before they take: allowed at maxmemory.
            // On a cluster it reaches the indexes of several hash slots of
            // its own master, declaring one (see heads.lua).
            ScriptId::Heads => (
                "#!lua flags=allow-oom,allow-cross-slot-keys",
                include_str!("lua/heads.lua"),
            ),
            ScriptId::Firsts => ("#!lua flags=no-writes", include_str!("lua/firsts.lua")),
            ScriptId::Secret => ("#!lua", include_str!("lua/secret.lua")),
        }
    }
}

impl ScriptId {
    /// The script's name in snake case: its Function's suffix, and the
    /// `script` label of `rmq_redis_call_duration_seconds`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            ScriptId::Send => "send",
            ScriptId::Pop => "pop",
            ScriptId::Settle => "settle",
            ScriptId::SettleTake => "settle_take",
            ScriptId::Stats => "stats",
            ScriptId::Peek => "peek",
            ScriptId::DeadList => "dead_list",
            ScriptId::DeadRequeue => "dead_requeue",
            ScriptId::DeadPurge => "dead_purge",
            ScriptId::DefineTopic => "define_topic",
            ScriptId::Lease => "lease",
            ScriptId::Renew => "renew",
            ScriptId::Membership => "membership",
            ScriptId::Get => "get",
            ScriptId::Cancel => "cancel",
            ScriptId::Reschedule => "reschedule",
            ScriptId::Pause => "pause",
            ScriptId::ReplaceTopic => "replace_topic",
            ScriptId::DropSlot => "drop_slot",
            ScriptId::Groups => "groups",
            ScriptId::Rate => "rate",
            ScriptId::InFlight => "inflight",
            ScriptId::Room => "room",
            ScriptId::Heads => "heads",
            ScriptId::Firsts => "firsts",
            ScriptId::Secret => "secret",
        }
    }

    /// Whether a second run of one call (same request key, KEYS[11]; for
    /// room.lua KEYS[3]) returns the first run's answer and changes
    /// nothing: the calls that write and must not be applied twice (a
    /// requeue run twice would report nothing requeued the second time,
    /// and a bound's give-back run twice would give room back twice).
    pub(crate) fn memoized(self) -> bool {
        matches!(
            self,
            ScriptId::Send
                | ScriptId::Pop
                | ScriptId::Settle
                | ScriptId::SettleTake
                | ScriptId::Lease
                | ScriptId::Cancel
                | ScriptId::Reschedule
                | ScriptId::Pause
                | ScriptId::DeadRequeue
                | ScriptId::Room
        )
    }

    /// Whether the script writes nothing, or only what a second run
    /// writes the same (a second run is harmless): a renewal run twice
    /// extends the same leases of the same epochs twice.
    pub(crate) fn rerun_harmless(self) -> bool {
        matches!(
            self,
            ScriptId::Stats
                | ScriptId::Peek
                | ScriptId::DeadList
                | ScriptId::DefineTopic
                | ScriptId::Membership
                | ScriptId::Get
                | ScriptId::Heads
                | ScriptId::Firsts
                | ScriptId::Renew
                | ScriptId::Secret
        )
    }

    /// Whether a call keeps the topic's head index (`lua/notify.lua`) when
    /// the connection keeps one: the scripts that can make a slot's next
    /// work earlier, and pop and settle, which set its entry exactly.
    pub(crate) fn keeps_head_index(self) -> bool {
        matches!(
            self,
            ScriptId::Send
                | ScriptId::Pop
                | ScriptId::Settle
                | ScriptId::SettleTake
                | ScriptId::Reschedule
                | ScriptId::Pause
                | ScriptId::DeadRequeue
        )
    }

    /// Whether a call is passed the topic's head index after its keys when
    /// the connection keeps one: those that keep it, and the slot drop,
    /// which deletes it with the slot.
    pub(crate) fn names_head_index(self) -> bool {
        self.keeps_head_index() || self == ScriptId::DropSlot
    }

    /// What a memoized script keeps of its answer, when not all of it.
    fn memo_codec(self) -> &'static str {
        match self {
            ScriptId::Pop => concat!(
                include_str!("lua/pop_memo.lua"),
                "memo_pack, memo_unpack = pop_pack, pop_unpack\n"
            ),
            // Its settle codes whole, its take as a pop's.
            ScriptId::SettleTake => concat!(
                include_str!("lua/pop_memo.lua"),
                "memo_pack = function(a) return { a[1], a[2] and pop_pack(a[2]), a[3], a[4] } end\n",
                "memo_unpack = function(k) return { k[1], k[2] and pop_unpack(k[2]), k[3], k[4] } end\n"
            ),
            // Two keys of its own: the request key comes third.
            ScriptId::Room => "memo_key_at = 3",
            _ => "",
        }
    }
}

/// The includes a script names on its `-- Includes:` line.
fn includes_named(body: &str) -> Vec<&str> {
    body.lines()
        .take_while(|l| l.starts_with("--"))
        .find_map(|l| l.strip_prefix("-- Includes:"))
        .map(|names| names.split_whitespace().collect())
        .unwrap_or_default()
}

/// The sources of the includes a script names, in their fixed order.
fn includes_of(id: ScriptId) -> Vec<&'static str> {
    let named = includes_named(id.source().1);
    INCLUDES
        .iter()
        .filter(|(name, _)| named.contains(name))
        .map(|(_, src)| *src)
        .collect()
}

/// What a script runs after its includes: its body, run through the memo
/// wrapper when the script is memoized.
fn main_text(id: ScriptId) -> String {
    let (_, body) = id.source();
    if id.memoized() {
        format!(
            "local memo_pack, memo_unpack, memo_key_at\n{}\nlocal function rmq_main()\n{body}\nend\n{MEMO}",
            id.memo_codec()
        )
    } else {
        body.to_string()
    }
}

/// A script's Lua text without its `#!lua` line, as EVALSHA runs it: of
/// the includes it names (in their fixed order), the statements its body
/// reaches (`shake.rs`), then [`main_text`]. The Function library puts
/// the includes' helpers outside the functions instead (`functions.rs`).
pub(crate) fn text(id: ScriptId) -> String {
    let main = main_text(id);
    let common = shake::reachable(&includes_of(id), &main);
    format!("{common}\n\n{main}")
}

/// The `<array>[n] name` entries of a header (`array` is `KEYS` or
/// `ARGV`), names in order of n; the first entry of each n counts.
#[cfg(test)]
fn header_names(header: &str, array: &str) -> Vec<String> {
    let mut found: Vec<(usize, String)> = Vec::new();
    let open = format!("{array}[");
    for line in header.lines().take_while(|l| l.starts_with("--")) {
        for part in line.split(open.as_str()).skip(1) {
            let Some((n, rest)) = part.split_once(']') else {
                continue;
            };
            let (Ok(n), Some(name)) = (n.parse::<usize>(), rest.split_whitespace().next()) else {
                continue;
            };
            if !found.iter().any(|(m, _)| *m == n) {
                found.push((n, name.trim_end_matches(':').to_string()));
            }
        }
    }
    found.sort();
    found.into_iter().map(|(_, name)| name).collect()
}

/// The arguments a command sends, the command's name first (what a test
/// of a request's layout compares).
#[cfg(test)]
pub(crate) fn sent_args(cmd: &redis::Cmd) -> Vec<Vec<u8>> {
    cmd.args_iter()
        .filter_map(|a| match a {
            redis::Arg::Simple(b) => Some(b.to_vec()),
            _ => None,
        })
        .collect()
}

/// The `ARGV[n] name` entries of a script's header, names in order of n
/// (what a typed request's `ARGV` must equal).
#[cfg(test)]
pub(crate) fn header_argv(id: ScriptId) -> Vec<String> {
    header_names(id.source().1, "ARGV")
}

/// The names of a script's KEYS, by its header: a slot script's are the
/// ten that `layout.lua` lists.
#[cfg(test)]
pub(crate) fn header_keys(id: ScriptId) -> Vec<String> {
    let (_, body) = id.source();
    if body.contains("-- KEYS: the ten slot keys (see layout.lua)") {
        header_names(INCLUDES[0].1, "KEYS")
    } else {
        header_names(body, "KEYS")
    }
}

/// A built script: its full source and SHA1.
pub(crate) struct Built {
    pub(crate) code: String,
    pub(crate) sha: String,
}

fn build(id: ScriptId) -> Built {
    let (flags, _) = id.source();
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
/// every test of the suite checks every call it makes): no script but
/// `renew.lua` (see [`call_on_one_node`]) can then ever fail with CROSSSLOT.
///
/// Only the typed requests of this module's children call it: no other
/// module builds a script's KEYS or ARGV.
fn call(id: ScriptId, keys: &[String], args: &[&[u8]]) -> redis::Cmd {
    debug_assert!(
        one_hash_slot(keys),
        "{id:?} called with keys of several cluster slots: {keys:?}"
    );
    call_on_one_node(id, keys, args)
}

/// A call whose keys may span hash slots, for a server not in cluster mode
/// only: a server in cluster mode refuses it with CROSSSLOT, even one that
/// owns every hash slot and is reached as a single node. Its users, the
/// lease keeper's batched renewal and the admin readings over many slots,
/// fall back to a call per slot then.
fn call_on_one_node(id: ScriptId, keys: &[String], args: &[&[u8]]) -> redis::Cmd {
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
    fn every_slot_script_takes_the_ten_slot_keys_in_layout_order() {
        let slot_scripts: Vec<ScriptId> = ScriptId::ALL
            .into_iter()
            .filter(|&id| {
                !matches!(
                    id,
                    ScriptId::DefineTopic
                        | ScriptId::Membership
                        | ScriptId::Renew
                        | ScriptId::ReplaceTopic
                        | ScriptId::Groups
                        | ScriptId::Rate
                        | ScriptId::InFlight
                        | ScriptId::Room
                        | ScriptId::Heads
                        | ScriptId::Secret
                )
            })
            .collect();
        for id in slot_scripts {
            assert_eq!(header_keys(id), crate::keys::SLOT_KEY_NAMES, "{id:?}");
        }
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

    /// The names a Lua text defines as `local function NAME` or `local NAME =`.
    fn defined(src: &str) -> Vec<String> {
        src.lines()
            .filter_map(|l| {
                let rest = l
                    .strip_prefix("local function ")
                    .or_else(|| l.strip_prefix("local "))?;
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                (!name.is_empty()).then_some(name)
            })
            .collect()
    }

    /// Whether `text` uses `name` as a word (not part of a longer name).
    fn uses(text: &str, name: &str) -> bool {
        let word = |c: char| c.is_alphanumeric() || c == '_';
        text.match_indices(name).any(|(i, _)| {
            let before = text[..i].chars().next_back();
            let after = text[i + name.len()..].chars().next();
            !before.is_some_and(word) && !after.is_some_and(word)
        })
    }

    #[test]
    fn every_helper_a_script_uses_is_included_and_every_include_is_known() {
        let known: Vec<&str> = INCLUDES.iter().map(|(n, _)| *n).collect();
        for id in ScriptId::ALL {
            let (_, body) = id.source();
            for name in includes_named(body) {
                assert!(
                    known.contains(&name),
                    "{id:?} names an unknown include {name}"
                );
            }
            // A helper used but not included would be a global at run time
            // (an error only on the path that calls it): refuse it here.
            // With the includes shaken (shake.rs), a helper a kept one
            // calls must have been kept too.
            let code = text(id);
            let used = shake::words(&code);
            let has = defined(&code);
            for (inc, src) in INCLUDES {
                for name in defined(src) {
                    assert!(
                        !used.contains(&name) || has.contains(&name),
                        "{id:?} uses {name} from {inc}.lua without including it"
                    );
                }
            }
        }
    }

    #[test]
    fn every_include_a_script_names_is_used_by_it() {
        let code_of = |src: &str| -> String {
            src.lines()
                .filter(|l| !l.trim_start().starts_with("--"))
                .collect::<Vec<_>>()
                .join("\n")
        };
        for id in ScriptId::ALL {
            let (_, body) = id.source();
            let named = includes_named(body);
            for (k, (inc, src)) in INCLUDES.iter().enumerate() {
                if !named.contains(inc) {
                    continue;
                }
                // Its users: the body and the includes put after it.
                let mut users = code_of(body);
                for (later, later_src) in &INCLUDES[k + 1..] {
                    if named.contains(later) {
                        users.push_str(&code_of(later_src));
                    }
                }
                assert!(
                    defined(src).iter().any(|name| uses(&users, name)),
                    "{id:?} includes {inc}.lua but uses nothing of it"
                );
            }
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

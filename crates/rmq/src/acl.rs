//! Least privilege: the exact Redis ACL rmq needs for one key prefix.
//!
//! An explicit list of commands, never categories: `+@write` would include
//! FLUSHALL and `+@scripting` SCRIPT FLUSH. Scripts run with the caller's
//! permissions in Redis 7, so the list holds every command the scripts call
//! as well as those the client sends; the key pattern `~<prefix>:*` and the
//! channel pattern `&<prefix>:*` confine a user to its own queues (tenant
//! isolation: another prefix's keys and channels answer NOPERM, also from
//! inside a script). A test derives the script commands from the `.lua`
//! files and runs every operation as such a user.

use crate::error::Result;
use crate::topic::validate_prefix;

/// Commands the scripts call (`redis.call`), checked against the `.lua`
/// files by a test.
pub const SCRIPT_COMMANDS: &[&str] = &[
    // A call's remembered answer (a second run returns it): memo.lua.
    "get",
    "set",
    // Readings over many slots skip a slot that holds no key: stats.lua.
    "exists",
    "hdel",
    "hexists",
    "hget",
    "hgetall",
    "hincrby",
    "hlen",
    "hmget",
    "hset",
    "hvals",
    "time",
    "type",
    "unlink",
    "zadd",
    "zcard",
    "zcount",
    "zmscore",
    "zpopmax",
    "zpopmin",
    "zrange",
    "zrangebyscore",
    "zrem",
    "zremrangebyscore",
    "zscore",
    "publish",
    "spublish",
];

/// Commands the client sends itself.
pub const CLIENT_COMMANDS: &[&str] = &[
    // Scripts: loaded once (never flushed), called by SHA.
    "evalsha",
    "script|load",
    // The topic index (read outside scripts).
    "hget",
    "hgetall",
    // Topic delete: live consumers are the subscribers of its channels.
    "pubsub|numsub",
    "pubsub|shardnumsub",
    // Marks (a single node): idle parallel consumers wait on them (with
    // a key of their own, which they write to and clear to end their own
    // wait), and give back those they cannot serve soon.
    "bzmpop",
    "zadd",
    "zrem",
    // Wake-up notices: single node and cluster (sharded).
    "subscribe",
    "unsubscribe",
    "ssubscribe",
    "sunsubscribe",
    // Durable sends (on Redis 7.2+ with the AOF on, add "waitaof": 7.0
    // refuses unknown names in ACL SETUSER, so it is not listed).
    "wait",
    // Connection set-up and health: the handshake, the preflight's
    // version and persistence checks, a cluster's topology. (The client
    // also tries CLIENT SETINFO, Redis 7.2+, and goes on without it.)
    "hello",
    "ping",
    "info",
    "cluster|slots",
    "cluster|shards",
    "cluster|nodes",
];

/// Every command of both lists, sorted and without repeats.
pub fn commands() -> Vec<&'static str> {
    let mut all: Vec<&str> = SCRIPT_COMMANDS
        .iter()
        .chain(CLIENT_COMMANDS)
        .copied()
        .collect();
    all.sort_unstable();
    all.dedup();
    all
}

/// The commands of the locked-down mode
/// ([`ClientOptions::functions`](crate::ClientOptions::functions)): `FCALL` of the admin-loaded library
/// (and `FUNCTION LIST` to check it is there) instead of `EVALSHA` and
/// `SCRIPT LOAD`: the user cannot run Lua of its own.
pub fn locked_down_commands() -> Vec<&'static str> {
    let mut all: Vec<&str> = commands()
        .into_iter()
        .filter(|c| *c != "evalsha" && *c != "script|load")
        .chain(["fcall", "function|list"])
        .collect();
    all.sort_unstable();
    all
}

/// Like [`setuser_line`], for the locked-down mode.
pub fn setuser_line_locked_down(prefix: &str, user: &str) -> Result<String> {
    line(prefix, user, &locked_down_commands())
}

/// The `ACL SETUSER` line for a user confined to `prefix`, without a
/// password and switched off: the operator appends `on >password`.
/// `CONFIG GET` is not included (it can read secrets); without it the
/// preflight cannot check the eviction policy and reports
/// [`ServerWarning::ConfigUnreadable`](crate::ServerWarning::ConfigUnreadable):
/// add `+config|get` to have it checked.
pub fn setuser_line(prefix: &str, user: &str) -> Result<String> {
    line(prefix, user, &commands())
}

fn line(prefix: &str, user: &str, commands: &[&str]) -> Result<String> {
    validate_prefix(prefix)?;
    crate::topic::validate_topic_name(user).map_err(|_| {
        crate::Error::new(
            crate::ErrorKind::InvalidName,
            format!(
                "invalid user name {user:?}: use letters, digits, '_', '.' or '-' (at most 100)"
            ),
        )
    })?;
    let cmds: Vec<String> = commands.iter().map(|c| format!("+{c}")).collect();
    Ok(format!(
        "ACL SETUSER {user} reset -@all {} ~{prefix}:* resetchannels &{prefix}:*",
        cmds.join(" ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_is_explicit_and_confined() {
        let line = setuser_line("team-a", "rmq-a").unwrap();
        assert!(line.starts_with("ACL SETUSER rmq-a reset -@all +bzmpop +cluster|nodes"));
        assert!(line.contains(" ~team-a:* resetchannels &team-a:*"));
        assert!(!line.contains("+@"), "no categories: {line}");
        assert!(!line.contains('>'), "no password in the line");
        for bad in [
            "flushall",
            "flushdb",
            "script|flush",
            "keys",
            "scan",
            "config|set",
            "eval ",
        ] {
            assert!(!line.contains(bad), "{bad} in {line}");
        }
        assert!(setuser_line("bad prefix", "u").is_err());
        assert!(setuser_line("p", "bad user").is_err());
    }
}

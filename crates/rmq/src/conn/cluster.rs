//! What the cluster path of the script runner shares with reads: which
//! failures a call may be tried again after (it rides out a failover,
//! retrying what did not run and, when a second run is harmless, what may
//! have run), and the request key a writing call carries, so that a second
//! run answers as the first (`lua/memo.lua`).

use redis::Cmd;

/// Whether a cluster call that failed so may be tried again. Replies that
/// mean the call did not run (the slot is elsewhere or moving, the cluster
/// is electing a master, the node is loading or was demoted) always; a
/// broken connection or a time-out (the call may have run) only when a
/// second run is harmless.
pub(crate) fn retry_through_failover(e: &redis::RedisError, rerun_safe: bool) -> bool {
    let not_run = matches!(
        e.kind(),
        redis::ErrorKind::Server(
            redis::ServerErrorKind::Moved
                | redis::ServerErrorKind::Ask
                | redis::ServerErrorKind::TryAgain
                | redis::ServerErrorKind::ClusterDown
                | redis::ServerErrorKind::MasterDown
                | redis::ServerErrorKind::BusyLoading
                | redis::ServerErrorKind::ReadOnly
        ) | redis::ErrorKind::ClusterConnectionNotFound
    ) || e.is_connection_refusal();
    let maybe_run = e.is_io_error() || e.is_timeout() || e.is_connection_dropped();
    not_run || (rerun_safe && maybe_run)
}

/// A memoized script call with its request key added after its keys (a
/// slot script's KEYS[11], room.lua's KEYS[2]): `<base>:req:<ttl ms>.<random
/// id>`, where `<base>` is its first key up to the last colon (a slot's
/// `<slot base>:q`, a topic's `<topic base>:room`), so in the same hash tag.
pub(super) fn with_request_key(cmd: &Cmd, ttl_ms: u128) -> Cmd {
    super::with_keys_after_keys(cmd, |first| {
        let colon = first.iter().rposition(|&b| b == b':')?;
        let mut key = first[..colon].to_vec();
        key.extend_from_slice(format!(":req:{ttl_ms}.{:016x}", rand::random::<u64>()).as_bytes());
        Some([key])
    })
}

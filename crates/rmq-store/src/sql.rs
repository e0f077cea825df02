//! The statements whose cost grows with the store, kept in one place so
//! that tests can `EXPLAIN` exactly the text the relay and recovery run
//! (`tests/scale.rs`): each must find its rows through an index, never by
//! reading every stored or queued row.

/// A relay's batch of one topic: up to `$3` of topic `$1`'s stored rows
/// due to load within `$2` ms of the database's clock, oldest load time
/// first, locked for this relay. The bound is fixed when the statement
/// starts (`rmq_statement_ms()` is STABLE), so it is an index condition on
/// `(topic, load_ms, id)`: the scan stops at the first row not due.
pub const TAKE_DUE: &str = "SELECT id, merge_key, slot_basis, payload, priority, due_ms
     FROM rmq_messages
     WHERE status = 'stored' AND topic = $1 AND load_ms <= rmq_statement_ms() + $2
     ORDER BY load_ms, id
     LIMIT $3
     FOR UPDATE SKIP LOCKED";

/// A recovery's page: topic `$1`'s queued rows after id `$2`, `$3` of
/// them, in id order.
pub const RECOVER_PAGE: &str =
    "SELECT id, merge_key, slot_basis, coalesce(queued_ms, 0) FROM rmq_messages
     WHERE topic = $1 AND status = 'queued' AND id > $2 ORDER BY id LIMIT $3";

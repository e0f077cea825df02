//! `lease.lua`'s call and answer, typed: serial mode's slot lease is
//! acquired, renewed and released through [`LeaseRequest`] only, and its
//! answer read as a [`LeaseAnswer`] only (the keeper and the low-level
//! `Topic::slot_lease` share them).

use redis::{Cmd, Value};

use super::ScriptId;
use crate::value::{bytes_at, int_at, items};

/// What to do with the lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LeaseOp {
    Acquire,
    Renew,
    Release,
}

impl LeaseOp {
    fn as_str(self) -> &'static str {
        match self {
            LeaseOp::Acquire => "acquire",
            LeaseOp::Renew => "renew",
            LeaseOp::Release => "release",
        }
    }

    /// The op a tool names (`acquire`, `renew`, `release`).
    pub(crate) fn parse(op: &str) -> Option<LeaseOp> {
        [LeaseOp::Acquire, LeaseOp::Renew, LeaseOp::Release]
            .into_iter()
            .find(|o| o.as_str() == op)
    }
}

/// One call of `lease.lua` on one slot.
pub(crate) struct LeaseRequest<'a> {
    /// The slot's ten keys.
    pub(crate) keys: &'a [String],
    pub(crate) op: LeaseOp,
    /// The member id.
    pub(crate) owner: &'a str,
    /// The epoch held (renew, release; ignored by acquire).
    pub(crate) epoch: u64,
    /// How long the lease lasts (acquire, renew).
    pub(crate) ttl_ms: u64,
}

/// The script's ARGV, by the names its header gives them, in order.
pub(crate) const ARGV: [&str; 4] = ["op", "owner", "epoch", "ttl_ms"];

impl LeaseRequest<'_> {
    pub(crate) fn call(&self) -> (ScriptId, Cmd) {
        let (epoch, ttl) = (self.epoch.to_string(), self.ttl_ms.max(1).to_string());
        // In the order of `ARGV` (the header's; a test holds them together).
        let args: [&[u8]; ARGV.len()] = [
            self.op.as_str().as_bytes(),
            self.owner.as_bytes(),
            epoch.as_bytes(),
            ttl.as_bytes(),
        ];
        (
            ScriptId::Lease,
            super::call(ScriptId::Lease, self.keys, &args),
        )
    }
}

/// What `lease.lua` answered: its code (1 granted, 2 release refused while
/// a delivery is in flight, 0 refused), the epoch when granted, the current
/// owner when refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LeaseAnswer {
    pub(crate) code: Option<i64>,
    pub(crate) epoch: Option<u64>,
    pub(crate) owner: Option<String>,
}

impl LeaseAnswer {
    pub(crate) fn of(v: Value) -> LeaseAnswer {
        let a = items(v);
        let code = int_at(&a, 0);
        let granted = matches!(code, Some(1) | Some(2));
        LeaseAnswer {
            code,
            epoch: if granted {
                int_at(&a, 1).and_then(|e| u64::try_from(e).ok())
            } else {
                None
            },
            owner: if granted {
                None
            } else {
                bytes_at(&a, 1).map(|b| String::from_utf8_lossy(&b).into_owned())
            },
        }
    }

    pub(crate) fn granted(&self) -> bool {
        self.code == Some(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lease_request_sends_what_the_lua_header_names_in_its_order() {
        assert_eq!(crate::scripts::header_argv(ScriptId::Lease), ARGV);
        let keys: Vec<String> = (0..10).map(|i| format!("{{t}}:{i}")).collect();
        let (_, cmd) = LeaseRequest {
            keys: &keys,
            op: LeaseOp::Renew,
            owner: "me",
            epoch: 7,
            ttl_ms: 0,
        }
        .call();
        let args: Vec<Vec<u8>> = crate::scripts::sent_args(&cmd);
        // EVALSHA sha numkeys keys.. then ARGV in the header's order.
        assert_eq!(&args[2], b"10");
        let argv: Vec<&[u8]> = args[13..].iter().map(Vec::as_slice).collect();
        assert_eq!(argv, [&b"renew"[..], b"me", b"7", b"1"]);
        assert_eq!(LeaseOp::parse("release"), Some(LeaseOp::Release));
        assert_eq!(LeaseOp::parse("steal"), None);
    }

    #[test]
    fn an_answer_reads_code_epoch_or_owner() {
        let v = |a: Vec<Value>| Value::Array(a);
        let granted = LeaseAnswer::of(v(vec![
            Value::Int(1),
            Value::Int(9),
            Value::Int(5),
            Value::Int(1),
        ]));
        assert!(granted.granted());
        assert_eq!(granted.epoch, Some(9));
        let refused = LeaseAnswer::of(v(vec![
            Value::Int(0),
            Value::BulkString(b"other".to_vec()),
            Value::Int(5),
            Value::Int(1),
        ]));
        assert!(!refused.granted());
        assert_eq!(refused.owner.as_deref(), Some("other"));
        let busy = LeaseAnswer::of(v(vec![
            Value::Int(2),
            Value::Int(9),
            Value::Int(5),
            Value::Int(1),
        ]));
        assert_eq!((busy.code, busy.epoch), (Some(2), Some(9)));
    }
}

//! `renew.lua`'s call and answer, typed: serial mode renews all of one
//! member's leases on a single node in one call per round (one call per
//! slot on a cluster, through `lease.lua`), so a group's cost in Redis
//! grows with its members, not with its slots.

use redis::{Cmd, Value};

use super::lease::LeaseAnswer;
use super::ScriptId;
use crate::value::{int_at, items};

/// One call of `renew.lua`: the leases of `slots`, each held at its epoch.
pub(crate) struct RenewRequest<'a> {
    /// Each slot's lease key (`layout.lua`'s l).
    pub(crate) leases: Vec<String>,
    /// The epoch held of each, in the same order.
    pub(crate) epochs: &'a [u64],
    pub(crate) owner: &'a str,
    pub(crate) ttl_ms: u64,
}

/// The script's ARGV, by the names its header gives them, in order.
pub(crate) const ARGV: [&str; 3] = ["owner", "ttl_ms", "epochs"];

impl RenewRequest<'_> {
    pub(crate) fn call(&self) -> (ScriptId, Cmd) {
        let ttl = self.ttl_ms.max(1).to_string();
        let epochs = self
            .epochs
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(" ");
        // In the order of `ARGV` (the header's; a test holds them together).
        let args: [&[u8]; ARGV.len()] = [self.owner.as_bytes(), ttl.as_bytes(), epochs.as_bytes()];
        (
            ScriptId::Renew,
            super::call_on_one_node(ScriptId::Renew, &self.leases, &args),
        )
    }
}

/// Each lease's answer, as `lease.lua`'s renew would give it: granted at
/// the epoch held, or refused. A reply that does not hold `n` codes (an
/// error) answers None for every lease: those renewals failed.
pub(crate) fn answers(reply: Option<Value>, epochs: &[u64]) -> Vec<Option<LeaseAnswer>> {
    let codes: Option<Vec<i64>> = reply.and_then(|v| {
        let a = items(v);
        (a.len() == epochs.len() + 2)
            .then(|| {
                (2..a.len())
                    .map(|i| int_at(&a, i))
                    .collect::<Option<Vec<i64>>>()
            })
            .flatten()
    });
    match codes {
        Some(codes) => codes
            .into_iter()
            .zip(epochs)
            .map(|(code, &epoch)| {
                Some(LeaseAnswer {
                    code: Some(code),
                    epoch: (code == 1).then_some(epoch),
                    owner: None,
                })
            })
            .collect(),
        None => vec![None; epochs.len()],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_renew_request_sends_what_the_lua_header_names_in_its_order() {
        assert_eq!(crate::scripts::header_argv(ScriptId::Renew), ARGV);
        assert_eq!(crate::scripts::header_keys(ScriptId::Renew), ["leases"]);
        let (_, cmd) = RenewRequest {
            leases: vec!["{a}:l".into(), "{b}:l".into()],
            epochs: &[3, 9],
            owner: "me",
            ttl_ms: 0,
        }
        .call();
        let args: Vec<Vec<u8>> = cmd
            .args_iter()
            .filter_map(|a| match a {
                redis::Arg::Simple(b) => Some(b.to_vec()),
                _ => None,
            })
            .collect();
        // EVALSHA sha numkeys keys.. then ARGV in the header's order.
        assert_eq!(&args[2], b"2");
        let argv: Vec<&[u8]> = args[5..].iter().map(Vec::as_slice).collect();
        assert_eq!(argv, [&b"me"[..], b"1", b"3 9"]);
    }

    #[test]
    fn each_lease_gets_its_own_answer_and_a_bad_reply_fails_them_all() {
        let reply = Value::Array(vec![
            Value::Int(100),
            Value::Int(6100),
            Value::Int(1),
            Value::Int(0),
        ]);
        let a = answers(Some(reply), &[3, 9]);
        assert_eq!(
            a,
            vec![
                Some(LeaseAnswer {
                    code: Some(1),
                    epoch: Some(3),
                    owner: None
                }),
                Some(LeaseAnswer {
                    code: Some(0),
                    epoch: None,
                    owner: None
                }),
            ]
        );
        let short = Value::Array(vec![Value::Int(100), Value::Int(6100), Value::Int(1)]);
        assert_eq!(answers(Some(short), &[3, 9]), vec![None, None]);
        assert_eq!(answers(None, &[3]), vec![None]);
    }
}

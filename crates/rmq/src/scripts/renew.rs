//! `renew.lua`'s call and answer, typed: serial mode renews a member's
//! leases in one call per round on a single node, and in one call per
//! master on a cluster, so a group's cost in Redis grows with its members
//! (and masters), not with its slots.

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
    /// For a cluster: the leases are (as far as the caller knows) on one
    /// master; the first is declared and routes the call there, the others
    /// go in ARGV. Otherwise every lease is declared (a single node).
    pub(crate) on_cluster: bool,
}

/// The script's ARGV, by the names its header gives them, in order.
pub(crate) const ARGV: [&str; 4] = ["owner", "ttl_ms", "epochs", "more_leases"];

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
        // (The last, more_leases, is every further lease on a cluster.)
        let fixed: [&[u8]; ARGV.len() - 1] =
            [self.owner.as_bytes(), ttl.as_bytes(), epochs.as_bytes()];
        let mut args = fixed.to_vec();
        let cmd = if self.on_cluster {
            let (first, more) = self.leases.split_at(self.leases.len().min(1));
            args.extend(more.iter().map(String::as_bytes));
            super::call(ScriptId::Renew, first, &args)
        } else {
            super::call_on_one_node(ScriptId::Renew, &self.leases, &args)
        };
        (ScriptId::Renew, cmd)
    }
}

/// What became of one lease in a `renew.lua` call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Renewal {
    /// Renewed at the epoch held, or refused, as `lease.lua`'s renew
    /// would answer.
    Answered(LeaseAnswer),
    /// Not on the master the call ran on (the cluster's layout changed):
    /// not renewed, to be asked again alone.
    Elsewhere,
}

/// Each lease's outcome, or None when the reply does not hold one code per
/// lease (the call failed as a whole: none was renewed).
pub(crate) fn answers(reply: Option<Value>, epochs: &[u64]) -> Option<Vec<Renewal>> {
    let a = items(reply?);
    if a.len() != epochs.len() + 2 {
        return None;
    }
    let codes = (2..a.len())
        .map(|i| int_at(&a, i))
        .collect::<Option<Vec<i64>>>()?;
    Some(
        codes
            .into_iter()
            .zip(epochs)
            .map(|(code, &epoch)| match code {
                2 => Renewal::Elsewhere,
                _ => Renewal::Answered(LeaseAnswer {
                    code: Some(code),
                    epoch: (code == 1).then_some(epoch),
                    owner: None,
                }),
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sent(request: &RenewRequest) -> Vec<Vec<u8>> {
        let (_, cmd) = request.call();
        crate::scripts::sent_args(&cmd)
    }

    #[test]
    fn the_renew_request_sends_what_the_lua_header_names_in_its_order() {
        assert_eq!(crate::scripts::header_argv(ScriptId::Renew), ARGV);
        assert_eq!(crate::scripts::header_keys(ScriptId::Renew), ["leases"]);
        let mut request = RenewRequest {
            leases: vec!["{a}:l".into(), "{b}:l".into(), "{c}:l".into()],
            epochs: &[3, 9, 4],
            owner: "me",
            ttl_ms: 0,
            on_cluster: false,
        };
        // EVALSHA sha numkeys keys.. then ARGV in the header's order.
        let args = sent(&request);
        assert_eq!(&args[2], b"3");
        let argv: Vec<&[u8]> = args[6..].iter().map(Vec::as_slice).collect();
        assert_eq!(argv, [&b"me"[..], b"1", b"3 9 4"]);
        // On a cluster the first lease is declared, the others follow the
        // epochs (more_leases, ARGV[4..]).
        request.on_cluster = true;
        let args = sent(&request);
        assert_eq!(&args[2], b"1");
        assert_eq!(&args[3], b"{a}:l");
        let argv: Vec<&[u8]> = args[4..].iter().map(Vec::as_slice).collect();
        assert_eq!(argv, [&b"me"[..], b"1", b"3 9 4", b"{b}:l", b"{c}:l"]);
    }

    #[test]
    fn each_lease_gets_its_own_answer_and_a_bad_reply_fails_them_all() {
        let reply = Value::Array(vec![
            Value::Int(100),
            Value::Int(6100),
            Value::Int(1),
            Value::Int(0),
            Value::Int(2),
        ]);
        let a = answers(Some(reply), &[3, 9, 4]);
        assert_eq!(
            a,
            Some(vec![
                Renewal::Answered(LeaseAnswer {
                    code: Some(1),
                    epoch: Some(3),
                    owner: None
                }),
                Renewal::Answered(LeaseAnswer {
                    code: Some(0),
                    epoch: None,
                    owner: None
                }),
                Renewal::Elsewhere,
            ])
        );
        let short = Value::Array(vec![Value::Int(100), Value::Int(6100), Value::Int(1)]);
        assert_eq!(answers(Some(short), &[3, 9]), None);
        assert_eq!(answers(None, &[3]), None);
    }

    /// Lease-like keys, `count` of them, whose hash slots one master
    /// serves (`same`) or that another master serves (`!same`) than the
    /// one serving `{first}`.
    fn keys_where(
        cluster: &rmq_test_support::RedisCluster,
        first: &str,
        same: bool,
        count: usize,
    ) -> Vec<String> {
        let master = |k: &str| cluster.master_of_slot(crate::keys::cluster_hash_slot(k.as_bytes()));
        let home = master(first);
        (0..)
            .map(|i| format!("{{k{i}}}:l"))
            .filter(|k| k != first && (master(k) == home) == same)
            .take(count)
            .collect()
    }

    #[tokio::test]
    async fn on_a_cluster_one_call_renews_the_leases_of_its_master_and_leaves_the_others_alone() {
        let cluster = rmq_test_support::RedisCluster::builder()
            .replicas(0)
            .start();
        let first = "{k0}:l".to_string();
        let mut leases = vec![first.clone()];
        leases.extend(keys_where(&cluster, &first, true, 3));
        leases.extend(keys_where(&cluster, &first, false, 1));
        // Three of this master, one of another, then one of this master
        // that is never written (a missing lease).
        leases.swap(3, 4);
        let urls = cluster.urls();
        let seeds: Vec<&str> = urls.iter().map(String::as_str).collect();
        let client = crate::Client::connect_cluster(&seeds, crate::ClientOptions::default())
            .await
            .unwrap();
        let topic = client
            .define_topic(crate::TopicSpec::new("t", crate::TopicKind::Priority))
            .await
            .unwrap();
        let redis = topic.redis();
        for (lease, owner) in leases.iter().zip(["me", "me", "other", "me"]) {
            let mut hset = redis::cmd("HSET");
            hset.arg(lease)
                .arg("owner")
                .arg(owner)
                .arg("epoch")
                .arg(7)
                .arg("until")
                .arg(1);
            let _: i64 = redis.query(&hset).await.unwrap();
        }
        let request = RenewRequest {
            leases: leases.clone(),
            epochs: &[7, 7, 7, 7, 7],
            owner: "me",
            ttl_ms: 60_000,
            on_cluster: true,
        };
        let (id, cmd) = request.call();
        let reply = redis.run_one(id, cmd).await.unwrap();
        let got: Vec<Option<i64>> = answers(Some(reply), &[7, 7, 7, 7, 7])
            .unwrap()
            .into_iter()
            .map(|r| match r {
                Renewal::Answered(a) => a.code,
                Renewal::Elsewhere => None,
            })
            .collect();
        assert_eq!(
            got,
            [Some(1), Some(1), Some(0), None, None],
            "renewed, renewed, another owner's, on another master, missing"
        );
        let until = |lease: &String| {
            let mut hget = redis::cmd("HGET");
            hget.arg(lease).arg("until");
            async move { redis.query::<i64>(&hget).await.unwrap() }
        };
        assert!(until(&leases[0]).await > 1 && until(&leases[1]).await > 1);
        assert_eq!(
            until(&leases[2]).await,
            1,
            "another owner's lease untouched"
        );
        assert_eq!(
            until(&leases[3]).await,
            1,
            "the other master's lease untouched"
        );
    }
}

//! A topic's head index as a whole (`scripts/lua/notify.lua` describes
//! it): one key on a single node; on a Redis Cluster one per hash tag of
//! the topic's slots (up to 16,384), which a consumer reads, and a new
//! topic marks, in one call per master (more for a master
//! serving more than [`INDEXES_PER_CALL`] of them), as the cluster's layout
//! says. A stale layout costs a read its completeness (the consumer then
//! looks at every slot and the layout is asked again), never a wrong
//! answer.
//!
//! A serial member takes only from the slots it owns, so on a cluster it
//! reads only their tags' indexes ([`Reach::Slots`]): what a read costs
//! Redis grows with the slots a member owns, not with the topic's, and a
//! group of many members reads each index about once per rescan instead
//! of once per member. A single node's one index is read whole.

use redis::Cmd;

use crate::conn::{ClusterLayout, Redis};
use crate::error::{Error, ErrorKind, Result};
use crate::keys::{cluster_hash_slot, slot_tag, topic_tags};
use crate::scripts::heads::{self, IndexOp};
use crate::scripts::ScriptId;

/// Indexes one cluster call reaches at most: a 65,536-slot topic's
/// 16,384 tags on three masters take a call each (a read of an index
/// with nothing to report is one `ZRANGE`).
const INDEXES_PER_CALL: usize = 8_192;

/// The part of a topic's head index a call reaches.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Reach<'a> {
    /// The entries of every slot.
    Every,
    /// The entries of these slots at least: on a cluster the indexes of
    /// their tags (which may hold the entries of a few neighbours too, on
    /// more than 16,384 slots), on a single node the one index.
    Slots(&'a std::collections::HashSet<u32>),
}

impl Reach<'_> {
    /// The distinct tags whose indexes hold the entries reached, of a
    /// topic `name` with `slots` slots.
    fn tags(self, name: &str, slots: u32) -> Vec<&'static str> {
        match self {
            Reach::Every => topic_tags(name, slots),
            Reach::Slots(of) => {
                let tags: std::collections::BTreeSet<&'static str> = of
                    .iter()
                    .filter(|&&slot| slot < slots)
                    .map(|&slot| slot_tag(name, slot, slots))
                    .collect();
                tags.into_iter().collect()
            }
        }
    }
}

/// The calls that do `op` on the part `reach` of the head index of topic
/// `name` with `slots` slots. Err when the cluster's layout could not be
/// read or leaves a tag's hash slot unserved.
pub(crate) async fn index_calls(
    redis: &Redis,
    prefix: &str,
    name: &str,
    slots: u32,
    reach: Reach<'_>,
    op: IndexOp,
) -> Result<Vec<(ScriptId, Cmd)>> {
    if !redis.is_cluster() {
        return Ok(vec![heads::on_one_node(prefix, name, op)]);
    }
    let layout = redis.known_layout().await?;
    per_master_calls(&layout, prefix, name, &reach.tags(name, slots), op).ok_or_else(|| {
        redis.forget_layout();
        Error::new(
            ErrorKind::Redis,
            "the cluster layout leaves some hash slot of the topic unserved",
        )
    })
}

/// Notes the whole head index of topic `name` complete (every slot with
/// work has an entry): a topic defined now, or one whose every slot a
/// consumer just looked at.
pub(crate) async fn mark_complete(
    redis: &Redis,
    prefix: &str,
    name: &str,
    slots: u32,
) -> Result<()> {
    let calls = index_calls(redis, prefix, name, slots, Reach::Every, IndexOp::Mark).await?;
    redis
        .run(calls)
        .await?
        .into_iter()
        .try_for_each(|r| r.map(drop))
}

/// The cluster calls: the indexes of `tags` grouped by the master `layout`
/// says serves each, in chunks. None when one is served by none.
fn per_master_calls(
    layout: &ClusterLayout,
    prefix: &str,
    name: &str,
    tags: &[&'static str],
    op: IndexOp,
) -> Option<Vec<(ScriptId, Cmd)>> {
    let mut by_master: std::collections::BTreeMap<u16, Vec<&str>> = Default::default();
    for &tag in tags {
        let master = layout.master_of(cluster_hash_slot(tag.as_bytes()))?;
        by_master.entry(master).or_default().push(tag);
    }
    by_master
        .values()
        .flat_map(|tags| tags.chunks(INDEXES_PER_CALL))
        .map(|chunk| heads::on_one_master(prefix, name, chunk, op))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis::Value;

    /// Three masters with equal contiguous ranges.
    fn three_masters() -> ClusterLayout {
        let entry = |start: i64, end: i64, id: &str| {
            Value::Array(vec![
                Value::Int(start),
                Value::Int(end),
                Value::Array(vec![
                    Value::BulkString(b"127.0.0.1".to_vec()),
                    Value::Int(7000),
                    Value::BulkString(id.as_bytes().to_vec()),
                ]),
            ])
        };
        let reply = Value::Array(vec![
            entry(0, 5460, "a"),
            entry(5461, 10922, "b"),
            entry(10923, 16383, "c"),
        ]);
        ClusterLayout::of_reply(&reply).unwrap()
    }

    #[test]
    fn each_call_reaches_one_masters_indexes_and_all_calls_reach_every_tag() {
        let layout = three_masters();
        for slots in [1, 16, 1_024, 65_536] {
            let tags = Reach::Every.tags("orders", slots);
            let calls = per_master_calls(&layout, "p", "orders", &tags, IndexOp::Read(10)).unwrap();
            let mut reached = 0;
            for (_, cmd) in &calls {
                let keys = indexes_named(cmd);
                let masters: std::collections::HashSet<_> = keys
                    .iter()
                    .map(|k| layout.master_of(cluster_hash_slot(k.as_bytes())))
                    .collect();
                assert_eq!(masters.len(), 1, "{slots} slots: one master per call");
                reached += keys.len();
            }
            assert_eq!(reached, topic_tags("orders", slots).len(), "{slots} slots");
            assert!(calls.len() <= 3, "{slots} slots: {} calls", calls.len());
        }
    }

    /// The head indexes a call names.
    fn indexes_named(cmd: &Cmd) -> Vec<String> {
        crate::scripts::sent_args(cmd)
            .into_iter()
            .map(|a| String::from_utf8_lossy(&a).into_owned())
            .filter(|a| a.contains(":heads#"))
            .collect()
    }

    #[test]
    fn a_read_of_some_slots_names_only_the_indexes_of_their_tags() {
        let layout = three_masters();
        let index = |slot, slots| {
            crate::keys::tag_head_index("p", "orders", slot_tag("orders", slot, slots))
        };
        // 1,024 slots: a tag each, so three owned slots are three indexes,
        // whatever the masters serving them.
        let owned: std::collections::HashSet<u32> = [3, 500, 1_000].into();
        let tags = Reach::Slots(&owned).tags("orders", 1_024);
        let calls = per_master_calls(&layout, "p", "orders", &tags, IndexOp::Read(10)).unwrap();
        let mut named: Vec<String> = calls.iter().flat_map(|(_, c)| indexes_named(c)).collect();
        named.sort();
        let mut expected: Vec<String> = owned.iter().map(|&s| index(s, 1_024)).collect();
        expected.sort();
        assert_eq!(named, expected);
        // 65,536 slots: four neighbours share a tag, and a slot past the
        // topic's end names nothing.
        let owned: std::collections::HashSet<u32> = [0, 1, 2, 3, 70_000].into();
        let tags = Reach::Slots(&owned).tags("orders", 65_536);
        assert_eq!(tags, [slot_tag("orders", 0, 65_536)]);
        assert_eq!(Reach::Every.tags("orders", 65_536).len(), 16_384);
    }

    #[tokio::test]
    async fn a_read_of_one_masters_indexes_merges_them_cuts_at_the_limit_and_tells_what_it_missed()
    {
        let cluster = rmq_test_support::RedisCluster::builder()
            .replicas(0)
            .start();
        let urls = cluster.urls();
        let seeds: Vec<&str> = urls.iter().map(String::as_str).collect();
        let client = crate::Client::connect_cluster(&seeds, crate::ClientOptions::default())
            .await
            .unwrap();
        let redis = client.inner.ctx.redis.clone();
        let layout = redis.known_layout().await.unwrap();
        let master = |tag: &str| layout.master_of(cluster_hash_slot(tag.as_bytes()));
        let names: Vec<String> = (0..200).map(|i| format!("t{i}")).collect();
        let home = master("t0");
        let mine: Vec<&str> = names
            .iter()
            .map(String::as_str)
            .filter(|t| master(t) == home)
            .take(3)
            .collect();
        let away = names
            .iter()
            .map(String::as_str)
            .find(|t| master(t) != home)
            .unwrap();
        let zadd = |tag: &str, entries: &[(&str, &str)]| {
            let mut cmd = redis::cmd("ZADD");
            cmd.arg(crate::keys::tag_head_index("p", "x", tag));
            for (member, score) in entries {
                cmd.arg(*score).arg(*member);
            }
            cmd
        };
        let _: i64 = redis
            .query(&zadd(mine[0], &[("1", "10"), ("2", "50"), ("*", "+inf")]))
            .await
            .unwrap();
        let _: i64 = redis
            .query(&zadd(
                mine[1],
                &[("3", "20"), ("4", "30"), ("5", "40"), ("*", "+inf")],
            ))
            .await
            .unwrap();
        let read = |tags: Vec<&str>| {
            let (id, cmd) = heads::on_one_master("p", "x", &tags, IndexOp::Read(2)).unwrap();
            let redis = redis.clone();
            async move { heads::Heads::parse(redis.run_one(id, cmd).await.unwrap()).unwrap() }
        };
        // The second index was cut after 30: nothing past it is returned,
        // and the read says entries were left out.
        let both = read(vec![mine[0], mine[1]]).await;
        assert!(both.complete && both.more && !both.unreached, "{both:?}");
        assert_eq!(both.entries, [(1, 10), (3, 20)]);
        // An index that is not marked complete makes the read incomplete.
        let unmarked = read(vec![mine[0], mine[2]]).await;
        assert!(!unmarked.complete && !unmarked.unreached, "{unmarked:?}");
        // One on another master is not read, and the read says so.
        let elsewhere = read(vec![mine[0], away]).await;
        assert!(!elsewhere.complete && elsewhere.unreached, "{elsewhere:?}");
    }

    #[test]
    fn a_tag_no_master_serves_gives_no_calls() {
        let reply = Value::Array(vec![Value::Array(vec![
            Value::Int(0),
            Value::Int(99),
            Value::Array(vec![
                Value::BulkString(b"127.0.0.1".to_vec()),
                Value::Int(7000),
            ]),
        ])]);
        let layout = ClusterLayout::of_reply(&reply).unwrap();
        let tags = Reach::Every.tags("orders", 1_024);
        assert!(per_master_calls(&layout, "p", "orders", &tags, IndexOp::Mark).is_none());
    }
}

//! Every Redis key and channel name rmq uses, built in one place.
//!
//! All keys of one slot share one hash tag, so one script can touch all of
//! them on one Redis Cluster node, and every script but the lease renewal
//! (`renew.lua`, flagged to reach several hash slots of its own master)
//! keeps to one cluster slot. The tag is not the slot's name but a short string picked from a
//! fixed table so that the slots of a topic land on evenly spaced Redis
//! Cluster hash slots: slot `i` of `n` goes to hash slot
//! `(offset(topic) + i * 16384 / n) mod 16384`. Masters own contiguous
//! hash-slot ranges, so a topic's slots spread over all masters in
//! proportion to what each owns (64 slots on 3 equal masters: 21, 21, 22),
//! instead of wherever CRC16 of their names happens to fall.
//!
//! Key layout: `<prefix>:{<tag>}:<topic>:<slot>:<x>`. Every key and channel
//! starts with the client's prefix and a colon, so an ACL key pattern
//! `<prefix>:*` covers them. The keys outside any slot are the prefix's
//! topic index and a serial group's membership hash; each is used alone.

use std::sync::OnceLock;

/// Number of Redis Cluster hash slots.
pub(crate) const HASH_SLOTS: u32 = 16384;

/// The hash tag of slot `slot` of a topic with `slots` slots.
pub(crate) fn slot_tag(topic: &str, slot: u32, slots: u32) -> &'static str {
    let offset = crc32fast::hash(topic.as_bytes()) % HASH_SLOTS;
    let step = (u64::from(slot) * u64::from(HASH_SLOTS)) / u64::from(slots.max(1));
    let hash_slot = (u64::from(offset) + step) % u64::from(HASH_SLOTS);
    tag_table()[hash_slot as usize].as_str()
}

/// The names of a slot's ten keys (each key ends in `:<name>`), in the
/// order every slot script takes them as KEYS (`scripts/lua/layout.lua`
/// describes each; a test holds the two lists together).
pub(crate) const SLOT_KEY_NAMES: [&str; 10] = [
    "q", // ZSET pending (or, for a slot of many, the index of its buckets: pending.lua)
    "d", // HASH payloads
    "f", // ZSET in flight (lease deadlines)
    "n", // HASH duplicates waiting behind in-flight deliveries
    "m", // HASH counters
    "r", // ZSET priority retries waiting out their backoff
    "x", // ZSET dead letters by time of death
    "X", // HASH dead-letter records
    "a", // HASH attempts and score of redelivered messages waiting again
    "l", // HASH serial mode: the slot's lease (owner, epoch, until)
];

/// The ten keys of one slot, in the order every slot script expects them.
pub(crate) fn slot_keys(prefix: &str, topic: &str, slot: u32, slots: u32) -> [String; 10] {
    let tag = slot_tag(topic, slot, slots);
    let base = format!("{prefix}:{{{tag}}}:{topic}:{slot}");
    SLOT_KEY_NAMES.map(|name| format!("{base}:{name}"))
}

/// STRING: the key that signs receipts (`receipt/key.rs`), one per prefix.
pub(crate) fn receipt_key(prefix: &str) -> String {
    format!("{prefix}:receipt-key")
}

/// HASH: topic name -> definition (JSON).
pub(crate) fn topic_index(prefix: &str) -> String {
    format!("{prefix}:topics")
}

/// HASH: a topic's rate-limit bucket (rate, burst, theoretical arrival
/// time), shared by all its consumers; its own hash tag.
pub(crate) fn rate_key(prefix: &str, topic: &str) -> String {
    format!("{prefix}:rate:{{{topic}}}")
}

/// A topic's in-flight cap: HASH `cap` (the limit) and ZSET `capz` (the
/// permits held, by deadline). They carry slot 0's hash tag, which does not
/// depend on the slot count, so on a cluster the cap's "room" notice can go
/// out on slot 0's sharded wake-up channel, which every consumer hears.
pub(crate) fn cap_keys(prefix: &str, topic: &str) -> [String; 2] {
    let tag = slot_tag(topic, 0, 1);
    let base = format!("{prefix}:{{{tag}}}:{topic}");
    [format!("{base}:cap"), format!("{base}:capz")]
}

/// A bounded topic's room: HASH `room` (limit, live, used) and ZSET
/// `roomz` (reservations of sends in progress, by deadline). Slot 0's hash
/// tag, as the cap's: the settler gives room back and frees permits in one
/// call to one node.
pub(crate) fn room_keys(prefix: &str, topic: &str) -> [String; 2] {
    let tag = slot_tag(topic, 0, 1);
    let base = format!("{prefix}:{{{tag}}}:{topic}");
    [format!("{base}:room"), format!("{base}:roomz")]
}

/// HASH: a consumer group's members -> heartbeat deadline (serial mode).
pub(crate) fn group_key(prefix: &str, topic: &str, group: &str) -> String {
    format!("{prefix}:group:{topic}:{group}")
}

/// The membership group of a topic's parallel consumers on a cluster
/// (`consumer/affinity.rs`), kept as a serial group's is: no serial group
/// can have this name, since a group name holds no `#`.
pub(crate) const PARALLEL_GROUP: &str = "#parallel";

/// The field of the topic index that notes a serial group of a topic
/// (topic names hold no ':', so it can never be a topic's field).
pub(crate) fn group_field(topic: &str, group: &str) -> String {
    format!("{topic}:group:{group}")
}

/// The topic and group a field of the topic index notes, if it notes a
/// group (a topic name has no colon, so the first `:group:` splits it).
pub(crate) fn parse_group_field(field: &str) -> Option<(&str, &str)> {
    field.split_once(":group:")
}

/// ZSET: a topic's head index, slot -> when it may next have work (a
/// single node only: slot scripts write it next to keys of every hash
/// slot; see `scripts/lua/notify.lua`). No hash tag: scripts tell it from a
/// cluster's request key by that. The `#`, which neither a prefix nor a
/// topic may hold, keeps it apart from every key of any other prefix
/// (`app:heads#topics` is no topic registry of a prefix `app:heads`).
pub(crate) fn head_index(prefix: &str, topic: &str) -> String {
    format!("{prefix}:heads#{topic}")
}

/// ZSET: a topic's marks, slot -> when it has work no consumer was told
/// of (a single node only, written with the head index; idle parallel
/// consumers wait on it with BZMPOP, which hands each mark to one of them:
/// see `scripts/lua/notify.lua`). The `#` keeps it apart from every other
/// prefix's keys, as the index's.
pub(crate) fn marks(prefix: &str, topic: &str) -> String {
    format!("{prefix}:marks#{topic}")
}

/// ZSET: one consumer's own wake-up key, which it waits on with the
/// marks so that, when it stops, it can end its own wait (and only its
/// own) before it hands back what it holds.
pub(crate) fn marks_wake(prefix: &str, topic: &str, consumer: &str) -> String {
    format!("{prefix}:marks#{topic}#{consumer}")
}

/// The head index and the marks of the topic whose slot key is `slot_key`
/// (`<prefix>:{<tag>}:<topic>:<slot>:<x>`; neither prefix nor topic holds
/// a brace, and a topic no colon). None for any other key.
pub(crate) fn head_index_and_marks_of(slot_key: &[u8]) -> Option<[String; 2]> {
    let key = std::str::from_utf8(slot_key).ok()?;
    let (prefix, rest) = key.split_once(":{")?;
    let (_, rest) = rest.split_once("}:")?;
    let (topic, _) = rest.split_once(':')?;
    Some([head_index(prefix, topic), marks(prefix, topic)])
}

/// Cluster: ZSET, the head index of a topic's slots whose hash tag is
/// `tag` (every slot of a topic of up to 16,384 slots has a tag of its
/// own; 65,536 slots share each tag four ways). It carries that tag, so a
/// slot script keeps it without leaving its hash slot, and a consumer
/// reads the indexes a master serves in one call (`scripts/lua/heads.lua`).
/// The `#` keeps it apart from the slots' keys (a topic holds none).
pub(crate) fn tag_head_index(prefix: &str, topic: &str, tag: &str) -> String {
    format!("{prefix}:{{{tag}}}:heads#{topic}")
}

/// Cluster: the head index of the slot whose key is `slot_key`
/// (`<prefix>:{<tag>}:<topic>:<slot>:<x>`). None for any other key.
pub(crate) fn tag_head_index_of(slot_key: &[u8]) -> Option<String> {
    let key = std::str::from_utf8(slot_key).ok()?;
    let (prefix, rest) = key.split_once(":{")?;
    let (tag, rest) = rest.split_once("}:")?;
    let (topic, _) = rest.split_once(':')?;
    Some(tag_head_index(prefix, topic, tag))
}

/// The distinct hash tags of a topic's slots, in slot order.
pub(crate) fn topic_tags(topic: &str, slots: u32) -> Vec<&'static str> {
    let mut tags: Vec<&'static str> = Vec::with_capacity(slots.min(HASH_SLOTS) as usize);
    for slot in 0..slots.max(1) {
        let tag = slot_tag(topic, slot, slots);
        // Slots sharing a tag are neighbours (slot i goes to hash slot
        // offset + i * 16384 / slots).
        if tags.last() != Some(&tag) {
            tags.push(tag);
        }
    }
    tags
}

/// Single node: the one pub/sub channel (PUBLISH) on which send and settle
/// announce a new head of any slot of the topic.
pub(crate) fn wake_channel(prefix: &str, topic: &str) -> String {
    format!("{prefix}:wake:{topic}")
}

/// Single node: the channel on which a freed in-flight permit is
/// announced (`room`) besides the wake-up channel: consumers that wait on
/// the marks instead of hearing every notice listen here alone. A topic
/// holds no colon, so this is no other topic's wake-up channel.
pub(crate) fn room_channel(prefix: &str, topic: &str) -> String {
    format!("{prefix}:wake:{topic}:room")
}

/// Cluster: the sharded channel (SPUBLISH) of the slots of a topic whose
/// tag is `tag`. A script may only publish to a sharded channel of its own
/// hash slot, so the channel carries the tag; slots sharing a tag share it.
/// Scripts tell the two kinds apart by the brace (see `notify.lua`).
pub(crate) fn sharded_wake_channel(prefix: &str, topic: &str, tag: &str) -> String {
    format!("{prefix}:{{{tag}}}:{topic}:wake")
}

/// Redis Cluster hash slot of a key: CRC16/XMODEM of its hash tag (the part
/// between the first `{` and the next `}`, when not empty) mod 16384.
pub(crate) fn cluster_hash_slot(key: &[u8]) -> u16 {
    let tagged = match key.iter().position(|&b| b == b'{') {
        Some(open) => match key[open + 1..].iter().position(|&b| b == b'}') {
            Some(len) if len > 0 => &key[open + 1..open + 1 + len],
            _ => key,
        },
        None => key,
    };
    let mut crc: u16 = 0;
    for &b in tagged {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % HASH_SLOTS as u16
}

/// For every hash slot, the first string in the sequence "0", "1", ...,
/// "z", "10", ... (base 36) that hashes to it. Fixed forever: it names keys.
fn tag_table() -> &'static [String] {
    static TABLE: OnceLock<Vec<String>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut table: Vec<Option<String>> = vec![None; HASH_SLOTS as usize];
        let mut missing = HASH_SLOTS;
        let mut n: u64 = 0;
        while missing > 0 {
            let s = base36(n);
            let h = cluster_hash_slot(s.as_bytes()) as usize;
            if table[h].is_none() {
                table[h] = Some(s);
                missing -= 1;
            }
            n += 1;
        }
        table.into_iter().map(Option::unwrap_or_default).collect()
    })
}

fn base36(mut n: u64) -> String {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    loop {
        out.push(DIGITS[(n % 36) as usize]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8(out).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot_of(key: &str) -> u16 {
        cluster_hash_slot(key.as_bytes())
    }

    #[test]
    fn the_room_channel_is_the_one_inflight_lua_publishes_to() {
        // inflight.lua appends ':room' to the wake-up channel it is given.
        let wake = wake_channel("app:x", "orders");
        assert_eq!(room_channel("app:x", "orders"), format!("{wake}:room"));
    }

    #[test]
    fn keys_of_one_slot_share_one_cluster_slot() {
        for (slot, slots) in [(0, 1), (1, 2), (7, 64), (65535, 65536), (9, 16)] {
            let keys = slot_keys("rmq", "orders", slot, slots);
            let first = slot_of(&keys[0]);
            assert!(keys.iter().all(|k| slot_of(k) == first), "{keys:?}");
            let tag = slot_tag("orders", slot, slots);
            assert_eq!(slot_of(&sharded_wake_channel("rmq", "orders", tag)), first);
        }
    }

    #[test]
    fn a_slot_key_names_its_topics_head_index_and_marks() {
        for (prefix, topic) in [("rmq", "orders"), ("a:b", "t.1-x_y")] {
            let keys = slot_keys(prefix, topic, 5, 64);
            assert_eq!(
                head_index_and_marks_of(keys[0].as_bytes()),
                Some([head_index(prefix, topic), marks(prefix, topic)])
            );
            assert!(!head_index(prefix, topic).contains('{'));
            assert!(!marks(prefix, topic).contains('{'));
        }
        assert_eq!(head_index_and_marks_of(b"rmq:topics"), None);
    }

    #[test]
    fn a_slot_key_names_the_head_index_of_its_tag_in_its_own_hash_slot() {
        for (slot, slots) in [(0, 1), (5, 64), (65535, 65536), (9, 16)] {
            let keys = slot_keys("a:b", "orders", slot, slots);
            let tag = slot_tag("orders", slot, slots);
            let index = tag_head_index("a:b", "orders", tag);
            assert_eq!(tag_head_index_of(keys[0].as_bytes()), Some(index.clone()));
            assert_eq!(slot_of(&index), slot_of(&keys[0]));
            assert!(index.contains(":heads#") && !keys.iter().any(|k| k.contains('#')));
        }
        assert_eq!(tag_head_index_of(b"rmq:topics"), None);
    }

    #[test]
    fn a_topics_tags_are_one_per_slot_up_to_16384_slots_and_then_shared() {
        for slots in [1, 16, 1024, 16384, 65536] {
            let tags = topic_tags("orders", slots);
            let distinct: std::collections::HashSet<_> = tags.iter().collect();
            assert_eq!(distinct.len(), tags.len(), "{slots}: no tag twice");
            assert_eq!(tags.len() as u32, slots.min(HASH_SLOTS), "{slots}");
            for slot in [0, slots / 2, slots - 1] {
                assert!(tags.contains(&slot_tag("orders", slot, slots)));
            }
        }
    }

    #[test]
    fn keys_of_different_slots_never_collide() {
        let mut seen = std::collections::HashSet::new();
        for slot in 0..1024 {
            assert!(seen.insert(slot_keys("p", "t", slot, 1024)[0].clone()));
        }
    }

    #[test]
    fn cluster_slot_matches_the_reference_value() {
        // Redis documentation: CLUSTER KEYSLOT "123456789" == 12739 (CRC16 of "123456789" is 0x31C3).
        assert_eq!(slot_of("123456789"), 0x31C3);
        assert_eq!(
            slot_of("{user1000}.following"),
            slot_of("{user1000}.followers")
        );
        assert_eq!(slot_of("{}x"), slot_of("{}x"));
    }

    #[test]
    fn the_tag_table_covers_every_hash_slot_and_never_changes() {
        let table = tag_table();
        for (h, tag) in table.iter().enumerate() {
            assert_eq!(usize::from(slot_of(tag)), h);
            assert!(tag.len() <= 4, "{tag}");
        }
        // Pinned: these name keys in every deployed Redis.
        assert_eq!(slot_tag("orders", 0, 64), slot_tag("orders", 0, 64));
        assert_eq!(table[slot_of("0") as usize], "0");
        assert_eq!(
            slot_keys("rmq", "orders", 3, 4)[0],
            format!("rmq:{{{}}}:orders:3:q", slot_tag("orders", 3, 4))
        );
    }

    #[test]
    fn slots_spread_evenly_over_equal_masters() {
        // Three masters owning equal contiguous ranges, as `redis-cli --cluster create` assigns.
        for topic in ["orders", "a", "jobs-1"] {
            let mut per_master = [0u32; 3];
            for slot in 0..64 {
                let h = u32::from(slot_of(slot_tag(topic, slot, 64)));
                per_master[(h * 3 / HASH_SLOTS) as usize] += 1;
            }
            assert!(
                per_master.iter().all(|&n| (21..=22).contains(&n)),
                "{per_master:?}"
            );
        }
    }

    #[test]
    fn every_key_starts_with_the_prefix() {
        for k in slot_keys("team-a", "t", 3, 4) {
            assert!(k.starts_with("team-a:"), "{k}");
        }
        assert!(topic_index("team-a").starts_with("team-a:"));
        assert!(wake_channel("team-a", "t").starts_with("team-a:"));
        assert!(sharded_wake_channel("team-a", "t", "0").starts_with("team-a:"));
    }
}

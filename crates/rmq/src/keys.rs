//! Every Redis key and channel name rmq uses, built in one place.
//!
//! All keys of one slot share the hash tag `{<topic>:<slot>}`, so one script
//! can touch all of them on one Redis Cluster node. Every key starts with the
//! client's prefix and a colon, so an ACL key pattern `<prefix>:*` covers them.
//! The one key outside any slot is the prefix's topic index.

/// The ten keys of one slot, in the order every slot script expects them
/// (see `scripts/lua/common.lua`).
pub(crate) fn slot_keys(prefix: &str, topic: &str, slot: u32) -> [String; 10] {
    let tag = format!("{prefix}:{{{topic}:{slot}}}");
    [
        format!("{tag}:q"), // ZSET pending
        format!("{tag}:d"), // HASH payloads
        format!("{tag}:f"), // ZSET in flight (lease deadlines)
        format!("{tag}:n"), // HASH duplicates waiting behind in-flight deliveries
        format!("{tag}:m"), // HASH counters
        format!("{tag}:r"), // ZSET priority retries waiting out their backoff
        format!("{tag}:x"), // ZSET dead letters by time of death
        format!("{tag}:X"), // HASH dead-letter records
        format!("{tag}:a"), // HASH attempts, score and token of delivered messages
        format!("{tag}:l"), // HASH serial mode: the slot's lease (owner, epoch, until)
    ]
}

/// HASH: topic name -> definition (JSON).
pub(crate) fn topic_index(prefix: &str) -> String {
    format!("{prefix}:topics")
}

/// HASH: a consumer group's members -> heartbeat deadline (serial mode).
pub(crate) fn group_key(prefix: &str, topic: &str, group: &str) -> String {
    format!("{prefix}:group:{topic}:{group}")
}

/// Pub/sub channel on which send and settle announce a new head of a slot.
pub(crate) fn wake_channel(prefix: &str, topic: &str) -> String {
    format!("{prefix}:wake:{topic}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Redis Cluster hash slot of a key (CRC16/XMODEM of the hash tag).
    fn cluster_slot(key: &str) -> u16 {
        let bytes = key.as_bytes();
        let tagged = match bytes.iter().position(|&b| b == b'{') {
            Some(open) => match bytes[open + 1..].iter().position(|&b| b == b'}') {
                Some(len) if len > 0 => &bytes[open + 1..open + 1 + len],
                _ => bytes,
            },
            None => bytes,
        };
        let mut crc: u16 = 0;
        for &b in tagged {
            crc ^= (b as u16) << 8;
            for _ in 0..8 {
                crc = if crc & 0x8000 != 0 {
                    (crc << 1) ^ 0x1021
                } else {
                    crc << 1
                };
            }
        }
        crc % 16384
    }

    #[test]
    fn keys_of_one_slot_share_one_cluster_slot() {
        for slot in [0, 1, 7, 65535] {
            let keys = slot_keys("rmq", "orders", slot);
            let first = cluster_slot(&keys[0]);
            assert!(keys.iter().all(|k| cluster_slot(k) == first), "{keys:?}");
        }
    }

    #[test]
    fn cluster_slot_matches_the_reference_value() {
        // Redis documentation: CLUSTER KEYSLOT "123456789" == 12739 (CRC16 of "123456789" is 0x31C3).
        assert_eq!(cluster_slot("123456789"), 0x31C3);
        assert_eq!(
            cluster_slot("{user1000}.following"),
            cluster_slot("{user1000}.followers")
        );
    }

    #[test]
    fn every_key_starts_with_the_prefix() {
        for k in slot_keys("team-a", "t", 3) {
            assert!(k.starts_with("team-a:"), "{k}");
        }
        assert!(topic_index("team-a").starts_with("team-a:"));
        assert!(wake_channel("team-a", "t").starts_with("team-a:"));
    }
}

//! Who listens: the subscribers of a topic's wake-up channels are its live
//! consumers (every consumer subscribes to all of them), which a topic
//! delete refuses to pull the rug from under.

use redis::Value;

use super::Redis;
use crate::error::Result;

impl Redis {
    /// Consumers subscribed to these channels. Sharded channels (a
    /// cluster, where every node answers for its own shard): the most any
    /// one has, since every consumer of a topic subscribes to all of them.
    /// A single node's: the sum, since each consumer subscribes to one of
    /// them (the wake-up channel, or the room channel).
    pub(crate) async fn subscribers(&self, channels: &[String], sharded: bool) -> Result<u64> {
        if channels.is_empty() {
            return Ok(0);
        }
        let mut cmd = redis::cmd("PUBSUB");
        cmd.arg(if sharded { "SHARDNUMSUB" } else { "NUMSUB" });
        cmd.arg(channels);
        let reply: Value = self.query(&cmd).await?;
        let counts: Vec<i64> = match reply {
            Value::Map(pairs) => pairs
                .iter()
                .filter_map(|(_, n)| crate::value::as_int(n))
                .collect(),
            Value::Array(a) => a
                .chunks_exact(2)
                .filter_map(|p| crate::value::as_int(&p[1]))
                .collect(),
            _ => Vec::new(),
        };
        let counts = counts.into_iter().map(|n| u64::try_from(n).unwrap_or(0));
        Ok(if sharded {
            counts.max().unwrap_or(0)
        } else {
            counts.sum()
        })
    }
}

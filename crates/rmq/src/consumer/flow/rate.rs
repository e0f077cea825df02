//! The topic's global rate limit as a consumer meets it: before taking
//! messages, ask the topic's bucket for as many tokens as messages wanted;
//! after, give back the tokens the slots had no message for. Topics without
//! a limit make no call at all.

use crate::error::Result;
use crate::keys;
use crate::scripts::rate::{self, Granted};
use crate::topic::Topic;

/// Up to `n` tokens now; a topic without a limit grants `n` with no call.
pub(crate) async fn take(topic: &Topic, n: usize) -> Result<Granted> {
    if !limited(topic) {
        return Ok(Granted {
            tokens: n,
            wait_ms: 0,
        });
    }
    let bucket = keys::rate_key(topic.prefix(), topic.name());
    let (id, cmd) = rate::take(&bucket, n);
    Ok(Granted::parse(topic.redis().run_one(id, cmd).await?))
}

/// Returns `unused` tokens, in the background (a lost give-back only
/// lowers the rate a little, never raises it above the limit).
pub(crate) fn give_back(topic: &Topic, unused: usize) {
    if unused == 0 || !limited(topic) {
        return;
    }
    let topic = topic.clone();
    tokio::spawn(async move {
        let bucket = keys::rate_key(topic.prefix(), topic.name());
        let (id, cmd) = rate::give(&bucket, unused);
        if let Err(e) = topic.redis().run_one(id, cmd).await {
            tracing::debug!("giving back rate tokens failed: {e}");
        }
    });
}

/// Whether the topic has a rate limit, as this handle's definition says
/// (refreshed every 2 s; the rate itself is read from the bucket at once).
fn limited(topic: &Topic) -> bool {
    topic.cached().spec.rate_per_sec > 0
}

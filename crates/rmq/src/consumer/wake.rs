//! Wake-ups: a dedicated pub/sub connection listens on the topic's channel,
//! where send and settle announce a slot's new head as `<slot>,<score>`.
//! It turns each notice into a hint and wakes the fetcher. After every
//! (re)connection it marks all slots for a look, since notices sent while
//! it was away are lost.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use super::Shared;
use crate::topic::Topic;

pub(crate) async fn listen(topic: Topic, shared: Arc<Shared>, cancel: CancellationToken) {
    let mut backoff = Duration::from_millis(50);
    while !cancel.is_cancelled() {
        let connect = async {
            let mut ps = topic.redis().client.get_async_pubsub().await?;
            ps.subscribe(&*topic.channel).await?;
            Ok::<_, redis::RedisError>(ps)
        };
        let mut ps = tokio::select! {
            r = connect => match r {
                Ok(ps) => ps,
                Err(e) => {
                    tracing::debug!("wake-up channel unavailable: {e}");
                    tokio::select! {
                        _ = tokio::time::sleep(backoff) => {}
                        _ = cancel.cancelled() => return,
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                    continue;
                }
            },
            _ = cancel.cancelled() => return,
        };
        backoff = Duration::from_millis(50);
        shared.lock().mark_all();
        shared.notify.notify_one();
        let mut messages = ps.on_message();
        loop {
            tokio::select! {
                m = messages.next() => match m {
                    Some(m) => {
                        let payload: &[u8] = m.get_payload_bytes();
                        if let Some((slot, score)) = parse(payload) {
                            shared.lock().notify(slot, score);
                            shared.notify.notify_one();
                        }
                    }
                    None => break,
                },
                _ = cancel.cancelled() => return,
            }
        }
    }
}

fn parse(p: &[u8]) -> Option<(u32, i64)> {
    let s = std::str::from_utf8(p).ok()?;
    let (slot, score) = s.split_once(',')?;
    Some((slot.parse().ok()?, score.parse().ok()?))
}

#[cfg(test)]
mod tests {
    #[test]
    fn notices_parse() {
        assert_eq!(
            super::parse(b"3,1700000000000"),
            Some((3, 1_700_000_000_000))
        );
        assert_eq!(super::parse(b"x"), None);
    }
}

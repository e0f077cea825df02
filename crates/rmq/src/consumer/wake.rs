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
                        match parse(payload) {
                            Some(Notice::Head { slot, score }) => shared.lock().notify(slot, score),
                            Some(Notice::RetryAt { slot, ms }) => shared.lock().wake_at(slot, ms),
                            None => continue,
                        }
                        shared.notify.notify_one();
                    }
                    None => break,
                },
                _ = cancel.cancelled() => return,
            }
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Notice {
    /// `<slot>,<score>`: the slot's first pending message has this score.
    Head { slot: u32, score: i64 },
    /// `<slot>,<ms>,t`: a retry in the slot is due at this server time.
    RetryAt { slot: u32, ms: i64 },
}

fn parse(p: &[u8]) -> Option<Notice> {
    let s = std::str::from_utf8(p).ok()?;
    let mut parts = s.split(',');
    let slot = parts.next()?.parse().ok()?;
    let n = parts.next()?.parse().ok()?;
    match parts.next() {
        None => Some(Notice::Head { slot, score: n }),
        Some("t") => Some(Notice::RetryAt { slot, ms: n }),
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::{parse, Notice};

    #[test]
    fn notices_parse() {
        assert_eq!(
            parse(b"3,1700000000000"),
            Some(Notice::Head {
                slot: 3,
                score: 1_700_000_000_000
            })
        );
        assert_eq!(parse(b"3,17,t"), Some(Notice::RetryAt { slot: 3, ms: 17 }));
        assert_eq!(parse(b"3,17,x"), None);
        assert_eq!(parse(b"x"), None);
    }
}

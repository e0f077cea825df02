//! Wake-ups: a dedicated pub/sub connection listens on the topic's channel
//! (a single node) or its sharded channels (a cluster: one per hash tag, on
//! the node that owns it, so no notice is broadcast to every node), where
//! send and settle announce a slot's new head as `<slot>,<score>`, and
//! the in-flight cap announces `room` when a permit is freed while a
//! consumer waits for one (on slot 0's channel, where its keys live).
//! It turns each notice into a hint and wakes the fetcher. After every
//! (re)connection it marks all slots for a look, since notices sent while
//! it was away are lost.
//!
//! A consumer that waits on the marks (`marks.rs`) hears of new heads from
//! them, one consumer per head, and listens here only for `room`, on the
//! topic's room channel, where no head is announced: a notice would wake
//! every such consumer, which is what the marks are there to avoid. A
//! parallel consumer on a cluster hears every notice but acts only on
//! those of its own slots (`affinity.rs`), for the same reason.

use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use tokio_util::sync::CancellationToken;

use crate::conn::{ClusterSeeds, Target};
use crate::consumer::Shared;
use crate::topic::Topic;

pub(crate) async fn listen(topic: Topic, shared: Arc<Shared>, cancel: CancellationToken) {
    match topic.redis().target.clone() {
        Target::Single(client) => listen_single(client, topic, shared, cancel).await,
        Target::Cluster(seeds) => listen_cluster(seeds, topic, shared, cancel).await,
    }
}

/// Sleeps for the backoff (doubling it, up to 2 s); false when cancelled.
async fn pause(backoff: &mut Duration, cancel: &CancellationToken) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(*backoff) => {}
        _ = cancel.cancelled() => return false,
    }
    *backoff = (*backoff * 2).min(Duration::from_secs(2));
    true
}

/// Turns one notice into a hint and wakes the fetcher.
fn deliver(topic: &str, shared: &Shared, payload: &[u8]) {
    crate::observe::woken(topic);
    let notice = match parse(payload) {
        Some(Notice::Room) => {
            shared.room.notify_one();
            return;
        }
        Some(n) => n,
        None => return,
    };
    {
        let mut s = shared.lock();
        match notice {
            // Another consumer's slot by affinity (`affinity.rs`): its own
            // consumer takes the work (this one only notes since when it is
            // there, to take it over if it stays).
            Notice::Head { slot, score } if !s.hears(slot) => {
                s.foreign_noticed(slot, score);
                return;
            }
            Notice::RetryAt { slot, .. } if !s.hears(slot) => return,
            Notice::Head { slot, score } => s.notify(slot, score),
            Notice::RetryAt { slot, ms } => s.wake_at(slot, ms),
            Notice::Room => {}
        }
    }
    shared.notify.notify_one();
}

/// After a (re)subscription: notices sent meanwhile are lost, look everywhere.
fn look_everywhere(shared: &Shared) {
    shared.lock().mark_all();
    shared.notify.notify_one();
}

/// Single node: one SUBSCRIBE to the topic's channel.
async fn listen_single(
    client: redis::Client,
    topic: Topic,
    shared: Arc<Shared>,
    cancel: CancellationToken,
) {
    let channel = if shared.marks {
        crate::keys::room_channel(topic.prefix(), topic.name())
    } else {
        topic.channel.to_string()
    };
    let mut backoff = Duration::from_millis(50);
    while !cancel.is_cancelled() {
        let connect = async {
            let mut ps = client.get_async_pubsub().await?;
            ps.subscribe(&channel).await?;
            Ok::<_, redis::RedisError>(ps)
        };
        let mut ps = tokio::select! {
            r = connect => match r {
                Ok(ps) => ps,
                Err(e) => {
                    tracing::debug!("wake-up channel unavailable: {e}");
                    if !pause(&mut backoff, &cancel).await {
                        return;
                    }
                    continue;
                }
            },
            _ = cancel.cancelled() => return,
        };
        backoff = Duration::from_millis(50);
        look_everywhere(&shared);
        let mut messages = ps.on_message();
        loop {
            tokio::select! {
                m = messages.next() => match m {
                    Some(m) => deliver(topic.name(), &shared, m.get_payload_bytes()),
                    None => break,
                },
                _ = cancel.cancelled() => return,
            }
        }
    }
}

/// `SSUBSCRIBE`s in flight at once on a cluster connection.
const SUBSCRIBES_IN_FLIGHT: usize = 64;

/// Cluster: SSUBSCRIBE to the sharded channel of each of the topic's hash
/// tags, each on the node that owns it (RESP3 pushes). When the server
/// drops a subscription (its hash slot moved, failover) or a connection
/// breaks, everything is subscribed again from scratch.
async fn listen_cluster(
    seeds: ClusterSeeds,
    topic: Topic,
    shared: Arc<Shared>,
    cancel: CancellationToken,
) {
    let channels = topic.channels();
    let mut backoff = Duration::from_millis(50);
    while !cancel.is_cancelled() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<redis::PushInfo>();
        let conn = tokio::select! {
            r = subscribe_cluster(&seeds, &channels, tx) => match r {
                Ok(c) => c,
                Err(e) => {
                    tracing::debug!("wake-up channels unavailable: {e}");
                    if !pause(&mut backoff, &cancel).await {
                        return;
                    }
                    continue;
                }
            },
            _ = cancel.cancelled() => return,
        };
        backoff = Duration::from_millis(50);
        look_everywhere(&shared);
        if !hear_cluster(&mut rx, &topic, &shared, &cancel).await {
            return;
        }
        drop(conn);
        tracing::debug!("wake-up subscriptions lost; subscribing again");
        if !pause(&mut backoff, &cancel).await {
            return;
        }
    }
}

/// A RESP3 cluster connection whose pushes go to `tx`, subscribed to
/// every channel in `channels` on the node that owns it.
async fn subscribe_cluster(
    seeds: &ClusterSeeds,
    channels: &[String],
    tx: tokio::sync::mpsc::UnboundedSender<redis::PushInfo>,
) -> Result<redis::cluster_async::ClusterConnection, redis::RedisError> {
    let client = seeds
        .builder()
        .use_protocol(redis::ProtocolVersion::RESP3)
        .push_sender(tx)
        .build()?;
    let conn = client.get_async_connection().await?;
    // A bounded number in flight: the cluster client looks over every
    // request in flight at each step, so the 16,384 channels of a
    // 65,536-slot topic sent at once cost it time quadratic in their
    // count (16 consumers starting together kept two cores busy for over
    // a minute).
    futures::stream::iter(channels.iter().cloned().map(|ch| {
        let mut conn = conn.clone();
        async move { conn.ssubscribe(ch).await }
    }))
    .buffer_unordered(SUBSCRIBES_IN_FLIGHT)
    .try_collect::<Vec<()>>()
    .await?;
    Ok(conn)
}

/// Hands each notice pushed to `rx` on, until a subscription is dropped
/// or the connection breaks (true) or `cancel` fires (false).
async fn hear_cluster(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<redis::PushInfo>,
    topic: &Topic,
    shared: &Shared,
    cancel: &CancellationToken,
) -> bool {
    loop {
        tokio::select! {
            m = rx.recv() => match m {
                Some(push) => match push.kind {
                    redis::PushKind::SMessage | redis::PushKind::Message => {
                        if let Some(redis::Value::BulkString(p)) = push.data.get(1) {
                            deliver(topic.name(), shared, p);
                        }
                    }
                    redis::PushKind::SUnsubscribe | redis::PushKind::Disconnection => return true,
                    _ => {}
                },
                None => return true,
            },
            _ = cancel.cancelled() => return false,
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Notice {
    /// `<slot>,<score>`: the slot's first pending message has this score.
    Head { slot: u32, score: i64 },
    /// `<slot>,<ms>,t`: a retry in the slot is due at this server time.
    RetryAt { slot: u32, ms: i64 },
    /// `room`: an in-flight cap permit was freed while a consumer waited.
    Room,
}

fn parse(p: &[u8]) -> Option<Notice> {
    if p == b"room" {
        return Some(Notice::Room);
    }
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
        assert_eq!(parse(b"room"), Some(Notice::Room));
        assert_eq!(parse(b"x"), None);
    }
}

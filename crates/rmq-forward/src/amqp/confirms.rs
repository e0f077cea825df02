//! Matching confirms and returns to the publishes they belong to.
//!
//! RabbitMQ sends an unroutable mandatory message back (`basic.return`)
//! before the ack that covers it, and one ack may cover many publishes
//! (`multiple`). `lapin` attaches a returned message to the next confirm
//! that completes, which may be another publish's, and completes a
//! multiple ack's confirms in no set order. So no publish can tell from its
//! own confirm whether it was the one returned.
//!
//! One collector task per channel owns every pending confirm. When some
//! complete, it first takes every other one that completed with them, notes
//! the ids of all returned messages (the `message_id` each publish set to
//! its stable id), and only then answers each publish: refused if its id
//! was returned (now or with an earlier ack: a return can ride on the
//! confirm of an earlier publish), confirmed otherwise.

use std::collections::HashMap;

use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use futures::FutureExt;
use lapin::Confirmation;
use lapin::PublisherConfirm;
use tokio::sync::{mpsc, oneshot};

use crate::sink::SinkError;

/// Returned ids kept while their own confirm has not come (bounded: a
/// broker cannot make the collector grow without limit).
const MAX_RETURNED: usize = 100_000;

struct Pending {
    id: String,
    confirm: PublisherConfirm,
    reply: oneshot::Sender<Result<(), SinkError>>,
}

type Done = (
    String,
    oneshot::Sender<Result<(), SinkError>>,
    lapin::Result<Confirmation>,
);

/// Where a channel's publishes hand their confirm to its collector.
#[derive(Clone)]
pub(super) struct Confirms {
    tx: mpsc::UnboundedSender<Pending>,
}

impl Confirms {
    /// Starts the collector of one channel; it ends when every `Confirms`
    /// of it is dropped and its confirms have come.
    pub(super) fn start() -> Confirms {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(collect(rx));
        Confirms { tx }
    }

    /// Waits until the broker confirmed the publish of `id`.
    pub(super) async fn wait(
        &self,
        id: String,
        confirm: PublisherConfirm,
    ) -> Result<(), SinkError> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .send(Pending { id, confirm, reply })
            .map_err(|_| SinkError::Unavailable("the connection was closed".into()))?;
        answer
            .await
            .unwrap_or_else(|_| Err(SinkError::Unavailable("the connection was closed".into())))
    }
}

async fn collect(mut rx: mpsc::UnboundedReceiver<Pending>) {
    let mut waiting: FuturesUnordered<BoxFuture<'static, Done>> = FuturesUnordered::new();
    let mut returned: HashMap<String, String> = HashMap::new();
    let mut open = true;
    while open || !waiting.is_empty() {
        tokio::select! {
            p = rx.recv(), if open => match p {
                Some(p) => waiting.push(async move { (p.id, p.reply, p.confirm.await) }.boxed()),
                None => open = false,
            },
            Some(first) = waiting.next(), if !waiting.is_empty() => {
                let mut done = vec![first];
                while let Some(Some(more)) = waiting.next().now_or_never() {
                    done.push(more);
                }
                for (_, _, r) in &done {
                    if let Ok(Confirmation::Ack(Some(m)) | Confirmation::Nack(Some(m))) = r {
                        if let Some(id) = m.delivery.properties.message_id() {
                            if returned.len() < MAX_RETURNED {
                                returned.insert(
                                    id.to_string(),
                                    format!("unroutable: {} {}", m.reply_code, m.reply_text),
                                );
                            }
                        }
                    }
                }
                for (id, reply, r) in done {
                    let answer = match (returned.remove(&id), r) {
                        (Some(why), Ok(_)) => Err(SinkError::Refused(why)),
                        (None, Ok(Confirmation::Ack(_))) => Ok(()),
                        (None, Ok(Confirmation::Nack(_))) => {
                            Err(SinkError::Refused("nacked by the broker".into()))
                        }
                        (None, Ok(Confirmation::NotRequested)) => Err(SinkError::Unavailable(
                            "the channel is not in confirm mode".into(),
                        )),
                        (_, Err(e)) => Err(SinkError::Unavailable(e.to_string())),
                    };
                    let _ = reply.send(answer);
                }
            }
        }
    }
}

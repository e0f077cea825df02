//! A connection's channels, each carrying one publish at a time.
//!
//! RabbitMQ sends an unroutable mandatory message back (`basic.return`)
//! before the ack that covers it, and `lapin` hands a returned message to
//! whichever confirm of the channel completes next, which need not be the
//! publish it belongs to when several are pending (and a collector of many
//! confirms cannot tell when the return of one of them is still to come).
//! With a single publish pending on a channel, the return that comes with
//! its confirm can only be its own. Throughput comes from many channels:
//! up to [`MAX_CHANNELS`] publishes in flight per connection, each on a
//! channel of its own (RabbitMQ serves channels in parallel).

use std::sync::Mutex;

use lapin::options::ConfirmSelectOptions;
use lapin::{Channel, Connection};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Publishes in flight per connection at most (RabbitMQ allows 2,047
/// channels per connection by default).
pub const MAX_CHANNELS: usize = 512;

/// The idle channels of one connection.
pub(super) struct Channels {
    idle: Mutex<Vec<Channel>>,
    room: std::sync::Arc<Semaphore>,
}

/// A channel lent to one publish; give it back with [`Channels::put`] when
/// its confirm came, or drop it (the channel is then not used again).
pub(super) struct Lent {
    pub(super) channel: Channel,
    _room: OwnedSemaphorePermit,
}

impl Channels {
    pub(super) fn new(first: Channel) -> Channels {
        Channels {
            idle: Mutex::new(vec![first]),
            room: std::sync::Arc::new(Semaphore::new(MAX_CHANNELS)),
        }
    }

    /// An idle channel of `conn`, or a new one when none is idle (waiting
    /// while [`MAX_CHANNELS`] publishes are in flight).
    pub(super) async fn take(&self, conn: &Connection) -> Result<Lent, String> {
        let room = self
            .room
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| "the connection is closing".to_string())?;
        let idle = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let channel = match idle {
            Some(c) if c.status().connected() => c,
            _ => confirm_channel(conn).await.map_err(|e| e.to_string())?,
        };
        Ok(Lent {
            channel,
            _room: room,
        })
    }

    /// Gives back a channel whose one publish was confirmed.
    pub(super) fn put(&self, lent: Lent) {
        if lent.channel.status().connected() {
            self.idle
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(lent.channel);
        }
    }
}

/// A new channel of `conn`, in confirm mode.
pub(super) async fn confirm_channel(conn: &Connection) -> lapin::Result<Channel> {
    let channel = conn.create_channel().await?;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await?;
    Ok(channel)
}

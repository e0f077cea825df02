//! The connection a sink publishes on, and making a new one when it fails.
//!
//! The state sits behind a plain mutex that is never held across an
//! await. A publish takes the current link if it is healthy; otherwise the
//! first publish to notice starts one connection attempt in the background
//! (unless one runs, or the last failed less than [`RECONNECT_PAUSE`] ago)
//! and every publish meanwhile fails at once as unavailable: nothing waits
//! for a broker that may never answer.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lapin::{Channel, Connection, ConnectionProperties};

use super::channels::{confirm_channel, Channels};
use super::{CONNECT_TIMEOUT, RECONNECT_PAUSE};
use crate::sink::SinkError;

/// One connection and its channels.
#[derive(Clone)]
pub(super) struct Link {
    pub(super) conn: Arc<Connection>,
    pub(super) channels: Arc<Channels>,
    /// Which connection of this sink it is (counted from 1).
    pub(super) number: u64,
}

#[derive(Default)]
struct State {
    link: Option<Link>,
    connecting: bool,
    last_failure: Option<Instant>,
}

/// The links of one sink.
pub(super) struct Links {
    uri: String,
    state: Arc<Mutex<State>>,
    made: Arc<AtomicU64>,
}

impl Links {
    pub(super) fn new(uri: String, conn: Connection, channel: Channel) -> Links {
        let link = Link {
            conn: Arc::new(conn),
            channels: Arc::new(Channels::new(channel)),
            number: 1,
        };
        Links {
            uri,
            state: Arc::new(Mutex::new(State {
                link: Some(link),
                ..State::default()
            })),
            made: Arc::new(AtomicU64::new(1)),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The healthy link in use, or unavailable (starting a new connection
    /// in the background when none is being made).
    pub(super) fn current(&self) -> Result<Link, SinkError> {
        let mut st = self.lock();
        if let Some(l) = &st.link {
            if l.conn.status().connected() {
                return Ok(l.clone());
            }
        }
        if let Some(old) = st.link.take() {
            close_later(old);
        }
        if st.connecting {
            return Err(SinkError::Unavailable("reconnecting".into()));
        }
        if st
            .last_failure
            .is_some_and(|t| t.elapsed() < RECONNECT_PAUSE)
        {
            return Err(SinkError::Unavailable("the broker is unreachable".into()));
        }
        st.connecting = true;
        drop(st);
        let (uri, state, made) = (self.uri.clone(), self.state.clone(), self.made.clone());
        tokio::spawn(async move {
            let opened = open(&uri).await;
            let mut st = state.lock().unwrap_or_else(|e| e.into_inner());
            st.connecting = false;
            match opened {
                Ok((conn, channel)) => {
                    let number = made.fetch_add(1, Ordering::Relaxed) + 1;
                    tracing::info!(uri = %rmq::redact(&uri), number, "connected to RabbitMQ again");
                    st.link = Some(Link {
                        conn: Arc::new(conn),
                        channels: Arc::new(Channels::new(channel)),
                        number,
                    });
                }
                Err(e) => {
                    tracing::warn!(uri = %rmq::redact(&uri), error = %e, "cannot reconnect to RabbitMQ");
                    st.last_failure = Some(Instant::now());
                }
            }
        });
        Err(SinkError::Unavailable("reconnecting".into()))
    }

    /// Stops using link `number` (a publish on it failed or timed out): the
    /// next publish starts a new connection.
    pub(super) fn drop_link(&self, number: u64) {
        let mut st = self.lock();
        if st.link.as_ref().is_some_and(|l| l.number == number) {
            if let Some(old) = st.link.take() {
                close_later(old);
            }
        }
    }
}

/// Closes a link in the background, giving the broker a second to answer.
fn close_later(link: Link) {
    tokio::spawn(async move {
        let close = link.conn.close(0, "rmq forward: reconnecting".into());
        let _ = tokio::time::timeout(Duration::from_secs(1), close).await;
    });
}

/// A connection and a channel in confirm mode, within [`CONNECT_TIMEOUT`].
pub(super) async fn open(uri: &str) -> Result<(Connection, Channel), String> {
    let opened = async {
        let conn = Connection::connect(uri, ConnectionProperties::default()).await?;
        let channel = confirm_channel(&conn).await?;
        Ok::<_, lapin::Error>((conn, channel))
    };
    match tokio::time::timeout(CONNECT_TIMEOUT, opened).await {
        Ok(r) => r.map_err(|e| e.to_string()),
        Err(_) => Err(format!("no answer within {CONNECT_TIMEOUT:?}")),
    }
}

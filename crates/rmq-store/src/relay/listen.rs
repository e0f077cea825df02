//! The relay's wake-up: `LISTEN rmq_store` on a connection of its own,
//! notified when a transaction that stored rows commits.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use rmq::CancellationToken;
use tokio::sync::Notify;

/// Listens for commits of new rows (`NOTIFY rmq_store`) and wakes the
/// relay; reconnects after a lost connection (the relay polls meanwhile).
pub(super) async fn listen(
    conninfo: String,
    app: String,
    wake: Arc<Notify>,
    cancel: CancellationToken,
) {
    while !cancel.is_cancelled() {
        let connected = match crate::store::config(&conninfo, &app) {
            Ok(c) => c.connect(tokio_postgres::NoTls).await.ok(),
            Err(_) => None,
        };
        if let Some((client, mut connection)) = connected {
            let messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
            let wake2 = wake.clone();
            let driver = tokio::spawn(async move {
                let mut messages = std::pin::pin!(messages);
                while let Some(m) = messages.next().await {
                    match m {
                        Ok(tokio_postgres::AsyncMessage::Notification(_)) => wake2.notify_one(),
                        Ok(_) => {}
                        Err(_) => break,
                    }
                }
            });
            if client.batch_execute("LISTEN rmq_store").await.is_ok() {
                // Something may have committed while we were not listening.
                wake.notify_one();
                tokio::select! {
                    () = cancel.cancelled() => {}
                    _ = driver => {}
                }
            } else {
                driver.abort();
            }
        }
        tokio::select! {
            () = cancel.cancelled() => {}
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}

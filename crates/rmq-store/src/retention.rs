//! Retention: finished rows (done, dead) deleted after a while, in bounded
//! batches so that no statement holds many row locks or runs long.

use std::time::Duration;

use crate::error::Result;

pub(crate) async fn prune(
    pg: &tokio_postgres::Client,
    older_than: Duration,
    batch: u32,
) -> Result<u64> {
    let age_ms = i64::try_from(older_than.as_millis()).unwrap_or(i64::MAX);
    let batch = i64::from(batch.max(1));
    let mut total = 0;
    loop {
        let n = pg
            .execute(
                "DELETE FROM rmq_messages WHERE id IN (
                     SELECT id FROM rmq_messages
                     WHERE status IN ('done', 'dead')
                       AND finished_at < now() - make_interval(secs => $1::bigint / 1000.0)
                     ORDER BY finished_at
                     LIMIT $2
                     FOR UPDATE SKIP LOCKED)",
                &[&age_ms, &batch],
            )
            .await?;
        total += n;
        if n < batch as u64 {
            return Ok(total);
        }
    }
}

//! Readings of the Redis server's own counters (`INFO` cpu, stats, memory),
//! used by scenarios that report server-side cost per message.

use std::time::Duration;

use anyhow::{Context, Result};

pub(crate) async fn info_field(
    conn: &mut redis::aio::MultiplexedConnection,
    section: &str,
    field: &str,
) -> Result<f64> {
    let info: String = redis::cmd("INFO").arg(section).query_async(conn).await?;
    info.lines()
        .find_map(|l| l.strip_prefix(field).and_then(|r| r.strip_prefix(':')))
        .and_then(|v| v.trim().parse().ok())
        .with_context(|| format!("INFO {section} has no {field}"))
}

pub(crate) async fn redis_cpu_secs(conn: &mut redis::aio::MultiplexedConnection) -> Result<f64> {
    Ok(info_field(conn, "cpu", "used_cpu_sys").await?
        + info_field(conn, "cpu", "used_cpu_user").await?)
}

/// A field summed over several nodes (a cluster's; or the one node).
pub(crate) async fn info_field_sum(
    conns: &mut [redis::aio::MultiplexedConnection],
    section: &str,
    field: &str,
) -> Result<f64> {
    let mut total = 0.0;
    for c in conns.iter_mut() {
        total += info_field(c, section, field).await?;
    }
    Ok(total)
}

/// Redis CPU seconds summed over several nodes.
pub(crate) async fn redis_cpu_secs_sum(
    conns: &mut [redis::aio::MultiplexedConnection],
) -> Result<f64> {
    let mut total = 0.0;
    for c in conns.iter_mut() {
        total += redis_cpu_secs(c).await?;
    }
    Ok(total)
}

/// `used_memory` once it stops moving (UNLINK and lazy frees of earlier
/// cases finish in the background), at most ~3 s of polling.
pub(crate) async fn settled_used_memory(
    conn: &mut redis::aio::MultiplexedConnection,
) -> Result<f64> {
    let mut last = info_field(conn, "memory", "used_memory").await?;
    for _ in 0..30 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = info_field(conn, "memory", "used_memory").await?;
        let lazy = info_field(conn, "memory", "lazyfree_pending_objects").await?;
        if lazy == 0.0 && (now - last).abs() <= 1024.0 {
            return Ok(now);
        }
        last = now;
    }
    Ok(last)
}

/// Script calls Redis ran so far (every lease, membership, pop and
/// settle call is one; the commands a script runs inside are not
/// counted), and waits on the marks (`BZMPOP`). Besides these, each client reads its topic's settings every
/// 2 s with one `HGET`.
pub(crate) async fn script_calls(conn: &mut redis::aio::MultiplexedConnection) -> Result<f64> {
    const SCRIPT_CALLS: [&str; 7] = [
        "evalsha",
        "evalsha_ro",
        "eval",
        "eval_ro",
        "fcall",
        "fcall_ro",
        // An idle consumer's wait on the marks (not a script, but a call
        // it makes all the same).
        "bzmpop",
    ];
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await?;
    let mut total = 0.0;
    for line in info.lines() {
        let Some((name, rest)) = line
            .strip_prefix("cmdstat_")
            .and_then(|l| l.split_once(':'))
        else {
            continue;
        };
        if SCRIPT_CALLS.contains(&name) {
            total += rest
                .split(',')
                .find_map(|f| f.strip_prefix("calls="))
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0);
        }
    }
    Ok(total)
}

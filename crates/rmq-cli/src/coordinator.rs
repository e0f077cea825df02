//! `--coordinator` of `rmq consume --serial` and `rmq forward --serial`:
//! where a serial group's members meet. `redis` (the default) keeps
//! heartbeats next to the topic; `zk://…` joins through ZooKeeper (built
//! with the `zookeeper` feature, on by default), and an ensemble that
//! cannot be reached within `--coordinator-wait` stops the command before
//! it takes anything (one still starting is waited for).

use std::sync::Arc;
use std::time::Duration;

use rmq::Coordinator;

use crate::CliError;

/// The backend `address` names (None: Redis, or no serial mode);
/// `member_timeout` is a ZooKeeper session's timeout, `wait` how long an
/// unreachable ensemble is tried again before the command fails.
pub async fn open(
    serial: bool,
    address: &str,
    member_timeout: Duration,
    wait: Duration,
) -> Result<Option<Arc<dyn Coordinator>>, CliError> {
    if !serial || address == "redis" {
        return Ok(None);
    }
    if address.starts_with("zk://") {
        return zookeeper(address, member_timeout, wait).await;
    }
    Err(CliError::usage(format!(
        "--coordinator {address:?}: use redis or zk://HOST:PORT[,HOST:PORT...]/ROOT"
    )))
}

#[cfg(feature = "zookeeper")]
async fn zookeeper(
    address: &str,
    session: Duration,
    wait: Duration,
) -> Result<Option<Arc<dyn Coordinator>>, CliError> {
    match rmq_zk::ZooKeeper::connect_within(address, session, wait).await {
        Ok(zk) => {
            tracing::info!(zookeeper = %zk.address(), "serial group coordinated by ZooKeeper");
            Ok(Some(Arc::new(zk)))
        }
        Err(e @ rmq_zk::ZkError::BadAddress(_)) => Err(CliError::usage(e.to_string())),
        Err(e) => Err(CliError::runtime(e.to_string())),
    }
}

#[cfg(not(feature = "zookeeper"))]
async fn zookeeper(
    _: &str,
    _: Duration,
    _: Duration,
) -> Result<Option<Arc<dyn Coordinator>>, CliError> {
    Err(CliError::usage(
        "this rmq was built without ZooKeeper support (cargo feature \"zookeeper\")",
    ))
}

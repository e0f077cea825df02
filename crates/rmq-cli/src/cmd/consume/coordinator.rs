//! `--coordinator`: where a serial group's members meet. `redis` (the
//! default) keeps heartbeats next to the topic; `zk://…` joins through
//! ZooKeeper (built with the `zookeeper` feature, on by default), and an
//! ensemble that cannot be reached stops the command before it consumes.

use std::sync::Arc;
#[cfg(feature = "zookeeper")]
use std::time::Duration;

use rmq::Coordinator;

use super::ConsumeArgs;
use crate::CliError;

/// The backend `--coordinator` names; None for Redis (or no serial mode).
pub(super) async fn open(a: &ConsumeArgs) -> Result<Option<Arc<dyn Coordinator>>, CliError> {
    if !a.serial || a.coordinator == "redis" {
        return Ok(None);
    }
    if a.coordinator.starts_with("zk://") {
        return zookeeper(a).await;
    }
    Err(CliError::usage(format!(
        "--coordinator {:?}: use redis or zk://HOST:PORT[,HOST:PORT...]/ROOT",
        a.coordinator
    )))
}

#[cfg(feature = "zookeeper")]
async fn zookeeper(a: &ConsumeArgs) -> Result<Option<Arc<dyn Coordinator>>, CliError> {
    let session = Duration::from_millis(a.member_timeout);
    match rmq_zk::ZooKeeper::connect(&a.coordinator, session).await {
        Ok(zk) => {
            tracing::info!(zookeeper = %zk.address(), "serial group coordinated by ZooKeeper");
            Ok(Some(Arc::new(zk)))
        }
        Err(e @ rmq_zk::ZkError::BadAddress(_)) => Err(CliError::usage(e.to_string())),
        Err(e) => Err(CliError::runtime(e.to_string())),
    }
}

#[cfg(not(feature = "zookeeper"))]
async fn zookeeper(_: &ConsumeArgs) -> Result<Option<Arc<dyn Coordinator>>, CliError> {
    Err(CliError::usage(
        "this rmq was built without ZooKeeper support (cargo feature \"zookeeper\")",
    ))
}

//! Loading the scripts: on one node in one pipeline; on a cluster on every
//! master (riding out a failover) and on every replica, since Redis does
//! not replicate the script cache and a promoted replica would otherwise
//! answer NOSCRIPT at the worst moment. SCRIPT LOAD is idempotent.

use redis::Value;

use super::{Conn, Redis, Target};
use crate::error::Result;
use crate::scripts::{self, ScriptId};

impl Redis {
    /// Loads every script, on every node of a cluster (SCRIPT LOAD is
    /// idempotent; the cluster client sends it to all nodes).
    pub(crate) async fn load_scripts(&self) -> Result<()> {
        let mut conn = self.conn();
        match conn {
            Conn::Single(_) => {
                let mut pipe = redis::pipe();
                for id in ScriptId::ALL {
                    pipe.cmd("SCRIPT").arg("LOAD").arg(&scripts::get(id).code);
                }
                let _: Vec<String> = pipe.query_async(&mut conn).await?;
            }
            Conn::Cluster(_) => {
                for id in ScriptId::ALL {
                    let mut load = redis::cmd("SCRIPT");
                    load.arg("LOAD").arg(&scripts::get(id).code);
                    let _: Value = self.query(&load).await?;
                }
                self.load_scripts_on_replicas().await;
            }
        }
        Ok(())
    }

    /// The cluster client sends SCRIPT LOAD to the masters only, and Redis
    /// does not replicate the script cache: without this, a replica
    /// promoted by a failover would answer NOSCRIPT to every call at the
    /// worst moment. Best effort: a replica that cannot be reached now is
    /// caught later by the NOSCRIPT reload.
    async fn load_scripts_on_replicas(&self) {
        let Target::Cluster(seeds) = &self.target else {
            return;
        };
        let mut conn = self.conn();
        let nodes: redis::RedisResult<String> = redis::cmd("CLUSTER")
            .arg("NODES")
            .query_async(&mut conn)
            .await;
        let Ok(nodes) = nodes else {
            return;
        };
        for line in nodes.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (Some(addr), Some(flags)) = (f.get(1), f.get(2)) else {
                continue;
            };
            if !flags.contains("slave") || flags.contains("fail") || flags.contains("noaddr") {
                continue;
            }
            let Some((host, port)) = addr.split('@').next().and_then(|a| a.rsplit_once(':')) else {
                continue;
            };
            let Ok(port) = port.parse::<u16>() else {
                continue;
            };
            let load = async {
                let client = seeds.client_for(host, port)?;
                let mut c = client.get_multiplexed_async_connection().await?;
                let mut pipe = redis::pipe();
                for id in ScriptId::ALL {
                    pipe.cmd("SCRIPT").arg("LOAD").arg(&scripts::get(id).code);
                }
                pipe.query_async::<Vec<String>>(&mut c).await
            };
            let r = tokio::time::timeout(std::time::Duration::from_secs(5), load).await;
            if !matches!(r, Ok(Ok(_))) {
                tracing::debug!("could not load the scripts on replica {host}:{port}");
            }
        }
    }
}

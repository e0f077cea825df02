//! The routing's connections, one per master (opened once for all the
//! calls that wait for it, forgotten when it breaks), and its questions of
//! the slot map (`CLUSTER SLOTS`, at most one at a time and one every
//! `REFRESH_AT_MOST_EVERY`).

use super::*;
use crate::conn::layout::SlotRange;

impl Routing {
    pub(super) fn lock_map(&self) -> std::sync::MutexGuard<'_, SlotMap> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn lock_conns(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<NodeAddr>, NodeConn>> {
        self.conns.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn map_unknown(&self) -> bool {
        self.lock_map().owner.is_empty()
    }

    /// The connection to a node (and its handle, to forget it by),
    /// opened on first use: one opening for all the calls that wait for it.
    pub(super) async fn conn_to(
        &self,
        addr: &Arc<NodeAddr>,
    ) -> RedisResult<(NodeConn, MultiplexedConnection)> {
        let handle = {
            let mut conns = self.lock_conns();
            match conns.get(addr) {
                Some(handle) => handle.clone(),
                None => {
                    let handle = self.opening(addr);
                    conns.insert(addr.clone(), handle.clone());
                    handle
                }
            }
        };
        match handle.clone().await {
            Ok(conn) => Ok((handle, conn)),
            Err(e) => {
                self.forget_conn(addr, &handle);
                Err(e)
            }
        }
    }

    /// Drops a node's connection if it is still `handle` (the next call
    /// opens a new one; one opened meanwhile stays).
    pub(super) fn forget_conn(&self, addr: &NodeAddr, handle: &NodeConn) {
        let mut conns = self.lock_conns();
        if conns.get(addr).is_some_and(|h| h.ptr_eq(handle)) {
            conns.remove(addr);
        }
    }

    /// An opening of a connection to a node, shared by whoever awaits it.
    pub(super) fn opening(&self, addr: &NodeAddr) -> NodeConn {
        let client = self.client_for(addr);
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(CONNECT_LIMIT))
            .set_response_timeout(Some(self.response_timeout));
        async move {
            client?
                .get_multiplexed_async_connection_with_config(&config)
                .await
        }
        .boxed()
        .shared()
    }

    pub(super) fn client_for(&self, addr: &NodeAddr) -> RedisResult<redis::Client> {
        self.seeds.client_for(&addr.host, addr.port)
    }

    /// Asks a master, else a seed, for the map of hash slots: one question
    /// at a time, and none when another was asked within `unless_within`
    /// (or, without it, when the map is known by now).
    pub(super) async fn refresh(&self, unless_within: Option<Duration>) {
        let mut refreshed = self.refreshed.lock().await;
        let fresh = match unless_within {
            // First use (or after a forget): another call may have asked
            // while this one waited.
            None => {
                let map = self.lock_map();
                !map.owner.is_empty() && !map.stale
            }
            Some(within) => refreshed.is_some_and(|at| at.elapsed() < within),
        };
        if fresh {
            return;
        }
        let (known, asked_at) = {
            let map = self.lock_map();
            (map.nodes.clone(), map.forgotten)
        };
        let seeds = self
            .seeds
            .nodes
            .iter()
            .filter_map(|info| match info.addr() {
                redis::ConnectionAddr::Tcp(host, port)
                | redis::ConnectionAddr::TcpTls { host, port, .. } => Some(Arc::new(NodeAddr {
                    host: host.clone(),
                    port: *port,
                })),
                _ => None,
            });
        let mut candidates: Vec<Arc<NodeAddr>> = Vec::new();
        for addr in known.into_iter().chain(seeds) {
            if !candidates.contains(&addr) {
                candidates.push(addr);
            }
        }
        // All at once: the first that answers with a layout is taken (a
        // master that went dark costs no wait).
        let questions = candidates
            .iter()
            .map(|addr| self.ask_map(addr).boxed())
            .collect::<Vec<_>>();
        if !questions.is_empty() {
            if let Ok((map, _)) = futures::future::select_ok(questions).await {
                self.lock_map().answered(map, asked_at);
            }
        }
        *refreshed = Some(Instant::now());
    }

    /// One node's answer to `CLUSTER SLOTS`, on a connection of its own
    /// (the shared one may be queued behind `WAIT`s).
    pub(super) async fn ask_map(&self, addr: &Arc<NodeAddr>) -> std::result::Result<SlotMap, ()> {
        let question = async {
            let config = redis::AsyncConnectionConfig::new()
                .set_connection_timeout(Some(ASK_LIMIT))
                .set_response_timeout(Some(ASK_LIMIT));
            let mut conn = self
                .client_for(addr)?
                .get_multiplexed_async_connection_with_config(&config)
                .await?;
            redis::cmd("CLUSTER")
                .arg("SLOTS")
                .query_async::<Value>(&mut conn)
                .await
        };
        let Ok(Ok(reply)) = tokio::time::timeout(ASK_LIMIT * 2, question).await else {
            return Err(());
        };
        match SlotRange::all_of_reply(&reply) {
            // A node that serves nothing (or not yet) is no authority.
            Some(ranges) if !ranges.is_empty() => Ok(SlotMap::of_ranges(ranges, addr)),
            _ => Err(()),
        }
    }
}

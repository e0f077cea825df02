//! What a cluster client is built from: the seed nodes, their
//! credentials and TLS settings, and rmq's retry settings for the
//! cluster client (the routing's per-node clients and the pub/sub client
//! are built from the same seeds).

use redis::cluster::ClusterClient;

/// What a cluster client is built from.
#[derive(Clone)]
pub(crate) struct ClusterSeeds {
    pub(crate) nodes: Vec<redis::ConnectionInfo>,
    pub(crate) response_timeout: std::time::Duration,
    /// TLS: a CA to trust and/or a client certificate (rediss:// seeds).
    pub(crate) certs: Option<redis::TlsCertificates>,
}

impl ClusterSeeds {
    /// A client for one node of the cluster, with the seeds' credentials
    /// and TLS settings (CA and client certificate included).
    pub(crate) fn client_for(&self, host: &str, port: u16) -> redis::RedisResult<redis::Client> {
        let Some(template) = self.nodes.first() else {
            return Err(redis::RedisError::from((
                redis::ErrorKind::Client,
                "a cluster connection without seed nodes",
            )));
        };
        let addr = match template.addr() {
            redis::ConnectionAddr::TcpTls {
                insecure,
                tls_params,
                ..
            } => redis::ConnectionAddr::TcpTls {
                host: host.to_string(),
                port,
                insecure: *insecure,
                tls_params: tls_params.clone(),
            },
            _ => redis::ConnectionAddr::Tcp(host.to_string(), port),
        };
        let info = template.clone().set_addr(addr);
        match &self.certs {
            Some(certs) => redis::Client::build_with_tls(info, certs.clone()),
            None => redis::Client::open(info),
        }
    }

    /// A builder with rmq's settings. Redirects and a node that went away
    /// are retried 20 times, waiting a random 20..500 ms (growing) between
    /// tries: ~5 s in all, enough to ride out a failover with a node
    /// timeout of a few seconds without parking callers for long (the
    /// client's default waits grow to minutes).
    pub(crate) fn builder(&self) -> redis::cluster::ClusterClientBuilder {
        let builder = ClusterClient::builder(self.nodes.clone());
        let builder = match &self.certs {
            Some(c) => builder.certs(c.clone()),
            None => builder,
        };
        builder
            .connection_timeout(std::time::Duration::from_secs(2))
            .response_timeout(self.response_timeout)
            .retries(20)
            .min_retry_wait(20)
            .max_retry_wait(500)
            .retry_wait_formula(10, 2)
    }
}

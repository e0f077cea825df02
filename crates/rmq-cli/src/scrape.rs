//! `--metrics-listen ADDR`: this process's metrics (what the library
//! records: deliveries, lateness, handler duration and outcomes, settles)
//! served for Prometheus at `http://ADDR/metrics`, by `rmq consume` and
//! `rmq forward`.

use std::net::SocketAddr;

use crate::{CliError, CliResult};

/// Starts serving the metrics on `addr` (in the background).
pub fn listen(addr: SocketAddr) -> CliResult {
    metrics_exporter_prometheus::PrometheusBuilder::new()
        .with_http_listener(addr)
        .install()
        .map_err(|e| CliError::runtime(format!("cannot serve metrics on {addr}: {e}")))
}

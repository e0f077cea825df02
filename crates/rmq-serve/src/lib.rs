//! `rmq serve`: a JSON API under `/api/v1` and Prometheus metrics at
//! `/metrics`, over one [`rmq::Client`] (one key prefix).
//!
//! Reading is open to whoever reaches the listener (it binds loopback by
//! default). Anything that changes state is an *action*: refused (403)
//! in read-only mode, refused (403) without a configured token unless
//! unauthenticated actions were allowed explicitly, and otherwise taken
//! only with `Authorization: Bearer <token>` (a header, never a cookie, so
//! no page of another site can act in the user's name). Errors are one JSON
//! shape, `{"error": {"kind", "message"}}`, with the library's error kind.
//!
//! The dashboard at `/` is a page and a script embedded in the binary
//! (nothing is fetched from elsewhere) that calls the same API; its
//! overview and charts read the server's own samples of the last hour
//! (`history.rs`), so opening it costs Redis nothing.
//!
//! Routes: `api.rs` (topics, messages by key, dead letters, serial
//! groups), `panels.rs` (what only the dashboard needs: overview, history,
//! per-slot arrays, the server's settings), `metrics.rs` (the scrape,
//! cached per interval), `reads.rs` (expensive readings: single flight
//! and a cap), `bounded.rs` (lists in bodies counted while parsed),
//! `openapi.rs` (the API's OpenAPI document),
//! `dashboard.rs` (the embedded assets),
//! `access.rs` (who may act), `error.rs` (the error shape and status codes),
//! `listener.rs` (the accept loop: timeouts, the connection cap, a bounded
//! stop).

mod access;
mod api;
mod bounded;
mod dashboard;
mod error;
mod history;
mod listener;
mod metrics;
mod openapi;
mod panels;
mod reads;
mod slot_readings;
mod takers;
pub mod views;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;

pub use access::{read_token_file, Access, TokenFile, TokenFileError};
pub use listener::Limits;

/// How the server runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// Who may act.
    pub access: Access,
    /// How long one scrape's readings are reused (a scrape of many topics
    /// reads every slot of each: scraping faster than this costs nothing).
    pub scrape_cache: Duration,
    /// How often the dashboard's samples are taken (one stats reading per
    /// topic); an hour of them is kept (at most 3,600 samples).
    pub sample_every: Duration,
    /// Host names the dashboard and the API answer for, besides IP
    /// addresses and `localhost` (see `access.rs`: DNS rebinding).
    pub allowed_hosts: Vec<String>,
    /// Expensive readings (the topic list, a topic's stats, slots, peeks,
    /// dead-letter pages, serial groups: work in proportion to the slots)
    /// run at once; beyond it a request is answered 429 with
    /// `Retry-After`. Requests for a reading under way share it.
    pub max_expensive_reads: usize,
    /// A topic of more than 1,024 slots is read at most once per this
    /// long by all of the server's readers together (the sampler,
    /// `/metrics`, the topic list, stats, slots): within it, they answer
    /// from the last reading (its `server_ms` says when it was taken).
    pub large_topic_reuse: Duration,
    /// The longest an HTTP take waits for a first message, whatever its
    /// `wait_ms` asks (at most 30 s, under the connections' idle timeout).
    pub max_take_wait: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            access: Access::ReadOnly,
            scrape_cache: Duration::from_secs(5),
            sample_every: Duration::from_secs(10),
            allowed_hosts: Vec::new(),
            max_expensive_reads: 8,
            large_topic_reuse: Duration::from_secs(5),
            max_take_wait: Duration::from_secs(30),
        }
    }
}

/// How much history the dashboard's charts show.
const HISTORY_SPAN: Duration = Duration::from_secs(3600);

/// What every handler shares.
pub(crate) struct AppState {
    pub(crate) client: rmq::Client,
    pub(crate) options: Options,
    pub(crate) scrape: metrics::Cache,
    pub(crate) reads: reads::Reads,
    pub(crate) history: Arc<history::History>,
    pub(crate) slot_readings: Arc<slot_readings::SlotReadings>,
    /// HTTP take's engines and the receipt key.
    pub(crate) takers: takers::Takers,
    /// Stops the sampler when the last handle on the state is gone.
    stop_sampler: rmq::CancellationToken,
}

impl Drop for AppState {
    fn drop(&mut self) {
        self.stop_sampler.cancel();
    }
}

/// The server's routes over `client`. Called within a Tokio runtime, it
/// also starts the dashboard's sampler (one task, stopped with the
/// runtime).
pub fn router(client: rmq::Client, options: Options) -> Router {
    let history = Arc::new(history::History::new(options.sample_every, HISTORY_SPAN));
    let slot_readings = Arc::new(slot_readings::SlotReadings::default());
    let stop_sampler = rmq::CancellationToken::new();
    if let Ok(rt) = tokio::runtime::Handle::try_current() {
        let run = history.clone().run(
            client.clone(),
            slot_readings.clone(),
            options.large_topic_reuse,
        );
        let stop = stop_sampler.clone();
        rt.spawn(async move {
            tokio::select! {
                () = run => {}
                () = stop.cancelled() => {}
            }
        });
    }
    let state = Arc::new(AppState {
        client,
        scrape: metrics::Cache::default(),
        reads: reads::Reads::new(options.max_expensive_reads),
        options,
        history,
        slot_readings,
        takers: takers::Takers::default(),
        stop_sampler,
    });
    let guard = axum::middleware::from_fn_with_state(state.clone(), access::guard);
    Router::new()
        .nest(
            "/api/v1",
            api::routes(state.clone())
                .merge(panels::routes(state.clone()))
                .route("/openapi.json", axum::routing::get(openapi::document))
                .fallback(api::not_found)
                .layer(guard.clone())
                .layer(axum::middleware::map_response(error::as_error_shape)),
        )
        .merge(dashboard::routes().layer(guard))
        .route("/metrics", axum::routing::get(metrics::scrape))
        .with_state(state)
}

/// Serves `router` on `listener` until `shutdown` resolves, with the
/// default [`Limits`].
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_with(listener, router, shutdown, Limits::default()).await
}

/// Serves `router` on `listener` until `shutdown` resolves, within `limits`.
pub async fn serve_with(
    listener: tokio::net::TcpListener,
    router: Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    limits: Limits,
) -> std::io::Result<()> {
    listener::run(listener, router, shutdown, limits).await
}

//! Readings that cost the server (and Redis) in proportion to a topic's
//! slots: the topic list, a topic's stats and slots, peeks, dead-letter
//! pages, serial groups. Reading is open to whoever reaches the listener,
//! and 48 concurrent `GET /api/v1/topics` over one 65,536-slot topic took
//! the server to 2.3 GB, 17 s each. So:
//!
//! - **single flight**: requests for the same reading (same route, topic
//!   and parameters) that arrive while it runs wait for it and share its
//!   answer, serialized once (one reading, one body, however many wait);
//! - **a cap**: at most `Options::max_expensive_reads` different readings
//!   run at once; a request beyond it is answered 429 `TooBusy` with
//!   `Retry-After` at once, rather than queueing memory and Redis work.
//!
//! Nothing is cached past the reading: the next request reads anew.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use tokio::sync::{OnceCell, Semaphore};

use crate::error::{ApiError, ApiResult};

/// A reading's answer, shared by everyone who waited for it.
type Shared = Result<Bytes, ApiError>;

/// The readings under way and the cap on them.
pub(crate) struct Reads {
    flights: Mutex<HashMap<String, Arc<OnceCell<Shared>>>>,
    gate: Semaphore,
    max: usize,
}

/// A JSON body serialized once.
pub(crate) struct JsonBody(Bytes);

impl IntoResponse for JsonBody {
    fn into_response(self) -> Response {
        ([(header::CONTENT_TYPE, "application/json")], self.0).into_response()
    }
}

impl Reads {
    pub(crate) fn new(max: usize) -> Reads {
        let max = max.max(1);
        Reads {
            flights: Mutex::default(),
            gate: Semaphore::new(max),
            max,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<OnceCell<Shared>>>> {
        self.flights.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The reading named `key`: joins the one under way, or makes it with
    /// `read` if a place is free (else 429).
    ///
    /// The reading is serialized straight from what `read` returns (give
    /// a typed value rather than a `serde_json::Value` for large readings:
    /// a `Value` tree of 65,536 slots' stats took ~400 MB).
    pub(crate) async fn run<F, Fut, T>(&self, key: String, read: F) -> ApiResult<JsonBody>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = ApiResult<T>>,
        T: serde::Serialize,
    {
        let flight = self.lock().entry(key.clone()).or_default().clone();
        // Whatever happens to this request (answered, or dropped when its
        // client hangs up), the last one to leave a flight removes it.
        let _leave = Leave {
            reads: self,
            key: &key,
            flight: &flight,
        };
        // If the request making the reading goes away (its client hung
        // up), a waiting one takes the reading over.
        let shared = flight
            .get_or_init(|| async {
                let Ok(_place) = self.gate.try_acquire() else {
                    return Err(ApiError::too_busy(self.max));
                };
                let v = read().await?;
                serde_json::to_vec(&v).map(Bytes::from).map_err(|e| {
                    ApiError::new(
                        axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                        "Internal",
                        format!("the reading could not be written as JSON: {e}"),
                    )
                })
            })
            .await
            .clone();
        shared.map(JsonBody)
    }
}

/// Leaves a flight: removes it once done (the next request reads anew),
/// or once nobody waits for it any more (so that requests given up
/// midway leave nothing behind).
struct Leave<'a> {
    reads: &'a Reads,
    key: &'a str,
    flight: &'a Arc<OnceCell<Shared>>,
}

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        let mut flights = self.reads.lock();
        let ours = flights
            .get(self.key)
            .is_some_and(|f| Arc::ptr_eq(f, self.flight));
        // Held by the map and by this request alone: nobody else waits.
        let alone = Arc::strong_count(self.flight) <= 2;
        if ours && (self.flight.initialized() || alone) {
            flights.remove(self.key);
        }
    }
}

/// The name of a reading: its route and parameters, unambiguously.
pub(crate) fn flight(parts: &impl serde::Serialize) -> String {
    serde_json::to_string(parts).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_reading_given_up_midway_leaves_nothing_behind() {
        let reads = Reads::new(1);
        let never = reads.run("k".into(), std::future::pending::<ApiResult<u8>>);
        let gave_up = tokio::time::timeout(std::time::Duration::from_millis(20), never).await;
        assert!(gave_up.is_err());
        assert!(reads.lock().is_empty());
        // Its place was given back: the next reading runs.
        let body = reads.run("k".into(), || async { Ok(7u8) }).await;
        assert_eq!(body.ok().map(|b| b.0), Some(Bytes::from_static(b"7")));
        assert!(reads.lock().is_empty());
    }
}

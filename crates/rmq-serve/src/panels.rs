//! What only the dashboard needs, beside the API proper: the overview of
//! every topic and one topic's last hour (both from the server's samples,
//! no Redis call), a topic's slots as compact arrays (a heat map of 65,536
//! slots would be megabytes as objects), and the server's settings that
//! change what the page offers (whether actions exist, and need a token).

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};

use crate::access::Access;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::reads::{flight, JsonBody};
use crate::AppState;

type St = State<Arc<AppState>>;

pub(crate) fn routes(state: Arc<AppState>) -> Router<Arc<AppState>> {
    Router::new()
        .route("/server", get(server))
        .route("/overview", get(overview))
        .route("/topics/{topic}/history", get(history))
        .route("/topics/{topic}/slots", get(slots))
        .with_state(state)
}

#[utoipa::path(
    get,
    path = "/api/v1/server",
    tag = "dashboard",
    summary = "What this server allows (actions, token) and how often it samples",
    responses(
        (status = 200, description = "Settings", body = Object),
    )
)]
async fn server(State(st): St) -> Json<Value> {
    let access = match st.options.access {
        Access::ReadOnly => "read-only",
        Access::Token(_) => "token",
        Access::Unauthenticated => "open",
    };
    Json(json!({
        "access": access,
        "actions": st.options.access.allows_actions(),
        "sample_every_ms": st.history.every.as_millis() as u64,
        "version": env!("CARGO_PKG_VERSION"),
    }))
}

#[utoipa::path(
    get,
    path = "/api/v1/overview",
    tag = "dashboard",
    summary = "Every topic's last sample, and send and ack rates over the last minute",
    responses(
        (status = 200, description = "The overview", body = Object),
    )
)]
async fn overview(State(st): St) -> Json<Value> {
    let (topics, at_ms, error) = st.history.overview();
    Json(json!({ "topics": topics, "at_ms": at_ms, "error": error }))
}

#[utoipa::path(
    get,
    path = "/api/v1/topics/{topic}/history",
    tag = "dashboard",
    summary = "One topic's samples of the last hour",
    params(("topic" = String, Path, description = "Topic name", example = "p")),
    responses(
        (status = 200, description = "Samples, oldest first", body = Object),
        (status = 400, description = "Not a topic name", body = ErrorBody),
        (status = 404, description = "No such topic", body = ErrorBody),
        (status = 503, description = "Redis is unreachable", body = ErrorBody),
    )
)]
async fn history(State(st): St, Path(name): Path<String>) -> ApiResult<Json<Value>> {
    match st.history.points(&name) {
        Some(points) => Ok(Json(json!({
            "every_ms": st.history.every.as_millis() as u64,
            "points": points,
        }))),
        // Not sampled yet: known to Redis (an empty history) or not at all.
        None => {
            st.client.topic(&name).await.map_err(ApiError::from)?;
            Ok(Json(json!({
                "every_ms": st.history.every.as_millis() as u64,
                "points": [],
            })))
        }
    }
}

/// Per slot, index = slot: depth by state, the serial lease's owner
/// (index into `owners`, -1 for none) and epoch.
#[utoipa::path(
    get,
    path = "/api/v1/topics/{topic}/slots",
    tag = "dashboard",
    summary = "Per slot, index = slot: depth by state, lease owner and epoch",
    params(("topic" = String, Path, description = "Topic name", example = "p")),
    responses(
        (status = 200, description = "Arrays per slot", body = Object),
        (status = 400, description = "Not a topic name", body = ErrorBody),
        (status = 429, description = "Too many expensive readings under way: retry after `Retry-After` seconds", body = ErrorBody),
        (status = 404, description = "No such topic", body = ErrorBody),
        (status = 503, description = "Redis is unreachable", body = ErrorBody),
    )
)]
async fn slots(State(st): St, Path(name): Path<String>) -> ApiResult<JsonBody> {
    st.reads
        .run(flight(&("slots", &name)), || slot_arrays(&st, &name))
        .await
}

async fn slot_arrays(st: &AppState, name: &str) -> ApiResult<Value> {
    let topic = st.client.topic(name).await?;
    let s = st
        .slot_readings
        .read(&topic, st.options.large_topic_reuse)
        .await?;
    let mut owners: Vec<&str> = Vec::new();
    let owner_of: Vec<i64> = s
        .leases
        .iter()
        .map(|l| match l.owner.as_deref() {
            None => -1,
            Some(o) => match owners.iter().position(|x| *x == o) {
                Some(i) => i as i64,
                None => {
                    owners.push(o);
                    owners.len() as i64 - 1
                }
            },
        })
        .collect();
    let col = |f: fn(&rmq::Stats) -> u64| -> Vec<u64> { s.slots.iter().map(f).collect() };
    Ok(json!({
        "due_now": col(|x| x.due_now),
        "scheduled": col(|x| x.scheduled),
        "retry_waiting": col(|x| x.retry_waiting),
        "in_flight": col(|x| x.in_flight),
        "parked": col(|x| x.behind_in_flight),
        "dead": col(|x| x.dead),
        "paused": col(|x| x.paused_slots),
        "owner": owner_of,
        "owners": owners,
        "epoch": s.leases.iter().map(|l| l.epoch).collect::<Vec<_>>(),
        "server_ms": s.server_ms,
    }))
}

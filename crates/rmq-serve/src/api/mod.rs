//! The JSON API under `/api/v1`: topics (list, show, create, update,
//! delete, pause, resume, stats, peek), messages (send one or a batch; get,
//! cancel and reschedule by key), dead letters (list with paging,
//! requeue, purge), serial groups (members, slot owners, epochs) and
//! consuming (take, then ack, nack, dead, extend or release by receipt). Every action checks [`Access`](crate::Access) first;
//! every input is checked by the library, and a refusal changes nothing.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::rejection::JsonRejection;
use axum::extract::{DefaultBodyLimit, OriginalUri, Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use rmq::{CancelOutcome, DeadSelection, Message, Reschedule, Topic, TopicSpec};
use serde::Deserialize;
use serde_json::{json, Value};
use utoipa::{IntoParams, ToSchema};

use crate::bounded::Capped;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::reads::{flight, JsonBody};
use crate::views::{with_key, with_key_and_payload, LookupJson};
use crate::AppState;

mod consume;
mod dead;
mod groups;
mod keys;
mod messages;
mod stats;
mod topics;
pub(crate) use consume::*;
pub(crate) use dead::*;
pub(crate) use groups::*;
pub(crate) use keys::*;
pub(crate) use messages::*;
pub(crate) use stats::*;
pub(crate) use topics::*;

type St = State<Arc<AppState>>;

/// The deepest page of dead letters (a page reads where each slot's dead
/// letters begin, then up to offset + limit letters of the slots that can
/// hold the page).
const MAX_DEAD_OFFSET: usize = 10_000;
/// The deepest page of pending messages (read the same way; a page holds
/// up to 1,000).
const MAX_PEEK_OFFSET: usize = 9_000;
/// The largest request body.
const MAX_BODY: usize = 16 * 1024 * 1024;

pub(crate) fn routes(state: Arc<AppState>) -> Router<Arc<AppState>> {
    Router::new()
        .route("/topics", get(list_topics).post(create_topic))
        .route(
            "/topics/{topic}",
            get(show_topic).patch(update_topic).delete(delete_topic),
        )
        .route("/topics/{topic}/pause", post(pause))
        .route("/topics/{topic}/resume", post(resume))
        .route("/topics/{topic}/stats", get(stats))
        .route("/topics/{topic}/peek", get(peek))
        .route("/topics/{topic}/messages", post(send))
        .route(
            "/topics/{topic}/messages/{key}",
            get(lookup).delete(cancel_one),
        )
        .route(
            "/topics/{topic}/messages/{key}/reschedule",
            post(reschedule),
        )
        .route("/topics/{topic}/key", get(lookup_q).delete(cancel_one_q))
        .route("/topics/{topic}/key/reschedule", post(reschedule_q))
        .route("/topics/{topic}/cancel", post(cancel_many))
        .route("/topics/{topic}/dead", get(dead_list).post(dead_by_receipt))
        .route("/topics/{topic}/take", post(take))
        .route("/topics/{topic}/ack", post(ack))
        .route("/topics/{topic}/nack", post(nack))
        .route("/topics/{topic}/extend", post(extend))
        .route("/topics/{topic}/release", post(release))
        .route("/topics/{topic}/dead/requeue", post(dead_requeue))
        .route("/topics/{topic}/dead/purge", post(dead_purge))
        .route("/topics/{topic}/groups", get(groups))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(state)
}

/// Any other path under `/api/v1`: the error shape, not an empty 404.
/// The path is the one the client asked for (the nested router's own
/// `Uri` has lost its `/api/v1`).
pub(crate) async fn not_found(OriginalUri(uri): OriginalUri) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "NotFound",
        format!("no API route {}", uri.path()),
    )
}

/// A JSON body, or the API's error shape when it cannot be read: 413 for
/// a body over the limit, else 400.
fn body<T>(b: Result<Json<T>, JsonRejection>) -> ApiResult<T> {
    b.map(|Json(v)| v).map_err(|e| match e.status() {
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "PayloadTooLarge",
            format!("the request body is larger than {MAX_BODY} bytes; nothing was done"),
        ),
        _ => ApiError::bad_request(format!("the request body is not valid: {}", e.body_text())),
    })
}

/// A key given as text (`key`) or, for one that is not UTF-8, as standard
/// base64 (`key_base64`): one of the two (None when neither and not
/// `required`).
fn key_bytes(
    key: Option<String>,
    key_base64: Option<String>,
    required: bool,
) -> ApiResult<Option<Vec<u8>>> {
    use base64::Engine;
    match (key, key_base64) {
        (Some(k), None) => Ok(Some(k.into_bytes())),
        (None, Some(b)) => base64::engine::general_purpose::STANDARD
            .decode(b.as_bytes())
            .map(Some)
            .map_err(|e| {
                ApiError::bad_request(format!("key_base64 is not base64: {e}; nothing was done"))
            }),
        (None, None) if !required => Ok(None),
        (None, None) => Err(ApiError::bad_request(
            "give the key as key (text) or key_base64; nothing was done",
        )),
        (Some(_), Some(_)) => Err(ApiError::bad_request(
            "give key or key_base64, not both; nothing was done",
        )),
    }
}

async fn topic(st: &AppState, name: &str) -> ApiResult<Topic> {
    Ok(st.client.topic(name).await?)
}

/// After an action that changes the topic list or a topic's settings or
/// state: the dashboard's overview reads anew at once, and the topic's
/// shared reading (a large topic's) is not reused.
fn changed(st: &AppState, topic: &str) {
    st.slot_readings.forget(topic);
    st.history.poke();
}

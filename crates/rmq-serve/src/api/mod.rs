//! The JSON API under `/api/v1`: topics (list, show, create, update,
//! delete, pause, resume, stats, peek), messages (send one or a batch; get,
//! cancel and reschedule by key), dead letters (list with paging,
//! requeue, purge) and serial groups (members, slot owners, epochs). Every action checks [`Access`](crate::Access) first;
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
use crate::views::{lossy, LookupJson};
use crate::AppState;

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
        .route("/topics/{topic}/dead", get(dead_list))
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

async fn topic(st: &AppState, name: &str) -> ApiResult<Topic> {
    Ok(st.client.topic(name).await?)
}

/// After an action that changes the topic list or a topic's state: the
/// dashboard's overview reads anew at once.
fn changed(st: &AppState) {
    st.history.poke();
}

async fn topic_view(t: &Topic) -> ApiResult<Value> {
    let stats = t.stats().await?;
    let spec = t.spec();
    // A bounded topic: the messages counted against its bound now.
    let bound_held = match spec.max_pending {
        0 => None,
        _ => t.bound_usage().await?.map(|(held, _)| held),
    };
    Ok(json!({
        "definition": &*spec,
        "stats": stats.total,
        "paused": stats.total.paused_slots == u64::from(spec.slots),
        "server_ms": stats.server_ms,
        "bound_held": bound_held,
    }))
}

#[utoipa::path(
    get,
    path = "/api/v1/topics",
    tag = "topics",
    summary = "Every topic with its definition and totals",
    responses(
        (status = 200, description = "The topics", body = Object),
        (status = 400, description = "Bad input; nothing was changed", body = ErrorBody),
        (status = 429, description = "Too many expensive readings under way: retry after `Retry-After` seconds", body = ErrorBody),
        (status = 404, description = "No such topic", body = ErrorBody),
        (status = 503, description = "Redis is unreachable", body = ErrorBody),
    )
)]
async fn list_topics(State(st): St) -> ApiResult<JsonBody> {
    st.reads
        .run(flight(&("topics",)), || async {
            let mut out = Vec::new();
            for t in st.client.open_topics().await? {
                out.push(topic_view(&t).await?);
            }
            Ok(json!({ "topics": out }))
        })
        .await
}

#[utoipa::path(
    get,
    path = "/api/v1/topics/{topic}",
    tag = "topics",
    summary = "One topic: definition, totals, paused",
    params(("topic" = String, Path, description = "Topic name", example = "p")),
    responses(
        (status = 200, description = "The topic", body = Object),
        (status = 400, description = "Bad input; nothing was changed", body = ErrorBody),
        (status = 429, description = "Too many expensive readings under way: retry after `Retry-After` seconds", body = ErrorBody),
        (status = 404, description = "No such topic", body = ErrorBody),
        (status = 503, description = "Redis is unreachable", body = ErrorBody),
    )
)]
async fn show_topic(State(st): St, Path(name): Path<String>) -> ApiResult<JsonBody> {
    st.reads
        .run(flight(&("topic", &name)), || async {
            topic_view(&topic(&st, &name).await?).await
        })
        .await
}

/// A topic's kind (the library's `TopicKind`).
#[derive(Deserialize, ToSchema, Clone, Copy)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Kind {
    RangeMerge,
    Priority,
    FixedTime,
}

impl From<Kind> for rmq::TopicKind {
    fn from(k: Kind) -> Self {
        match k {
            Kind::RangeMerge => rmq::TopicKind::RangeMerge,
            Kind::Priority => rmq::TopicKind::Priority,
            Kind::FixedTime => rmq::TopicKind::FixedTime,
        }
    }
}

/// A topic to create: its name and kind, and any settings that differ
/// from the defaults (the same names as a stored definition).
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateBody {
    name: String,
    kind: Kind,
    slots: Option<u32>,
    lease_ms: Option<u64>,
    max_attempts: Option<u32>,
    backoff_ms: Option<u64>,
    backoff_max_ms: Option<u64>,
    max_payload_bytes: Option<u64>,
    past_tolerance_ms: Option<u64>,
    dead_letters_per_slot: Option<u64>,
    dead_letter_ttl_ms: Option<u64>,
    rate_per_sec: Option<u32>,
    rate_burst: Option<u32>,
    max_in_flight: Option<u32>,
    max_pending: Option<u64>,
}

impl CreateBody {
    fn spec(self) -> TopicSpec {
        let mut spec = TopicSpec::new(self.name, self.kind.into());
        if let Some(n) = self.slots {
            spec = spec.slots(n);
        }
        Settings {
            lease_ms: self.lease_ms,
            max_attempts: self.max_attempts,
            backoff_ms: self.backoff_ms,
            backoff_max_ms: self.backoff_max_ms,
            max_payload_bytes: self.max_payload_bytes,
            past_tolerance_ms: self.past_tolerance_ms,
            dead_letters_per_slot: self.dead_letters_per_slot,
            dead_letter_ttl_ms: self.dead_letter_ttl_ms,
            rate_per_sec: self.rate_per_sec,
            rate_burst: self.rate_burst,
            max_in_flight: self.max_in_flight,
            max_pending: self.max_pending,
        }
        .apply(spec)
    }
}

#[utoipa::path(
    post,
    path = "/api/v1/topics",
    tag = "topics",
    summary = "Define a topic (an identical definition is accepted again)",
    request_body = CreateBody,
    security(("bearer" = [])),
    responses(
        (status = 201, description = "Defined", body = Object),
        (status = 400, description = "Bad input; nothing was changed", body = ErrorBody),
        (status = 401, description = "The bearer token is missing or wrong", body = ErrorBody),
        (status = 403, description = "This server is read-only", body = ErrorBody),
        (status = 404, description = "No such topic", body = ErrorBody),
        (status = 409, description = "The state refuses it (in use, not waiting, another definition)", body = ErrorBody),
        (status = 503, description = "Redis is unreachable", body = ErrorBody),
    )
)]
async fn create_topic(
    State(st): St,
    b: Result<Json<CreateBody>, JsonRejection>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let spec = body(b)?.spec();
    let t = st.client.define_topic(spec).await?;
    changed(&st);
    Ok((StatusCode::CREATED, Json(topic_view(&t).await?)))
}

/// The settings a PATCH may change (all optional).
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Settings {
    lease_ms: Option<u64>,
    max_attempts: Option<u32>,
    backoff_ms: Option<u64>,
    backoff_max_ms: Option<u64>,
    max_payload_bytes: Option<u64>,
    past_tolerance_ms: Option<u64>,
    dead_letters_per_slot: Option<u64>,
    dead_letter_ttl_ms: Option<u64>,
    /// Deliveries a second across all consumers (0: no limit).
    rate_per_sec: Option<u32>,
    /// Deliveries let through at once (at least 1 with a rate).
    rate_burst: Option<u32>,
    /// Deliveries in flight at once across all consumers (0: no cap).
    max_in_flight: Option<u32>,
    /// Messages the topic may hold at once, waiting or in flight (0: not
    /// bounded); a send beyond it is refused with kind Full (503).
    max_pending: Option<u64>,
}

impl Settings {
    fn apply(&self, s: TopicSpec) -> TopicSpec {
        TopicSpec {
            lease_ms: self.lease_ms.unwrap_or(s.lease_ms),
            max_attempts: self.max_attempts.unwrap_or(s.max_attempts),
            backoff_ms: self.backoff_ms.unwrap_or(s.backoff_ms),
            backoff_max_ms: self.backoff_max_ms.unwrap_or(s.backoff_max_ms),
            max_payload_bytes: self.max_payload_bytes.unwrap_or(s.max_payload_bytes),
            past_tolerance_ms: self.past_tolerance_ms.unwrap_or(s.past_tolerance_ms),
            dead_letters_per_slot: self
                .dead_letters_per_slot
                .unwrap_or(s.dead_letters_per_slot),
            dead_letter_ttl_ms: self.dead_letter_ttl_ms.unwrap_or(s.dead_letter_ttl_ms),
            rate_per_sec: self.rate_per_sec.unwrap_or(s.rate_per_sec),
            rate_burst: match (self.rate_per_sec, self.rate_burst) {
                (Some(0), _) => 0,
                (_, Some(b)) => b,
                (Some(_), None) => s.rate_burst.max(1),
                (None, None) => s.rate_burst,
            },
            max_in_flight: self.max_in_flight.unwrap_or(s.max_in_flight),
            max_pending: self.max_pending.unwrap_or(s.max_pending),
            ..s
        }
    }
}

#[utoipa::path(
    patch,
    path = "/api/v1/topics/{topic}",
    tag = "topics",
    summary = "Change a topic's settings (not its kind or slots)",
    params(("topic" = String, Path, description = "Topic name", example = "p")),
    request_body = Settings,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Updated", body = Object),
        (status = 400, description = "Bad input; nothing was changed", body = ErrorBody),
        (status = 401, description = "The bearer token is missing or wrong", body = ErrorBody),
        (status = 403, description = "This server is read-only", body = ErrorBody),
        (status = 404, description = "No such topic", body = ErrorBody),
        (status = 409, description = "The state refuses it (in use, not waiting, another definition)", body = ErrorBody),
        (status = 503, description = "Redis is unreachable", body = ErrorBody),
    )
)]
async fn update_topic(
    State(st): St,
    Path(name): Path<String>,
    b: Result<Json<Settings>, JsonRejection>,
) -> ApiResult<Json<Value>> {
    let change = body(b)?;
    let t = st.client.update_topic(&name, |s| change.apply(s)).await?;
    Ok(Json(topic_view(&t).await?))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct Force {
    #[serde(default)]
    force: bool,
}

#[utoipa::path(
    delete,
    path = "/api/v1/topics/{topic}",
    tag = "topics",
    summary = "Delete a topic (refused while it holds messages or has consumers, unless forced)",
    params(("topic" = String, Path, description = "Topic name", example = "p"), Force),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Deleted", body = Object),
        (status = 400, description = "Bad input; nothing was changed", body = ErrorBody),
        (status = 401, description = "The bearer token is missing or wrong", body = ErrorBody),
        (status = 403, description = "This server is read-only", body = ErrorBody),
        (status = 404, description = "No such topic", body = ErrorBody),
        (status = 409, description = "The state refuses it (in use, not waiting, another definition)", body = ErrorBody),
        (status = 503, description = "Redis is unreachable", body = ErrorBody),
    )
)]
async fn delete_topic(
    State(st): St,
    Path(name): Path<String>,
    Query(q): Query<Force>,
) -> ApiResult<Json<Value>> {
    let d = st.client.delete_topic(&name, q.force).await?;
    changed(&st);
    Ok(Json(
        json!({ "deleted": true, "messages": d.messages, "slots": d.slots }),
    ))
}

#[utoipa::path(
    post,
    path = "/api/v1/topics/{topic}/pause",
    tag = "topics",
    summary = "Pause: no delivery starts until resumed",
    params(("topic" = String, Path, description = "Topic name", example = "p")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Paused", body = Object),
        (status = 400, description = "Bad input; nothing was changed", body = ErrorBody),
        (status = 401, description = "The bearer token is missing or wrong", body = ErrorBody),
        (status = 403, description = "This server is read-only", body = ErrorBody),
        (status = 404, description = "No such topic", body = ErrorBody),
        (status = 409, description = "The state refuses it (in use, not waiting, another definition)", body = ErrorBody),
        (status = 503, description = "Redis is unreachable", body = ErrorBody),
    )
)]
async fn pause(State(st): St, Path(name): Path<String>) -> ApiResult<Json<Value>> {
    set_paused(st, name, true).await
}

#[utoipa::path(
    post,
    path = "/api/v1/topics/{topic}/resume",
    tag = "topics",
    summary = "Resume a paused topic",
    params(("topic" = String, Path, description = "Topic name", example = "p")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Resumed", body = Object),
        (status = 400, description = "Bad input; nothing was changed", body = ErrorBody),
        (status = 401, description = "The bearer token is missing or wrong", body = ErrorBody),
        (status = 403, description = "This server is read-only", body = ErrorBody),
        (status = 404, description = "No such topic", body = ErrorBody),
        (status = 409, description = "The state refuses it (in use, not waiting, another definition)", body = ErrorBody),
        (status = 503, description = "Redis is unreachable", body = ErrorBody),
    )
)]
async fn resume(State(st): St, Path(name): Path<String>) -> ApiResult<Json<Value>> {
    set_paused(st, name, false).await
}

async fn set_paused(st: Arc<AppState>, name: String, paused: bool) -> ApiResult<Json<Value>> {
    let t = topic(&st, &name).await?;
    let r = if paused {
        t.pause().await?
    } else {
        t.resume().await?
    };
    changed(&st);
    Ok(Json(json!({
        "paused": paused,
        "slots": r.slots,
        "were_paused": r.were_paused,
        "server_ms": r.server_ms,
    })))
}

/// A topic's stats, serialized straight from the reading (no JSON tree
/// of 65,536 slots in between).
#[derive(serde::Serialize)]
struct StatsBody {
    total: rmq::Stats,
    server_ms: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    slots: Option<Vec<rmq::Stats>>,
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct SlotsQuery {
    #[serde(default)]
    slots: bool,
}

#[utoipa::path(
    get,
    path = "/api/v1/topics/{topic}/stats",
    tag = "topics",
    summary = "Depth per state and counters, in total and optionally per slot",
    params(("topic" = String, Path, description = "Topic name", example = "p"), SlotsQuery),
    responses(
        (status = 200, description = "Stats", body = Object),
        (status = 400, description = "Bad input; nothing was changed", body = ErrorBody),
        (status = 429, description = "Too many expensive readings under way: retry after `Retry-After` seconds", body = ErrorBody),
        (status = 404, description = "No such topic", body = ErrorBody),
        (status = 503, description = "Redis is unreachable", body = ErrorBody),
    )
)]
async fn stats(
    State(st): St,
    Path(name): Path<String>,
    Query(q): Query<SlotsQuery>,
) -> ApiResult<JsonBody> {
    st.reads
        .run(flight(&("stats", &name, q.slots)), || async {
            let s = topic(&st, &name).await?.stats().await?;
            Ok(StatsBody {
                total: s.total,
                server_ms: s.server_ms,
                slots: q.slots.then_some(s.slots),
            })
        })
        .await
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct Limit {
    limit: Option<usize>,
    offset: Option<usize>,
}

#[utoipa::path(
    get,
    path = "/api/v1/topics/{topic}/peek",
    tag = "topics",
    summary = "The next pending messages in consumption order, by page (takes nothing; offset at most 9,000)",
    params(("topic" = String, Path, description = "Topic name", example = "p"), Limit),
    responses(
        (status = 200, description = "Pending messages", body = Object),
        (status = 400, description = "Bad input; nothing was changed", body = ErrorBody),
        (status = 429, description = "Too many expensive readings under way: retry after `Retry-After` seconds", body = ErrorBody),
        (status = 404, description = "No such topic", body = ErrorBody),
        (status = 503, description = "Redis is unreachable", body = ErrorBody),
    )
)]
async fn peek(
    State(st): St,
    Path(name): Path<String>,
    Query(q): Query<Limit>,
) -> ApiResult<JsonBody> {
    let (limit, offset) = (
        q.limit.unwrap_or(20).min(1_000),
        q.offset.unwrap_or(0).min(MAX_PEEK_OFFSET),
    );
    st.reads
        .run(flight(&("peek", &name, offset, limit)), || {
            peek_page(&st, &name, offset, limit)
        })
        .await
}

async fn peek_page(st: &AppState, name: &str, offset: usize, limit: usize) -> ApiResult<Value> {
    let pending = topic(st, name).await?.peek(offset + limit).await?;
    let out: Vec<Value> = pending
        .iter()
        .skip(offset)
        .map(|p| {
            json!({
                "key": lossy(&p.key), "payload": lossy(&p.payload), "slot": p.slot,
                "attempts": p.attempts, "priority": p.priority, "due_ms": p.due_ms,
            })
        })
        .collect();
    Ok(json!({ "offset": offset, "limit": limit, "messages": out }))
}

/// One message to send.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SendLine {
    payload: String,
    key: Option<String>,
    slot_basis: Option<String>,
    priority: Option<u32>,
    at: Option<i64>,
    delay: Option<u64>,
    range: Option<u64>,
}

impl SendLine {
    fn message(self) -> ApiResult<Message> {
        let mut m = Message::new(self.payload);
        if let Some(k) = self.key {
            m = m.key(k);
        }
        if let Some(b) = self.slot_basis {
            m = m.slot_basis(b);
        }
        let timings = [
            self.priority.is_some(),
            self.at.is_some(),
            self.delay.is_some(),
            self.range.is_some(),
        ];
        if timings.iter().filter(|&&t| t).count() > 1 {
            return Err(ApiError::bad_request(
                "give at most one of priority, at, delay and range",
            ));
        }
        m = match (self.priority, self.at, self.delay, self.range) {
            (Some(p), ..) => m.priority(p),
            (_, Some(ms), ..) => m.at_ms(ms),
            (_, _, Some(ms), _) => m.delay(Duration::from_millis(ms)),
            (.., Some(ms)) => m.range(Duration::from_millis(ms)),
            _ => m,
        };
        // The library checks it against the topic (kind, sizes) when sent.
        Ok(m)
    }
}

/// One message, or `{"messages": [...]}` (as the OpenAPI document shows
/// it; the body is read as [`SendBody`]).
#[derive(Deserialize, ToSchema)]
#[serde(untagged)]
#[allow(dead_code)]
pub(crate) enum SendBodyDoc {
    Batch {
        /// At most 10,000.
        messages: Vec<SendLine>,
    },
    One(SendLine),
}

/// One message's fields, or `messages` alone. Not an untagged enum: that
/// would buffer the whole body as a tree before choosing, and the batch
/// must be counted while it is read.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SendBody {
    messages: Option<Capped<SendLine>>,
    payload: Option<String>,
    key: Option<String>,
    slot_basis: Option<String>,
    priority: Option<u32>,
    at: Option<i64>,
    delay: Option<u64>,
    range: Option<u64>,
}

impl SendBody {
    /// The lines to send, and whether it was one message.
    fn lines(self) -> ApiResult<(Vec<SendLine>, bool)> {
        let SendBody {
            messages,
            payload,
            key,
            slot_basis,
            priority,
            at,
            delay,
            range,
        } = self;
        let one_field = key.is_some()
            || slot_basis.is_some()
            || priority.is_some()
            || at.is_some()
            || delay.is_some()
            || range.is_some();
        match (messages, payload) {
            (Some(Capped(lines)), None) if !one_field => Ok((lines, false)),
            (None, Some(payload)) => Ok((
                vec![SendLine {
                    payload,
                    key,
                    slot_basis,
                    priority,
                    at,
                    delay,
                    range,
                }],
                true,
            )),
            (Some(_), _) => Err(ApiError::bad_request(
                "give either one message's fields or messages: [...], not both; nothing was sent",
            )),
            (None, None) => Err(ApiError::bad_request(
                "missing field `payload` (or give messages: [...]); nothing was sent",
            )),
        }
    }
}

#[utoipa::path(
    post,
    path = "/api/v1/topics/{topic}/messages",
    tag = "messages",
    summary = "Send one message, or a batch as an object with a messages array",
    params(("topic" = String, Path, description = "Topic name", example = "p")),
    request_body = SendBodyDoc,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Where each message went (merged or new)", body = Object),
        (status = 400, description = "Bad input; nothing was changed", body = ErrorBody),
        (status = 401, description = "The bearer token is missing or wrong", body = ErrorBody),
        (status = 403, description = "This server is read-only", body = ErrorBody),
        (status = 404, description = "No such topic", body = ErrorBody),
        (status = 409, description = "The state refuses it (in use, not waiting, another definition)", body = ErrorBody),
        (status = 503, description = "Redis is unreachable, or the bounded topic is full (one message; a batch reports per message)", body = ErrorBody),
    )
)]
async fn send(
    State(st): St,
    Path(name): Path<String>,
    b: Result<Json<SendBody>, JsonRejection>,
) -> ApiResult<Json<Value>> {
    let (lines, one) = body(b)?.lines()?;
    let t = topic(&st, &name).await?;
    let messages = lines
        .into_iter()
        .map(SendLine::message)
        .collect::<ApiResult<Vec<_>>>()?;
    let report = t.send_batch(&messages).await?;
    let results: Vec<Value> = report
        .results
        .iter()
        .map(|r| match r {
            Ok(s) => json!({
                "slot": s.slot, "merged": s.merged, "behind_in_flight": s.behind_in_flight,
            }),
            Err(e) => {
                json!({ "error": { "kind": format!("{:?}", e.kind()), "message": e.to_string() } })
            }
        })
        .collect();
    if one {
        if let Some(Err(e)) = report.results.into_iter().next() {
            return Err(e.into());
        }
        return Ok(Json(results.into_iter().next().unwrap_or(Value::Null)));
    }
    Ok(Json(json!({ "results": results })))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct Basis {
    slot_basis: Option<String>,
}

#[utoipa::path(
    get,
    path = "/api/v1/topics/{topic}/messages/{key}",
    tag = "messages",
    summary = "Where a key is and everything about it",
    params(("topic" = String, Path, description = "Topic name", example = "p"), ("key" = String, Path, description = "Merge key", example = "k"), Basis),
    responses(
        (status = 200, description = "The key", body = Object),
        (status = 400, description = "Bad input; nothing was changed", body = ErrorBody),
        (status = 404, description = "No such topic", body = ErrorBody),
        (status = 503, description = "Redis is unreachable", body = ErrorBody),
    )
)]
async fn lookup(
    State(st): St,
    Path((name, key)): Path<(String, String)>,
    Query(q): Query<Basis>,
) -> ApiResult<Json<LookupJson>> {
    lookup_key(&st, &name, key, q.slot_basis).await
}

/// A key in the query rather than the path: the keys `.` and `..`
/// cannot travel as a path segment (clients, browsers first, resolve them
/// as dot segments, even percent-encoded), so the dashboard names every
/// key this way.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct KeyQuery {
    /// Merge key.
    key: String,
    slot_basis: Option<String>,
}

#[utoipa::path(
    get,
    path = "/api/v1/topics/{topic}/key",
    tag = "messages",
    summary = "Where a key is, the key given in the query (any key, `.` and `..` too)",
    params(("topic" = String, Path, description = "Topic name", example = "p"), KeyQuery),
    responses(
        (status = 200, description = "The key", body = Object),
        (status = 400, description = "Bad input; nothing was changed", body = ErrorBody),
        (status = 404, description = "No such topic", body = ErrorBody),
        (status = 503, description = "Redis is unreachable", body = ErrorBody),
    )
)]
async fn lookup_q(
    State(st): St,
    Path(name): Path<String>,
    Query(q): Query<KeyQuery>,
) -> ApiResult<Json<LookupJson>> {
    lookup_key(&st, &name, q.key, q.slot_basis).await
}

async fn lookup_key(
    st: &AppState,
    name: &str,
    key: String,
    slot_basis: Option<String>,
) -> ApiResult<Json<LookupJson>> {
    let t = topic(st, name).await?;
    let basis = slot_basis.unwrap_or_else(|| key.clone());
    let l = t.get_in(key.as_bytes(), basis.as_bytes()).await?;
    Ok(Json(LookupJson::of(&l)))
}

fn cancel_json(key: &str, o: CancelOutcome) -> Value {
    let outcome = match o {
        CancelOutcome::Cancelled(_) => "cancelled",
        CancelOutcome::WillNotRetry { .. } => "will-not-retry",
        CancelOutcome::Dead => "dead",
        CancelOutcome::Absent => "absent",
    };
    json!({
        "key": key, "cancelled": o.cancelled(), "state": o.state_before().name(), "outcome": outcome,
    })
}

#[utoipa::path(
    delete,
    path = "/api/v1/topics/{topic}/messages/{key}",
    tag = "messages",
    summary = "Cancel a key's message (waiting: removed; in flight: never retried)",
    params(("topic" = String, Path, description = "Topic name", example = "p"), ("key" = String, Path, description = "Merge key", example = "k"), Basis),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "What the cancel met", body = Object),
        (status = 400, description = "Bad input; nothing was changed", body = ErrorBody),
        (status = 401, description = "The bearer token is missing or wrong", body = ErrorBody),
        (status = 403, description = "This server is read-only", body = ErrorBody),
        (status = 404, description = "No such topic", body = ErrorBody),
        (status = 409, description = "The state refuses it (in use, not waiting, another definition)", body = ErrorBody),
        (status = 503, description = "Redis is unreachable", body = ErrorBody),
    )
)]
async fn cancel_one(
    State(st): St,
    Path((name, key)): Path<(String, String)>,
    Query(q): Query<Basis>,
) -> ApiResult<Json<Value>> {
    cancel_key(&st, &name, key, q.slot_basis).await
}

#[utoipa::path(
    delete,
    path = "/api/v1/topics/{topic}/key",
    tag = "messages",
    summary = "Cancel a key's message, the key given in the query (any key, `.` and `..` too)",
    params(("topic" = String, Path, description = "Topic name", example = "p"), KeyQuery),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "What the cancel met", body = Object),
        (status = 400, description = "Bad input; nothing was changed", body = ErrorBody),
        (status = 401, description = "The bearer token is missing or wrong", body = ErrorBody),
        (status = 403, description = "This server is read-only", body = ErrorBody),
        (status = 404, description = "No such topic", body = ErrorBody),
        (status = 409, description = "The state refuses it (in use, not waiting, another definition)", body = ErrorBody),
        (status = 503, description = "Redis is unreachable", body = ErrorBody),
    )
)]
async fn cancel_one_q(
    State(st): St,
    Path(name): Path<String>,
    Query(q): Query<KeyQuery>,
) -> ApiResult<Json<Value>> {
    cancel_key(&st, &name, q.key, q.slot_basis).await
}

async fn cancel_key(
    st: &AppState,
    name: &str,
    key: String,
    slot_basis: Option<String>,
) -> ApiResult<Json<Value>> {
    let t = topic(st, name).await?;
    let basis = slot_basis.unwrap_or_else(|| key.clone());
    let out = t.cancel_in(&[key.as_bytes()], basis.as_bytes()).await?;
    let o = out.first().copied().unwrap_or(CancelOutcome::Absent);
    Ok(Json(cancel_json(&key, o)))
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CancelBody {
    /// At most 10,000.
    #[schema(value_type = Vec<String>)]
    keys: Capped<String>,
    slot_basis: Option<String>,
}

#[utoipa::path(
    post,
    path = "/api/v1/topics/{topic}/cancel",
    tag = "messages",
    summary = "Cancel many keys",
    params(("topic" = String, Path, description = "Topic name", example = "p")),
    request_body = CancelBody,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "What each cancel met", body = Object),
        (status = 400, description = "Bad input; nothing was changed", body = ErrorBody),
        (status = 401, description = "The bearer token is missing or wrong", body = ErrorBody),
        (status = 403, description = "This server is read-only", body = ErrorBody),
        (status = 404, description = "No such topic", body = ErrorBody),
        (status = 409, description = "The state refuses it (in use, not waiting, another definition)", body = ErrorBody),
        (status = 503, description = "Redis is unreachable", body = ErrorBody),
    )
)]
async fn cancel_many(
    State(st): St,
    Path(name): Path<String>,
    b: Result<Json<CancelBody>, JsonRejection>,
) -> ApiResult<Json<Value>> {
    let c = body(b)?;
    let t = topic(&st, &name).await?;
    let keys: Vec<&[u8]> = c.keys.0.iter().map(|k| k.as_bytes()).collect();
    let out = match &c.slot_basis {
        Some(b) => t.cancel_in(&keys, b.as_bytes()).await?,
        None => t.cancel(&keys).await?,
    };
    let results: Vec<Value> = c
        .keys
        .0
        .iter()
        .zip(out)
        .map(|(k, o)| cancel_json(k, o))
        .collect();
    Ok(Json(json!({ "results": results })))
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RescheduleBody {
    at: Option<i64>,
    delay: Option<u64>,
    priority: Option<u32>,
    slot_basis: Option<String>,
}

#[utoipa::path(
    post,
    path = "/api/v1/topics/{topic}/messages/{key}/reschedule",
    tag = "messages",
    summary = "Give a waiting message a new due time or priority",
    params(("topic" = String, Path, description = "Topic name", example = "p"), ("key" = String, Path, description = "Merge key", example = "k")),
    request_body = RescheduleBody,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Rescheduled", body = Object),
        (status = 400, description = "Bad input; nothing was changed", body = ErrorBody),
        (status = 401, description = "The bearer token is missing or wrong", body = ErrorBody),
        (status = 403, description = "This server is read-only", body = ErrorBody),
        (status = 404, description = "No such topic", body = ErrorBody),
        (status = 409, description = "The state refuses it (in use, not waiting, another definition)", body = ErrorBody),
        (status = 503, description = "Redis is unreachable", body = ErrorBody),
    )
)]
async fn reschedule(
    State(st): St,
    Path((name, key)): Path<(String, String)>,
    b: Result<Json<RescheduleBody>, JsonRejection>,
) -> ApiResult<Json<Value>> {
    reschedule_key(&st, &name, key, body(b)?).await
}

/// The key of a reschedule given in the query.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct KeyOnly {
    /// Merge key.
    key: String,
}

#[utoipa::path(
    post,
    path = "/api/v1/topics/{topic}/key/reschedule",
    tag = "messages",
    summary = "Reschedule a waiting message, the key given in the query (any key, `.` and `..` too)",
    params(("topic" = String, Path, description = "Topic name", example = "p"), KeyOnly),
    request_body = RescheduleBody,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Rescheduled", body = Object),
        (status = 400, description = "Bad input; nothing was changed", body = ErrorBody),
        (status = 401, description = "The bearer token is missing or wrong", body = ErrorBody),
        (status = 403, description = "This server is read-only", body = ErrorBody),
        (status = 404, description = "No such topic", body = ErrorBody),
        (status = 409, description = "The state refuses it (in use, not waiting, another definition)", body = ErrorBody),
        (status = 503, description = "Redis is unreachable", body = ErrorBody),
    )
)]
async fn reschedule_q(
    State(st): St,
    Path(name): Path<String>,
    Query(q): Query<KeyOnly>,
    b: Result<Json<RescheduleBody>, JsonRejection>,
) -> ApiResult<Json<Value>> {
    reschedule_key(&st, &name, q.key, body(b)?).await
}

async fn reschedule_key(
    st: &AppState,
    name: &str,
    key: String,
    r: RescheduleBody,
) -> ApiResult<Json<Value>> {
    let to = match (r.at, r.delay, r.priority) {
        (Some(ms), None, None) => Reschedule::At(ms),
        (None, Some(ms), None) => Reschedule::Delay(ms),
        (None, None, Some(p)) => Reschedule::Priority(p),
        _ => {
            return Err(ApiError::bad_request(
                "give exactly one of at, delay and priority",
            ))
        }
    };
    let t = topic(st, name).await?;
    let basis = r.slot_basis.unwrap_or_else(|| key.clone());
    let done = t
        .reschedule_in(key.as_bytes(), basis.as_bytes(), to)
        .await?;
    let moved = match done.moved {
        rmq::Moved::Pending => "pending",
        rmq::Moved::RetryWaiting => "retry-waiting",
        rmq::Moved::Parked => "parked",
    };
    Ok(Json(json!({
        "key": key, "rescheduled": true, "slot": done.slot, "moved": moved,
        "priority": done.priority, "due_ms": done.due_ms,
    })))
}

#[utoipa::path(
    get,
    path = "/api/v1/topics/{topic}/dead",
    tag = "dead letters",
    summary = "Dead letters, oldest death first, by page (offset at most 10,000)",
    params(("topic" = String, Path, description = "Topic name", example = "p"), Limit),
    responses(
        (status = 200, description = "A page of dead letters", body = Object),
        (status = 400, description = "Bad input; nothing was changed", body = ErrorBody),
        (status = 429, description = "Too many expensive readings under way: retry after `Retry-After` seconds", body = ErrorBody),
        (status = 404, description = "No such topic", body = ErrorBody),
        (status = 503, description = "Redis is unreachable", body = ErrorBody),
    )
)]
async fn dead_list(
    State(st): St,
    Path(name): Path<String>,
    Query(q): Query<Limit>,
) -> ApiResult<JsonBody> {
    let (limit, offset) = (
        q.limit.unwrap_or(50).min(1_000),
        q.offset.unwrap_or(0).min(MAX_DEAD_OFFSET),
    );
    st.reads
        .run(flight(&("dead", &name, offset, limit)), || {
            dead_page(&st, &name, offset, limit)
        })
        .await
}

async fn dead_page(st: &AppState, name: &str, offset: usize, limit: usize) -> ApiResult<Value> {
    let all = topic(st, name).await?.dead_letters(offset + limit).await?;
    let page: Vec<Value> = all
        .iter()
        .skip(offset)
        .map(|d| {
            json!({
                "key": lossy(&d.key), "payload": lossy(&d.payload), "slot": d.slot,
                "attempts": d.attempts, "error": d.error, "dead_at_ms": d.dead_at_ms, "deaths": d.deaths,
            })
        })
        .collect();
    Ok(json!({ "offset": offset, "limit": limit, "dead": page }))
}

/// Which dead letters: `{"key": ".."}`, `{"all": true}`, or (purge)
/// `{"older_than_ms": N}`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct DeadBody {
    key: Option<String>,
    #[serde(default)]
    all: bool,
    older_than_ms: Option<u64>,
}

impl DeadBody {
    fn selection(self) -> ApiResult<DeadSelection> {
        match (self.key, self.all, self.older_than_ms) {
            (Some(k), false, None) => Ok(DeadSelection::Key(k.into_bytes())),
            (None, true, None) => Ok(DeadSelection::All),
            (None, false, Some(ms)) => Ok(DeadSelection::OlderThan(Duration::from_millis(ms))),
            _ => Err(ApiError::bad_request(
                "give exactly one of key, all (true) and older_than_ms; nothing was changed",
            )),
        }
    }
}

#[utoipa::path(
    post,
    path = "/api/v1/topics/{topic}/dead/requeue",
    tag = "dead letters",
    summary = "Requeue dead letters: one key, all, or older than an age",
    params(("topic" = String, Path, description = "Topic name", example = "p")),
    request_body = DeadBody,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "How many were requeued", body = Object),
        (status = 400, description = "Bad input; nothing was changed", body = ErrorBody),
        (status = 401, description = "The bearer token is missing or wrong", body = ErrorBody),
        (status = 403, description = "This server is read-only", body = ErrorBody),
        (status = 404, description = "No such topic", body = ErrorBody),
        (status = 409, description = "The state refuses it (in use, not waiting, another definition)", body = ErrorBody),
        (status = 503, description = "Redis is unreachable", body = ErrorBody),
    )
)]
async fn dead_requeue(
    State(st): St,
    Path(name): Path<String>,
    b: Result<Json<DeadBody>, JsonRejection>,
) -> ApiResult<Json<Value>> {
    let which = body(b)?.selection()?;
    let (requeued, merged) = topic(&st, &name).await?.requeue_dead(which).await?;
    Ok(Json(json!({ "requeued": requeued, "merged": merged })))
}

#[utoipa::path(
    post,
    path = "/api/v1/topics/{topic}/dead/purge",
    tag = "dead letters",
    summary = "Delete dead letters: one key, all, or older than an age",
    params(("topic" = String, Path, description = "Topic name", example = "p")),
    request_body = DeadBody,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "How many were deleted", body = Object),
        (status = 400, description = "Bad input; nothing was changed", body = ErrorBody),
        (status = 401, description = "The bearer token is missing or wrong", body = ErrorBody),
        (status = 403, description = "This server is read-only", body = ErrorBody),
        (status = 404, description = "No such topic", body = ErrorBody),
        (status = 409, description = "The state refuses it (in use, not waiting, another definition)", body = ErrorBody),
        (status = 503, description = "Redis is unreachable", body = ErrorBody),
    )
)]
async fn dead_purge(
    State(st): St,
    Path(name): Path<String>,
    b: Result<Json<DeadBody>, JsonRejection>,
) -> ApiResult<Json<Value>> {
    let which = body(b)?.selection()?;
    let purged = topic(&st, &name).await?.purge_dead(which).await?;
    Ok(Json(json!({ "purged": purged })))
}

#[utoipa::path(
    get,
    path = "/api/v1/topics/{topic}/groups",
    tag = "serial groups",
    summary = "Serial groups: members, heartbeat deadlines, slot owners and epochs",
    params(("topic" = String, Path, description = "Topic name", example = "p")),
    responses(
        (status = 200, description = "The groups and every slot's lease", body = Object),
        (status = 400, description = "Bad input; nothing was changed", body = ErrorBody),
        (status = 429, description = "Too many expensive readings under way: retry after `Retry-After` seconds", body = ErrorBody),
        (status = 404, description = "No such topic", body = ErrorBody),
        (status = 503, description = "Redis is unreachable", body = ErrorBody),
    )
)]
async fn groups(State(st): St, Path(name): Path<String>) -> ApiResult<JsonBody> {
    st.reads
        .run(flight(&("groups", &name)), || async {
            let t = topic(&st, &name).await?;
            let view = t.serial_groups().await?;
            let consumers = t.consumers().await?;
            let mut v = json!(view);
            v["consumers"] = json!(consumers);
            Ok(v)
        })
        .await
}

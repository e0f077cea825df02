//! Topics: list, show, create, update, delete, pause and resume, stats
//! and a page of pending messages.

#[allow(clippy::wildcard_imports)]
use super::*;

pub(crate) async fn topic_view(st: &AppState, t: &Topic) -> ApiResult<Value> {
    let stats = st
        .slot_readings
        .read(t, st.options.large_topic_reuse)
        .await?;
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
pub(crate) async fn list_topics(State(st): St) -> ApiResult<JsonBody> {
    st.reads
        .run(flight(&("topics",)), || async {
            let mut out = Vec::new();
            for t in st.client.open_topics().await? {
                out.push(topic_view(&st, &t).await?);
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
pub(crate) async fn show_topic(State(st): St, Path(name): Path<String>) -> ApiResult<JsonBody> {
    st.reads
        .run(flight(&("topic", &name)), || async {
            topic_view(&st, &topic(&st, &name).await?).await
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

/// How a deep slot keeps its pending messages (the library's
/// `PendingLayout`): `flat` (the default, the fastest) or `compact` (less
/// memory past 120 pending a slot, more Redis work a message).
#[derive(Deserialize, ToSchema, Clone, Copy)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Layout {
    Flat,
    Compact,
}

impl From<Layout> for rmq::PendingLayout {
    fn from(l: Layout) -> Self {
        match l {
            Layout::Flat => rmq::PendingLayout::Flat,
            Layout::Compact => rmq::PendingLayout::Compact,
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
    /// How long a handler may run on one delivery (ms; 0: no limit).
    handler_timeout_ms: Option<u64>,
    /// How a deep slot keeps its pending messages (default `flat`).
    pending_layout: Option<Layout>,
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
            handler_timeout_ms: self.handler_timeout_ms,
            pending_layout: self.pending_layout,
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
pub(crate) async fn create_topic(
    State(st): St,
    b: Result<Json<CreateBody>, JsonRejection>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let spec = body(b)?.spec();
    let t = st.client.define_topic(spec).await?;
    changed(&st, &t.spec().name);
    Ok((StatusCode::CREATED, Json(topic_view(&st, &t).await?)))
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
    /// How long a handler may run on one delivery (ms; 0: no limit):
    /// past it the handler is stopped and the message retried.
    handler_timeout_ms: Option<u64>,
    /// How a deep slot keeps its pending messages: applies to each slot at
    /// its next write that finds it in the other layout.
    pending_layout: Option<Layout>,
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
            handler_timeout_ms: self.handler_timeout_ms.unwrap_or(s.handler_timeout_ms),
            pending_layout: self.pending_layout.map_or(s.pending_layout, Into::into),
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
pub(crate) async fn update_topic(
    State(st): St,
    Path(name): Path<String>,
    b: Result<Json<Settings>, JsonRejection>,
) -> ApiResult<Json<Value>> {
    let change = body(b)?;
    let t = st.client.update_topic(&name, |s| change.apply(s)).await?;
    changed(&st, &name);
    Ok(Json(topic_view(&st, &t).await?))
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
pub(crate) async fn delete_topic(
    State(st): St,
    Path(name): Path<String>,
    Query(q): Query<Force>,
) -> ApiResult<Json<Value>> {
    let d = st.client.delete_topic(&name, q.force).await?;
    changed(&st, &name);
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
pub(crate) async fn pause(State(st): St, Path(name): Path<String>) -> ApiResult<Json<Value>> {
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
pub(crate) async fn resume(State(st): St, Path(name): Path<String>) -> ApiResult<Json<Value>> {
    set_paused(st, name, false).await
}

pub(crate) async fn set_paused(
    st: Arc<AppState>,
    name: String,
    paused: bool,
) -> ApiResult<Json<Value>> {
    let t = topic(&st, &name).await?;
    let r = if paused {
        t.pause().await?
    } else {
        t.resume().await?
    };
    changed(&st, &name);
    Ok(Json(json!({
        "paused": paused,
        "slots": r.slots,
        "were_paused": r.were_paused,
        "server_ms": r.server_ms,
    })))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct Limit {
    pub(super) limit: Option<usize>,
    pub(super) offset: Option<usize>,
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
pub(crate) async fn peek(
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

pub(crate) async fn peek_page(
    st: &AppState,
    name: &str,
    offset: usize,
    limit: usize,
) -> ApiResult<Value> {
    let pending = topic(st, name).await?.peek(offset + limit).await?;
    let out: Vec<Value> = pending
        .iter()
        .skip(offset)
        .map(|p| {
            with_key_and_payload(
                json!({
                    "slot": p.slot, "attempts": p.attempts, "priority": p.priority,
                    "due_ms": p.due_ms,
                }),
                &p.key,
                &p.payload,
            )
        })
        .collect();
    Ok(json!({ "offset": offset, "limit": limit, "messages": out }))
}

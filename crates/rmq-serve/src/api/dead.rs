//! Dead letters: pages, requeue, purge.

#[allow(clippy::wildcard_imports)]
use super::*;

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
pub(crate) async fn dead_list(
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

pub(crate) async fn dead_page(
    st: &AppState,
    name: &str,
    offset: usize,
    limit: usize,
) -> ApiResult<Value> {
    let all = topic(st, name).await?.dead_letters(offset + limit).await?;
    let page: Vec<Value> = all
        .iter()
        .skip(offset)
        .map(|d| {
            with_key_and_payload(
                json!({
                    "slot": d.slot, "attempts": d.attempts, "error": d.error,
                    "dead_at_ms": d.dead_at_ms, "deaths": d.deaths,
                }),
                &d.key,
                &d.payload,
            )
        })
        .collect();
    Ok(json!({ "offset": offset, "limit": limit, "dead": page }))
}

/// Which dead letters: `{"key": ".."}` (or `{"key_base64": ".."}` for a
/// key that is not UTF-8), `{"all": true}`, or (purge)
/// `{"older_than_ms": N}`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct DeadSelectionBody {
    key: Option<String>,
    key_base64: Option<String>,
    #[serde(default)]
    all: bool,
    older_than_ms: Option<u64>,
}

impl DeadSelectionBody {
    fn selection(self) -> ApiResult<DeadSelection> {
        let key = key_bytes(self.key, self.key_base64, false)?;
        match (key, self.all, self.older_than_ms) {
            (Some(k), false, None) => Ok(DeadSelection::Key(k)),
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
    request_body = DeadSelectionBody,
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
pub(crate) async fn dead_requeue(
    State(st): St,
    Path(name): Path<String>,
    b: Result<Json<DeadSelectionBody>, JsonRejection>,
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
    request_body = DeadSelectionBody,
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
pub(crate) async fn dead_purge(
    State(st): St,
    Path(name): Path<String>,
    b: Result<Json<DeadSelectionBody>, JsonRejection>,
) -> ApiResult<Json<Value>> {
    let which = body(b)?.selection()?;
    let purged = topic(&st, &name).await?.purge_dead(which).await?;
    Ok(Json(json!({ "purged": purged })))
}

//! The key in the query rather than the path (`/topics/{t}/key?key=…`):
//! the keys `.` and `..` cannot travel as a path segment, so the dashboard
//! names every key this way. The same lookups, cancels and reschedules as
//! `messages.rs`.

#[allow(clippy::wildcard_imports)]
use super::*;

/// A key in the query rather than the path: the keys `.` and `..`
/// cannot travel as a path segment (clients, browsers first, resolve them
/// as dot segments, even percent-encoded), so the dashboard names every
/// key this way.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct KeyQuery {
    /// Merge key (text).
    key: Option<String>,
    /// Merge key, standard base64: for a key that is not UTF-8.
    key_base64: Option<String>,
    slot_basis: Option<String>,
}

impl KeyQuery {
    fn key(self) -> ApiResult<(Vec<u8>, Option<Vec<u8>>)> {
        let key = key_bytes(self.key, self.key_base64, true)?.unwrap_or_default();
        Ok((key, self.slot_basis.map(String::into_bytes)))
    }
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
pub(crate) async fn lookup_q(
    State(st): St,
    Path(name): Path<String>,
    Query(q): Query<KeyQuery>,
) -> ApiResult<Json<LookupJson>> {
    let (key, basis) = q.key()?;
    lookup_key(&st, &name, key, basis).await
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
pub(crate) async fn cancel_one_q(
    State(st): St,
    Path(name): Path<String>,
    Query(q): Query<KeyQuery>,
) -> ApiResult<Json<Value>> {
    let (key, basis) = q.key()?;
    cancel_key(&st, &name, key, basis).await
}

/// The key of a reschedule given in the query.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct KeyOnly {
    /// Merge key (text).
    key: Option<String>,
    /// Merge key, standard base64: for a key that is not UTF-8.
    key_base64: Option<String>,
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
pub(crate) async fn reschedule_q(
    State(st): St,
    Path(name): Path<String>,
    Query(q): Query<KeyOnly>,
    b: Result<Json<RescheduleBody>, JsonRejection>,
) -> ApiResult<Json<Value>> {
    let key = key_bytes(q.key, q.key_base64, true)?.unwrap_or_default();
    reschedule_key(&st, &name, key, body(b)?).await
}

//! Messages: send one or a batch; look up, cancel and reschedule by key
//! (the key in the path, or in the query for keys a path cannot carry).

#[allow(clippy::wildcard_imports)]
use super::*;

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
        (status = 200, description = "Where each message went (merged or new), and its priority or due time as stored (`priority` or `due_ms`, with the server's clock `server_ms`)", body = Object),
        (status = 400, description = "Bad input; nothing was changed", body = ErrorBody),
        (status = 401, description = "The bearer token is missing or wrong", body = ErrorBody),
        (status = 403, description = "This server is read-only", body = ErrorBody),
        (status = 404, description = "No such topic", body = ErrorBody),
        (status = 409, description = "The state refuses it (in use, not waiting, another definition)", body = ErrorBody),
        (status = 503, description = "Redis is unreachable, or the bounded topic is full (one message; a batch reports per message)", body = ErrorBody),
    )
)]
pub(crate) async fn send(
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
            Ok(s) => {
                let mut v = json!({
                    "slot": s.slot, "merged": s.merged, "behind_in_flight": s.behind_in_flight,
                    "server_ms": s.server_ms,
                });
                if let Some(p) = s.priority {
                    v["priority"] = p.into();
                }
                if let Some(due) = s.due_ms {
                    v["due_ms"] = due.into();
                }
                v
            }
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
pub(crate) async fn lookup(
    State(st): St,
    Path((name, key)): Path<(String, String)>,
    Query(q): Query<Basis>,
) -> ApiResult<Json<LookupJson>> {
    let basis = q.slot_basis.map(String::into_bytes);
    lookup_key(&st, &name, key.into_bytes(), basis).await
}

pub(crate) async fn lookup_key(
    st: &AppState,
    name: &str,
    key: Vec<u8>,
    slot_basis: Option<Vec<u8>>,
) -> ApiResult<Json<LookupJson>> {
    let t = topic(st, name).await?;
    let basis = slot_basis.unwrap_or_else(|| key.clone());
    let l = t.get_in(&key, &basis).await?;
    Ok(Json(LookupJson::of(&l)))
}

pub(crate) fn cancel_json(key: &[u8], o: CancelOutcome) -> Value {
    let outcome = match o {
        CancelOutcome::Cancelled(_) => "cancelled",
        CancelOutcome::WillNotRetry { .. } => "will-not-retry",
        CancelOutcome::Dead => "dead",
        CancelOutcome::Absent => "absent",
    };
    with_key(
        json!({
            "cancelled": o.cancelled(), "state": o.state_before().name(), "outcome": outcome,
        }),
        key,
    )
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
pub(crate) async fn cancel_one(
    State(st): St,
    Path((name, key)): Path<(String, String)>,
    Query(q): Query<Basis>,
) -> ApiResult<Json<Value>> {
    let basis = q.slot_basis.map(String::into_bytes);
    cancel_key(&st, &name, key.into_bytes(), basis).await
}

pub(crate) async fn cancel_key(
    st: &AppState,
    name: &str,
    key: Vec<u8>,
    slot_basis: Option<Vec<u8>>,
) -> ApiResult<Json<Value>> {
    let t = topic(st, name).await?;
    let basis = slot_basis.unwrap_or_else(|| key.clone());
    let out = t.cancel_in(&[&key], &basis).await?;
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
pub(crate) async fn cancel_many(
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
        .map(|(k, o)| cancel_json(k.as_bytes(), o))
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
pub(crate) async fn reschedule(
    State(st): St,
    Path((name, key)): Path<(String, String)>,
    b: Result<Json<RescheduleBody>, JsonRejection>,
) -> ApiResult<Json<Value>> {
    reschedule_key(&st, &name, key.into_bytes(), body(b)?).await
}

pub(crate) async fn reschedule_key(
    st: &AppState,
    name: &str,
    key: Vec<u8>,
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
    let basis = r.slot_basis.map_or_else(|| key.clone(), String::into_bytes);
    let done = t.reschedule_in(&key, &basis, to).await?;
    let moved = match done.moved {
        rmq::Moved::Pending => "pending",
        rmq::Moved::RetryWaiting => "retry-waiting",
        rmq::Moved::Parked => "parked",
    };
    Ok(Json(with_key(
        json!({
            "rescheduled": true, "slot": done.slot, "moved": moved,
            "priority": done.priority, "due_ms": done.due_ms,
        }),
        &key,
    )))
}

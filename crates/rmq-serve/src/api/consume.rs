//! Consuming over HTTP: take due messages (long-polling), then settle each
//! by its receipt: ack, nack, dead, extend, or release (given back
//! untouched: a client that stops gives back what it has not started). The same two phases, leases,
//! retries and dead letters as the library, for a client in any language.
//!
//! A receipt is opaque text sealed with the prefix's receipt key (bound to
//! its topic and its delivery; a changed or guessed one is refused, 400,
//! and nothing is settled), so any server of the prefix settles it, after
//! a restart too. Each receipt answers on its own: a delivery whose lease
//! ran out (the message came back as a failed attempt) answers `stale`
//! and nothing changes.

#[allow(clippy::wildcard_imports)]
use super::*;
use crate::views::DeliveryJson;
use rmq::{Ending, Settled};

/// The longest a take waits for a first message (under the server's
/// 60 s idle timeout, with room to answer).
const MAX_WAIT_MS: u64 = 30_000;
/// The longest lease a take or an extension asks (a topic's own limit).
const MAX_LEASE_MS: u64 = rmq::limits::MAX_LEASE_MS;
/// Messages one take answers at most; receipts one settle takes at most.
const MAX_BATCH: usize = rmq::limits::MAX_TAKE;

/// What to take.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct TakeBody {
    /// How many messages at most (1..=1000; default 1).
    max: Option<usize>,
    /// How long to wait for a first message when none is due (0..=30000
    /// ms, and at most the server's `--max-take-wait`; default 0: answer
    /// at once).
    wait_ms: Option<u64>,
    /// The lease of each delivery (1..=86400000 ms; default the topic's):
    /// settle or extend before it runs out, or the message comes back as
    /// a failed attempt.
    lease_ms: Option<u64>,
    /// Serial mode: the consumer group to take in (with `member`).
    group: Option<String>,
    /// Serial mode: this client's member id in the group (1 to 100 of
    /// `A-Z a-z 0-9 _ . -`). The server keeps the member's slot leases
    /// while the client takes or settles; each delivery carries its
    /// `fence`.
    member: Option<String>,
    /// Serial mode: a member whose client neither takes nor settles for
    /// this long is gone; its slots go to the others (1000..=600000 ms;
    /// default 30000).
    member_timeout_ms: Option<u64>,
}

/// What a take answered.
#[derive(serde::Serialize, ToSchema)]
pub(crate) struct Taken {
    deliveries: Vec<DeliveryJson>,
}

#[utoipa::path(
    post,
    path = "/api/v1/topics/{topic}/take",
    tag = "consume",
    summary = "Take due messages (long-poll): each comes with a receipt to settle it by",
    description = "Answers as soon as one message is due, or after `wait_ms` with an empty list. \
                   Settle each delivery before its `lease_until_ms` with ack, nack or dead (or \
                   extend it); one not settled in time comes back as a failed attempt.",
    params(("topic" = String, Path, description = "Topic name", example = "p")),
    request_body = TakeBody,
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The deliveries taken (maybe none)", body = Taken),
        (status = 400, description = "Bad input; nothing was taken", body = ErrorBody),
        (status = 401, description = "The bearer token is missing or wrong", body = ErrorBody),
        (status = 403, description = "This server is read-only", body = ErrorBody),
        (status = 404, description = "No such topic", body = ErrorBody),
        (status = 503, description = "Redis is unreachable", body = ErrorBody),
    )
)]
pub(crate) async fn take(
    State(st): St,
    Path(name): Path<String>,
    b: Result<Json<TakeBody>, JsonRejection>,
) -> ApiResult<Json<Taken>> {
    let b = body(b)?;
    let max = b.max.unwrap_or(1);
    if !(1..=MAX_BATCH).contains(&max) {
        return Err(ApiError::bad_request(format!(
            "max must be 1..={MAX_BATCH} (got {max}); nothing was taken"
        )));
    }
    let wait_ms = b.wait_ms.unwrap_or(0);
    if wait_ms > MAX_WAIT_MS {
        return Err(ApiError::bad_request(format!(
            "wait_ms must be 0..={MAX_WAIT_MS} (got {wait_ms}); nothing was taken"
        )));
    }
    let t = topic(&st, &name).await?;
    let lease_ms = b.lease_ms.unwrap_or(t.spec().lease_ms);
    if !(1..=MAX_LEASE_MS).contains(&lease_ms) {
        return Err(ApiError::bad_request(format!(
            "lease_ms must be 1..={MAX_LEASE_MS} (got {lease_ms}); nothing was taken"
        )));
    }
    let key = st.takers.key(&st.client).await?;
    let wait = Duration::from_millis(wait_ms).min(st.options.max_take_wait);
    let lease = Duration::from_millis(lease_ms);
    let got = match (b.group, b.member) {
        (None, None) => {
            if b.member_timeout_ms.is_some() {
                return Err(ApiError::bad_request(
                    "member_timeout_ms goes with group and member; nothing was taken",
                ));
            }
            st.takers.of(&t).take(max, lease, wait).await?
        }
        (Some(group), Some(member)) => {
            let timeout_ms = b.member_timeout_ms.unwrap_or(30_000);
            if !(1_000..=600_000).contains(&timeout_ms) {
                return Err(ApiError::bad_request(format!(
                    "member_timeout_ms must be 1000..=600000 (got {timeout_ms}); nothing was taken"
                )));
            }
            let timeout = Duration::from_millis(timeout_ms);
            let serial = st.takers.member(&t, &group, &member, timeout)?;
            serial.take(max, lease, wait).await?
        }
        _ => {
            return Err(ApiError::bad_request(
                "serial mode needs both group and member; nothing was taken",
            ))
        }
    };
    let deliveries = got
        .into_iter()
        .map(|d| DeliveryJson::of(&name, key, d, lease_ms))
        .collect();
    Ok(Json(Taken { deliveries }))
}

/// Receipts to ack.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct AckBody {
    /// 1..=1000 receipts from take.
    receipts: Vec<String>,
}

/// Receipts to nack: each is retried after `retry_after_ms` (the topic's
/// backoff when absent), or dead after its last attempt.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NackBody {
    receipts: Vec<String>,
    /// The retry delay (ms, at most 100 years); absent: the topic's backoff.
    retry_after_ms: Option<u64>,
    /// Why it failed (kept with a dead letter).
    error: Option<String>,
}

/// Receipts to send straight to the dead letters.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct DeadBody {
    receipts: Vec<String>,
    /// Why it failed for good.
    error: Option<String>,
}

/// Receipts whose leases to extend.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ExtendBody {
    receipts: Vec<String>,
    /// The lease now ends this long from now (1..=86400000 ms).
    lease_ms: u64,
}

/// Receipts to give back untouched: each is due again at once, and its
/// attempt is not counted (a client that stops gives back what it took
/// but has not started).
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReleaseBody {
    /// 1..=1000 receipts from take.
    receipts: Vec<String>,
}

/// One answer per receipt, in order: `outcome` is `acked`, `retrying`,
/// `dead`, `extended`, `released`, `superseded` (a duplicate sent while it was in
/// flight took its place), `cancelled`, `stale` (not the current delivery
/// any more: its lease ran out, or it was settled already; nothing
/// changed), `fenced` (serial mode: the slot moved on; nothing changed)
/// or `unknown` (Redis failed; `error` says why, try again).
#[derive(serde::Serialize, ToSchema)]
pub(crate) struct Settlements {
    results: Vec<Value>,
}

fn outcome(ending: &Ending, r: rmq::Result<Settled>) -> Value {
    let word = ending.outcome_word(&r);
    match r {
        Err(e) if word == "unknown" => json!({
            "outcome": word,
            "error": { "kind": format!("{:?}", e.kind()), "message": e.to_string() },
        }),
        _ => json!({ "outcome": word }),
    }
}

async fn settle(
    st: &AppState,
    name: &str,
    receipts: Vec<String>,
    ending: Ending,
) -> ApiResult<Json<Settlements>> {
    if receipts.is_empty() || receipts.len() > MAX_BATCH {
        return Err(ApiError::bad_request(format!(
            "give 1..={MAX_BATCH} receipts (got {}); nothing was settled",
            receipts.len()
        )));
    }
    let t = topic(st, name).await?;
    let key = st.takers.key(&st.client).await?;
    let mut batch = Vec::with_capacity(receipts.len());
    for (i, r) in receipts.iter().enumerate() {
        let opened = key.open(name, r).map_err(|e| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "InvalidReceipt",
                format!("receipts[{i}]: {e}; nothing was settled"),
            )
        })?;
        if let Some(member) = opened.member() {
            st.takers.seen(name, member);
        }
        batch.push((opened, ending.clone()));
    }
    let results = t
        .settle_receipts(batch)
        .await
        .into_iter()
        .map(|r| outcome(&ending, r))
        .collect();
    Ok(Json(Settlements { results }))
}

fn lease_of(ms: u64) -> ApiResult<Duration> {
    if (1..=MAX_LEASE_MS).contains(&ms) {
        Ok(Duration::from_millis(ms))
    } else {
        Err(ApiError::bad_request(format!(
            "lease_ms must be 1..={MAX_LEASE_MS} (got {ms}); nothing was settled"
        )))
    }
}

#[utoipa::path(
    post, path = "/api/v1/topics/{topic}/ack", tag = "consume",
    summary = "Ack deliveries by receipt: the messages are done and gone",
    params(("topic" = String, Path, description = "Topic name", example = "p")),
    request_body = AckBody, security(("bearer" = [])),
    responses(
        (status = 200, description = "One outcome per receipt, in order", body = Settlements),
        (status = 400, description = "Bad input or a receipt not of this topic; nothing was settled", body = ErrorBody),
        (status = 401, description = "The bearer token is missing or wrong", body = ErrorBody),
        (status = 403, description = "This server is read-only", body = ErrorBody),
        (status = 404, description = "No such topic", body = ErrorBody),
        (status = 503, description = "Redis is unreachable", body = ErrorBody),
    )
)]
pub(crate) async fn ack(
    State(st): St,
    Path(name): Path<String>,
    b: Result<Json<AckBody>, JsonRejection>,
) -> ApiResult<Json<Settlements>> {
    let b = body(b)?;
    settle(&st, &name, b.receipts, Ending::Ack).await
}

#[utoipa::path(
    post, path = "/api/v1/topics/{topic}/nack", tag = "consume",
    summary = "Nack deliveries by receipt: retried after a delay (dead after the last attempt)",
    params(("topic" = String, Path, description = "Topic name", example = "p")),
    request_body = NackBody, security(("bearer" = [])),
    responses(
        (status = 200, description = "One outcome per receipt, in order", body = Settlements),
        (status = 400, description = "Bad input or a receipt not of this topic; nothing was settled", body = ErrorBody),
        (status = 401, description = "The bearer token is missing or wrong", body = ErrorBody),
        (status = 403, description = "This server is read-only", body = ErrorBody),
        (status = 404, description = "No such topic", body = ErrorBody),
        (status = 503, description = "Redis is unreachable", body = ErrorBody),
    )
)]
pub(crate) async fn nack(
    State(st): St,
    Path(name): Path<String>,
    b: Result<Json<NackBody>, JsonRejection>,
) -> ApiResult<Json<Settlements>> {
    let b = body(b)?;
    let ending = Ending::Nack {
        delay: b.retry_after_ms.map(Duration::from_millis),
        error: b.error.unwrap_or_else(|| "nacked over HTTP".into()),
    };
    settle(&st, &name, b.receipts, ending).await
}

#[utoipa::path(
    post, path = "/api/v1/topics/{topic}/dead", tag = "consume",
    summary = "Send deliveries by receipt straight to the dead letters",
    params(("topic" = String, Path, description = "Topic name", example = "p")),
    request_body = DeadBody, security(("bearer" = [])),
    responses(
        (status = 200, description = "One outcome per receipt, in order", body = Settlements),
        (status = 400, description = "Bad input or a receipt not of this topic; nothing was settled", body = ErrorBody),
        (status = 401, description = "The bearer token is missing or wrong", body = ErrorBody),
        (status = 403, description = "This server is read-only", body = ErrorBody),
        (status = 404, description = "No such topic", body = ErrorBody),
        (status = 503, description = "Redis is unreachable", body = ErrorBody),
    )
)]
pub(crate) async fn dead_by_receipt(
    State(st): St,
    Path(name): Path<String>,
    b: Result<Json<DeadBody>, JsonRejection>,
) -> ApiResult<Json<Settlements>> {
    let b = body(b)?;
    let ending = Ending::Dead {
        error: b
            .error
            .unwrap_or_else(|| "sent to the dead letters over HTTP".into()),
    };
    settle(&st, &name, b.receipts, ending).await
}

#[utoipa::path(
    post, path = "/api/v1/topics/{topic}/extend", tag = "consume",
    summary = "Extend deliveries' leases by receipt",
    params(("topic" = String, Path, description = "Topic name", example = "p")),
    request_body = ExtendBody, security(("bearer" = [])),
    responses(
        (status = 200, description = "One outcome per receipt, in order", body = Settlements),
        (status = 400, description = "Bad input or a receipt not of this topic; nothing was settled", body = ErrorBody),
        (status = 401, description = "The bearer token is missing or wrong", body = ErrorBody),
        (status = 403, description = "This server is read-only", body = ErrorBody),
        (status = 404, description = "No such topic", body = ErrorBody),
        (status = 503, description = "Redis is unreachable", body = ErrorBody),
    )
)]
pub(crate) async fn extend(
    State(st): St,
    Path(name): Path<String>,
    b: Result<Json<ExtendBody>, JsonRejection>,
) -> ApiResult<Json<Settlements>> {
    let b = body(b)?;
    let lease = lease_of(b.lease_ms)?;
    settle(&st, &name, b.receipts, Ending::Extend(lease)).await
}

#[utoipa::path(
    post, path = "/api/v1/topics/{topic}/release", tag = "consume",
    summary = "Give deliveries back untouched by receipt: due again at once, no attempt counted",
    params(("topic" = String, Path, description = "Topic name", example = "p")),
    request_body = ReleaseBody, security(("bearer" = [])),
    responses(
        (status = 200, description = "One outcome per receipt, in order", body = Settlements),
        (status = 400, description = "Bad input or a receipt not of this topic; nothing was settled", body = ErrorBody),
        (status = 401, description = "The bearer token is missing or wrong", body = ErrorBody),
        (status = 403, description = "This server is read-only", body = ErrorBody),
        (status = 404, description = "No such topic", body = ErrorBody),
        (status = 503, description = "Redis is unreachable", body = ErrorBody),
    )
)]
pub(crate) async fn release(
    State(st): St,
    Path(name): Path<String>,
    b: Result<Json<ReleaseBody>, JsonRejection>,
) -> ApiResult<Json<Settlements>> {
    let b = body(b)?;
    settle(&st, &name, b.receipts, Ending::Release).await
}

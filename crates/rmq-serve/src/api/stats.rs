//! A topic's stats: totals, and per slot by the page (a 65,536-slot topic
//! whole was one 14 MB answer). A large topic's reading is shared with the
//! server's other readers (`slot_readings`).

#[allow(clippy::wildcard_imports)]
use super::*;

/// A topic's stats, serialized straight from the reading (no JSON tree
/// of 65,536 slots in between); per slot, one page of slots.
#[derive(serde::Serialize)]
struct StatsBody {
    total: rmq::Stats,
    server_ms: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    slots: Option<Vec<rmq::Stats>>,
    /// The first slot of the page.
    #[serde(skip_serializing_if = "Option::is_none")]
    slot_offset: Option<usize>,
    /// Where the next page begins, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    next_slot_offset: Option<usize>,
}

/// The most slots in one page of `/stats?slots=true` or `/groups` (a
/// 65,536-slot topic whole was one 14 MB answer).
const MAX_SLOT_PAGE: usize = 4_096;

/// The page asked for: its first slot and its length (at most 4,096).
pub(super) fn page_of(offset: Option<usize>, limit: Option<usize>) -> (usize, usize) {
    let limit = limit.unwrap_or(MAX_SLOT_PAGE).min(MAX_SLOT_PAGE);
    (offset.unwrap_or(0), limit)
}

/// A page within `len` slots: its first slot, the end, and where the next
/// page begins when there is one.
pub(super) fn bounds((offset, limit): (usize, usize), len: usize) -> (usize, usize, Option<usize>) {
    let from = offset.min(len);
    let to = from.saturating_add(limit).min(len);
    (from, to, (to < len).then_some(to))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct SlotsQuery {
    /// Include one page of per-slot stats (index = slot, from `slot_offset`).
    #[serde(default)]
    slots: bool,
    /// The first slot of the page (default 0).
    slot_offset: Option<usize>,
    /// Slots in the page (default and most 4,096); `next_slot_offset` in
    /// the answer says where the next page begins.
    slot_limit: Option<usize>,
}

#[utoipa::path(
    get,
    path = "/api/v1/topics/{topic}/stats",
    tag = "topics",
    summary = "Depth per state and counters, in total and optionally per slot (by page of up to 4,096 slots)",
    params(("topic" = String, Path, description = "Topic name", example = "p"), SlotsQuery),
    responses(
        (status = 200, description = "Stats", body = Object),
        (status = 400, description = "Bad input; nothing was changed", body = ErrorBody),
        (status = 429, description = "Too many expensive readings under way: retry after `Retry-After` seconds", body = ErrorBody),
        (status = 404, description = "No such topic", body = ErrorBody),
        (status = 503, description = "Redis is unreachable", body = ErrorBody),
    )
)]
pub(crate) async fn stats(
    State(st): St,
    Path(name): Path<String>,
    Query(q): Query<SlotsQuery>,
) -> ApiResult<JsonBody> {
    let page = q.slots.then(|| page_of(q.slot_offset, q.slot_limit));
    st.reads
        .run(flight(&("stats", &name, page)), || async {
            let t = topic(&st, &name).await?;
            let s = st
                .slot_readings
                .read(&t, st.options.large_topic_reuse)
                .await?;
            let (slots, slot_offset, next_slot_offset) = match page {
                None => (None, None, None),
                Some(page) => {
                    let (from, to, next) = bounds(page, s.slots.len());
                    (Some(s.slots[from..to].to_vec()), Some(from), next)
                }
            };
            Ok(StatsBody {
                total: s.total,
                server_ms: s.server_ms,
                slots,
                slot_offset,
                next_slot_offset,
            })
        })
        .await
}

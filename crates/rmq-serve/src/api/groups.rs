//! A topic's serial groups: their members with heartbeat deadlines, and
//! each slot's lease (owner, epoch) by the page of slots, from the topic's
//! shared reading (`slot_readings`): a 65,536-slot topic's every lease was
//! one answer of several MB, read anew for each request.

use super::stats::{bounds, page_of};
#[allow(clippy::wildcard_imports)]
use super::*;

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct SlotPage {
    /// The first slot of the page of leases (default 0).
    slot_offset: Option<usize>,
    /// Slots in the page (default and most 4,096); `next_slot_offset` in
    /// the answer says where the next page begins.
    slot_limit: Option<usize>,
}

#[derive(serde::Serialize)]
struct GroupsBody {
    groups: Vec<GroupBody>,
    /// The page's leases (index = slot - slot_offset).
    leases: Vec<rmq::SlotLease>,
    slot_offset: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    next_slot_offset: Option<usize>,
    /// Slots of the whole topic whose lease nobody holds.
    unowned_slots: usize,
    /// Consumer processes listening to the topic.
    consumers: u64,
    server_ms: i64,
}

#[derive(serde::Serialize)]
struct GroupBody {
    name: String,
    members: Vec<MemberBody>,
}

#[derive(serde::Serialize)]
struct MemberBody {
    id: String,
    deadline_ms: i64,
    alive: bool,
    /// Slots whose lease it holds, in the whole topic.
    slots_owned: usize,
    /// Those of them within the page.
    slots: Vec<u32>,
}

#[utoipa::path(
    get,
    path = "/api/v1/topics/{topic}/groups",
    tag = "serial groups",
    summary = "Serial groups: members, heartbeat deadlines, slot owners and epochs (leases by the page of up to 4,096 slots)",
    params(("topic" = String, Path, description = "Topic name", example = "p"), SlotPage),
    responses(
        (status = 200, description = "The groups and a page of the slots' leases", body = Object),
        (status = 400, description = "Bad input; nothing was changed", body = ErrorBody),
        (status = 429, description = "Too many expensive readings under way: retry after `Retry-After` seconds", body = ErrorBody),
        (status = 404, description = "No such topic", body = ErrorBody),
        (status = 503, description = "Redis is unreachable", body = ErrorBody),
    )
)]
pub(crate) async fn groups(
    State(st): St,
    Path(name): Path<String>,
    Query(q): Query<SlotPage>,
) -> ApiResult<JsonBody> {
    let page = page_of(q.slot_offset, q.slot_limit);
    st.reads
        .run(flight(&("groups", &name, page)), || async {
            let t = topic(&st, &name).await?;
            let stats = st
                .slot_readings
                .read(&t, st.options.large_topic_reuse)
                .await?;
            let names = st.client.serial_group_names().await?;
            let mine = names.get(&name).map_or(&[][..], Vec::as_slice);
            let view = t.serial_groups_with(&stats, mine).await?;
            let (from, to, next) = bounds(page, view.leases.len());
            let in_page = |s: &u32| (from..to).contains(&(*s as usize));
            Ok(GroupsBody {
                groups: view
                    .groups
                    .into_iter()
                    .map(|g| GroupBody {
                        name: g.name,
                        members: g
                            .members
                            .into_iter()
                            .map(|m| MemberBody {
                                slots_owned: m.slots.len(),
                                slots: m.slots.into_iter().filter(in_page).collect(),
                                id: m.id,
                                deadline_ms: m.deadline_ms,
                                alive: m.alive,
                            })
                            .collect(),
                    })
                    .collect(),
                unowned_slots: view.leases.iter().filter(|l| l.owner.is_none()).count(),
                leases: view.leases[from..to].to_vec(),
                slot_offset: from,
                next_slot_offset: next,
                consumers: t.consumers().await?,
                server_ms: view.server_ms,
            })
        })
        .await
}

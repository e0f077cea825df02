//! The OpenAPI 3 document of the API, generated from the handlers'
//! annotations (utoipa) and served at `/api/v1/openapi.json`: a client in
//! any language can be generated from it, and the tests fuzz the server
//! against it (schemathesis).

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use crate::{api, error, panels};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "rmq",
        description = "A live rmq queue: topics, messages by key, dead letters, serial groups, consuming by receipt. \
                       A key or payload that is not UTF-8 comes as base64 in `key_base64` / \
                       `payload_base64` instead of `key` / `payload`. \
                       Reads are open; actions need `Authorization: Bearer <token>` when the \
                       server has a token, and are refused (403) in read-only mode. Errors \
                       are `{\"error\": {\"kind\", \"message\"}}`."
    ),
    paths(
        api::list_topics, api::create_topic, api::show_topic, api::update_topic,
        api::delete_topic, api::pause, api::resume, api::stats, api::peek, api::send,
        api::lookup, api::cancel_one, api::lookup_q, api::cancel_one_q, api::cancel_many,
        api::reschedule, api::reschedule_q, api::dead_list,
        api::dead_requeue, api::dead_purge, api::groups,
        api::take, api::ack, api::nack, api::dead_by_receipt, api::extend, api::release,
        panels::server, panels::overview, panels::history, panels::slots,
    ),
    components(schemas(error::ErrorBody, error::ErrorDetail)),
    modifiers(&Bearer),
    tags(
        (name = "topics", description = "Define, inspect, pause and delete topics"),
        (name = "messages", description = "Send; look up, cancel and reschedule by key"),
        (name = "dead letters", description = "List, requeue and purge dead letters"),
        (name = "serial groups", description = "Who serves a topic in serial mode"),
        (name = "consume", description = "Take due messages, then ack, nack, dead, extend or release them by receipt"),
        (name = "dashboard", description = "What the web dashboard reads"),
    )
)]
pub(crate) struct ApiDoc;

/// The bearer token scheme that actions name.
struct Bearer;

impl Modify for Bearer {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// `GET /api/v1/openapi.json`.
pub(crate) async fn document() -> axum::Json<utoipa::openapi::OpenApi> {
    axum::Json(ApiDoc::openapi())
}

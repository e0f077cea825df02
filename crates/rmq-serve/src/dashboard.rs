//! The dashboard's files, embedded in the binary at build time: one page,
//! one script, one style sheet, no framework and no build step. Nothing is
//! fetched from anywhere else; the page only calls this server's API.
//!
//! The script renders every key, payload and error with `textContent`
//! (never as HTML), and a Content-Security-Policy that allows only this
//! server's own script keeps an injected `<script>` inert even if a bug
//! let one through.

use std::sync::Arc;

use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

use crate::AppState;

const INDEX: &str = include_str!("../assets/index.html");
const SCRIPT: &str = include_str!("../assets/app.js");
const STYLE: &str = include_str!("../assets/app.css");

/// Only this server's own files; no inline script, no other origin.
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
                   img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; \
                   base-uri 'none'; form-action 'none'";

pub(crate) fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/", get(|| file("text/html; charset=utf-8", INDEX)))
        .route(
            "/assets/app.js",
            get(|| file("text/javascript; charset=utf-8", SCRIPT)),
        )
        .route(
            "/assets/app.css",
            get(|| file("text/css; charset=utf-8", STYLE)),
        )
}

async fn file(content_type: &'static str, body: &'static str) -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CONTENT_SECURITY_POLICY, CSP),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
}

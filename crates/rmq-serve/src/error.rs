//! The API's one error shape, `{"error": {"kind": "...", "message": "..."}}`,
//! and the status code of each error kind: the caller's mistakes are 4xx
//! (nothing was changed), the server's or Redis' troubles 5xx.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use rmq::ErrorKind;
use serde_json::json;

/// An error answered to the client.
#[derive(Debug, Clone)]
pub(crate) struct ApiError {
    status: StatusCode,
    kind: String,
    message: String,
    /// Seconds after which a retry may succeed (`Retry-After`).
    retry_after: Option<u32>,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, kind: &str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            kind: kind.to_string(),
            message: message.into(),
            retry_after: None,
        }
    }

    /// Too many expensive readings under way (429, retry in a second).
    pub(crate) fn too_busy(max: usize) -> Self {
        ApiError {
            retry_after: Some(1),
            ..ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "TooBusy",
                format!(
                    "{max} expensive readings are under way, the most this server runs at once: \
                     retry in a second"
                ),
            )
        }
    }

    /// A request the API cannot read (bad JSON, a missing field).
    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, "InvalidArgument", message)
    }
}

/// The status code of a library error kind.
pub(crate) fn status_of(kind: ErrorKind) -> StatusCode {
    match kind {
        ErrorKind::InvalidName
        | ErrorKind::InvalidSlotCount
        | ErrorKind::InvalidArgument
        | ErrorKind::PayloadTooLarge
        | ErrorKind::PastDue
        | ErrorKind::InvalidReceipt => StatusCode::BAD_REQUEST,
        ErrorKind::UnknownTopic => StatusCode::NOT_FOUND,
        ErrorKind::TopicConflict | ErrorKind::TopicInUse | ErrorKind::NotWaiting => {
            StatusCode::CONFLICT
        }
        // Retryable: Redis away, a replica slow, a bounded topic full.
        ErrorKind::Connection | ErrorKind::NotReplicated | ErrorKind::Full => {
            StatusCode::SERVICE_UNAVAILABLE
        }
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl From<rmq::Error> for ApiError {
    fn from(e: rmq::Error) -> Self {
        ApiError {
            status: status_of(e.kind()),
            kind: format!("{:?}", e.kind()),
            message: e.to_string(),
            retry_after: None,
        }
    }
}

/// Turns the framework's own refusals (a query string or path it cannot
/// read, a body too large, a method not allowed, a wrong content type:
/// plain text) into the API's error shape, so that every 4xx and 5xx of
/// the API is JSON.
pub(crate) async fn as_error_shape(r: Response) -> Response {
    let status = r.status();
    let is_json = r
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return r;
    }
    let kind = match status {
        StatusCode::NOT_FOUND => "NotFound",
        StatusCode::METHOD_NOT_ALLOWED => "MethodNotAllowed",
        StatusCode::PAYLOAD_TOO_LARGE => "PayloadTooLarge",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "UnsupportedMediaType",
        s if s.is_server_error() => "Internal",
        _ => "InvalidArgument",
    };
    let (parts, body) = r.into_parts();
    let text = axum::body::to_bytes(body, 64 * 1024)
        .await
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    let message = match text.trim() {
        "" => status.canonical_reason().unwrap_or("error").to_string(),
        t => t.to_string(),
    };
    let mut out = ApiError::new(status, kind, message).into_response();
    // Keep what the refusal said besides its body (e.g. `Allow`).
    for (name, value) in parts.headers.iter() {
        if name != axum::http::header::CONTENT_TYPE && name != axum::http::header::CONTENT_LENGTH {
            out.headers_mut().insert(name.clone(), value.clone());
        }
    }
    out
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({ "error": { "kind": self.kind, "message": self.message } });
        let mut r = (self.status, Json(body)).into_response();
        if let Some(s) = self.retry_after {
            r.headers_mut()
                .insert(axum::http::header::RETRY_AFTER, s.into());
        }
        r
    }
}

pub(crate) type ApiResult<T> = Result<T, ApiError>;

/// The error shape, as the OpenAPI document describes it.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub(crate) struct ErrorBody {
    error: ErrorDetail,
}

/// An error's kind (the library's `ErrorKind`, or `InvalidArgument`,
/// `Unauthorized`, `ReadOnly`, `NotFound`) and a message for people.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub(crate) struct ErrorDetail {
    kind: String,
    message: String,
}

//! The API's one error shape, `{"error": {"kind": "...", "message": "..."}}`,
//! and the status code of each error kind: the caller's mistakes are 4xx
//! (nothing was changed), the server's or Redis' troubles 5xx.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use rmq::ErrorKind;
use serde_json::json;

/// An error answered to the client.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    kind: String,
    message: String,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, kind: &str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            kind: kind.to_string(),
            message: message.into(),
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
        | ErrorKind::PastDue => StatusCode::BAD_REQUEST,
        ErrorKind::UnknownTopic => StatusCode::NOT_FOUND,
        ErrorKind::TopicConflict | ErrorKind::TopicInUse | ErrorKind::NotWaiting => {
            StatusCode::CONFLICT
        }
        ErrorKind::Connection | ErrorKind::NotReplicated => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl From<rmq::Error> for ApiError {
    fn from(e: rmq::Error) -> Self {
        ApiError {
            status: status_of(e.kind()),
            kind: format!("{:?}", e.kind()),
            message: e.to_string(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({ "error": { "kind": self.kind, "message": self.message } });
        (self.status, Json(body)).into_response()
    }
}

pub(crate) type ApiResult<T> = Result<T, ApiError>;

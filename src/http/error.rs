//! API errors: a status and a JSON body `{"code", "message"}`. Client mistakes say what is
//! wrong; server trouble is logged and answered with a generic message, never database text.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::error::{shorten, Error};

/// An error answer: the JSON body `{"code", "message"}`, with the status as the HTTP status
/// (the schema `Error` of the OpenAPI document).
#[derive(Debug, utoipa::ToSchema)]
#[schema(as = Error)]
pub struct ApiError {
    /// HTTP status.
    #[schema(ignore)]
    pub status: StatusCode,
    /// Stable machine-readable code: bad_request, invalid_argument, invalid_type_name,
    /// priority_out_of_range, invalid_pipeline (400); unauthorized (401); not_found, unknown_task,
    /// unknown_task_type, unknown_pipeline, unknown_run (404); request_timeout (408); stale_fencing_token, wrong_state (409); payload_too_large, context_too_large (413); internal (500);
    /// unavailable (503).
    #[schema(value_type = String, example = "unknown_task_type")]
    pub code: &'static str,
    /// Human-readable explanation; never database text.
    #[schema(example = "unknown task type \"video\"")]
    pub message: String,
}

impl ApiError {
    /// 400 with a message naming the problem.
    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError { status: StatusCode::BAD_REQUEST, code: "bad_request", message: message.into() }
    }

    /// 404.
    pub fn not_found(message: impl Into<String>) -> Self {
        ApiError { status: StatusCode::NOT_FOUND, code: "not_found", message: message.into() }
    }

    /// 401.
    pub fn unauthorized() -> Self {
        ApiError {
            status: StatusCode::UNAUTHORIZED,
            code: "unauthorized",
            message: "a valid bearer token is required".into(),
        }
    }

    /// 403: a browser's request from another site to a server without tokens.
    pub fn cross_site() -> Self {
        ApiError {
            status: StatusCode::FORBIDDEN,
            code: "cross_site_request",
            message: "a request from another site is refused: this server has no bearer token (--token), so only \
                      its own pages and clients that are not browsers may call it"
                .into(),
        }
    }

    /// 409: the fencing token no longer matches.
    pub fn stale(message: impl Into<String>) -> Self {
        ApiError { status: StatusCode::CONFLICT, code: "stale_fencing_token", message: message.into() }
    }

    /// 408: the request body did not arrive in time.
    pub fn timeout(message: impl Into<String>) -> Self {
        ApiError { status: StatusCode::REQUEST_TIMEOUT, code: "request_timeout", message: message.into() }
    }

    /// 413.
    pub fn too_large(message: impl Into<String>) -> Self {
        ApiError { status: StatusCode::PAYLOAD_TOO_LARGE, code: "payload_too_large", message: message.into() }
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        let (status, code) = match (&e, e.wire()) {
            (_, Some((status, code))) => (StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST), code),
            (Error::Pool(_), None) => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
            // the connection went away under the request: a client may try again (503), where a
            // 500 reads as final
            (Error::Database(db), None) if crate::db::connection_failed(db) => {
                (StatusCode::SERVICE_UNAVAILABLE, "unavailable")
            }
            _ => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        };
        let message = if status.is_server_error() {
            tracing::error!(error = %e, "request failed");
            "the server could not complete the request; see its log".to_string()
        } else {
            e.to_string()
        };
        ApiError { status, code, message }
    }
}

impl IntoResponse for ApiError {
    /// The message is cut when long ([`shorten`]): one built from text we do not write (serde's,
    /// axum's rejections) may repeat a client's value of any size.
    fn into_response(self) -> Response {
        let message = shorten(&self.message);
        (self.status, axum::Json(json!({"code": self.code, "message": message}))).into_response()
    }
}

/// Handler result.
pub type ApiResult<T> = Result<T, ApiError>;

//! Request spans: with traces exported ([`crate::trace`]), every request runs in a span that
//! continues the trace of its `traceparent` header (a new trace without one), so that the tasks
//! it creates carry the request's context. With export off, nothing but one check.

use axum::extract::Request;
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::{ApiError, ApiResult};

pub(super) async fn request_span(request: Request, next: Next) -> Response {
    if !crate::trace::enabled() {
        return next.run(request).await;
    }
    let header = request.headers().get("traceparent").and_then(|v| v.to_str().ok());
    let span = tracing::info_span!("asyncflow.request", otel.kind = "server",
        http.request.method = %request.method(), url.path = %request.uri().path());
    // a span the filter disabled has no context to continue: the request then goes untraced
    let _ = span.set_parent(crate::trace::remote_parent(header));
    next.run(request).instrument(span).await
}

pub(super) const TRACEPARENT_HEADER: &str =
    "The W3C trace context of the enqueue, for the tasks whose body gives none \
    (00-<32 hex>-<16 hex>-<2 hex>); a malformed one is refused (400)";

/// The trace context of the tasks a request creates without their own: with traces exported,
/// the request's span (which continues the `traceparent` header); else the header, if any. Its
/// format is checked where the task is created (`create_task` refuses a malformed one, and
/// nothing is created), so a malformed header is passed on as it is, to be refused.
pub(super) fn traceparent(headers: &HeaderMap) -> ApiResult<Option<String>> {
    let header = headers
        .get("traceparent")
        .map(|v| v.to_str().map(str::to_string).map_err(|_| ApiError::bad_request("traceparent must be visible ASCII")))
        .transpose()?;
    if header.as_deref().is_none_or(crate::trace::is_traceparent) {
        if let Some(span) = crate::trace::current_traceparent() {
            return Ok(Some(span));
        }
    }
    Ok(header)
}

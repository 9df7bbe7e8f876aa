//! Request spans: with traces exported ([`crate::trace`]), every request runs in a span that
//! continues the trace of its `traceparent` header (a new trace without one), so that the tasks
//! it creates carry the request's context. With export off, nothing but one check.

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;

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

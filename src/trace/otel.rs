//! The OpenTelemetry side of [`crate::trace`] (feature `otel`): the OTLP exporter and the spans.

use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::SystemTime;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{
    Span as _, SpanContext, SpanKind, Status, TraceContextExt, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider, Span};

use super::is_traceparent;
use crate::error::{Error, Result};
use crate::task::{ClaimedTask, ReportKind};

/// The service name when `OTEL_SERVICE_NAME` is unset.
pub const SERVICE_NAME_DEFAULT: &str = "asyncflow";

/// Where spans go; no endpoint, no export.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct TraceConfig {
    /// Export OpenTelemetry traces over OTLP/HTTP (JSON) to this base URL (spans are POSTed to
    /// <url>/v1/traces). Unset: no traces.
    #[cfg_attr(feature = "cli", arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT", global = true))]
    pub otlp_endpoint: Option<String>,
    /// The `service.name` of the exported spans.
    #[cfg_attr(feature = "cli", arg(long, env = "OTEL_SERVICE_NAME", default_value = SERVICE_NAME_DEFAULT, global = true))]
    pub otel_service_name: String,
}

/// The tracer, once export is on.
static TRACER: OnceLock<SdkTracer> = OnceLock::new();

/// Whether spans are exported.
pub fn enabled() -> bool {
    TRACER.get().is_some()
}

/// Flushes and stops the exporter when dropped (at the end of `main`).
pub struct Exporter(SdkTracerProvider);

impl Drop for Exporter {
    fn drop(&mut self) {
        if let Err(e) = self.0.shutdown() {
            eprintln!("asyncflow: traces not all exported at exit: {e}");
        }
    }
}

/// Starts the exporter when an endpoint is configured; the tracer for the `tracing` bridge.
pub fn start(config: &TraceConfig) -> Result<Option<(Exporter, SdkTracer)>> {
    let Some(endpoint) = config.otlp_endpoint.as_deref().map(str::trim).filter(|e| !e.is_empty()) else {
        return Ok(None);
    };
    let url = url::Url::parse(endpoint)
        .ok()
        .filter(|u| matches!(u.scheme(), "http" | "https"))
        .ok_or_else(|| Error::InvalidArgument(format!("--otlp-endpoint must be an http(s) URL, got {endpoint:?}")))?;
    use opentelemetry_otlp::WithExportConfig as _;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpJson)
        .with_endpoint(format!("{}/v1/traces", url.as_str().trim_end_matches('/')))
        .build()
        .map_err(|e| Error::InvalidArgument(format!("the OTLP exporter cannot start: {e}")))?;
    let resource = opentelemetry_sdk::Resource::builder().with_service_name(config.otel_service_name.clone()).build();
    let provider = SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource).build();
    let tracer = provider.tracer("asyncflow");
    // set once, by main; a second start (tests in one process) keeps the first tracer
    let _ = TRACER.set(tracer.clone());
    Ok(Some((Exporter(provider), tracer)))
}

/// The context a stored traceparent names (an empty one for None or a malformed value: the
/// spans then start a trace of their own).
fn parent(traceparent: Option<&str>) -> Context {
    match traceparent.filter(|t| is_traceparent(t)) {
        Some(t) => {
            let carrier = HashMap::from([("traceparent".to_string(), t.to_string())]);
            TraceContextPropagator::new().extract(&carrier)
        }
        None => Context::new(),
    }
}

/// A span context as a traceparent.
fn traceparent_of(context: &SpanContext) -> String {
    format!("00-{}-{}-{:02x}", context.trace_id(), context.span_id(), context.trace_flags().to_u8())
}

fn child_of(span: &Span) -> Context {
    Context::new().with_remote_span_context(span.span_context().clone())
}

/// The spans of one stage call, made only when export is on (see [`CallSpans::start`]).
pub struct CallSpans {
    tracer: SdkTracer,
    stage: Span,
    attributes: Vec<KeyValue>,
}

impl CallSpans {
    /// For a task handed to an executor: its claim span (already ended) and its stage span
    /// (started). None when export is off.
    pub fn start(task: &ClaimedTask) -> Option<CallSpans> {
        let tracer = TRACER.get()?.clone();
        let attributes = vec![
            KeyValue::new("asyncflow.task_id", task.task_id.to_string()),
            KeyValue::new("asyncflow.task_type", task.task_type.clone()),
            KeyValue::new("asyncflow.stage", task.stage.clone()),
            KeyValue::new("asyncflow.attempt", i64::from(task.attempt)),
        ];
        let now = SystemTime::now();
        let claimed = SystemTime::from(task.claimed_at).min(now);
        let mut claim = tracer
            .span_builder("asyncflow.claim")
            .with_kind(SpanKind::Consumer)
            .with_start_time(claimed)
            .with_attributes(attributes.clone())
            .start_with_context(&tracer, &parent(task.traceparent.as_deref()));
        claim.end_with_timestamp(now);
        let stage = tracer
            .span_builder(format!("asyncflow.stage {}", task.stage))
            .with_kind(SpanKind::Internal)
            .with_start_time(now)
            .with_attributes(attributes.clone())
            .start_with_context(&tracer, &child_of(&claim));
        Some(CallSpans { tracer, stage, attributes })
    }

    /// The traceparent the function gets: the stage span's.
    pub fn traceparent(&self) -> String {
        traceparent_of(self.stage.span_context())
    }

    /// Ends the stage span with the call's outcome (`None`: the call was abandoned) and starts
    /// the report span.
    pub fn called(mut self, reply: Option<&ReportKind>) -> ReportSpan {
        let outcome = match reply {
            Some(kind) => outcome(kind),
            None => "abandoned",
        };
        self.stage.set_attribute(KeyValue::new("asyncflow.outcome", outcome));
        if let Some(ReportKind::Fail { error, .. }) = reply {
            self.stage.set_status(Status::error(crate::error::shorten(error)));
        }
        self.stage.end();
        let mut attributes = self.attributes;
        attributes.push(KeyValue::new("asyncflow.outcome", outcome));
        let span = self
            .tracer
            .span_builder("asyncflow.report")
            .with_kind(SpanKind::Producer)
            .with_attributes(attributes)
            .start_with_context(&self.tracer, &child_of(&self.stage));
        ReportSpan(span)
    }
}

/// The span of a reply's report; ends when dropped.
pub struct ReportSpan(Span);

impl ReportSpan {
    /// What became of the report: `accepted`, `refused`, `held` (the reply went to the open
    /// hold, whose commit writes it), `dropped` (the hold failed).
    pub fn written(mut self, how: &'static str) {
        self.0.set_attribute(KeyValue::new("asyncflow.report", how));
    }
}

impl Drop for ReportSpan {
    fn drop(&mut self) {
        self.0.end();
    }
}

/// The report outcome's name, as the schedule log writes it.
fn outcome(kind: &ReportKind) -> &'static str {
    match kind {
        ReportKind::Advance { .. } => "advance",
        ReportKind::Succeed { .. } => "succeed",
        ReportKind::Fail { .. } => "fail",
        ReportKind::Later { .. } => "later",
        ReportKind::Wait { .. } => "wait",
        ReportKind::Spawn { .. } => "spawn",
        ReportKind::Release => "release",
        ReportKind::Heartbeat => "heartbeat",
    }
}

/// The context of a request's `traceparent` header, for serve's request span.
pub fn remote_parent(traceparent: Option<&str>) -> Context {
    parent(traceparent)
}

/// The traceparent of the current `tracing` span, when it is exported.
pub fn current_traceparent() -> Option<String> {
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    enabled().then_some(())?;
    let context = tracing::Span::current().context();
    let span = context.span();
    let span_context = span.span_context();
    span_context.is_valid().then(|| traceparent_of(span_context))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_span_context_reads_back_as_the_traceparent_it_came_from() {
        let text = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let context = parent(Some(text));
        assert_eq!(traceparent_of(context.span().span_context()), text);
        assert!(!parent(Some("junk")).span().span_context().is_valid());
    }
}

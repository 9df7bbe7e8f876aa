//! [`crate::trace`] without the `otel` feature: nothing is exported, so no span is ever started.
//! The same names as with the feature; the span types are empty enums, never made.

use crate::task::{ClaimedTask, ReportKind};

/// Whether spans are exported: never, without the `otel` feature.
pub fn enabled() -> bool {
    false
}

/// The spans of one stage call: none without the `otel` feature.
pub enum CallSpans {}

impl CallSpans {
    /// None: nothing is exported.
    pub fn start(_task: &ClaimedTask) -> Option<CallSpans> {
        None
    }

    /// Not reached: no [`CallSpans`] exists.
    pub fn traceparent(&self) -> String {
        match *self {}
    }

    /// Not reached: no [`CallSpans`] exists.
    pub fn called(self, _reply: Option<&ReportKind>) -> ReportSpan {
        match self {}
    }
}

/// The span of a reply's report: none without the `otel` feature.
pub enum ReportSpan {}

impl ReportSpan {
    /// Not reached: no [`ReportSpan`] exists.
    pub fn written(self, _how: &'static str) {
        match self {}
    }
}

/// The traceparent of the current `tracing` span: none, nothing is exported.
pub fn current_traceparent() -> Option<String> {
    None
}

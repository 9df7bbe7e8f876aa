//! Traces: OpenTelemetry spans exported over OTLP/HTTP (JSON bodies), off unless an endpoint is
//! configured (`TraceConfig`, read once at start-up), and only with the `otel` feature: without
//! it nothing is exported, and a task's traceparent still reaches its functions as it is.
//!
//! A task carries the W3C `traceparent` of its enqueue. A worker that exports continues that
//! trace for every stage it runs, in three spans:
//!
//! ```text
//!   enqueue's span (the application's, or serve's request)
//!     └── asyncflow.claim     from the claim in the database to the call's start
//!           └── asyncflow.stage   the stage call; its context is what the function gets
//!                 └── asyncflow.report  writing the reply (a held claim's reply: handed to the hold)
//! ```
//!
//! The function joins the trace through the `traceparent` it is given (`TRACEPARENT` for
//! executables, a header for HTTP functions, a field of the call line for warm instances and of
//! [`crate::function::StageCall`] for Rust handlers): the stage span's context when exporting,
//! else the task's stored traceparent as it is. With export off nothing here runs on the claim and
//! report path but one check of [`enabled`].
//!
//! The `tracing` spans of the process (serve's requests) go to the same exporter through
//! `tracing-opentelemetry`.

#[cfg(feature = "otel")]
mod otel;
#[cfg(feature = "otel")]
pub use otel::*;

#[cfg(not(feature = "otel"))]
mod off;
#[cfg(not(feature = "otel"))]
pub use off::*;

/// Whether `text` is a W3C traceparent as `create_task` takes it: version 00, 32 and 16 lowercase
/// hex digits, neither all zeros, 2 hex digits of flags.
pub fn is_traceparent(text: &str) -> bool {
    let b = text.as_bytes();
    let hex = |r: std::ops::Range<usize>| b[r].iter().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c));
    let zeros = |r: std::ops::Range<usize>| b[r].iter().all(|c| *c == b'0');
    b.len() == 55
        && b.starts_with(b"00-")
        && b[35] == b'-'
        && b[52] == b'-'
        && hex(3..35)
        && !zeros(3..35)
        && hex(36..52)
        && !zeros(36..52)
        && hex(53..55)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_is_checked_as_the_database_checks_it() {
        assert!(is_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));
        assert!(!is_traceparent("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"));
        assert!(!is_traceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));
        assert!(!is_traceparent("00-00000000000000000000000000000000-00f067aa0ba902b7-01"));
        assert!(!is_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"));
        assert!(!is_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x"));
        assert!(!is_traceparent("00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01"));
    }
}

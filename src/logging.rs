//! The process's log: lines on stderr, as text (colour only for a person at a terminal) or as
//! one JSON object per line for a log collector, filtered by `ASYNCFLOW_LOG`
//! (default `asyncflow=info,warn`).
//!
//! The events an operator acts on carry the same fields in both formats (see
//! docs/operations.md, Logs): `task`, `task_type`, `stage`, `attempt`, `error`, `outcome` for a
//! task's failed call, retry, rescue or end, and `callback`, `attempt`, `error`, `outcome` for a
//! callback not delivered.

use tracing_subscriber::{EnvFilter, Layer};

/// The filter when `ASYNCFLOW_LOG` is unset or unreadable.
pub const FILTER_DEFAULT: &str = "asyncflow=info,warn";

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines, coloured only on a terminal.
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target`, `message` and the event's fields.
    Json,
}

/// Installs the global subscriber; call once, at start-up. With `tracer` (traces exported, see
/// [`crate::trace`]), the process's `tracing` spans are exported through it too.
pub fn init(format: LogFormat, tracer: Option<opentelemetry_sdk::trace::SdkTracer>) {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let filter = EnvFilter::try_from_env("ASYNCFLOW_LOG").unwrap_or_else(|_| EnvFilter::new(FILTER_DEFAULT));
    let lines = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let lines = match format {
        LogFormat::Text => {
            // colours only for a person at a terminal: a log redirected to a file gets none
            let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr()) && std::env::var_os("NO_COLOR").is_none();
            lines.with_ansi(ansi).boxed()
        }
        LogFormat::Json => lines.json().flatten_event(true).with_current_span(false).with_span_list(false).boxed(),
    };
    let spans = tracer.map(|t| tracing_opentelemetry::layer().with_tracer(t));
    tracing_subscriber::registry().with(filter).with(lines).with(spans).init();
}

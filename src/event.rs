//! Events that waiting tasks wait for: what `asyncflow.send_event` takes and answers, the one
//! definition used by the HTTP route (`POST /v1/events`), its OpenAPI document and the command
//! line (`asyncflow event send`).
//!
//! ```text
//!   stage call ── {"wait": {"event": KEY, "timeout": SECONDS}, "next_stage": S} ──> waiting
//!   send_event(KEY, payload) ──> every task waiting for KEY: pending at S, its call carries
//!                                "event": {"key", "payload", "sent_at"}, "timed_out": false
//! ```

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `POST /v1/events`: an event to send.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SendEvent {
    /// The event key: 1 to 200 of `A-Za-z0-9_.:/@#=+-` (e.g. `order:42/paid`).
    pub key: String,
    /// Any JSON value, at most 65,536 bytes as JSON text (default `{}`).
    #[serde(default)]
    #[cfg_attr(feature = "server", schema(value_type = Option<Object>))]
    pub payload: Option<Value>,
}

/// What sending an event did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct EventSent {
    /// The event key.
    pub key: String,
    /// The tasks waiting for it that it woke now. A wait that begins later (the call that asks
    /// to wait was still running) finds the event by itself, within the retention.
    pub woken: i32,
}

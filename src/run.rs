//! Workflow runs as the SQL API takes and gives them: what starts a run ([`StartRun`], also a body
//! of the HTTP API and the input of `asyncflow run start`), a callback due for delivery
//! ([`CallbackDelivery`]) and how one delivery attempt went ([`CallbackOutcome`]). Plain data, so
//! that the database layer and the workflow services both use it without depending on each other
//! (as [`crate::task`] is for tasks).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What starts a run (`asyncflow.start_run`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct StartRun {
    /// Pipeline name.
    pub pipeline: String,
    /// The run's input, a JSON object (default `{}`).
    #[serde(default)]
    #[cfg_attr(feature = "server", schema(value_type = Option<Object>))]
    pub input: Option<Value>,
    /// Where the outcome is POSTed when the run ends (succeeded, failed, timed out, cancelled).
    #[serde(default)]
    pub notify_url: Option<String>,
    /// The caller's own key for the run, sent with the outcome and kept by run retries.
    #[serde(default)]
    pub notify_key: Option<String>,
    /// Not before this time (a delayed start).
    #[serde(default)]
    pub run_at: Option<DateTime<Utc>>,
    /// A given version instead of the active one (not a retired one).
    #[serde(default)]
    pub version: Option<i32>,
    /// A second start with the same pipeline and key starts nothing and answers the first run's
    /// id (1 to 255 characters), for as long as that run's records are kept.
    #[serde(default)]
    pub idempotency_key: Option<String>,
    /// The W3C trace context the run joins (`00-<trace id>-<span id>-<flags>`): its node tasks
    /// carry it to their functions. Over HTTP the `traceparent` header gives it too.
    #[serde(default)]
    pub traceparent: Option<String>,
}

/// One callback due for delivery (`asyncflow.claim_callbacks`).
#[derive(Debug, Clone)]
pub struct CallbackDelivery {
    /// `<run_id>_cb<n>`.
    pub callback_id: String,
    /// The run it is about.
    pub run_id: String,
    /// `run` (the run's outcome) or `node` (a callback node).
    pub kind: String,
    /// Where it goes.
    pub url: String,
    /// The JSON body.
    pub payload: Value,
    /// This attempt's number (1-based), the fence for its report.
    pub attempt: i32,
}

/// How one delivery attempt went (`asyncflow.record_callback`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallbackOutcome {
    /// The answer's HTTP status, when there was an answer.
    pub http_status: Option<i32>,
    /// Why it was not delivered; None: delivered.
    pub error: Option<String>,
    /// The error will be the same at every attempt (a target `--callback-allow` refuses): the
    /// callback fails now instead of being retried until it gives up.
    pub give_up: bool,
    /// The attempt's time in milliseconds.
    pub cost_ms: i32,
}

//! The HTTP worker protocol's bodies: one set of wire types, used by the server's handlers
//! (`http::worker_protocol`), by the client a worker runs on a server (`worker::backend`) and by
//! the OpenAPI document, so that the three cannot drift apart. What the routes do is described
//! with the handlers; this module only says what travels.
//!
//! ```text
//!   POST /v1/worker/hold       HoldRequest          -> Held (at once, or once work is ready: `wait`)
//!   POST /v1/worker/report     ReportBatchRequest   -> ReportResults (one ReportOutcome per report)
//!   POST /v1/worker/<outcome>  ReportRequest        -> ReportAccepted
//!   GET  /v1/worker/next-due?type=T                 -> NextDue
//!   POST /v1/worker/held       HeldRequest          -> HeldTasks
//! ```
//!
//! Requests are read strictly (`deny_unknown_fields`), and each report of a batch is checked
//! for fields its outcome does not take. Optional answer fields are written as null, never left
//! out.

pub mod children;
pub mod dashboard;
pub mod health;
pub mod pipelines;
pub mod runs;
pub mod task_types;
pub mod tasks;

use std::borrow::Cow;

use chrono::{DateTime, Utc};
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::error::echo;
use crate::ids::TaskId;
use crate::task::{ClaimedTask, HeldTask, Report, ReportResult, TaskStatus};

/// Tasks a hold takes when the request does not say.
pub const HOLD_LIMIT_DEFAULT: i32 = 10;
/// Most tasks one hold may take.
pub const HOLD_LIMIT_MAX: i32 = 1000;
/// Most reports one batch may carry.
pub const REPORTS_PER_CALL_MAX: usize = 1000;
/// The longest a hold may be asked to wait for ready work (seconds); a proxy in front of the
/// server must allow an answer to take longer than the waits its workers ask for (nginx's
/// `proxy_read_timeout`, 60 s by default).
pub const HOLD_WAIT_MAX: f64 = 30.0;

fn default_limit() -> i32 {
    HOLD_LIMIT_DEFAULT
}

/// A claim: up to `limit` ready tasks of one type, each with a lease and a fencing token.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct HoldRequest {
    /// A registered task type.
    #[serde(rename = "type", alias = "task_type")]
    pub task_type: String,
    /// The worker's id (1 to 200 characters); reports must carry the same.
    pub worker_id: String,
    /// Most tasks to take, 1..=1000 (default 10).
    #[serde(default = "default_limit")]
    #[cfg_attr(feature = "server", schema(default = 10, minimum = 1, maximum = 1000))]
    pub limit: i32,
    /// Seconds to wait for ready work when none is ready now, 0 to 30 (absent or 0: answer at
    /// once). The server answers as soon as it has claimed some (it hears of new work through
    /// its LISTEN connection, and looks again when a delayed task falls due), or with none when
    /// the wait runs out or the server shuts down.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "server", schema(minimum = 0, maximum = 30))]
    pub wait: Option<f64>,
}

/// The tasks a hold took.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct Held {
    /// Each with its lease and fencing token (`claim_seq`).
    pub tasks: Vec<ClaimedTask>,
}

/// Mixed reports on held tasks (at most 1000), applied in one statement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ReportBatchRequest<'a> {
    /// The worker that holds the tasks.
    pub worker_id: String,
    /// One report per task, each fenced by its claim_seq.
    // Read strictly: a field its outcome does not take is refused (a misspelt `contxt` would
    // otherwise be dropped and the task advanced with its old context). Borrowed when sent, so
    // that a client need not copy what it reports.
    #[serde(deserialize_with = "strict_reports")]
    #[cfg_attr(feature = "server", schema(value_type = Vec<Report>))]
    pub reports: Cow<'a, [Report]>,
}

/// The fields a report may carry beside `task_id`, `claim_seq` and `outcome`, by outcome.
fn report_fields(outcome: &str) -> &'static [&'static str] {
    match outcome {
        "advance" => &["stage", "context"],
        "succeed" => &["result"],
        "fail" => &["error", "retry"],
        "later" => &["delay", "context"],
        "wait" => &["stage", "event", "timeout", "context"],
        "spawn" => &["stage", "spawn", "context"],
        _ => &[],
    }
}

/// One report of a batch, read strictly; the error names it by its index.
fn read_report(index: usize, value: Value) -> Result<Report, String> {
    if let Some(fields) = value.as_object() {
        let outcome = fields.get("outcome").and_then(Value::as_str).unwrap_or_default();
        let known = report_fields(outcome);
        // progress goes with any outcome: a heartbeat's, or the call's last one with its reply
        let unknown = fields.keys().find(|k| {
            !matches!(k.as_str(), "task_id" | "claim_seq" | "outcome" | "progress") && !known.contains(&k.as_str())
        });
        if let Some(key) = unknown {
            return Err(format!(
                "reports[{index}]: unknown field {} for outcome {} (it takes: {})",
                echo(key),
                echo(outcome),
                known.iter().chain(&["progress"]).copied().collect::<Vec<_>>().join(", ")
            ));
        }
    }
    serde_json::from_value(value).map_err(|e| format!("reports[{index}]: {e}"))
}

fn strict_reports<'de, 'a, D: Deserializer<'de>>(deserializer: D) -> Result<Cow<'a, [Report]>, D::Error> {
    let values = Vec::<Value>::deserialize(deserializer)?;
    let reports = values
        .into_iter()
        .enumerate()
        .map(|(i, v)| read_report(i, v))
        .collect::<Result<Vec<Report>, String>>()
        .map_err(D::Error::custom)?;
    Ok(Cow::Owned(reports))
}

/// The results of a batch of reports, in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct ReportResults {
    /// One per report.
    pub results: Vec<ReportOutcome>,
}

/// How one report of a batch was received.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct ReportOutcome {
    /// Task id.
    pub task_id: String,
    /// False when the fence no longer matched: the task was rescued, cancelled or claimed again.
    pub accepted: bool,
    /// The task's status after the report (its current status when refused; null if unknown).
    pub status: Option<TaskStatus>,
    /// The new lease end, for an accepted heartbeat.
    pub lease_until: Option<DateTime<Utc>>,
}

impl From<ReportResult> for ReportOutcome {
    fn from(r: ReportResult) -> Self {
        ReportOutcome { task_id: r.task_id, accepted: r.accepted, status: r.status, lease_until: r.lease_until }
    }
}

/// A report on one held task; which fields a route needs is in its description.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ReportRequest {
    /// The worker that holds the task.
    pub worker_id: String,
    /// The task.
    #[cfg_attr(feature = "server", schema(value_type = String))]
    pub task_id: TaskId,
    /// The fencing token the hold handed out.
    pub claim_seq: i64,
    /// advance: the next stage (required).
    pub stage: Option<String>,
    /// advance, later: the new context, a JSON object (absent keeps the current one).
    #[cfg_attr(feature = "server", schema(value_type = Option<Object>))]
    pub context: Option<Value>,
    /// succeed: the result (default null).
    pub result: Option<Value>,
    /// fail: why (required; truncated to 256 characters).
    pub error: Option<String>,
    /// fail: whether a retry may help (default true).
    pub retry: Option<bool>,
    /// later: seconds until the task is ready again (required).
    pub delay: Option<f64>,
    /// Any outcome: the call's progress, a small JSON value (shown by `get_task`): a heartbeat's,
    /// or the call's last one, written with its reply.
    #[serde(default)]
    #[cfg_attr(feature = "server", schema(value_type = Option<Object>))]
    pub progress: Option<Value>,
}

/// An accepted report on one task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct ReportAccepted {
    /// Task id.
    pub task_id: String,
    /// The task's status after the report.
    pub status: Option<TaskStatus>,
    /// The new lease end, for a heartbeat.
    pub lease_until: Option<DateTime<Utc>>,
}

/// `POST /v1/worker/progress`: a running call's progress, posted by the call itself (an HTTP
/// function), fenced by the claim's token from its stage call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ProgressRequest {
    /// The task (the stage call's `task_id`).
    pub task_id: String,
    /// The claim's fencing token (the stage call's `claim_seq`).
    pub claim_seq: i64,
    /// The progress, a small JSON value (at most 4096 bytes; not null), shown by `get_task`.
    #[cfg_attr(feature = "server", schema(value_type = Object))]
    pub progress: Value,
}

/// `POST /v1/worker/checkpoint`: a running call saves its context without ending, posted by the
/// call itself (an HTTP function), fenced by the claim's token from its stage call. A retry of
/// the stage starts from the last context saved.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CheckpointRequest {
    /// The task (the stage call's `task_id`).
    pub task_id: String,
    /// The claim's fencing token (the stage call's `claim_seq`).
    pub claim_seq: i64,
    /// The task's whole context from now on, a JSON object (at most the database's
    /// `max_context_bytes`).
    #[cfg_attr(feature = "server", schema(value_type = Object))]
    pub context: Value,
}

/// A checkpoint written: the task's context is the one posted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct CheckpointAccepted {
    /// Task id.
    pub task_id: String,
}

/// A worker says it is alive (`POST /v1/worker/presence`): the row `GET /v1/workers` lists, as a
/// database worker writes its own every few seconds (`asyncflow.heartbeat_worker`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PresenceRequest {
    /// The worker's id (1 to 255 characters).
    pub worker_id: String,
    /// The host it runs on (at most 255 characters).
    pub host: String,
    /// Its process id on that host.
    pub pid: i32,
    /// The task types it serves (at most 1,000).
    pub types: Vec<String>,
    /// Calls it has running.
    pub in_flight: i32,
    /// When it started.
    pub started_at: DateTime<Utc>,
}

/// A worker leaving cleanly (`POST /v1/worker/gone`): its row goes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct GoneRequest {
    /// The worker's id.
    pub worker_id: String,
}

/// What became of a worker's row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct PresenceAnswer {
    /// The worker's id.
    pub worker_id: String,
    /// Whether the worker has a row now (after `gone`: whether it had one).
    pub listed: bool,
}

/// Progress recorded on a running task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct ProgressAccepted {
    /// Task id.
    pub task_id: String,
    /// The task's status (running).
    pub status: Option<TaskStatus>,
}

/// When a type's earliest pending task is due.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct NextDue {
    /// The task type.
    #[serde(rename = "type", alias = "task_type")]
    pub task_type: String,
    /// The smallest order_time among its pending tasks (the database's clock); null when none.
    pub due: Option<DateTime<Utc>>,
    /// Milliseconds from now (the server's clock) until then, 0 when a task is ready; null when
    /// none is pending.
    pub wait_ms: Option<i64>,
}

/// Which tasks of a type a worker holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct HeldRequest {
    /// A task type name.
    #[serde(rename = "type", alias = "task_type")]
    pub task_type: String,
    /// The worker's id (1 to 200 characters).
    pub worker_id: String,
}

/// The tasks a worker holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct HeldTasks {
    /// Running tasks owned by the worker, in id order.
    pub tasks: Vec<HeldTask>,
}

/// One line of `GET /v1/worker/cancels` (newline-delimited JSON): a running call to stop, or,
/// with both fields absent, a keep-alive (the first line says the stream is live).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct CancelNotice {
    /// The task taken away from its worker (cancelled, or its run or node ended without it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// The fencing token of the claim whose call is to stop; a later claim's call goes on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim_seq: Option<i64>,
}

/// How long `GET /v1/worker/cancels` streams before it ends (seconds) by default.
pub const CANCELS_WAIT_DEFAULT: u64 = 60;
/// The longest a `GET /v1/worker/cancels` stream may be asked to last (seconds).
pub const CANCELS_WAIT_MAX: u64 = 3600;

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::task::ReportKind;

    #[test]
    fn a_batch_is_sent_as_it_is_read() {
        let reports = vec![Report::new(
            TaskId::parse("t-1-1").expect("id"),
            3,
            ReportKind::Advance { stage: "two".into(), context: None },
        )];
        let sent = ReportBatchRequest { worker_id: "w".into(), reports: Cow::Borrowed(&reports) };
        let wire = serde_json::to_value(&sent).expect("serializes");
        let report = json!({"task_id": "t-1-1", "claim_seq": 3, "outcome": "advance", "stage": "two"});
        assert_eq!(wire, json!({"worker_id": "w", "reports": [report]}));
        let read: ReportBatchRequest = serde_json::from_value(wire).expect("reads");
        assert_eq!(read.reports.as_ref(), reports.as_slice());
    }

    #[test]
    fn a_field_the_outcome_does_not_take_is_refused_with_the_report_index() {
        let body = json!({"worker_id": "w", "reports": [
            {"task_id": "t-1-1", "claim_seq": 1, "outcome": "heartbeat"},
            {"task_id": "t-1-2", "claim_seq": 1, "outcome": "advance", "stage": "s", "contxt": {}}]});
        let e = serde_json::from_value::<ReportBatchRequest>(body).expect_err("refused").to_string();
        assert!(
            e.contains(
                "reports[1]: unknown field \"contxt\" for outcome \"advance\" (it takes: stage, context, progress)"
            ),
            "{e}"
        );
        // progress goes with any outcome
        let body = json!({"worker_id": "w", "reports": [
            {"task_id": "t-1-1", "claim_seq": 1, "outcome": "succeed", "result": 1, "progress": {"percent": 100}}]});
        let read = serde_json::from_value::<ReportBatchRequest>(body).expect("reads");
        assert_eq!(read.reports[0].progress, Some(json!({"percent": 100})));
        let missing = json!({"worker_id": "w", "reports": [{"task_id": "t-1-1", "outcome": "heartbeat"}]});
        let e = serde_json::from_value::<ReportBatchRequest>(missing).expect_err("refused").to_string();
        assert!(e.starts_with("reports[0]: missing field `claim_seq`"), "{e}");
    }

    #[test]
    fn a_hold_takes_ten_unless_told() {
        let hold: HoldRequest = serde_json::from_value(json!({"type": "t", "worker_id": "w"})).expect("reads");
        assert_eq!((hold.limit, hold.wait), (HOLD_LIMIT_DEFAULT, None));
        // a hold that does not wait is sent as before, so an older server takes it
        assert_eq!(serde_json::to_value(&hold).expect("writes"), json!({"type": "t", "worker_id": "w", "limit": 10}));
        assert!(serde_json::from_value::<HoldRequest>(json!({"type": "t", "worker_id": "w", "x": 1})).is_err());
    }
}

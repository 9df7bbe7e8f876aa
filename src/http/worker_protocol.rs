//! The worker protocol over HTTP, for workers that cannot reach the database (`asyncflow worker
//! --server`): hold (claim a batch with a lease), then per task heartbeat / advance / succeed /
//! fail / later / release, or a batch of mixed reports. Each report carries the fencing token
//! (`claim_seq`) from the hold; a stale one is refused with 409 (in a batch: `accepted: false`)
//! and changes nothing. Same operations as `asyncflow.claim_tasks` and `asyncflow.report_tasks`
//! ("hold" is the protocol's name for a claim). Two reads complete it: `next-due` (when to look
//! again: `asyncflow.next_due`) and `held` (the tasks a worker holds, for a worker that lost the
//! answer to a hold and must hand back what it never received).
//!
//! ```text
//!   POST /v1/worker/hold       {type, worker_id, limit}        -> {tasks: [claimed task]}
//!   POST /v1/worker/report     {worker_id, reports: [...]}     -> {results: [{task_id, accepted, status, lease_until}]}
//!   POST /v1/worker/<outcome>  {worker_id, task_id, claim_seq, ...}   -> 200 | 409 stale | 404 unknown
//!   GET  /v1/worker/next-due?type=T                            -> {type, due, wait_ms}
//!   POST /v1/worker/held       {type, worker_id}               -> {tasks: [{task_id, claim_seq, stage, attempt, lease_until}]}
//! ```

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Query, State};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use super::openapi::{Held, ReportResults};
use super::{parse_body, ApiError, ApiResult, AppState};
use crate::db::api;
use crate::error::echo;
use crate::ids::{TaskId, TypeName, WorkerId};
use crate::task::{HeldTask, Report, ReportKind};

pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/worker/hold", post(hold))
        .route("/v1/worker/report", post(report_batch))
        .route("/v1/worker/heartbeat", post(|s, b| single(s, b, Kind::Heartbeat)))
        .route("/v1/worker/advance", post(|s, b| single(s, b, Kind::Advance)))
        .route("/v1/worker/succeed", post(|s, b| single(s, b, Kind::Succeed)))
        .route("/v1/worker/fail", post(|s, b| single(s, b, Kind::Fail)))
        .route("/v1/worker/later", post(|s, b| single(s, b, Kind::Later)))
        .route("/v1/worker/release", post(|s, b| single(s, b, Kind::Release)))
        .route("/v1/worker/next-due", get(next_due))
        .route("/v1/worker/held", post(held))
}

/// A claim: up to `limit` ready tasks of one type, each with a lease and a fencing token.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[schema(as = HoldRequest)]
#[serde(deny_unknown_fields)]
struct HoldBody {
    /// A registered task type.
    #[serde(rename = "type")]
    task_type: String,
    /// The worker's id (1 to 200 characters); reports must carry the same.
    worker_id: String,
    /// Most tasks to take, 1..=1000 (default 10).
    #[serde(default = "default_limit")]
    #[schema(default = 10, minimum = 1, maximum = 1000)]
    limit: i32,
}

fn default_limit() -> i32 {
    10
}

/// Claims ready tasks ("hold", the same operation as `asyncflow.claim_tasks`); none when
/// nothing is ready or the type is paused.
#[utoipa::path(post, path = "/v1/worker/hold", operation_id = "hold", tag = "worker protocol",
    request_body = HoldBody,
    responses(
        (status = 200, description = "The tasks now held, possibly none", body = Held),
        (status = 400, description = "Malformed body, limit out of range or invalid worker id", body = ApiError),
        (status = 401, description = "Missing or wrong bearer token", body = ApiError),
        (status = 404, description = "Unknown task type", body = ApiError),
        (status = 413, description = "Body too large", body = ApiError),
    ))]
async fn hold(State(state): State<AppState>, body: Result<Bytes, BytesRejection>) -> ApiResult<Json<Value>> {
    let body: HoldBody = parse_body(&state, body)?;
    if !(1..=1000).contains(&body.limit) {
        return Err(ApiError::bad_request("limit must be between 1 and 1000"));
    }
    let worker = WorkerId::new(&body.worker_id)?;
    let c = state.pool.get().await.map_err(crate::Error::from)?;
    let tasks = api::claim_tasks(&c, &body.task_type, &worker, body.limit, None).await?;
    Ok(Json(json!({"tasks": tasks})))
}

/// Mixed reports on held tasks (at most 1000), applied in one statement.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[schema(as = ReportBatchRequest)]
#[serde(deny_unknown_fields)]
struct BatchBody {
    /// The worker that holds the tasks.
    worker_id: String,
    /// One report per task, each fenced by its claim_seq.
    #[schema(value_type = Vec<Report>)]
    reports: Vec<Value>,
}

/// The fields a report may carry beside `task_id`, `claim_seq` and `outcome`, by outcome.
fn report_fields(outcome: &str) -> &'static [&'static str] {
    match outcome {
        "advance" => &["stage", "context"],
        "succeed" => &["result"],
        "fail" => &["error", "retry"],
        "later" => &["delay", "context"],
        _ => &[],
    }
}

/// One report of a batch, read strictly: a field its outcome does not take is refused, where
/// it was dropped (a misspelt `contxt` advanced the task with its old context).
fn read_report(index: usize, value: Value) -> ApiResult<Report> {
    if let Some(fields) = value.as_object() {
        let outcome = fields.get("outcome").and_then(Value::as_str).unwrap_or_default();
        let known = report_fields(outcome);
        let unknown = fields
            .keys()
            .find(|k| !matches!(k.as_str(), "task_id" | "claim_seq" | "outcome") && !known.contains(&k.as_str()));
        if let Some(key) = unknown {
            return Err(ApiError::bad_request(format!(
                "reports[{index}]: unknown field {} for outcome {} (it takes: {})",
                echo(key),
                echo(outcome),
                known.join(", ")
            )));
        }
    }
    serde_json::from_value(value).map_err(|e| ApiError::bad_request(format!("reports[{index}]: {e}")))
}

/// Reports on many held tasks at once (`asyncflow.report_tasks`). A report whose fence no
/// longer matches is refused (`accepted` false) and changes nothing; the others apply.
#[utoipa::path(post, path = "/v1/worker/report", operation_id = "report", tag = "worker protocol",
    request_body = BatchBody,
    responses(
        (status = 200, description = "One result per report, in order", body = ReportResults),
        (status = 400, description = "Malformed body, more than 1000 reports or invalid worker id", body = ApiError),
        (status = 401, description = "Missing or wrong bearer token", body = ApiError),
        (status = 413, description = "Body too large", body = ApiError),
    ))]
async fn report_batch(State(state): State<AppState>, body: Result<Bytes, BytesRejection>) -> ApiResult<Json<Value>> {
    let body: BatchBody = parse_body(&state, body)?;
    if body.reports.len() > 1000 {
        return Err(ApiError::bad_request("at most 1000 reports per call"));
    }
    let worker = WorkerId::new(&body.worker_id)?;
    let reports =
        body.reports.into_iter().enumerate().map(|(i, v)| read_report(i, v)).collect::<ApiResult<Vec<_>>>()?;
    let c = state.pool.get().await.map_err(crate::Error::from)?;
    let results = api::report_tasks(&c, &worker, &reports, None).await?;
    let results: Vec<Value> = results
        .into_iter()
        .map(
            |r| json!({"task_id": r.task_id, "accepted": r.accepted, "status": r.status, "lease_until": r.lease_until}),
        )
        .collect();
    Ok(Json(json!({"results": results})))
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Heartbeat,
    Advance,
    Succeed,
    Fail,
    Later,
    Release,
}

/// A report on one held task; which fields a route needs is in its description.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[schema(as = ReportRequest)]
#[serde(deny_unknown_fields)]
pub(super) struct SingleBody {
    /// The worker that holds the task.
    worker_id: String,
    /// The task.
    #[schema(value_type = String)]
    task_id: TaskId,
    /// The fencing token the hold handed out.
    claim_seq: i32,
    /// advance: the next stage (required).
    stage: Option<String>,
    /// advance, later: the new context (absent keeps the current one).
    context: Option<Value>,
    /// succeed: the result (default null).
    result: Option<Value>,
    /// fail: why (required; truncated to 256 characters).
    error: Option<String>,
    /// fail: whether a retry may help (default true).
    retry: Option<bool>,
    /// later: seconds until the task is ready again (required).
    delay: Option<f64>,
}

async fn single(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
    kind: Kind,
) -> ApiResult<Json<Value>> {
    let b: SingleBody = parse_body(&state, body)?;
    let missing = |field: &str| ApiError::bad_request(format!("{field} is required"));
    let report_kind = match kind {
        Kind::Heartbeat => ReportKind::Heartbeat,
        Kind::Advance => ReportKind::Advance { stage: b.stage.ok_or_else(|| missing("stage"))?, context: b.context },
        Kind::Succeed => ReportKind::Succeed { result: b.result.unwrap_or(Value::Null) },
        Kind::Fail => {
            ReportKind::Fail { error: b.error.ok_or_else(|| missing("error"))?, retry: b.retry.unwrap_or(true) }
        }
        Kind::Later => ReportKind::Later { delay: b.delay.ok_or_else(|| missing("delay"))?, context: b.context },
        Kind::Release => ReportKind::Release,
    };
    let worker = WorkerId::new(&b.worker_id)?;
    let report = Report { task_id: b.task_id.clone(), claim_seq: b.claim_seq, kind: report_kind };
    let c = state.pool.get().await.map_err(crate::Error::from)?;
    let result = api::report_tasks(&c, &worker, &[report], None).await?.into_iter().next();
    match result {
        Some(r) if r.accepted => {
            Ok(Json(json!({"task_id": r.task_id, "status": r.status, "lease_until": r.lease_until})))
        }
        Some(r) if r.status.is_none() => Err(ApiError::not_found(format!("unknown task {}", r.task_id))),
        Some(r) => Err(ApiError::stale(format!(
            "task {} is no longer held by {} with claim_seq {} (now {})",
            b.task_id,
            b.worker_id,
            b.claim_seq,
            r.status.map(|s| format!("{s:?}").to_lowercase()).unwrap_or_else(|| "unknown".into())
        ))),
        None => Err(ApiError::not_found(format!("unknown task {}", b.task_id))),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NextDueQuery {
    #[serde(rename = "type")]
    task_type: String,
}

/// When a type's earliest pending task is due (doc-only: the handler builds it with `json!`).
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub(super) struct NextDue {
    /// The task type.
    #[serde(rename = "type")]
    task_type: String,
    /// The smallest order_time among its pending tasks (the database's clock); null when none.
    due: Option<chrono::DateTime<chrono::Utc>>,
    /// Milliseconds from now (the server's clock) until then, 0 when a task is ready; null when
    /// none is pending.
    wait_ms: Option<i64>,
}

/// When to look again (`asyncflow.next_due`): how long until the earliest pending task of a
/// type is due, ready or delayed. Unknown types have none.
#[utoipa::path(get, path = "/v1/worker/next-due", tag = "worker protocol",
    params(("type" = String, Query, description = "A task type name")),
    responses(
        (status = 200, description = "The earliest due time, null when nothing is pending", body = NextDue),
        (status = 400, description = "Missing or invalid type name", body = ApiError),
        (status = 401, description = "Missing or wrong bearer token", body = ApiError),
    ))]
async fn next_due(
    State(state): State<AppState>,
    query: Result<Query<NextDueQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<Value>> {
    let Query(q) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let task_type = TypeName::new(&q.task_type)?;
    let c = state.pool.get().await.map_err(crate::Error::from)?;
    let due = api::next_due(&c, task_type.as_str()).await?;
    let wait_ms = due.map(|d| (d - chrono::Utc::now()).num_milliseconds().max(0));
    Ok(Json(json!({"type": task_type, "due": due, "wait_ms": wait_ms})))
}

/// Which tasks of a type a worker holds.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[schema(as = HeldRequest)]
#[serde(deny_unknown_fields)]
struct HeldBody {
    /// A task type name.
    #[serde(rename = "type")]
    task_type: String,
    /// The worker's id (1 to 200 characters).
    worker_id: String,
}

/// The tasks a worker holds (doc-only: the handler builds it with `json!`).
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub(super) struct HeldTasks {
    /// Running tasks owned by the worker, in id order.
    tasks: Vec<HeldTask>,
}

/// The running tasks of a type that a worker holds, each with its fencing token: a worker that
/// lost the answer to a hold finds what it claimed without knowing, and hands it back
/// (`/v1/worker/release`).
#[utoipa::path(post, path = "/v1/worker/held", tag = "worker protocol",
    request_body = HeldBody,
    responses(
        (status = 200, description = "The tasks the worker holds, possibly none", body = HeldTasks),
        (status = 400, description = "Malformed body, invalid type name or worker id", body = ApiError),
        (status = 401, description = "Missing or wrong bearer token", body = ApiError),
        (status = 413, description = "Body too large", body = ApiError),
    ))]
async fn held(State(state): State<AppState>, body: Result<Bytes, BytesRejection>) -> ApiResult<Json<Value>> {
    let body: HeldBody = parse_body(&state, body)?;
    let task_type = TypeName::new(&body.task_type)?;
    let worker = WorkerId::new(&body.worker_id)?;
    let c = state.pool.get().await.map_err(crate::Error::from)?;
    // one statement: the type's running tasks owned by the worker (V35), not every running task
    let tasks = api::held_tasks(&c, task_type.as_str(), &worker).await?;
    Ok(Json(json!({ "tasks": tasks })))
}

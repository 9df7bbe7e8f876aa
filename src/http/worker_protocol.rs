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
//!   POST /v1/worker/hold       {type, worker_id, limit, wait}  -> {tasks: [claimed task]}
//!   POST /v1/worker/report     {worker_id, reports: [...]}     -> {results: [{task_id, accepted, status, lease_until}]}
//!   POST /v1/worker/<outcome>  {worker_id, task_id, claim_seq, ...}   -> 200 | 409 stale | 404 unknown
//!   GET  /v1/worker/next-due?type=T                            -> {type, due, wait_ms}
//!   POST /v1/worker/held       {type, worker_id}               -> {tasks: [{task_id, claim_seq, stage, attempt, lease_until}]}
//!   POST /v1/worker/progress   {task_id, claim_seq, progress}  -> 200 | 409 stale | 404 unknown
//!   POST /v1/worker/checkpoint {task_id, claim_seq, context}   -> 200 | 409 stale | 404 unknown
//!   POST /v1/worker/presence   {worker_id, host, pid, types, in_flight, started_at} -> {worker_id, listed}
//!   POST /v1/worker/gone       {worker_id}                     -> {worker_id, listed}
//! ```
//!
//! `presence` and `gone` are a remote worker's heartbeat row for `GET /v1/workers`, as a worker
//! on the database writes its own (`asyncflow.heartbeat_worker`, `asyncflow.remove_worker`).
//!
//! `progress` is for the running call itself rather than its worker: an HTTP function posts its
//! progress with the `task_id` and `claim_seq` of its stage call, and only that claim's call can
//! set it (the lease stays the worker's). `checkpoint` is the same for the call's context
//! (`asyncflow.checkpoint_task`): the task's whole context becomes the one posted, and a retry of
//! the stage starts from it.
//!
//! The bodies are the wire types of [`crate::protocol`], which the client in `worker::backend`
//! and the OpenAPI document use too.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Query, State};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::Value;

use std::time::Duration;

use super::{hold_wait, parse_body, ApiError, ApiResult, AppState};
use crate::db::api;
use crate::ids::{TypeName, WorkerId};
use crate::protocol::{
    CheckpointAccepted, CheckpointRequest, GoneRequest, Held, HeldRequest, HeldTasks, HoldRequest, NextDue,
    PresenceAnswer, PresenceRequest, ProgressAccepted, ProgressRequest, ReportAccepted, ReportBatchRequest,
    ReportOutcome, ReportRequest, ReportResults, HOLD_LIMIT_MAX, HOLD_WAIT_MAX, REPORTS_PER_CALL_MAX,
};
use crate::task::{Report, ReportKind};

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
        .route("/v1/worker/progress", post(progress))
        .route("/v1/worker/checkpoint", post(checkpoint))
        .route("/v1/worker/presence", post(presence))
        .route("/v1/worker/gone", post(gone))
}

/// Claims ready tasks ("hold", the same operation as `asyncflow.claim_tasks`); none when
/// nothing is ready or the type is paused. With `wait`, a hold that finds nothing ready waits
/// (a long-poll) and answers as soon as it has claimed some, or with none when
/// the wait runs out.
#[utoipa::path(post, path = "/v1/worker/hold", operation_id = "hold", tag = "worker protocol",
    request_body = HoldRequest,
    responses(
        (status = 200, description = "The tasks now held, possibly none", body = Held),
        (status = 400, description = "Malformed body, limit or wait out of range, or invalid worker id", body = ApiError),
        (status = 401, description = "Missing or wrong bearer token", body = ApiError),
        (status = 404, description = "Unknown task type", body = ApiError),
        (status = 413, description = "Body too large", body = ApiError),
    ))]
async fn hold(State(state): State<AppState>, body: Result<Bytes, BytesRejection>) -> ApiResult<Json<Held>> {
    let body: HoldRequest = parse_body(&state, body)?;
    if !(1..=HOLD_LIMIT_MAX).contains(&body.limit) {
        return Err(ApiError::bad_request("limit must be between 1 and 1000"));
    }
    let wait = match body.wait {
        None => Duration::ZERO,
        Some(w) if (0.0..=HOLD_WAIT_MAX).contains(&w) => Duration::from_secs_f64(w),
        Some(_) => return Err(ApiError::bad_request(format!("wait must be 0 to {HOLD_WAIT_MAX} seconds"))),
    };
    let worker = WorkerId::new(&body.worker_id)?;
    if !wait.is_zero() {
        let tasks = hold_wait::claim_waiting(&state, &body.task_type, &worker, body.limit, wait).await?;
        return Ok(Json(Held { tasks }));
    }
    let c = state.pool.get().await.map_err(crate::Error::from)?;
    let tasks = api::claim_tasks(&c, &body.task_type, &worker, body.limit, None).await?;
    Ok(Json(Held { tasks }))
}

/// Reports on many held tasks at once (`asyncflow.report_tasks`). A report whose fence no
/// longer matches is refused (`accepted` false) and changes nothing; the others apply.
#[utoipa::path(post, path = "/v1/worker/report", operation_id = "report", tag = "worker protocol",
    request_body = ReportBatchRequest,
    responses(
        (status = 200, description = "One result per report, in order", body = ReportResults),
        (status = 400, description = "Malformed body, more than 1000 reports or invalid worker id", body = ApiError),
        (status = 401, description = "Missing or wrong bearer token", body = ApiError),
        (status = 413, description = "Body too large", body = ApiError),
    ))]
async fn report_batch(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<ReportResults>> {
    // each report is read strictly (see the type): a field its outcome does not take is a 400
    let body: ReportBatchRequest = parse_body(&state, body)?;
    if body.reports.len() > REPORTS_PER_CALL_MAX {
        return Err(ApiError::bad_request("at most 1000 reports per call"));
    }
    let worker = WorkerId::new(&body.worker_id)?;
    let c = state.pool.get().await.map_err(crate::Error::from)?;
    let results = api::report_tasks(&c, &worker, &body.reports, None).await?;
    Ok(Json(ReportResults { results: results.into_iter().map(ReportOutcome::from).collect() }))
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

async fn single(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
    kind: Kind,
) -> ApiResult<Json<ReportAccepted>> {
    let b: ReportRequest = parse_body(&state, body)?;
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
    let report = Report { task_id: b.task_id.clone(), claim_seq: b.claim_seq, kind: report_kind, progress: b.progress };
    let c = state.pool.get().await.map_err(crate::Error::from)?;
    let result = api::report_tasks(&c, &worker, &[report], None).await?.into_iter().next();
    match result {
        Some(r) if r.accepted => {
            Ok(Json(ReportAccepted { task_id: r.task_id, status: r.status, lease_until: r.lease_until }))
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
    #[serde(rename = "type", alias = "task_type")]
    task_type: String,
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
) -> ApiResult<Json<NextDue>> {
    let Query(q) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let task_type = TypeName::new(&q.task_type)?;
    let c = state.pool.get().await.map_err(crate::Error::from)?;
    let due = api::next_due(&c, task_type.as_str()).await?;
    let wait_ms = due.map(|d| (d - chrono::Utc::now()).num_milliseconds().max(0));
    Ok(Json(NextDue { task_type: task_type.to_string(), due, wait_ms }))
}

/// The running tasks of a type that a worker holds, each with its fencing token: a worker that
/// lost the answer to a hold finds what it claimed without knowing, and hands it back
/// (`/v1/worker/release`).
#[utoipa::path(post, path = "/v1/worker/held", tag = "worker protocol",
    request_body = HeldRequest,
    responses(
        (status = 200, description = "The tasks the worker holds, possibly none", body = HeldTasks),
        (status = 400, description = "Malformed body, invalid type name or worker id", body = ApiError),
        (status = 401, description = "Missing or wrong bearer token", body = ApiError),
        (status = 404, description = "Unknown task type", body = ApiError),
        (status = 413, description = "Body too large", body = ApiError),
    ))]
async fn held(State(state): State<AppState>, body: Result<Bytes, BytesRejection>) -> ApiResult<Json<HeldTasks>> {
    let body: HeldRequest = parse_body(&state, body)?;
    let task_type = TypeName::new(&body.task_type)?;
    let worker = WorkerId::new(&body.worker_id)?;
    let c = state.pool.get().await.map_err(crate::Error::from)?;
    // one statement (`asyncflow.held_tasks`) answering only the worker's running tasks of the
    // type, not a page through every running task
    let tasks = api::held_tasks(&c, task_type.as_str(), &worker).await?;
    Ok(Json(HeldTasks { tasks }))
}

/// Records a running call's progress (`asyncflow.set_progress`), posted by the call itself (an
/// HTTP function) with the `task_id` and `claim_seq` of its stage call. Only the claim that
/// handed out that `claim_seq` may set it: a stale one is refused with 409 and changes nothing.
/// Nothing else changes (the lease stays the worker's, kept by its heartbeats).
#[utoipa::path(post, path = "/v1/worker/progress", operation_id = "progress", tag = "worker protocol",
    request_body = ProgressRequest,
    responses(
        (status = 200, description = "The progress is the task's now", body = ProgressAccepted),
        (status = 400, description = "Malformed body, progress null, unreadable or over 4096 bytes", body = ApiError),
        (status = 401, description = "Missing or wrong bearer token", body = ApiError),
        (status = 404, description = "Unknown task", body = ApiError),
        (status = 409, description = "The task is no longer running under that claim_seq", body = ApiError),
        (status = 413, description = "Body too large", body = ApiError),
    ))]
async fn progress(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<ProgressAccepted>> {
    let b: ProgressRequest = parse_body(&state, body)?;
    let c = state.pool.get().await.map_err(crate::Error::from)?;
    let (accepted, status) = api::set_progress(&c, &b.task_id, b.claim_seq, &b.progress).await?;
    if !accepted {
        return Err(ApiError::stale(format!(
            "task {} is no longer running under claim_seq {} (now {})",
            b.task_id,
            b.claim_seq,
            status.map(|s| format!("{s:?}").to_lowercase()).unwrap_or_else(|| "unknown".into())
        )));
    }
    Ok(Json(ProgressAccepted { task_id: b.task_id, status }))
}

/// Saves a running call's context (`asyncflow.checkpoint_task`), posted by the call itself (an
/// HTTP function) with the `task_id` and `claim_seq` of its stage call: the task's whole context
/// becomes `context`, and a retry of the stage starts from it. Only the claim that handed out
/// that `claim_seq` may write it: a stale one is refused with 409 and changes nothing.
#[utoipa::path(post, path = "/v1/worker/checkpoint", operation_id = "checkpoint", tag = "worker protocol",
    request_body = CheckpointRequest,
    responses(
        (status = 200, description = "The context is the task's now", body = CheckpointAccepted),
        (status = 400, description = "Malformed body, a context that is not a JSON object or is unreadable", body = ApiError),
        (status = 401, description = "Missing or wrong bearer token", body = ApiError),
        (status = 404, description = "Unknown task", body = ApiError),
        (status = 409, description = "The task is no longer running under that claim_seq", body = ApiError),
        (status = 413, description = "Body or context too large", body = ApiError),
    ))]
async fn checkpoint(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<CheckpointAccepted>> {
    let b: CheckpointRequest = parse_body(&state, body)?;
    let c = state.pool.get().await.map_err(crate::Error::from)?;
    if !api::checkpoint_task(&c, &b.task_id, b.claim_seq, &b.context).await? {
        return Err(ApiError::stale(format!(
            "task {} is no longer running under claim_seq {}",
            crate::error::echo(&b.task_id),
            b.claim_seq
        )));
    }
    Ok(Json(CheckpointAccepted { task_id: b.task_id }))
}

/// A remote worker's heartbeat row: written with the server's clock as `last_seen`.
#[utoipa::path(post, path = "/v1/worker/presence", operation_id = "presence", tag = "worker protocol",
    request_body = PresenceRequest,
    responses(
        (status = 200, description = "The worker's row is written", body = PresenceAnswer),
        (status = 400, description = "Malformed body, or a value out of range", body = ApiError),
        (status = 401, description = "Missing or wrong bearer token", body = ApiError),
        (status = 413, description = "Body too large", body = ApiError),
    ))]
pub(super) async fn presence(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<PresenceAnswer>> {
    let b: PresenceRequest = parse_body(&state, body)?;
    let row = api::WorkerRow {
        id: b.worker_id.clone(),
        host: b.host,
        pid: b.pid,
        types: b.types,
        in_flight: b.in_flight,
        started_at: b.started_at,
        last_seen: b.started_at,
    };
    let c = state.pool.get().await.map_err(crate::Error::from)?;
    api::heartbeat_worker(&c, &row, None).await?;
    Ok(Json(PresenceAnswer { worker_id: b.worker_id, listed: true }))
}

/// A remote worker leaves cleanly: its heartbeat row goes.
#[utoipa::path(post, path = "/v1/worker/gone", operation_id = "gone", tag = "worker protocol",
    request_body = GoneRequest,
    responses(
        (status = 200, description = "The worker's row is gone (listed: whether there was one)", body = PresenceAnswer),
        (status = 400, description = "Malformed body", body = ApiError),
        (status = 401, description = "Missing or wrong bearer token", body = ApiError),
        (status = 413, description = "Body too large", body = ApiError),
    ))]
pub(super) async fn gone(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<PresenceAnswer>> {
    let b: GoneRequest = parse_body(&state, body)?;
    let c = state.pool.get().await.map_err(crate::Error::from)?;
    let listed = api::remove_worker(&c, &b.worker_id).await?;
    Ok(Json(PresenceAnswer { worker_id: b.worker_id, listed }))
}

//! The worker protocol over HTTP, for workers that cannot reach the database: hold (claim a
//! batch with a lease), then per task heartbeat / advance / succeed / fail / later, or a batch
//! of mixed reports. Each report carries the fencing token (`claim_seq`) from the hold; a stale
//! one is refused with 409 and changes nothing. Same operations as `asyncflow.claim_tasks` and
//! `asyncflow.report_tasks` ("hold" is the protocol's name for a claim).

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use super::{parse_body, ApiError, ApiResult, AppState};
use crate::db::api;
use crate::ids::{TaskId, WorkerId};
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
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct HoldBody {
    #[serde(rename = "type")]
    task_type: String,
    worker_id: String,
    #[serde(default = "default_limit")]
    limit: i32,
}

fn default_limit() -> i32 {
    10
}

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

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BatchBody {
    worker_id: String,
    reports: Vec<Report>,
}

async fn report_batch(State(state): State<AppState>, body: Result<Bytes, BytesRejection>) -> ApiResult<Json<Value>> {
    let body: BatchBody = parse_body(&state, body)?;
    if body.reports.len() > 1000 {
        return Err(ApiError::bad_request("at most 1000 reports per call"));
    }
    let worker = WorkerId::new(&body.worker_id)?;
    let c = state.pool.get().await.map_err(crate::Error::from)?;
    let results = api::report_tasks(&c, &worker, &body.reports, None).await?;
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
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SingleBody {
    worker_id: String,
    task_id: TaskId,
    claim_seq: i32,
    stage: Option<String>,
    context: Option<Value>,
    result: Option<Value>,
    error: Option<String>,
    retry: Option<bool>,
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

//! Task type routes: list, get, create or update settings, pause, resume; queue depth; the
//! queues of a type with fair_queues and their per-key limits; rate limits.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, Query, State};
use axum::routing::{get, post};
use axum::{Json, Router};

use super::{parse_body, ApiError, ApiResult, AppState};
use crate::error::echo;
use crate::protocol::task_types::QueuesQuery;
use crate::task::{QueueDepth, QueueKeyDepth, QueueLimit};
use crate::task_type::{QueueRateLimit, RateLimit, TaskTypeSettings, TaskTypeUpdate};

pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/task-types", get(list))
        .route("/v1/task-types/:name", get(get_one).put(put))
        .route("/v1/task-types/:name/pause", post(pause))
        .route("/v1/task-types/:name/resume", post(resume))
        .route("/v1/queue-depth", get(depth))
        .route("/v1/task-types/:name/queues", get(queues))
        .route("/v1/task-types/:name/queue-limit", axum::routing::put(queue_limit))
        .route("/v1/task-types/:name/rate-limit", axum::routing::put(rate_limit))
        .route("/v1/task-types/:name/queue-rate-limit", axum::routing::put(queue_rate_limit))
}

/// The queues of a type with `fair_queues` that have pending or running tasks, in key order
/// (`asyncflow.queue_keys`): per key its ready, delayed and running tasks, the age of its oldest
/// ready task and the limit that applies to it.
#[utoipa::path(get, path = "/v1/task-types/{name}/queues", operation_id = "list_queues", tag = "task types",
    params(("name" = String, Path, description = "Task type name, ^[a-z][a-z0-9_]{0,39}$"), QueuesQuery),
    responses(
        (status = 200, description = "One page of queues", body = Vec<QueueKeyDepth>),
        (status = 400, description = "Not a type with fair_queues, bad limit or unknown parameter", body = ApiError),
        (status = 401, description = "Missing or wrong bearer token", body = ApiError),
        (status = 404, description = "Unknown task type", body = ApiError),
    ))]
async fn queues(
    State(state): State<AppState>,
    Path(name): Path<String>,
    query: Result<Query<QueuesQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<Vec<QueueKeyDepth>>> {
    let Query(q) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    Ok(Json(state.client().list_queues(&name, &q).await?))
}

/// Sets one queue key's own limit on running tasks, or removes it (`concurrency: null`; the
/// type's `queue_concurrency` applies again). 0 holds the key. Answers with the limit that now
/// applies to the key.
#[utoipa::path(put, path = "/v1/task-types/{name}/queue-limit", operation_id = "put_queue_limit", tag = "task types",
    params(("name" = String, Path, description = "Task type name, ^[a-z][a-z0-9_]{0,39}$")),
    request_body = QueueLimit,
    responses(
        (status = 200, description = "The key and the limit that now applies to it", body = QueueLimit),
        (status = 400, description = "Bad key or limit, unknown field", body = ApiError),
        (status = 401, description = "Missing or wrong bearer token", body = ApiError),
        (status = 404, description = "Unknown task type", body = ApiError),
        (status = 413, description = "Body too large", body = ApiError),
    ))]
async fn queue_limit(
    State(state): State<AppState>,
    Path(name): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<QueueLimit>> {
    let limit: QueueLimit = parse_body(&state, body)?;
    Ok(Json(state.client().set_queue_limit(&name, &limit).await?))
}

/// Limits the type to `max_starts` task starts per `period` seconds across all workers, or
/// removes its limit (`max_starts: null`). Answers with the limit as stored.
#[utoipa::path(put, path = "/v1/task-types/{name}/rate-limit", operation_id = "put_rate_limit", tag = "task types",
    params(("name" = String, Path, description = "Task type name, ^[a-z][a-z0-9_]{0,39}$")),
    request_body = RateLimit,
    responses(
        (status = 200, description = "The limit that now applies", body = RateLimit),
        (status = 400, description = "max_starts or period out of range, unknown field", body = ApiError),
        (status = 401, description = "Missing or wrong bearer token", body = ApiError),
        (status = 404, description = "Unknown task type", body = ApiError),
        (status = 413, description = "Body too large", body = ApiError),
    ))]
async fn rate_limit(
    State(state): State<AppState>,
    Path(name): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<RateLimit>> {
    let limit: RateLimit = parse_body(&state, body)?;
    Ok(Json(state.client().set_rate_limit(&name, &limit).await?))
}

/// Limits one queue key of a type with `fair_queues` (`queue_key`), or every key without a limit
/// of its own (`queue_key` null or left out), to `max_starts` task starts per `period` seconds
/// across all workers, or removes that limit (`max_starts: null`). Answers with the limit that
/// now applies to the key.
#[utoipa::path(put, path = "/v1/task-types/{name}/queue-rate-limit", operation_id = "put_queue_rate_limit",
    tag = "task types",
    params(("name" = String, Path, description = "Task type name, ^[a-z][a-z0-9_]{0,39}$")),
    request_body = QueueRateLimit,
    responses(
        (status = 200, description = "The key and the limit that now applies to it", body = QueueRateLimit),
        (status = 400, description = "Not a type with fair_queues, bad key, max_starts or period, unknown field",
            body = ApiError),
        (status = 401, description = "Missing or wrong bearer token", body = ApiError),
        (status = 404, description = "Unknown task type", body = ApiError),
        (status = 413, description = "Body too large", body = ApiError),
    ))]
async fn queue_rate_limit(
    State(state): State<AppState>,
    Path(name): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<QueueRateLimit>> {
    let limit: QueueRateLimit = parse_body(&state, body)?;
    Ok(Json(state.client().set_queue_rate_limit(&name, &limit).await?))
}

/// Every registered task type's settings, by name.
#[utoipa::path(get, path = "/v1/task-types", operation_id = "list_task_types", tag = "task types",
    responses(
        (status = 200, description = "The task types", body = Vec<TaskTypeSettings>),
        (status = 401, description = "Missing or wrong bearer token", body = ApiError),
    ))]
async fn list(State(state): State<AppState>) -> ApiResult<Json<Vec<TaskTypeSettings>>> {
    Ok(Json(state.client().list_types().await?))
}

/// One task type's settings.
#[utoipa::path(get, path = "/v1/task-types/{name}", operation_id = "get_task_type", tag = "task types",
    params(("name" = String, Path, description = "Task type name, ^[a-z][a-z0-9_]{0,39}$")),
    responses(
        (status = 200, description = "Its settings", body = TaskTypeSettings),
        (status = 401, description = "Missing or wrong bearer token", body = ApiError),
        (status = 404, description = "Unknown task type", body = ApiError),
    ))]
async fn get_one(State(state): State<AppState>, Path(name): Path<String>) -> ApiResult<Json<TaskTypeSettings>> {
    let found = state.client().get_type(&name).await?;
    found.map(Json).ok_or_else(|| ApiError::not_found(format!("unknown task type {}", echo(&name))))
}

/// Registers the type, or changes only the settings named (`asyncflow.register_task_type`).
#[utoipa::path(put, path = "/v1/task-types/{name}", operation_id = "put_task_type", tag = "task types",
    params(("name" = String, Path, description = "Task type name, ^[a-z][a-z0-9_]{0,39}$")),
    request_body = TaskTypeUpdate,
    responses(
        (status = 200, description = "Its settings after the change", body = TaskTypeSettings),
        (status = 400, description = "Invalid name, unknown setting or value out of range", body = ApiError),
        (status = 401, description = "Missing or wrong bearer token", body = ApiError),
        (status = 413, description = "Body too large", body = ApiError),
    ))]
async fn put(
    State(state): State<AppState>,
    Path(name): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<TaskTypeSettings>> {
    let settings: TaskTypeUpdate = parse_body(&state, body)?;
    Ok(Json(state.client().register_type(&name, &settings).await?))
}

/// Pauses claims of the type (tasks can still be created).
#[utoipa::path(post, path = "/v1/task-types/{name}/pause", operation_id = "pause_task_type", tag = "task types",
    params(("name" = String, Path, description = "Task type name, ^[a-z][a-z0-9_]{0,39}$")),
    responses(
        (status = 200, description = "Its settings after the change", body = TaskTypeSettings),
        (status = 401, description = "Missing or wrong bearer token", body = ApiError),
        (status = 404, description = "Unknown task type", body = ApiError),
    ))]
async fn pause(State(state): State<AppState>, Path(name): Path<String>) -> ApiResult<Json<TaskTypeSettings>> {
    Ok(Json(state.client().pause_type(&name).await?))
}

/// Resumes claims of a paused type.
#[utoipa::path(post, path = "/v1/task-types/{name}/resume", operation_id = "resume_task_type", tag = "task types",
    params(("name" = String, Path, description = "Task type name, ^[a-z][a-z0-9_]{0,39}$")),
    responses(
        (status = 200, description = "Its settings after the change", body = TaskTypeSettings),
        (status = 401, description = "Missing or wrong bearer token", body = ApiError),
        (status = 404, description = "Unknown task type", body = ApiError),
    ))]
async fn resume(State(state): State<AppState>, Path(name): Path<String>) -> ApiResult<Json<TaskTypeSettings>> {
    Ok(Json(state.client().resume_type(&name).await?))
}

/// Per type: tasks ready now, delayed, running and the age of the oldest ready one (the
/// `asyncflow.queue_depth` view), for autoscalers.
#[utoipa::path(get, path = "/v1/queue-depth", operation_id = "queue_depth", tag = "task types",
    responses(
        (status = 200, description = "Queue depth per type", body = Vec<QueueDepth>),
        (status = 401, description = "Missing or wrong bearer token", body = ApiError),
    ))]
async fn depth(State(state): State<AppState>) -> ApiResult<Json<Vec<QueueDepth>>> {
    Ok(Json(state.client().queue_depth().await?))
}

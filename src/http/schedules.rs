//! Schedule routes: list, create or replace, pause, resume, remove periodic schedules.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};

use super::{parse_body, ApiError, ApiResult, AppState};
use crate::db::api;
use crate::error::echo;
use crate::schedule::{Schedule, SetSchedule};

pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/schedules", get(list))
        .route("/v1/schedules/:name", axum::routing::put(put).delete(remove))
        .route("/v1/schedules/:name/pause", post(pause))
        .route("/v1/schedules/:name/resume", post(resume))
}

/// Every schedule by name (`asyncflow.list_schedules`), with its next tick, its last tick and
/// the task or run released for it.
#[utoipa::path(get, path = "/v1/schedules", operation_id = "list_schedules", tag = "schedules",
    responses(
        (status = 200, description = "The schedules", body = Vec<Schedule>),
        (status = 401, description = "Missing or wrong bearer token", body = ApiError),
    ))]
async fn list(State(state): State<AppState>) -> ApiResult<Json<Vec<Schedule>>> {
    Ok(Json(api::list_schedules(&state.pool.get().await.map_err(crate::Error::from)?).await?))
}

/// Creates or replaces the schedule (`asyncflow.set_schedule`); the same schedule again changes
/// nothing.
#[utoipa::path(put, path = "/v1/schedules/{name}", operation_id = "put_schedule", tag = "schedules",
    params(("name" = String, Path, description = "Schedule name, ^[a-z][a-z0-9_.-]{0,63}$")),
    request_body = SetSchedule,
    responses(
        (status = 200, description = "The schedule as stored", body = Schedule),
        (status = 400, description = "Bad name, cron expression, time zone or spec", body = ApiError),
        (status = 401, description = "Missing or wrong bearer token", body = ApiError),
        (status = 404, description = "Unknown task type or pipeline", body = ApiError),
        (status = 413, description = "Body too large", body = ApiError),
    ))]
async fn put(
    State(state): State<AppState>,
    Path(name): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<Schedule>> {
    let set: SetSchedule = parse_body(&state, body)?;
    set.check().map_err(ApiError::bad_request)?;
    let c = state.pool.get().await.map_err(crate::Error::from)?;
    Ok(Json(api::set_schedule(&c, &name, &set.cron, &set.spec, None).await?))
}

/// Removes the schedule; the tasks and runs it released stay.
#[utoipa::path(delete, path = "/v1/schedules/{name}", operation_id = "remove_schedule", tag = "schedules",
    params(("name" = String, Path, description = "Schedule name")),
    responses(
        (status = 204, description = "Removed"),
        (status = 401, description = "Missing or wrong bearer token", body = ApiError),
        (status = 404, description = "Unknown schedule", body = ApiError),
    ))]
async fn remove(State(state): State<AppState>, Path(name): Path<String>) -> ApiResult<StatusCode> {
    let c = state.pool.get().await.map_err(crate::Error::from)?;
    if api::remove_schedule(&c, &name).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(crate::Error::UnknownSchedule(format!("unknown schedule {}", echo(&name))).into())
    }
}

/// Pauses the schedule: no tick is released until it is resumed.
#[utoipa::path(post, path = "/v1/schedules/{name}/pause", operation_id = "pause_schedule", tag = "schedules",
    params(("name" = String, Path, description = "Schedule name")),
    responses(
        (status = 200, description = "The schedule after the change", body = Schedule),
        (status = 401, description = "Missing or wrong bearer token", body = ApiError),
        (status = 404, description = "Unknown schedule", body = ApiError),
    ))]
async fn pause(State(state): State<AppState>, Path(name): Path<String>) -> ApiResult<Json<Schedule>> {
    let c = state.pool.get().await.map_err(crate::Error::from)?;
    Ok(Json(api::pause_schedule(&c, &name, true).await?))
}

/// Resumes the schedule: the ticks after now are released (none of those while it was paused).
#[utoipa::path(post, path = "/v1/schedules/{name}/resume", operation_id = "resume_schedule", tag = "schedules",
    params(("name" = String, Path, description = "Schedule name")),
    responses(
        (status = 200, description = "The schedule after the change", body = Schedule),
        (status = 401, description = "Missing or wrong bearer token", body = ApiError),
        (status = 404, description = "Unknown schedule", body = ApiError),
    ))]
async fn resume(State(state): State<AppState>, Path(name): Path<String>) -> ApiResult<Json<Schedule>> {
    let c = state.pool.get().await.map_err(crate::Error::from)?;
    Ok(Json(api::pause_schedule(&c, &name, false).await?))
}

//! Schedule routes: list, create or replace, pause, resume, remove periodic schedules.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};

use super::{parse_body, ApiError, ApiResult, AppState};
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
    Ok(Json(state.client().list_schedules().await?))
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
    Ok(Json(state.client().set_schedule(&name, &set).await?))
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
    state.client().remove_schedule(&name).await?;
    Ok(StatusCode::NO_CONTENT)
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
    Ok(Json(state.client().pause_schedule(&name).await?))
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
    Ok(Json(state.client().resume_schedule(&name).await?))
}

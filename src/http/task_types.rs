//! Task type routes: list, get, create or update settings, pause, resume; queue depth.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::routing::{get, post};
use axum::{Json, Router};

use super::{parse_body, ApiError, ApiResult, AppState};
use crate::db::api;
use crate::ids::TypeName;
use crate::task::QueueDepth;
use crate::task_type::{TaskTypeSettings, TaskTypeUpdate};

pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/task-types", get(list))
        .route("/v1/task-types/:name", get(get_one).put(put))
        .route("/v1/task-types/:name/pause", post(pause))
        .route("/v1/task-types/:name/resume", post(resume))
        .route("/v1/queue-depth", get(depth))
}

async fn list(State(state): State<AppState>) -> ApiResult<Json<Vec<TaskTypeSettings>>> {
    Ok(Json(api::list_task_types(&state.pool.get().await.map_err(crate::Error::from)?).await?))
}

async fn get_one(State(state): State<AppState>, Path(name): Path<String>) -> ApiResult<Json<TaskTypeSettings>> {
    let all = api::list_task_types(&state.pool.get().await.map_err(crate::Error::from)?).await?;
    all.into_iter()
        .find(|t| t.task_type == name)
        .map(Json)
        .ok_or_else(|| ApiError::not_found(format!("unknown task type {name:?}")))
}

async fn put(
    State(state): State<AppState>,
    Path(name): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<TaskTypeSettings>> {
    let settings: TaskTypeUpdate = parse_body(&state, body)?;
    let name = TypeName::new(&name)?;
    Ok(Json(api::register_task_type(&state.pool.get().await.map_err(crate::Error::from)?, &name, &settings).await?))
}

async fn set_paused(state: &AppState, name: &str, paused: bool) -> ApiResult<Json<TaskTypeSettings>> {
    let c = state.pool.get().await.map_err(crate::Error::from)?;
    // Pausing must not create a type: check it exists first.
    if !api::list_task_types(&c).await?.iter().any(|t| t.task_type == name) {
        return Err(ApiError::not_found(format!("unknown task type {name:?}")));
    }
    let settings = TaskTypeUpdate { paused: Some(paused), ..Default::default() };
    Ok(Json(api::register_task_type(&c, &TypeName::new(name)?, &settings).await?))
}

async fn pause(State(state): State<AppState>, Path(name): Path<String>) -> ApiResult<Json<TaskTypeSettings>> {
    set_paused(&state, &name, true).await
}

async fn resume(State(state): State<AppState>, Path(name): Path<String>) -> ApiResult<Json<TaskTypeSettings>> {
    set_paused(&state, &name, false).await
}

async fn depth(State(state): State<AppState>) -> ApiResult<Json<Vec<QueueDepth>>> {
    Ok(Json(api::queue_depth(&state.pool.get().await.map_err(crate::Error::from)?).await?))
}

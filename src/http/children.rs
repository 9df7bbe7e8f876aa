//! `GET /v1/tasks/{id}/children`: the tasks a task spawned (`asyncflow.task_children`).

use axum::extract::{Path, Query, State};
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;

use super::{ApiError, ApiResult, AppState};
use crate::db::api;
use crate::error::echo;
use crate::protocol::children::TaskChildren;

pub(super) fn routes() -> Router<AppState> {
    Router::new().route("/v1/tasks/:id/children", get(children))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ChildrenQuery {
    /// At most this many (1..=1000, default 100).
    limit: Option<i32>,
}

/// The tasks the task's `spawn` replies created: how many in all, and the first `limit` of them
/// (id, type, status), oldest first.
#[utoipa::path(get, path = "/v1/tasks/{id}/children", operation_id = "task_children", tag = "tasks",
    params(("id" = String, Path, description = "Task id"),
        ("limit" = Option<i32>, Query, description = "At most this many children (1..=1000, default 100)")),
    responses(
        (status = 200, description = "The children", body = TaskChildren),
        (status = 400, description = "A limit out of range", body = ApiError),
        (status = 401, description = "Missing or wrong bearer token", body = ApiError),
        (status = 404, description = "No such task", body = ApiError),
    ))]
pub(super) async fn children(
    State(state): State<AppState>,
    Path(id): Path<String>,
    query: Result<Query<ChildrenQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<TaskChildren>> {
    let Query(q) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let c = state.pool.get().await.map_err(crate::Error::from)?;
    match api::task_children(&c, &id, q.limit.unwrap_or(100)).await? {
        Some(children) => Ok(Json(children)),
        None => Err(crate::Error::UnknownTask(format!("unknown task {}", echo(&id))).into()),
    }
}

//! `GET /v1/tasks/{id}/explain`: why a task is not running (`asyncflow.explain_task`).

use axum::extract::{Path, State};
use axum::routing::get;
use axum::{Json, Router};

use super::{ApiError, ApiResult, AppState};
use crate::db::api;
use crate::error::echo;
use crate::explain::Explanation;

pub(super) fn routes() -> Router<AppState> {
    Router::new().route("/v1/tasks/:id/explain", get(explain))
}

/// Why the task is not running: one reason (`ended`, `running`, `waiting_event`, `paused`,
/// `backing_off`, `delayed`, `key_held`, `concurrency`, `rate_limited`, `ready`) with its detail.
#[utoipa::path(get, path = "/v1/tasks/{id}/explain", operation_id = "explain_task", tag = "tasks",
    params(("id" = String, Path, description = "Task id")),
    responses(
        (status = 200, description = "The reason and its detail", body = Explanation),
        (status = 401, description = "Missing or wrong bearer token", body = ApiError),
        (status = 404, description = "No such task", body = ApiError),
    ))]
pub(super) async fn explain(State(state): State<AppState>, Path(id): Path<String>) -> ApiResult<Json<Explanation>> {
    let c = state.pool.get().await.map_err(crate::Error::from)?;
    match api::explain_task(&c, &id, None).await? {
        Some(e) => Ok(Json(e)),
        None => Err(crate::Error::UnknownTask(format!("unknown task {}", echo(&id))).into()),
    }
}

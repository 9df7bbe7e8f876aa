//! Task routes: create (one or many), get, list with filters and keyset pagination, cancel,
//! retry.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use super::{parse_body, ApiError, ApiResult, AppState};
use crate::db::api::{self, TaskFilter};
use crate::task::{NewTask, Task};

pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/tasks", post(create).get(list))
        .route("/v1/tasks/bulk", post(create_bulk))
        .route("/v1/tasks/:id", get(get_one))
        .route("/v1/tasks/:id/cancel", post(cancel))
        .route("/v1/tasks/:id/retry", post(retry))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateBody {
    #[serde(rename = "type")]
    task_type: String,
    #[serde(flatten)]
    task: NewTask,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BulkBody {
    #[serde(rename = "type")]
    task_type: String,
    tasks: Vec<NewTask>,
}

async fn create(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let mut body: CreateBody = parse_body(&state, body)?;
    if let Some(key) = headers.get("idempotency-key") {
        let key = key.to_str().map_err(|_| ApiError::bad_request("Idempotency-Key must be visible ASCII"))?;
        body.task.idempotency_key = Some(key.to_string());
    }
    let id =
        api::create_task(&state.pool.get().await.map_err(crate::Error::from)?, &body.task_type, &body.task).await?;
    Ok((StatusCode::CREATED, Json(json!({"id": id}))))
}

async fn create_bulk(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let body: BulkBody = parse_body(&state, body)?;
    if body.tasks.len() > 10_000 {
        return Err(ApiError::bad_request("at most 10000 tasks per call"));
    }
    let ids =
        api::create_tasks(&state.pool.get().await.map_err(crate::Error::from)?, &body.task_type, &body.tasks).await?;
    Ok((StatusCode::CREATED, Json(json!({"ids": ids}))))
}

async fn get_one(State(state): State<AppState>, Path(id): Path<String>) -> ApiResult<Json<Task>> {
    let task = api::get_task(&state.pool.get().await.map_err(crate::Error::from)?, &id).await?;
    task.map(Json).ok_or_else(|| ApiError::not_found(format!("unknown task {id:?}")))
}

/// The query string of a list: like [`TaskFilter`], with the status as text so that a bad one
/// gets an error naming the field.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    #[serde(rename = "type")]
    task_type: Option<String>,
    status: Option<String>,
    stage: Option<String>,
    user_id: Option<String>,
    after: Option<String>,
    limit: Option<i32>,
}

async fn list(
    State(state): State<AppState>,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<Value>> {
    let Query(q) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let status = match q.status.as_deref() {
        None => None,
        Some(s) => Some(crate::task::TaskStatus::parse(s).ok_or_else(|| {
            ApiError::bad_request(format!(
                "status must be one of pending, running, succeeded, failed, cancelled; got {s:?}"
            ))
        })?),
    };
    let filter = TaskFilter {
        task_type: q.task_type,
        status,
        stage: q.stage,
        user_id: q.user_id,
        after: q.after,
        limit: q.limit,
    };
    let limit = filter.limit.unwrap_or(100);
    let tasks = api::list_tasks(&state.pool.get().await.map_err(crate::Error::from)?, &filter).await?;
    let next = if tasks.len() as i32 == limit { tasks.last().map(|t| t.id.to_string()) } else { None };
    Ok(Json(json!({"tasks": tasks, "next": next})))
}

async fn cancel(State(state): State<AppState>, Path(id): Path<String>) -> ApiResult<Json<Value>> {
    let done = api::cancel_task(&state.pool.get().await.map_err(crate::Error::from)?, &id).await?;
    Ok(Json(json!({"id": id, "cancelled": done})))
}

async fn retry(State(state): State<AppState>, Path(id): Path<String>) -> ApiResult<Json<Value>> {
    let done = api::retry_task(&state.pool.get().await.map_err(crate::Error::from)?, &id).await?;
    Ok(Json(json!({"id": id, "retried": done})))
}

//! Task routes: create (one or many), get, list with filters and search and keyset pagination,
//! cancel, retry, and bulk retry / cancel of what a filter selects.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::{Json, Router};

use super::request_span::{traceparent, TRACEPARENT_HEADER};
use super::{parse_body, ApiError, ApiResult, AppState};
use crate::db::api::{BulkAction, BulkOutcome, TaskFilter, TaskOrder, BULK_LIMIT_MAX};
use crate::error::echo;
use crate::protocol::tasks::{
    BulkChangeRequest, CreateTaskRequest, CreateTasksRequest, TaskCancelled, TaskCreated, TaskPage, TaskQuery,
    TaskReadQuery, TaskRetried, TasksCreated, CREATE_TASKS_MAX,
};
use crate::task::Task;

pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/tasks", post(create).get(list))
        .route("/v1/tasks/bulk", post(create_bulk))
        .route("/v1/tasks/bulk-retry", post(bulk_retry))
        .route("/v1/tasks/bulk-cancel", post(bulk_cancel))
        .route("/v1/tasks/:id", get(get_one))
        .route("/v1/tasks/:id/cancel", post(cancel))
        .route("/v1/tasks/:id/retry", post(retry))
}

/// Creates one task (of a type nothing has registered yet too: it is registered with the default
/// settings); an `Idempotency-Key` header (or body field) returns the existing task's id,
/// and so does a `unique_key` while its task blocks (answered 200, `created`: false).
#[utoipa::path(post, path = "/v1/tasks", operation_id = "create_task", tag = "tasks",
    params(("Idempotency-Key" = Option<String>, Header, description = "Same key, same type: the existing task's id, nothing created"),
        ("traceparent" = Option<String>, Header, description = TRACEPARENT_HEADER)),
    request_body = CreateTaskRequest,
    responses(
        (status = 201, description = "Created (`created`: true)", body = TaskCreated),
        (status = 200, description = "Found by its idempotency key or unique key, nothing created (`created`: false)", body = TaskCreated),
        (status = 400, description = "Malformed body, invalid type name, priority or argument", body = ApiError),
        (status = 401, description = "Missing or wrong bearer token", body = ApiError),
        (status = 413, description = "Body or context too large", body = ApiError),
    ))]
async fn create(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<(StatusCode, Json<TaskCreated>)> {
    let mut body: CreateTaskRequest = parse_body(&state, body)?;
    if let Some(key) = headers.get("idempotency-key") {
        let key = key.to_str().map_err(|_| ApiError::bad_request("Idempotency-Key must be visible ASCII"))?;
        body.task.idempotency_key = Some(key.to_string());
    }
    if body.task.traceparent.is_none() {
        body.task.traceparent = traceparent(&headers)?;
    }
    let created = state.client().create_task(&body.task_type, &body.task).await?;
    let status = if created.created { StatusCode::CREATED } else { StatusCode::OK };
    Ok((status, Json(created)))
}

/// Creates many tasks of one type in one statement (registering a new type as `POST /v1/tasks`
/// does); their ids in input order.
#[utoipa::path(post, path = "/v1/tasks/bulk", operation_id = "create_tasks", tag = "tasks",
    params(("traceparent" = Option<String>, Header, description = TRACEPARENT_HEADER)),
    request_body = CreateTasksRequest,
    responses(
        (status = 201, description = "Created", body = TasksCreated),
        (status = 400, description = "Malformed body, more than 10,000 tasks, invalid type name or priority", body = ApiError),
        (status = 401, description = "Missing or wrong bearer token", body = ApiError),
        (status = 413, description = "Body or a context too large", body = ApiError),
    ))]
async fn create_bulk(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<(StatusCode, Json<TasksCreated>)> {
    let mut body: CreateTasksRequest = parse_body(&state, body)?;
    if body.tasks.len() > CREATE_TASKS_MAX {
        return Err(ApiError::bad_request("at most 10000 tasks per call"));
    }
    if let Some(parent) = traceparent(&headers)? {
        for task in body.tasks.iter_mut().filter(|t| t.traceparent.is_none()) {
            task.traceparent = Some(parent.clone());
        }
    }
    Ok((StatusCode::CREATED, Json(state.client().create_tasks(&body.task_type, &body.tasks).await?)))
}

/// The longest `wait` of one read of a task, in seconds.
pub const WAIT_MAX_SECONDS: f64 = 60.0;

/// One task with its context, result and schedule log; with `wait`, once it has ended.
#[utoipa::path(get, path = "/v1/tasks/{id}", operation_id = "get_task", tag = "tasks",
    params(("id" = String, Path, description = "Task id"), TaskReadQuery),
    responses(
        (status = 200, description = "The task (with `wait`: once ended, or as it is when the wait ran out)", body = Task),
        (status = 400, description = "Unknown parameter, or a wait outside 0..60 seconds", body = ApiError),
        (status = 401, description = "Missing or wrong bearer token", body = ApiError),
        (status = 404, description = "No such task", body = ApiError),
    ))]
async fn get_one(
    State(state): State<AppState>,
    Path(id): Path<String>,
    query: Result<Query<TaskReadQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<Task>> {
    let Query(q) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let wait = match q.wait {
        None => None,
        Some(w) if w.is_finite() && (0.0..=WAIT_MAX_SECONDS).contains(&w) => {
            Some(std::time::Duration::from_secs_f64(w))
        }
        Some(_) => return Err(ApiError::bad_request(format!("wait must be 0 to {WAIT_MAX_SECONDS} seconds"))),
    };
    match wait {
        Some(wait) => Ok(Json(super::task_wait::read_when_ended(&state, &id, wait).await?)),
        None => {
            let task = state.client().get_task(&id).await?;
            Ok(Json(task.ok_or_else(|| ApiError::not_found(format!("unknown task {}", echo(&id))))?))
        }
    }
}

/// One page of tasks, types by name and each type's newest first (`order=oldest`: oldest first);
/// `next` is the `after` of the next page in the same order, null on the last.
#[utoipa::path(get, path = "/v1/tasks", operation_id = "list_tasks", tag = "tasks",
    params(TaskQuery),
    responses(
        (status = 200, description = "A page of tasks", body = TaskPage),
        (status = 400, description = "Unknown parameter, bad status, order or limit", body = ApiError),
        (status = 401, description = "Missing or wrong bearer token", body = ApiError),
    ))]
async fn list(
    State(state): State<AppState>,
    query: Result<Query<TaskQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<TaskPage>> {
    let Query(q) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    Ok(Json(state.client().list_tasks(&task_filter(q)?).await?))
}

/// Cancels a task that has not ended (`cancelled` is false when it had).
#[utoipa::path(post, path = "/v1/tasks/{id}/cancel", operation_id = "cancel_task", tag = "tasks",
    params(("id" = String, Path, description = "Task id")),
    responses(
        (status = 200, description = "Whether it was cancelled", body = TaskCancelled),
        (status = 401, description = "Missing or wrong bearer token", body = ApiError),
        (status = 404, description = "No such task (or not a task id)", body = ApiError),
    ))]
async fn cancel(State(state): State<AppState>, Path(id): Path<String>) -> ApiResult<Json<TaskCancelled>> {
    Ok(Json(state.client().cancel_task(&id).await?))
}

/// Queues a failed or cancelled task again (`retried` is false for any other status). A task of a
/// workflow run is retried through its node instead (409).
#[utoipa::path(post, path = "/v1/tasks/{id}/retry", operation_id = "retry_task", tag = "tasks",
    params(("id" = String, Path, description = "Task id")),
    responses(
        (status = 200, description = "Whether it was queued again", body = TaskRetried),
        (status = 401, description = "Missing or wrong bearer token", body = ApiError),
        (status = 404, description = "No such task (or not a task id)", body = ApiError),
        (status = 409, description = "The task works for a workflow node (wrong_state): retry the node \
            (`POST /v1/runs/{id}/nodes/{node}/retry`), which resumes its run", body = ApiError),
    ))]
async fn retry(State(state): State<AppState>, Path(id): Path<String>) -> ApiResult<Json<TaskRetried>> {
    Ok(Json(state.client().retry_task(&id).await?))
}

/// The filter a list or a bulk call names, its status checked with an error naming the field.
fn task_filter(q: TaskQuery) -> ApiResult<TaskFilter> {
    let status = match q.status.as_deref() {
        None => None,
        Some(s) => Some(crate::task::TaskStatus::parse(s).ok_or_else(|| {
            ApiError::bad_request(format!(
                "status must be one of {}; got {}",
                crate::task::TaskStatus::names(),
                echo(s)
            ))
        })?),
    };
    let order = match q.order.as_deref() {
        None => None,
        Some(o) => Some(
            TaskOrder::parse(o)
                .ok_or_else(|| ApiError::bad_request(format!("order must be newest or oldest; got {}", echo(o))))?,
        ),
    };
    Ok(TaskFilter {
        task_type: q.task_type,
        status,
        stage: q.stage,
        user_id: q.user_id,
        queue_key: q.queue_key,
        created_after: q.created_after,
        created_before: q.created_before,
        q: q.q,
        after: q.after,
        limit: q.limit,
        order,
    })
}

async fn bulk_change(
    state: AppState,
    body: Result<Bytes, BytesRejection>,
    action: BulkAction,
) -> ApiResult<Json<BulkOutcome>> {
    let body: BulkChangeRequest = parse_body(&state, body)?;
    if body.filter.after.is_some() || body.filter.limit.is_some() || body.filter.order.is_some() {
        return Err(ApiError::bad_request(
            "filter.after, filter.limit and filter.order page a list; a bulk call takes `limit` beside `filter`",
        ));
    }
    let filter = task_filter(body.filter)?;
    let limit = body.limit.unwrap_or(BULK_LIMIT_MAX);
    Ok(Json(state.client().bulk_change_tasks(action, &filter, body.dry_run, limit).await?))
}

/// Queues again the failed and cancelled tasks that match the filter (not those that work for a
/// workflow node: retry the node), at most `limit` per call, each as `POST /v1/tasks/{id}/retry`
/// does. With `dry_run` only counts them.
#[utoipa::path(post, path = "/v1/tasks/bulk-retry", operation_id = "bulk_retry_tasks", tag = "tasks",
    request_body = BulkChangeRequest,
    responses(
        (status = 200, description = "How many matched and were retried, and whether more remain", body = BulkOutcome),
        (status = 400, description = "Malformed body, bad filter or limit", body = ApiError),
        (status = 401, description = "Missing or wrong bearer token", body = ApiError),
        (status = 413, description = "Body too large", body = ApiError),
    ))]
async fn bulk_retry(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<BulkOutcome>> {
    bulk_change(state, body, BulkAction::Retry).await
}

/// Cancels the pending and running tasks that match the filter, at most `limit` per call, each
/// as `POST /v1/tasks/{id}/cancel` does. With `dry_run` only counts them.
#[utoipa::path(post, path = "/v1/tasks/bulk-cancel", operation_id = "bulk_cancel_tasks", tag = "tasks",
    request_body = BulkChangeRequest,
    responses(
        (status = 200, description = "How many matched and were cancelled, and whether more remain", body = BulkOutcome),
        (status = 400, description = "Malformed body, bad filter or limit", body = ApiError),
        (status = 401, description = "Missing or wrong bearer token", body = ApiError),
        (status = 413, description = "Body too large", body = ApiError),
    ))]
async fn bulk_cancel(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<BulkOutcome>> {
    bulk_change(state, body, BulkAction::Cancel).await
}

//! Task routes: create (one or many), get, list with filters and search and keyset pagination,
//! cancel, retry, and bulk retry / cancel of what a filter selects.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use super::openapi::{TaskCancelled, TaskCreated, TaskPage, TaskRetried, TasksCreated};
use super::{parse_body, ApiError, ApiResult, AppState};
use crate::db::api::{self, BulkAction, BulkOutcome, TaskFilter, TaskOrder, BULK_LIMIT_MAX};
use crate::error::echo;
use crate::task::{NewTask, Task};

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

/// A task to create: its type, and the optional fields of one task (`NewTask`).
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[schema(as = CreateTaskRequest)]
#[serde(deny_unknown_fields)]
struct CreateBody {
    /// A task type (registered with the default settings if nothing has registered it).
    #[serde(rename = "type", alias = "task_type")]
    task_type: String,
    #[serde(flatten)]
    task: NewTask,
}

/// Many tasks of one type, created in one statement (at most 10,000).
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[schema(as = CreateTasksRequest)]
#[serde(deny_unknown_fields)]
struct BulkBody {
    /// A task type (registered with the default settings if nothing has registered it).
    #[serde(rename = "type", alias = "task_type")]
    task_type: String,
    /// The tasks, each with the optional fields of one task.
    tasks: Vec<NewTask>,
}

/// Creates one task (of a type nothing has registered yet too: it is registered with the default
/// settings); an `Idempotency-Key` header (or body field) returns the existing task's id,
/// and so does a `unique_key` while its task blocks (answered 200, `created`: false).
#[utoipa::path(post, path = "/v1/tasks", operation_id = "create_task", tag = "tasks",
    params(("Idempotency-Key" = Option<String>, Header, description = "Same key, same type: the existing task's id, nothing created"),
        ("traceparent" = Option<String>, Header, description = TRACEPARENT_HEADER)),
    request_body = CreateBody,
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
) -> ApiResult<(StatusCode, Json<Value>)> {
    let mut body: CreateBody = parse_body(&state, body)?;
    if let Some(key) = headers.get("idempotency-key") {
        let key = key.to_str().map_err(|_| ApiError::bad_request("Idempotency-Key must be visible ASCII"))?;
        body.task.idempotency_key = Some(key.to_string());
    }
    if body.task.traceparent.is_none() {
        body.task.traceparent = traceparent(&headers)?;
    }
    let mut c = state.pool.get().await.map_err(crate::Error::from)?;
    let (id, created) = api::create_task_found(&mut c, &body.task_type, &body.task).await?;
    let status = if created { StatusCode::CREATED } else { StatusCode::OK };
    Ok((status, Json(json!({"id": id, "created": created}))))
}

/// Creates many tasks of one type in one statement (registering a new type as `POST /v1/tasks`
/// does); their ids in input order.
#[utoipa::path(post, path = "/v1/tasks/bulk", operation_id = "create_tasks", tag = "tasks",
    params(("traceparent" = Option<String>, Header, description = TRACEPARENT_HEADER)),
    request_body = BulkBody,
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
) -> ApiResult<(StatusCode, Json<Value>)> {
    let mut body: BulkBody = parse_body(&state, body)?;
    if body.tasks.len() > 10_000 {
        return Err(ApiError::bad_request("at most 10000 tasks per call"));
    }
    if let Some(parent) = traceparent(&headers)? {
        for task in body.tasks.iter_mut().filter(|t| t.traceparent.is_none()) {
            task.traceparent = Some(parent.clone());
        }
    }
    let ids =
        api::create_tasks(&state.pool.get().await.map_err(crate::Error::from)?, &body.task_type, &body.tasks).await?;
    Ok((StatusCode::CREATED, Json(json!({"ids": ids}))))
}

pub(super) const TRACEPARENT_HEADER: &str =
    "The W3C trace context of the enqueue, for the tasks whose body gives none \
    (00-<32 hex>-<16 hex>-<2 hex>); a malformed one is refused (400)";

/// The trace context of the tasks a request creates without their own: with traces exported,
/// the request's span (which continues the `traceparent` header); else the header, if any. Its
/// format is checked where the task is created (`create_task` refuses a malformed one, and
/// nothing is created), so a malformed header is passed on as it is, to be refused.
pub(super) fn traceparent(headers: &HeaderMap) -> ApiResult<Option<String>> {
    let header = headers
        .get("traceparent")
        .map(|v| v.to_str().map(str::to_string).map_err(|_| ApiError::bad_request("traceparent must be visible ASCII")))
        .transpose()?;
    if header.as_deref().is_none_or(crate::trace::is_traceparent) {
        if let Some(span) = crate::trace::current_traceparent() {
            return Ok(Some(span));
        }
    }
    Ok(header)
}

/// The query string of a task's read: how long to wait for it to end.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct GetQuery {
    /// Seconds (0 to 60, fractions allowed) to hold the answer until the task ends: a long-poll
    /// that answers as soon as it has ended, or with the task as it is when the wait runs out.
    wait: Option<f64>,
}

/// The longest `wait` of one read of a task, in seconds.
pub const WAIT_MAX_SECONDS: f64 = 60.0;
/// How often a waiting read looks at its task again: the first pause, doubling to the longest.
const WAIT_POLL_FIRST: std::time::Duration = std::time::Duration::from_millis(20);
const WAIT_POLL_MAX: std::time::Duration = std::time::Duration::from_millis(500);

/// One task with its context, result and schedule log; with `wait`, once it has ended.
#[utoipa::path(get, path = "/v1/tasks/{id}", operation_id = "get_task", tag = "tasks",
    params(("id" = String, Path, description = "Task id"), GetQuery),
    responses(
        (status = 200, description = "The task (with `wait`: once ended, or as it is when the wait ran out)", body = Task),
        (status = 400, description = "Unknown parameter, or a wait outside 0..60 seconds", body = ApiError),
        (status = 401, description = "Missing or wrong bearer token", body = ApiError),
        (status = 404, description = "No such task", body = ApiError),
    ))]
async fn get_one(
    State(state): State<AppState>,
    Path(id): Path<String>,
    query: Result<Query<GetQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<Task>> {
    let Query(q) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let wait = match q.wait {
        None => None,
        Some(w) if w.is_finite() && (0.0..=WAIT_MAX_SECONDS).contains(&w) => {
            Some(std::time::Duration::from_secs_f64(w))
        }
        Some(_) => return Err(ApiError::bad_request(format!("wait must be 0 to {WAIT_MAX_SECONDS} seconds"))),
    };
    let deadline = wait.map(|w| tokio::time::Instant::now() + w);
    let mut pause = WAIT_POLL_FIRST;
    loop {
        // a connection per look, not held through the wait
        let task = api::get_task(&state.pool.get().await.map_err(crate::Error::from)?, &id).await?;
        let task = task.ok_or_else(|| ApiError::not_found(format!("unknown task {}", echo(&id))))?;
        let Some(deadline) = deadline else { return Ok(Json(task)) };
        let now = tokio::time::Instant::now();
        if task.status.is_final() || now >= deadline {
            return Ok(Json(task));
        }
        tokio::time::sleep(pause.min(deadline - now)).await;
        pause = (pause * 2).min(WAIT_POLL_MAX);
    }
}

/// The query string of a list, and the filter of a bulk call: like [`TaskFilter`], with the
/// status as text so that a bad one gets an error naming the field.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams, utoipa::ToSchema)]
#[into_params(parameter_in = Query)]
#[schema(as = TaskFilter)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    /// Only this type.
    #[serde(rename = "type", alias = "task_type")]
    task_type: Option<String>,
    /// Only this status: pending, running, succeeded, failed or cancelled.
    status: Option<String>,
    /// Only this stage.
    stage: Option<String>,
    /// Only this user.
    user_id: Option<String>,
    /// Only this queue key.
    queue_key: Option<String>,
    /// Only tasks created at or after this time (RFC 3339).
    created_after: Option<chrono::DateTime<chrono::Utc>>,
    /// Only tasks created before this time (RFC 3339).
    created_before: Option<chrono::DateTime<chrono::Utc>>,
    /// An exact task id, an idempotency key, or text in the last error (looked for in at most
    /// 10,000 tasks that match the other conditions, from `after` on).
    q: Option<String>,
    /// Start after this task id (`next` of the previous page, asked in the same order).
    after: Option<String>,
    /// Page size, 1..=1000 (default 100).
    limit: Option<i32>,
    /// `newest` (the default) or `oldest`: each type's tasks newest or oldest first (types by
    /// name; ids count per type, so no index orders tasks of several types by age).
    order: Option<String>,
}

/// One page of tasks, types by name and each type's newest first (`order=oldest`: oldest first);
/// `next` is the `after` of the next page in the same order, null on the last.
#[utoipa::path(get, path = "/v1/tasks", operation_id = "list_tasks", tag = "tasks",
    params(ListQuery),
    responses(
        (status = 200, description = "A page of tasks", body = TaskPage),
        (status = 400, description = "Unknown parameter, bad status, order or limit", body = ApiError),
        (status = 401, description = "Missing or wrong bearer token", body = ApiError),
    ))]
async fn list(
    State(state): State<AppState>,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<Value>> {
    let Query(q) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let filter = task_filter(q)?;
    let limit = filter.limit.unwrap_or(100);
    let tasks = api::list_tasks(&state.pool.get().await.map_err(crate::Error::from)?, &filter).await?;
    let next = if tasks.len() as i32 == limit { tasks.last().map(|t| t.id.to_string()) } else { None };
    Ok(Json(json!({"tasks": tasks, "next": next})))
}

/// Cancels a task that has not ended (`cancelled` is false when it had).
#[utoipa::path(post, path = "/v1/tasks/{id}/cancel", operation_id = "cancel_task", tag = "tasks",
    params(("id" = String, Path, description = "Task id")),
    responses(
        (status = 200, description = "Whether it was cancelled", body = TaskCancelled),
        (status = 401, description = "Missing or wrong bearer token", body = ApiError),
        (status = 404, description = "No such task (or not a task id)", body = ApiError),
    ))]
async fn cancel(State(state): State<AppState>, Path(id): Path<String>) -> ApiResult<Json<Value>> {
    let done = api::cancel_task(&state.pool.get().await.map_err(crate::Error::from)?, &id).await?;
    Ok(Json(json!({"id": id, "cancelled": done})))
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
async fn retry(State(state): State<AppState>, Path(id): Path<String>) -> ApiResult<Json<Value>> {
    let done = api::retry_task(&state.pool.get().await.map_err(crate::Error::from)?, &id).await?;
    Ok(Json(json!({"id": id, "retried": done})))
}

/// The filter a list or a bulk call names, its status checked with an error naming the field.
fn task_filter(q: ListQuery) -> ApiResult<TaskFilter> {
    let status = match q.status.as_deref() {
        None => None,
        Some(s) => Some(crate::task::TaskStatus::parse(s).ok_or_else(|| {
            ApiError::bad_request(format!(
                "status must be one of pending, running, succeeded, failed, cancelled; got {}",
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

/// A bulk retry or cancel: which tasks, whether only to count them, and how many at most.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[schema(as = BulkChangeRequest)]
#[serde(deny_unknown_fields)]
struct BulkChangeBody {
    /// The tasks to act on: the conditions of `GET /v1/tasks` (none at all selects every task the
    /// action can take); its paging fields `after`, `limit` and `order` are refused.
    #[serde(default)]
    filter: ListQuery,
    /// Only count the tasks that would change; change nothing.
    #[serde(default)]
    dry_run: bool,
    /// Most tasks this call changes, 1..=1000 (default 1000); `more` says whether others remain.
    limit: Option<i32>,
}

async fn bulk_change(
    state: AppState,
    body: Result<Bytes, BytesRejection>,
    action: BulkAction,
) -> ApiResult<Json<BulkOutcome>> {
    let body: BulkChangeBody = parse_body(&state, body)?;
    if body.filter.after.is_some() || body.filter.limit.is_some() || body.filter.order.is_some() {
        return Err(ApiError::bad_request(
            "filter.after, filter.limit and filter.order page a list; a bulk call takes `limit` beside `filter`",
        ));
    }
    let filter = task_filter(body.filter)?;
    let c = state.pool.get().await.map_err(crate::Error::from)?;
    let limit = body.limit.unwrap_or(BULK_LIMIT_MAX);
    Ok(Json(api::bulk_change_tasks(&c, action, &filter, body.dry_run, limit).await?))
}

/// Queues again the failed and cancelled tasks that match the filter (not those that work for a
/// workflow node: retry the node), at most `limit` per call, each as `POST /v1/tasks/{id}/retry`
/// does. With `dry_run` only counts them.
#[utoipa::path(post, path = "/v1/tasks/bulk-retry", operation_id = "bulk_retry_tasks", tag = "tasks",
    request_body = BulkChangeBody,
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
    request_body = BulkChangeBody,
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

//! Workflow routes: pipelines (apply a definition as a new version, list, get, activate,
//! retire) and runs (start, list, get with events / segments / traces / callbacks, cancel, retry,
//! retry a node, complete an asynchronous node). Thin over the SQL API; pipelines and runs are
//! the JSON documents the SQL functions build.

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::Value;

use super::{parse_body, ApiError, ApiResult, AppState};
use crate::protocol::pipelines::PipelineQuery;
use crate::protocol::runs::{CompleteNodeRequest, RunCancelled, RunNodeRetried, RunPage, RunQuery, RunStarted};
use crate::run::StartRun;

pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/pipelines", get(list_pipelines))
        .route("/v1/pipelines/:name", get(get_pipeline).put(put_pipeline))
        .route("/v1/pipelines/:name/versions/:version/activate", post(activate))
        .route("/v1/pipelines/:name/versions/:version/retire", post(retire))
        .route("/v1/runs", post(start_run).get(list_runs))
        .route("/v1/runs/:id", get(get_run))
        .route("/v1/runs/:id/cancel", post(cancel_run))
        .route("/v1/runs/:id/retry", post(retry_run))
        .route("/v1/runs/:id/nodes/:node/retry", post(retry_node))
        .route("/v1/runs/:id/nodes/:node/complete", post(complete_node))
}

/// Every pipeline's versions, newest first, without definitions.
#[utoipa::path(get, path = "/v1/pipelines", operation_id = "list_pipelines", tag = "workflows",
    responses(
        (status = 200, description = "Pipeline versions", body = Vec<Object>),
        (status = 401, description = "Missing or wrong bearer token", body = ApiError),
    ))]
async fn list_pipelines(State(state): State<AppState>) -> ApiResult<Json<Vec<Value>>> {
    Ok(Json(state.client().list_pipelines().await?))
}

/// One version with its definition and execution plan.
#[utoipa::path(get, path = "/v1/pipelines/{name}", operation_id = "get_pipeline", tag = "workflows",
    params(("name" = String, Path, description = "Pipeline name"), PipelineQuery),
    responses(
        (status = 200, description = "The version", body = Object),
        (status = 400, description = "Unknown parameter, a version that is not an integer, or a malformed name",
            body = ApiError),
        (status = 401, description = "Missing or wrong bearer token", body = ApiError),
        (status = 404, description = "No such pipeline or version", body = ApiError),
    ))]
async fn get_pipeline(
    State(state): State<AppState>,
    Path(name): Path<String>,
    query: Result<Query<PipelineQuery>, QueryRejection>,
) -> ApiResult<Json<Value>> {
    let Query(q) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    Ok(Json(state.client().get_pipeline(&name, q.version).await?))
}

/// Validates a definition (the body) and stores it as the pipeline's next version, active
/// unless `?status=draft`; the same definition as the latest version stores nothing new
/// (`created`: false). An invalid definition gets 400 naming the node or edge.
#[utoipa::path(put, path = "/v1/pipelines/{name}", operation_id = "put_pipeline", tag = "workflows",
    params(("name" = String, Path, description = "Pipeline name"), PipelineQuery),
    request_body(content = Object, description = "The definition: {nodes, edges, timeout, retries, description}"),
    responses(
        (status = 200, description = "The stored (or found) version", body = Object),
        (status = 400, description = "Invalid definition (naming the node or edge), unknown parameter, bad status \
            or a malformed name", body = ApiError),
        (status = 401, description = "Missing or wrong bearer token", body = ApiError),
        (status = 413, description = "Body too large", body = ApiError),
    ))]
async fn put_pipeline(
    State(state): State<AppState>,
    Path(name): Path<String>,
    query: Result<Query<PipelineQuery>, QueryRejection>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<Value>> {
    let Query(q) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let definition: Value = parse_body(&state, body)?;
    let status = q.status.as_deref().unwrap_or("active");
    Ok(Json(state.client().put_pipeline(&name, &definition, status).await?))
}

/// Makes a version the active one (the previous active version is retired).
#[utoipa::path(post, path = "/v1/pipelines/{name}/versions/{version}/activate", operation_id = "activate_pipeline",
    tag = "workflows",
    params(("name" = String, Path, description = "Pipeline name"), ("version" = i32, Path, description = "Version")),
    responses(
        (status = 200, description = "The version", body = Object),
        (status = 401, description = "Missing or wrong bearer token", body = ApiError),
        (status = 404, description = "No such pipeline or version", body = ApiError),
    ))]
async fn activate(State(state): State<AppState>, Path((name, version)): Path<(String, i32)>) -> ApiResult<Json<Value>> {
    Ok(Json(state.client().activate_pipeline(&name, version).await?))
}

/// Retires a version: it starts no new runs (started runs finish on it).
#[utoipa::path(post, path = "/v1/pipelines/{name}/versions/{version}/retire", operation_id = "retire_pipeline",
    tag = "workflows",
    params(("name" = String, Path, description = "Pipeline name"), ("version" = i32, Path, description = "Version")),
    responses(
        (status = 200, description = "The version", body = Object),
        (status = 401, description = "Missing or wrong bearer token", body = ApiError),
        (status = 404, description = "No such pipeline or version", body = ApiError),
    ))]
async fn retire(State(state): State<AppState>, Path((name, version)): Path<(String, i32)>) -> ApiResult<Json<Value>> {
    Ok(Json(state.client().retire_pipeline(&name, version).await?))
}

/// Starts a run of a pipeline's active version (or of `version`).
#[utoipa::path(post, path = "/v1/runs", operation_id = "start_run", tag = "workflows",
    request_body = StartRun,
    params(("traceparent" = Option<String>, Header, description = super::request_span::TRACEPARENT_HEADER)),
    responses(
        (status = 201, description = "Started (or scheduled for run_at)", body = RunStarted),
        (status = 400, description = "Malformed body or bad input", body = ApiError),
        (status = 401, description = "Missing or wrong bearer token", body = ApiError),
        (status = 404, description = "Unknown pipeline or version", body = ApiError),
        (status = 409, description = "The version is retired", body = ApiError),
        (status = 413, description = "Body or input too large", body = ApiError),
    ))]
async fn start_run(
    State(state): State<AppState>,
    headers: axum::http::HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<(StatusCode, Json<RunStarted>)> {
    let mut start: StartRun = parse_body(&state, body)?;
    if start.traceparent.is_none() {
        start.traceparent = super::request_span::traceparent(&headers)?;
    }
    Ok((StatusCode::CREATED, Json(state.client().start_run(&start).await?)))
}

/// One page of runs, newest first; `next` is the `before` of the next page, null on the last.
#[utoipa::path(get, path = "/v1/runs", operation_id = "list_runs", tag = "workflows",
    params(RunQuery),
    responses(
        (status = 200, description = "A page of runs", body = RunPage),
        (status = 400, description = "Unknown parameter, bad status or limit, or a `before` that names no run \
            (invalid_argument)", body = ApiError),
        (status = 401, description = "Missing or wrong bearer token", body = ApiError),
    ))]
async fn list_runs(
    State(state): State<AppState>,
    query: Result<Query<RunQuery>, QueryRejection>,
) -> ApiResult<Json<RunPage>> {
    let Query(q) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    Ok(Json(state.client().list_runs(&q).await?))
}

/// A run with its events (in plan order), segments, function calls (traces) and callbacks.
#[utoipa::path(get, path = "/v1/runs/{id}", operation_id = "get_run", tag = "workflows",
    params(("id" = String, Path, description = "Run id")),
    responses(
        (status = 200, description = "The run", body = Object),
        (status = 401, description = "Missing or wrong bearer token", body = ApiError),
        (status = 404, description = "No such run", body = ApiError),
    ))]
async fn get_run(State(state): State<AppState>, Path(id): Path<String>) -> ApiResult<Json<Value>> {
    Ok(Json(state.client().get_run(&id).await?))
}

/// Cancels a scheduled or running run (`cancelled` is false when it had already ended).
#[utoipa::path(post, path = "/v1/runs/{id}/cancel", operation_id = "cancel_run", tag = "workflows",
    params(("id" = String, Path, description = "Run id")),
    responses(
        (status = 200, description = "Whether it was cancelled", body = RunCancelled),
        (status = 401, description = "Missing or wrong bearer token", body = ApiError),
        (status = 404, description = "No such run", body = ApiError),
    ))]
async fn cancel_run(State(state): State<AppState>, Path(id): Path<String>) -> ApiResult<Json<RunCancelled>> {
    Ok(Json(state.client().cancel_run(&id).await?))
}

/// Runs a failed, timed-out or cancelled run again as a new run with the same notify key.
#[utoipa::path(post, path = "/v1/runs/{id}/retry", operation_id = "retry_run", tag = "workflows",
    params(("id" = String, Path, description = "Run id")),
    responses(
        (status = 201, description = "The new run", body = RunStarted),
        (status = 401, description = "Missing or wrong bearer token", body = ApiError),
        (status = 404, description = "No such run", body = ApiError),
        (status = 409, description = "The run has not failed (or was retried already)", body = ApiError),
    ))]
async fn retry_run(State(state): State<AppState>, Path(id): Path<String>) -> ApiResult<(StatusCode, Json<RunStarted>)> {
    Ok((StatusCode::CREATED, Json(state.client().retry_run(&id).await?)))
}

/// Resumes a failed run from a failed node.
#[utoipa::path(post, path = "/v1/runs/{id}/nodes/{node}/retry", operation_id = "retry_node", tag = "workflows",
    params(("id" = String, Path, description = "Run id"), ("node" = String, Path, description = "Node name")),
    responses(
        (status = 200, description = "Resumed", body = RunNodeRetried),
        (status = 401, description = "Missing or wrong bearer token", body = ApiError),
        (status = 404, description = "No such run or node", body = ApiError),
        (status = 409, description = "The node (or run) has not failed", body = ApiError),
    ))]
async fn retry_node(
    State(state): State<AppState>,
    Path((id, node)): Path<(String, String)>,
) -> ApiResult<Json<RunNodeRetried>> {
    Ok(Json(state.client().retry_node(&id, &node).await?))
}

/// Completes (or fails, with `error`) an asynchronous node waiting for an external result; the run
/// afterwards.
#[utoipa::path(post, path = "/v1/runs/{id}/nodes/{node}/complete", operation_id = "complete_node", tag = "workflows",
    params(("id" = String, Path, description = "Run id"), ("node" = String, Path, description = "Node name")),
    request_body = CompleteNodeRequest,
    responses(
        (status = 200, description = "The run", body = Object),
        (status = 400, description = "Malformed body", body = ApiError),
        (status = 401, description = "Missing or wrong bearer token", body = ApiError),
        (status = 404, description = "No such run or node", body = ApiError),
        (status = 409, description = "The node is not waiting for an external completion", body = ApiError),
        (status = 413, description = "Body or result too large", body = ApiError),
    ))]
async fn complete_node(
    State(state): State<AppState>,
    Path((id, node)): Path<(String, String)>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<Value>> {
    let body: CompleteNodeRequest = parse_body(&state, body)?;
    Ok(Json(state.client().complete_node(&id, &node, &body).await?))
}

//! The dashboard's history and presence routes: `GET /v1/stats/history` (the points the
//! history sampler keeps, per type or for all types) and `GET /v1/workers` (live workers and the
//! maintenance leader). Both read small tables only, so they cost the same at any number of tasks.

use axum::extract::{Query, State};
use axum::routing::get;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use super::{ApiError, ApiResult, AppState};
use crate::db::api;
use crate::error::Error;

/// A worker is listed while its last heartbeat is this recent (every 5 s while busy, 30 s idle).
pub(super) const WORKER_SEEN_WITHIN_SECS: f64 = 60.0;

pub(super) fn routes() -> Router<AppState> {
    Router::new().route("/v1/stats/history", get(history)).route("/v1/workers", get(workers))
}

/// The query string of `GET /v1/stats/history`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct HistoryQuery {
    /// Only this type (default: all types summed).
    #[serde(rename = "type")]
    task_type: Option<String>,
    /// hour or day (minute points), or month (hour points).
    range: String,
}

/// What `GET /v1/stats/history` answers.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct History {
    /// The type, or null for all types summed.
    #[serde(rename = "type")]
    task_type: Option<String>,
    /// hour, day or month.
    range: String,
    /// Seconds per point: 60 for hour and day, 3600 for month.
    resolution_seconds: i32,
    /// Oldest first; counts are per interval, not cumulative; intervals with no sample have no point.
    points: Vec<api::StatsPoint>,
}

/// Throughput and queue lag of one type (or all types) over the last hour, day or month.
#[utoipa::path(get, path = "/v1/stats/history", tag = "dashboard",
    params(HistoryQuery),
    responses(
        (status = 200, description = "The points, oldest first", body = History),
        (status = 400, description = "Unknown parameter, type or range", body = ApiError),
        (status = 401, description = "Missing or wrong bearer token", body = ApiError),
        (status = 503, description = "No database connection", body = ApiError),
    ))]
async fn history(
    State(state): State<AppState>,
    query: Result<Query<HistoryQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<History>> {
    let Query(q) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let resolution_seconds = match q.range.as_str() {
        "hour" | "day" => 60,
        "month" => 3600,
        other => {
            return Err(ApiError::bad_request(format!(
                "range must be one of hour, day, month; got {}",
                crate::error::echo(other)
            )))
        }
    };
    let c = state.pool.get().await.map_err(Error::from)?;
    let points = match api::stats_history(&c, q.task_type.as_deref(), &q.range, None).await {
        // a type named in the query string is a bad parameter here, not a missing resource
        Err(Error::UnknownTaskType(m) | Error::InvalidArgument(m)) => return Err(ApiError::bad_request(m)),
        other => other?,
    };
    Ok(Json(History { task_type: q.task_type, range: q.range, resolution_seconds, points }))
}

/// What `GET /v1/workers` answers.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct Workers {
    /// Workers whose heartbeat row is recent, by id.
    workers: Vec<api::WorkerRow>,
    /// The maintenance leader, or null when none has said so recently.
    leader: Option<api::LeaderRow>,
}

/// Live workers (those on the database write a heartbeat row every few seconds) and the current
/// maintenance leader.
#[utoipa::path(get, path = "/v1/workers", tag = "dashboard",
    responses(
        (status = 200, description = "Live workers and the leader", body = Workers),
        (status = 401, description = "Missing or wrong bearer token", body = ApiError),
        (status = 503, description = "No database connection", body = ApiError),
    ))]
async fn workers(State(state): State<AppState>) -> ApiResult<Json<Workers>> {
    let c = state.pool.get().await.map_err(Error::from)?;
    let workers = api::list_workers(&c, WORKER_SEEN_WITHIN_SECS, None).await?;
    let leader = api::current_leader(&c, crate::client::LEADER_SEEN_WITHIN_SECS, None).await?;
    Ok(Json(Workers { workers, leader }))
}

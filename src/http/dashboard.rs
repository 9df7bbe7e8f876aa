//! The web dashboard: one page at `GET /` with its scripts and style sheet under `/dashboard/`,
//! embedded in the binary (`include_str!` of `src/http/dashboard/*`: plain HTML, vanilla JS and
//! CSS, charts and graphs drawn as SVG by the page, no build step, nothing loaded from
//! elsewhere), and one read-only JSON route, `GET /v1/dashboard`, with the per-type figures that
//! no other route gives in one call. The page uses only documented `/v1` routes:
//!
//! ```text
//!   browser ── GET /  /dashboard/{file} ───────────────────────────────▶ no token: static, no data
//!      │
//!      └──── GET  /v1/dashboard, /v1/stats/history      overview: figures, totals, charts
//!            GET  /v1/tasks?filters  POST /v1/tasks/bulk-retry|bulk-cancel   tasks
//!            GET  /v1/tasks/{id}  POST /v1/tasks/{id}/retry|cancel           one task
//!            GET|PUT /v1/task-types/{name}, .../pause|resume, .../queues, .../queue-limit
//!            GET  /v1/pipelines, /v1/runs, /v1/runs/{id}  POST .../retry, .../nodes/{node}/retry
//!            GET  /v1/schedules  POST .../pause|resume;  GET /v1/workers
//!                                                ───▶ bearer token when the server has tokens
//! ```
//!
//! The page's state is in the URL's hash (`#/tasks?status=failed`, `#task=<id>`, `#run=<id>`,
//! `#/types/<name>`, ...), so every view is a bookmark. The charts and the workers view read
//! routes that a server may not have yet: a 404 there shows "not available", not an error.
//!
//! # Auth
//! The page and its assets hold no data, so they are served without a token. The API calls the
//! page makes need one when the server was started with tokens: the page has a Token field, and
//! keeps what is saved there in the browser's `localStorage` (key `asyncflow.token`), sent as
//! `Authorization: Bearer <token>` on every call; Forget removes it. Whoever can use that browser
//! profile can read the token, so save it only on a machine you trust.
//!
//! # What the figures are
//! - ready, delayed, running, lag (age of the oldest ready task), paused: the
//!   `asyncflow.queue_depth` view, as `GET /v1/queue-depth` gives them.
//! - ready, delayed, running, waiting, succeeded, failed, cancelled: the type's stored tasks per
//!   status (waiting: for an event or for children),
//!   from the counters the SQL API keeps on every transition (`asyncflow.status_counts`; ready
//!   and delayed split pending by counting the delayed ones through their index), so finished
//!   tasks leave the counts when retention drops their shard and an answer costs the same at
//!   ten tasks and at ten million.
//! - succeeded_total, failed_total, retried_total: the monotonic counters (as `GET /metrics`).
//! - held, held_tasks: whether and how many pending tasks are in queue keys held at 0 (fair
//!   types), which no claim takes.
//! - totals: the per-type counts summed; leader: the maintenance leader, as `GET /v1/workers`.
//! - throughput: computed in the browser, not here: the growth of succeeded + failed between the
//!   page's successive polls, per minute, over about the last minute of polls ("—" until the
//!   second poll; it starts again when the count goes down, as after a retry by hand).
//! - shards: `begin_pos..end_pos` from the type's row in `asyncflow.positions` and the count of
//!   live shards.
//!
//! All of it is read in one read-only, repeatable-read transaction, so the figures of one answer
//! agree with each other.
//!
//! # Untrusted text
//! Task data (context, result, errors, stage and worker names) reaches the page only through
//! `textContent`, never `innerHTML`, and the page is served with a Content-Security-Policy that
//! allows only its own script and style sheet: markup in task data is shown as text and could
//! not run even if it got in.

use axum::extract::{Path, State};
use axum::http::header;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::{Json, Router};

use super::{ApiError, ApiResult, AppState};
use crate::protocol::dashboard::Overview;

const INDEX_HTML: &str = include_str!("dashboard/index.html");

/// The page's assets by file name: its scripts (index.html loads them in this order) and style
/// sheet.
const ASSETS: &[(&str, &str, &str)] = &[
    ("core.js", "text/javascript; charset=utf-8", include_str!("dashboard/core.js")),
    ("charts.js", "text/javascript; charset=utf-8", include_str!("dashboard/charts.js")),
    ("overview.js", "text/javascript; charset=utf-8", include_str!("dashboard/overview.js")),
    ("tasks.js", "text/javascript; charset=utf-8", include_str!("dashboard/tasks.js")),
    ("types.js", "text/javascript; charset=utf-8", include_str!("dashboard/types.js")),
    ("workflows.js", "text/javascript; charset=utf-8", include_str!("dashboard/workflows.js")),
    ("app.js", "text/javascript; charset=utf-8", include_str!("dashboard/app.js")),
    ("style.css", "text/css; charset=utf-8", include_str!("dashboard/style.css")),
];

/// Only the page's own script, style sheet and API; no inline script, no framing, no forms
/// posting elsewhere.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; \
                   base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The page and its assets, served without a token.
pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/", get(page))
        .route("/dashboard", get(|| async { Redirect::permanent("/") }))
        .route("/dashboard/:file", get(asset_file))
}

/// The JSON route the page reads, behind the bearer token like the rest of `/v1`.
pub(super) fn api_routes() -> Router<AppState> {
    Router::new().route("/v1/dashboard", get(overview))
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            // Revalidate every time, so a new binary's page is never mixed with an old script.
            (header::CACHE_CONTROL, "no-cache"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
            (header::CONTENT_SECURITY_POLICY, CSP),
        ],
        body,
    )
        .into_response()
}

/// The dashboard page (no auth: it holds no data; its API calls carry the token).
#[utoipa::path(get, path = "/", tag = "dashboard", security(()),
    responses((status = 200, description = "The dashboard's HTML page", content_type = "text/html", body = String)))]
async fn page() -> Response {
    asset("text/html; charset=utf-8", INDEX_HTML)
}

/// One of the dashboard's scripts or its style sheet (no auth).
#[utoipa::path(get, path = "/dashboard/{file}", tag = "dashboard", security(()),
    params(("file" = String, Path, description = "core.js, charts.js, overview.js, tasks.js, types.js, workflows.js, app.js or style.css")),
    responses(
        (status = 200, description = "The file (text/javascript or text/css)", body = String),
        (status = 400, description = "Not a file name", body = ApiError),
        (status = 404, description = "No such file", body = ApiError),
    ))]
async fn asset_file(Path(file): Path<String>) -> Response {
    match ASSETS.iter().find(|(name, _, _)| *name == file) {
        Some((_, content_type, body)) => asset(content_type, body),
        None => ApiError::not_found("no such dashboard file").into_response(),
    }
}

/// Per task type: queue depth, lag, counts per status and shard positions, for the dashboard.
#[utoipa::path(get, path = "/v1/dashboard", tag = "dashboard",
    responses(
        (status = 200, description = "The figures of every task type", body = Overview),
        (status = 401, description = "Missing or wrong bearer token", body = ApiError),
        (status = 503, description = "No database connection", body = ApiError),
    ))]
async fn overview(State(state): State<AppState>) -> ApiResult<Json<Overview>> {
    Ok(Json(state.client().overview().await?))
}

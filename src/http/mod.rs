//! The HTTP API: tasks, task types, queue depth and a fenced worker protocol for workers that
//! cannot reach the database (and, in `compat/`, the original asyncflow server's protocol).
//! Servers keep no state of their own, so any number run behind a load balancer against one
//! database.
//!
//! ```text
//!   /healthz /readyz /openapi.json       no auth (openapi.rs: the document of everything else)
//!   /v1/tasks ...  /v1/task-types ...    bearer token when configured
//!   /v1/queue-depth  /v1/worker/...
//!   /metrics                             Prometheus, bearer token when configured (metrics.rs)
//!   /create_task /hold_tasks /set_task ... and the same under /v1: the original flowsvr
//!                                        protocol for old workers (compat/)
//! ```

mod cancels;
mod children;
mod compat;
mod dashboard;
mod error;
mod events;
mod explain;
mod health;
mod hold_wait;
mod keyed_watch;
mod metrics;
pub mod openapi;
mod request_span;
mod schedules;
mod server;
mod stats;
mod task_types;
mod task_wait;
mod tasks;
mod worker_protocol;
mod workflows;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use axum::Router;
use tokio_util::sync::CancellationToken;

pub use error::{ApiError, ApiResult};

use crate::db::DbPool;
use crate::error::{Error, Result};

/// Default largest request body.
pub const MAX_BODY_DEFAULT: usize = 2 * 1024 * 1024;
/// Default time a client has to send a request's head, from when the server starts waiting for
/// it: also how long a connection may stay open with nothing said (see `server`).
pub const HEADER_TIMEOUT_DEFAULT: Duration = Duration::from_secs(30);
/// Default time a client has to send a request's body, from the end of its head.
pub const BODY_TIMEOUT_DEFAULT: Duration = Duration::from_secs(60);

/// How the server runs.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// Accepted bearer tokens (empty: no auth).
    pub tokens: Vec<String>,
    /// Allow a non-loopback address without tokens.
    pub insecure_no_auth: bool,
    /// Largest request body in bytes.
    pub max_body: usize,
    /// Time to send a request's head; also the longest a connection stays open idle.
    pub header_timeout: Duration,
    /// Time to send a request's body, from the end of its head.
    pub body_timeout: Duration,
}

impl HttpConfig {
    /// Refuses to expose an unauthenticated API beyond this machine unless told to.
    pub fn validate(&self) -> Result<()> {
        if self.tokens.is_empty() && !self.listen.ip().is_loopback() && !self.insecure_no_auth {
            return Err(Error::Config(format!(
                "refusing to listen on {} without a bearer token: set --token (or ASYNCFLOW_TOKENS), \
                 or pass --insecure-no-auth",
                self.listen
            )));
        }
        if self.tokens.iter().any(|t| t.len() < 16) {
            return Err(Error::Config("bearer tokens must be at least 16 characters".into()));
        }
        if self.max_body < 1024 {
            return Err(Error::Config("--max-body must be at least 1024 bytes".into()));
        }
        if self.header_timeout.is_zero() || self.body_timeout.is_zero() {
            return Err(Error::Config("--header-timeout and --body-timeout must be longer than 0s".into()));
        }
        Ok(())
    }
}

/// What handlers share.
#[derive(Clone)]
pub struct AppState {
    pool: DbPool,
    tokens: Arc<Vec<String>>,
    max_body: usize,
    body_timeout: Duration,
    metrics: Arc<metrics::Metrics>,
    /// The cancels heard on the database's `asyncflow_cancel` channel, for
    /// `GET /v1/worker/cancels`; None without a LISTEN connection (its streams end at once).
    cancels: Option<tokio::sync::broadcast::Sender<crate::db::listen::Cancel>>,
    /// The wake-ups heard on the database's `asyncflow` channel, per type, for holds that wait;
    /// None without a LISTEN connection (they poll, see `hold_wait`).
    wakeups: Option<Arc<hold_wait::Wakeups>>,
    /// The ends of waited tasks heard on the database's `asyncflow_ended` channel, per task, for
    /// `GET /v1/tasks/{id}?wait=`; None without a LISTEN connection (it polls, see `task_wait`).
    task_waiters: Option<Arc<task_wait::Waiters>>,
    /// Fired when the server shuts down: waiting holds answer at once.
    shutdown: CancellationToken,
}

impl AppState {
    /// The admin client of the server's own database: handlers answer through it, so that an
    /// answer is composed in one place for the HTTP API and the Rust and command-line clients.
    fn client(&self) -> crate::client::Client {
        crate::client::Client::Database(self.pool.clone())
    }
}

/// The router with every route, auth and body limit, without a LISTEN connection behind
/// `GET /v1/worker/cancels` and the holds that wait (see [`router_listening`]).
pub fn router(pool: DbPool, config: &HttpConfig) -> Router {
    router_listening(pool, config, None, CancellationToken::new())
}

/// The router with every route; `channels` (a LISTEN connection, `db::listen`) carries the
/// `asyncflow_cancel` notifications to the workers' cancel streams, the `asyncflow` ones to
/// the holds that wait and the `asyncflow_ended` ones to the reads that wait for a task's end;
/// `shutdown` ends those waits.
pub fn router_listening(
    pool: DbPool,
    config: &HttpConfig,
    channels: Option<&crate::db::listen::Channels>,
    shutdown: CancellationToken,
) -> Router {
    let state = AppState {
        pool,
        tokens: Arc::new(config.tokens.clone()),
        max_body: config.max_body,
        body_timeout: config.body_timeout,
        metrics: Arc::default(),
        cancels: channels.map(|c| c.cancels.clone()),
        wakeups: channels.map(|c| hold_wait::Wakeups::spawn(c.wakes.subscribe())),
        task_waiters: channels.map(|c| task_wait::Waiters::spawn(c.ended.subscribe(), c.wakes.subscribe())),
        shutdown,
    };
    let api = Router::new()
        .merge(tasks::routes())
        .merge(task_types::routes())
        .merge(worker_protocol::routes())
        .merge(cancels::routes())
        .merge(workflows::routes())
        .merge(schedules::routes())
        .merge(events::routes())
        .merge(explain::routes())
        .merge(children::routes())
        .merge(compat::routes())
        .merge(metrics::routes())
        .merge(dashboard::api_routes())
        .merge(stats::routes())
        .route_layer(axum::middleware::from_fn_with_state(state.clone(), require_token));
    Router::new()
        .merge(health::routes())
        .merge(openapi::routes())
        .merge(dashboard::routes())
        .merge(api)
        .fallback(|| async { ApiError::not_found("no such route") })
        .layer(axum::middleware::map_response(json_client_errors))
        .layer(DefaultBodyLimit::max(config.max_body))
        .layer(axum::middleware::from_fn_with_state(state.clone(), metrics::track))
        .layer(axum::middleware::from_fn_with_state(state.clone(), server::body_deadline))
        .layer(axum::middleware::from_fn(request_span::request_span))
        .with_state(state)
}

/// Serves the API on `config.listen` until `shutdown`, then finishes the requests in flight;
/// `url` is the database's, for the LISTEN connection that feeds the workers' cancel streams
/// and the holds that wait.
pub async fn serve(pool: DbPool, url: &str, config: HttpConfig, shutdown: CancellationToken) -> Result<()> {
    config.validate()?;
    let listener = tokio::net::TcpListener::bind(config.listen).await?;
    serve_on(listener, pool, url, config, shutdown).await
}

/// [`serve`] on a listener already bound (its address stands for `config.listen`).
pub async fn serve_on(
    listener: tokio::net::TcpListener,
    pool: DbPool,
    url: &str,
    mut config: HttpConfig,
    shutdown: CancellationToken,
) -> Result<()> {
    config.listen = listener.local_addr()?;
    config.validate()?;
    tracing::info!(listen = %listener.local_addr()?, auth = !config.tokens.is_empty(), "serving the HTTP API");
    // through a pooler in transaction mode without a direct URL: no LISTEN, holds answer at once
    let channels = crate::db::pooling::listen_url(url).map(|u| crate::db::listen::spawn(u, shutdown.child_token()));
    let app = router_listening(pool, &config, channels.as_ref(), shutdown.clone());
    server::run(listener, app, config.header_timeout, shutdown).await?;
    Ok(())
}

async fn require_token(State(state): State<AppState>, request: Request, next: Next) -> Response {
    if state.tokens.is_empty() {
        // Without tokens any page a browser shows could call this server (a loopback one
        // included) with the browser's reach: a form's POST, an image's GET on the compat
        // routes. Browsers say where a request comes from; a request from another site is
        // refused. Clients that are not browsers send neither header and pass.
        if is_cross_site(request.headers()) {
            return axum::response::IntoResponse::into_response(ApiError::cross_site());
        }
        return next.run(request).await;
    }
    let given = request
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    if state.tokens.iter().any(|t| constant_time_eq(t.as_bytes(), given.as_bytes())) {
        next.run(request).await
    } else {
        axum::response::IntoResponse::into_response(ApiError::unauthorized())
    }
}

/// A client error that axum's extractors answered in plain text (a path segment that does not
/// parse, a method a route does not take) gets the API's JSON error body, as every other error
/// does, its text as the message.
async fn json_client_errors(response: Response) -> Response {
    let status = response.status();
    let is_json = response
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !status.is_client_error() || is_json {
        return response;
    }
    let code = match status {
        axum::http::StatusCode::NOT_FOUND => "not_found",
        axum::http::StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
        axum::http::StatusCode::PAYLOAD_TOO_LARGE => "payload_too_large",
        axum::http::StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
        _ => "bad_request",
    };
    let bytes = axum::body::to_bytes(response.into_body(), 4096).await.unwrap_or_default();
    let text = String::from_utf8_lossy(&bytes).trim().to_string();
    let message = if text.is_empty() { status.canonical_reason().unwrap_or("client error").to_string() } else { text };
    axum::response::IntoResponse::into_response(ApiError { status, code, message })
}

/// Whether a browser sent the request from another site: `Sec-Fetch-Site` when the browser
/// sends it (every current one does), else an `Origin` whose host is not the one addressed.
fn is_cross_site(headers: &axum::http::HeaderMap) -> bool {
    let text = |name: &str| headers.get(name).map(|v| v.to_str().unwrap_or("?"));
    if let Some(site) = text("sec-fetch-site") {
        return !matches!(site, "same-origin" | "none");
    }
    match (text("origin"), text("host")) {
        (Some(origin), Some(host)) => origin.split_once("://").map(|(_, h)| h) != Some(host),
        (Some(_), None) => true,
        (None, _) => false,
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Reads a JSON body: 413 past the limit, 408 past the body timeout, 400 naming the problem
/// otherwise.
fn parse_body<T: serde::de::DeserializeOwned>(
    state: &AppState,
    body: std::result::Result<Bytes, BytesRejection>,
) -> ApiResult<T> {
    let bytes = body.map_err(|e| match e.status() {
        axum::http::StatusCode::PAYLOAD_TOO_LARGE => {
            ApiError::too_large(format!("the request body is larger than {} bytes", state.max_body))
        }
        _ => match crate::error::find_cause::<server::BodyTimedOut>(&e) {
            Some(late) => ApiError::timeout(late.to_string()),
            None => ApiError::bad_request(e.body_text()),
        },
    })?;
    let value: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))?;
    // every body is an object: an array would be matched to the fields by position
    if !value.is_object() {
        return Err(ApiError::bad_request("the request body must be a JSON object".to_string()));
    }
    serde_json::from_value(value).map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))
}

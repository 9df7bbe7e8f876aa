//! `GET /v1/worker/cancels`: the cancels of running calls, streamed to workers that cannot
//! LISTEN (`asyncflow worker --server`), so a cancelled task's call stops at once there too.
//!
//! ```text
//!   asyncflow_cancel ──NOTIFY──> serve's LISTEN connection ──> every open stream whose types
//!   '<task id> <claim_seq>'                                     name the task's type
//!   worker --server <── {"task_id": "video-1-7", "claim_seq": 2}\n ── one JSON object per line
//! ```
//!
//! The first line is `{}` (the stream is live: a cancel from then on is sent), and so is a line
//! every [`KEEP_ALIVE`], so a worker notices a dead connection. The stream ends after `wait`
//! seconds; the worker opens the next one at once. A cancel sent while a worker had no stream
//! open (reconnecting, or to a server without a database LISTEN, whose streams end at once) is
//! not lost: the worker's next heartbeat for the task is refused and stops the call.

use std::convert::Infallible;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde::Deserialize;
use tokio::sync::broadcast::{self, error::RecvError};
use tokio::time::Instant;

use super::{ApiError, ApiResult, AppState};
use crate::ids::TypeName;
use crate::protocol::{CancelNotice, CANCELS_WAIT_DEFAULT, CANCELS_WAIT_MAX};

/// How often an idle stream sends `{}`.
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);

pub(super) fn routes() -> Router<AppState> {
    Router::new().route("/v1/worker/cancels", get(cancels))
}

#[derive(Deserialize)]
pub(super) struct CancelsQuery {
    /// Comma-separated task type names.
    types: String,
    wait: Option<u64>,
}

/// The cancels of running calls of the given types, as newline-delimited JSON (see the module
/// docs): `{}` first and every 15 s, then one line per cancelled call, until `wait` seconds
/// have passed.
#[utoipa::path(get, path = "/v1/worker/cancels", operation_id = "worker_cancels", tag = "worker protocol",
    params(
        ("types" = String, Query, description = "Comma-separated task type names"),
        ("wait" = Option<u64>, Query, description = "Seconds to stream before the stream ends (1 to 3600, default 60)"),
    ),
    responses(
        (status = 200, description = "Newline-delimited JSON: one object per line, `{}` as keep-alive",
         body = CancelNotice, content_type = "application/x-ndjson"),
        (status = 400, description = "Missing or invalid type names, or wait out of range", body = ApiError),
        (status = 401, description = "Missing or wrong bearer token", body = ApiError),
    ))]
pub(super) async fn cancels(
    State(state): State<AppState>,
    query: Result<Query<CancelsQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Response> {
    let Query(q) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let types =
        q.types.split(',').map(|t| TypeName::new(t.trim()).map(|t| t.to_string())).collect::<Result<Vec<_>, _>>()?;
    if types.is_empty() || types.len() > 1000 {
        return Err(ApiError::bad_request("types: 1 to 1000 task type names, comma-separated".to_string()));
    }
    let wait = q.wait.unwrap_or(CANCELS_WAIT_DEFAULT);
    if !(1..=CANCELS_WAIT_MAX).contains(&wait) {
        return Err(ApiError::bad_request(format!("wait must be 1 to {CANCELS_WAIT_MAX} seconds")));
    }
    let live = line(&CancelNotice::default());
    // subscribed before the first line goes out: a cancel after it is in the stream
    let Some(receiver) = state.cancels.as_ref().map(|s| s.subscribe()) else {
        // no LISTEN behind this router: the stream ends at once, and heartbeats find the cancels
        return Ok(ndjson(Body::from(Vec::new())));
    };
    let stream = Stream { receiver, types, until: Instant::now() + Duration::from_secs(wait), first: Some(live) };
    let body = futures_util::stream::unfold(stream, |mut s| async move {
        let next = s.next().await?;
        Some((Ok::<Bytes, Infallible>(next), s))
    });
    Ok(ndjson(Body::from_stream(body)))
}

fn ndjson(body: Body) -> Response {
    // X-Accel-Buffering: a proxy such as nginx passes each line on as it comes
    let headers = [
        (header::CONTENT_TYPE, "application/x-ndjson"),
        (header::CACHE_CONTROL, "no-store"),
        (header::HeaderName::from_static("x-accel-buffering"), "no"),
    ];
    (headers, body).into_response()
}

fn line(notice: &CancelNotice) -> Bytes {
    let mut text = serde_json::to_vec(notice).unwrap_or_else(|_| b"{}".to_vec());
    text.push(b'\n');
    Bytes::from(text)
}

struct Stream {
    receiver: broadcast::Receiver<crate::db::listen::Cancel>,
    types: Vec<String>,
    until: Instant,
    first: Option<Bytes>,
}

impl Stream {
    /// The next line, or None when the stream ends.
    async fn next(&mut self) -> Option<Bytes> {
        if let Some(first) = self.first.take() {
            return Some(first);
        }
        loop {
            let now = Instant::now();
            if now >= self.until {
                return None;
            }
            let pause = (self.until - now).min(KEEP_ALIVE);
            let message = match tokio::time::timeout(pause, self.receiver.recv()).await {
                Err(_) if Instant::now() >= self.until => return None,
                Err(_) => return Some(line(&CancelNotice::default())),
                Ok(Ok(message)) => message,
                // a burst overflowed this stream: the heartbeats find what it missed
                Ok(Err(RecvError::Lagged(_))) => continue,
                Ok(Err(RecvError::Closed)) => return None,
            };
            if self.types.iter().any(|t| t == message.task_id.task_type()) {
                let notice =
                    CancelNotice { task_id: Some(message.task_id.into_string()), claim_seq: Some(message.claim_seq) };
                return Some(line(&notice));
            }
        }
    }
}

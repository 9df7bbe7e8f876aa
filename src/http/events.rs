//! `POST /v1/events`: sends an event (`asyncflow.send_event`), waking the tasks that wait for
//! its key.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};

use super::{parse_body, ApiError, ApiResult, AppState};
use crate::db::api;
use crate::event::{EventSent, SendEvent};

pub(super) fn routes() -> Router<AppState> {
    Router::new().route("/v1/events", post(send))
}

/// Sends an event: every task waiting for its key goes on to the stage it named, its call
/// carrying the event; a wait that begins later, within the retention (`event_retention`),
/// finds it too.
#[utoipa::path(post, path = "/v1/events", operation_id = "send_event", tag = "events",
    request_body = SendEvent,
    responses(
        (status = 200, description = "Sent; how many waiting tasks it woke", body = EventSent),
        (status = 400, description = "Bad key or payload (too large, not JSON)", body = ApiError),
        (status = 401, description = "Missing or wrong bearer token", body = ApiError),
        (status = 413, description = "Body too large", body = ApiError),
    ))]
pub(super) async fn send(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<EventSent>> {
    let event: SendEvent = parse_body(&state, body)?;
    let payload = event.payload.unwrap_or_else(|| serde_json::json!({}));
    let c = state.pool.get().await.map_err(crate::Error::from)?;
    let woken = api::send_event(&c, &event.key, &payload, None).await?;
    Ok(Json(EventSent { key: event.key, woken }))
}

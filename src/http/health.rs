//! `/healthz`: the process answers. `/readyz`: the database answers and its schema is the one
//! this build expects.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};

use super::AppState;
use crate::db::{api, migrate};

pub(super) fn routes() -> Router<AppState> {
    Router::new().route("/healthz", get(|| async { Json(json!({"status": "ok"})) })).route("/readyz", get(readyz))
}

/// Ready: the database answers and its schema is the one this build expects (no auth).
#[utoipa::path(get, path = "/readyz", tag = "health", security(()),
    responses(
        (status = 200, description = "Ready", body = super::openapi::Readiness),
        (status = 503, description = "Database unreachable or schema not current", body = super::openapi::Readiness),
    ))]
async fn readyz(State(state): State<AppState>) -> (StatusCode, Json<Value>) {
    let schema = async {
        let c = state.pool.get().await.ok()?;
        api::schema_state(&c).await.ok()
    }
    .await;
    let expected = i64::from(migrate::latest_version());
    match schema {
        Some(schema) => {
            let version = match &schema {
                api::SchemaState::Migrated { version, .. } => *version,
                api::SchemaState::NotMigrated => None,
            };
            match migrate::check_state(&schema) {
                Ok(()) => (StatusCode::OK, Json(json!({"status": "ready", "schema_version": version}))),
                Err(_) => (
                    StatusCode::SERVICE_UNAVAILABLE,
                    Json(json!({"status": "schema not current", "schema_version": version, "expected": expected})),
                ),
            }
        }
        None => (StatusCode::SERVICE_UNAVAILABLE, Json(json!({"status": "database unreachable"}))),
    }
}

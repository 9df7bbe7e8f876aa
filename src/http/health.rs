//! `/healthz`: the process answers. `/readyz`: the database answers and its schema is the one
//! this build expects.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};

use super::AppState;
use crate::db::{api, migrate};
use crate::protocol::health::{Health, Readiness};

pub(super) fn routes() -> Router<AppState> {
    Router::new().route("/healthz", get(healthz)).route("/readyz", get(readyz))
}

/// The process answers (no auth).
#[utoipa::path(get, path = "/healthz", tag = "health", security(()),
    responses((status = 200, description = "Alive", body = Health)))]
async fn healthz() -> Json<Health> {
    Json(Health { status: "ok".to_string() })
}

/// Ready: the database answers and its schema is the one this build expects (no auth).
#[utoipa::path(get, path = "/readyz", tag = "health", security(()),
    responses(
        (status = 200, description = "Ready", body = Readiness),
        (status = 503, description = "Database unreachable or schema not current", body = Readiness),
    ))]
async fn readyz(State(state): State<AppState>) -> (StatusCode, Json<Readiness>) {
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
                Ok(()) => (
                    StatusCode::OK,
                    Json(Readiness { status: "ready".into(), schema_version: version, expected: None }),
                ),
                Err(_) => (
                    StatusCode::SERVICE_UNAVAILABLE,
                    Json(Readiness {
                        status: "schema not current".into(),
                        schema_version: version,
                        expected: Some(expected),
                    }),
                ),
            }
        }
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(Readiness { status: "database unreachable".into(), schema_version: None, expected: None }),
        ),
    }
}

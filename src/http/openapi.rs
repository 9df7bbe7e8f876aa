//! The OpenAPI 3 document of the HTTP API, generated from the code: the handlers'
//! `#[utoipa::path]` annotations and the `ToSchema` derives of the request and response types.
//! Served at `GET /openapi.json` without a token, like `/healthz` (it describes the API's shape and
//! holds no data). `openapi.json` in the repository root is a committed copy;
//! `tests/openapi.rs` fails when it differs from what the code generates, and
//! `UPDATE_OPENAPI=1 cargo test --test suite openapi::` rewrites it.
//!
//! Invariants:
//! - Every route under `/v1` is in the document except the compatibility endpoints of the
//!   original flowsvr (src/http/compat/), which the document's description names instead.
//! - Every 4xx and 5xx answer has the body schema `Error` (`{code, message}`, see error.rs).
//! - Every operation with a path parameter documents a 400 (`PathParameterErrors`).
//! - Request schemas mean to a JSON Schema 2020-12 validator what serde reads (`StrictBodies`):
//!   `tests/openapi_schemas.rs` validates them, and `tests/openapi_fuzz.rs` sends requests
//!   generated from the document and checks that every answer is documented.
//! - The worker protocol's bodies are the wire types of [`crate::protocol`], which the handlers
//!   serialize and the worker's client reads: the document describes what is really sent.
//! - Every other answer is a type of a resource module of [`crate::protocol`] (or the data
//!   types beside it), which the handler returns: no body is described apart from the code that
//!   writes it. `tests/openapi.rs` calls the handlers and checks that the real bodies have
//!   exactly the documented properties.
//! - The single-report routes of the worker protocol share one handler (a closure per route);
//!   they are described by bodiless functions here, since utoipa documents functions.

use axum::routing::get;
use axum::{Json, Router};
use utoipa::openapi::path::ParameterIn;
use utoipa::openapi::schema::{AdditionalProperties, AllOf, Object, Schema, Type};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ContentBuilder, Ref, RefOr, ResponseBuilder};
use utoipa::{Modify, OpenApi};

use super::{ApiError, AppState};
use crate::protocol::{ReportAccepted, ReportRequest};

/// The document. Security: the bearer scheme applies to every operation that does not say
/// otherwise (`security(())` marks the routes that never need a token).
#[derive(OpenApi)]
#[openapi(
    info(
        title = "asyncflow",
        description = "The HTTP API of asyncflow, a Postgres-native runner for long, multi-stage \
asynchronous tasks: create and follow tasks, manage task types, read queue depth, the fenced \
worker protocol (hold, then heartbeat / advance / succeed / fail / later) for workers that cannot \
reach the database, workflows (versioned DAG pipelines and their runs) and periodic schedules.\n\n\
Auth: when the server is started with tokens (`--token`, `ASYNCFLOW_TOKENS`), every route under \
`/v1` and `/metrics` needs `Authorization: Bearer <token>`; `/healthz`, `/readyz`, \
`/openapi.json` and the dashboard's page and assets never do.\n\n\
Errors: every 4xx and 5xx answer is JSON `{\"code\", \"message\"}` (schema `Error`).\n\n\
Not described here: the compatibility endpoints for workers of the original flowsvr \
(`/create_task`, `/hold_tasks`, `/set_task`, `/get_task`, `/get_task_list`, \
`/get_task_schedule_cfg_list`, `/register_task`, `/get_task_counts_by_type`, `/ping`, each also \
under `/v1`), which keep that protocol's own `{code, msg}` envelope."
    ),
    paths(
        super::tasks::create,
        super::tasks::create_bulk,
        super::tasks::list,
        super::tasks::get_one,
        super::tasks::cancel,
        super::explain::explain,
        super::children::children,
        super::tasks::retry,
        super::tasks::bulk_retry,
        super::tasks::bulk_cancel,
        super::task_types::list,
        super::task_types::get_one,
        super::task_types::put,
        super::task_types::pause,
        super::task_types::resume,
        super::task_types::depth,
        super::task_types::queues,
        super::task_types::queue_limit,
        super::task_types::rate_limit,
        super::task_types::queue_rate_limit,
        super::worker_protocol::hold,
        super::worker_protocol::report_batch,
        heartbeat,
        advance,
        succeed,
        fail,
        later,
        release,
        super::worker_protocol::next_due,
        super::worker_protocol::held,
        super::worker_protocol::progress,
        super::worker_protocol::checkpoint,
        super::worker_protocol::presence,
        super::worker_protocol::gone,
        super::cancels::cancels,
        super::health::healthz,
        super::health::readyz,
        openapi_json,
        super::metrics::metrics,
        super::dashboard::overview,
        super::stats::history,
        super::stats::workers,
        super::dashboard::page,
        super::dashboard::asset_file,
        super::workflows::list_pipelines,
        super::workflows::get_pipeline,
        super::workflows::put_pipeline,
        super::workflows::activate,
        super::workflows::retire,
        super::workflows::start_run,
        super::workflows::list_runs,
        super::workflows::get_run,
        super::workflows::cancel_run,
        super::workflows::retry_run,
        super::workflows::retry_node,
        super::workflows::complete_node,
        super::schedules::list,
        super::schedules::put,
        super::schedules::remove,
        super::schedules::pause,
        super::schedules::resume,
        super::events::send,
    ),
    modifiers(&BearerAuth, &StrictBodies, &PathParameterErrors),
    security(("bearer" = [])),
    tags(
        (name = "tasks", description = "Create, read, list, cancel and retry tasks"),
        (name = "task types", description = "Task type settings, pause and resume, queue depth"),
        (name = "worker protocol", description = "Hold tasks and report on them, fenced by claim_seq"),
        (name = "health", description = "Liveness, readiness and this document"),
        (name = "metrics", description = "Prometheus metrics"),
        (name = "dashboard", description = "The web dashboard's page, assets and figures"),
        (name = "workflows", description = "Versioned DAG pipelines and their runs"),
        (name = "schedules", description = "Periodic (cron) schedules releasing tasks and runs"),
        (name = "events", description = "Events that waiting tasks wait for"),
    )
)]
pub struct ApiDoc;

/// The generated document.
pub fn document() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}

pub(super) fn routes() -> Router<AppState> {
    Router::new().route("/openapi.json", get(openapi_json))
}

/// This document (no auth).
#[utoipa::path(get, path = "/openapi.json", tag = "health", security(()),
    responses((status = 200, description = "The OpenAPI 3 document", body = Object)))]
async fn openapi_json() -> Json<utoipa::openapi::OpenApi> {
    Json(document())
}

/// Adds the bearer scheme that `security(("bearer" = []))` names.
struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let scheme = HttpBuilder::new()
            .scheme(HttpAuthScheme::Bearer)
            .description(Some("One of the server's tokens (--token, ASYNCFLOW_TOKENS); required only when it has some"))
            .build();
        openapi
            .components
            .get_or_insert_with(Default::default)
            .add_security_scheme("bearer", SecurityScheme::Http(scheme));
    }
}

/// Makes the request schemas mean to a JSON Schema 2020-12 validator what serde reads.
///
/// utoipa writes a struct with a `#[serde(flatten)]` field as `allOf: [flattened, own fields]`.
/// With `deny_unknown_fields`, the flattened part carries `additionalProperties: false`, which
/// sees only that part's own `properties`: it refuses the other part's fields, so the `allOf`
/// matches no body at all (`CreateTaskRequest` refused `{"type": "video"}`). Such an `allOf` of
/// plain objects is written here as the one flat object serde reads: the parts' properties and
/// required fields together, closed when any part was.
///
/// `Report` cannot be flattened (its outcome part is a `oneOf`); a report of a batch is read
/// strictly (`protocol::read_report`: a field its outcome does not take is refused), which
/// 2020-12 says with `unevaluatedProperties: false`: it sees the fields that the matching
/// outcome and the common part evaluated. utoipa has no field for that keyword; the schema's
/// extensions are written into the object as they are.
struct StrictBodies;

impl Modify for StrictBodies {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let Some(components) = openapi.components.as_mut() else {
            return;
        };
        let named = components.schemas.clone();
        for (name, schema) in components.schemas.iter_mut() {
            let RefOr::T(Schema::AllOf(all)) = schema else {
                continue;
            };
            if let Some(flat) = flat_object(&named, all) {
                *schema = RefOr::T(Schema::Object(flat));
            } else if name == "Report" {
                all.extensions
                    .get_or_insert_with(Default::default)
                    .insert("unevaluatedProperties".to_string(), serde_json::Value::Bool(false));
            }
        }
    }
}

/// Every operation with a path parameter may answer 400 for it, whatever the route: axum's
/// path extractor refuses a segment that is not UTF-8 once percent-decoded (and a `version` that
/// is not a 32-bit integer), and PostgreSQL a NUL character in the text it is given. Added here
/// to each such operation that does not document a 400 of its own, so that no route can leave it
/// out (tests/openapi_fuzz.rs sends such parameters to every route).
struct PathParameterErrors;

impl Modify for PathParameterErrors {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        for item in openapi.paths.paths.values_mut() {
            let operations = [&mut item.get, &mut item.put, &mut item.post, &mut item.delete, &mut item.patch];
            for op in operations.into_iter().flatten() {
                let in_path = op.parameters.iter().flatten().any(|p| p.parameter_in == ParameterIn::Path);
                if in_path && !op.responses.responses.contains_key("400") {
                    let error = ContentBuilder::new().schema(Some(Ref::from_schema_name("Error"))).build();
                    let response = ResponseBuilder::new()
                        .description(
                            "A path parameter that is not UTF-8 once percent-decoded, holds a NUL character, or \
                             (a version) is not an integer",
                        )
                        .content("application/json", error)
                        .build();
                    op.responses.responses.insert("400".to_string(), RefOr::T(response));
                }
            }
        }
    }
}

/// The one object an `allOf` of objects (inline or named) describes; None when a part is
/// anything else.
fn flat_object(named: &std::collections::BTreeMap<String, RefOr<Schema>>, all: &AllOf) -> Option<Object> {
    let mut flat = Object::with_type(Type::Object);
    flat.description = all.description.clone();
    for part in &all.items {
        let part = match part {
            RefOr::Ref(r) => named.get(r.ref_location.strip_prefix("#/components/schemas/")?)?,
            inline => inline,
        };
        let RefOr::T(Schema::Object(part)) = part else {
            return None;
        };
        flat.properties.extend(part.properties.clone());
        flat.required.extend(part.required.iter().cloned());
        if matches!(part.additional_properties.as_deref(), Some(AdditionalProperties::FreeForm(false))) {
            flat.additional_properties = Some(Box::new(AdditionalProperties::FreeForm(false)));
        }
    }
    Some(flat)
}

// ---- The single-report routes, whose handler is a closure (doc-only functions) ----

/// The single-report routes of the worker protocol share one handler and one body.
macro_rules! single_report {
    ($name:ident, $path:literal, $doc:literal) => {
        #[doc = $doc]
        #[utoipa::path(post, path = $path, operation_id = stringify!($name), tag = "worker protocol",
            request_body = ReportRequest,
            responses(
                (status = 200, description = "Accepted", body = ReportAccepted),
                (status = 400, description = "Malformed body, a required field missing or an invalid worker id", body = ApiError),
                (status = 401, description = "Missing or wrong bearer token", body = ApiError),
                (status = 404, description = "No such task", body = ApiError),
                (status = 409, description = "Stale fencing token: the task is no longer held by this worker with \
                    this claim_seq (rescued, cancelled or claimed again); nothing changed", body = ApiError),
                (status = 413, description = "Body too large", body = ApiError),
            ))]
        #[allow(dead_code)]
        fn $name() {}
    };
}

single_report!(
    heartbeat,
    "/v1/worker/heartbeat",
    "Still working: extends the lease by the type's max_processing_time. Needs worker_id, task_id, claim_seq."
);
single_report!(
    advance,
    "/v1/worker/advance",
    "The stage is done: the task goes on to `stage` (required) with `context` (absent keeps the current one) and queues again."
);
single_report!(succeed, "/v1/worker/succeed", "The task succeeded with `result` (default null).");
single_report!(
    fail,
    "/v1/worker/fail",
    "The attempt failed with `error` (required): retried per the type's policy unless `retry` is false."
);
single_report!(
    release,
    "/v1/worker/release",
    "Handed back unfinished (shutdown, or a hold whose answer was lost): ready again at once, the try given back."
);
single_report!(
    later,
    "/v1/worker/later",
    "Not done yet, not a failure: ready again after `delay` seconds (required), with `context` if given."
);

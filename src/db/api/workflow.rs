//! The workflow part of the SQL seam: one async fn per `asyncflow.*` workflow function
//! (pipelines, runs, the checker, callbacks, run retention). Runs and pipelines travel as the
//! JSON the SQL functions build, so the SQL API, HTTP and the CLI show the same documents.

use chrono::{DateTime, NaiveDate, Utc};
use serde_json::Value;

use super::{get, query, query_one};
use crate::db::GenericClient;
use crate::error::Result;
use crate::run::{CallbackDelivery, CallbackOutcome, StartRun};

/// `asyncflow.put_pipeline`: validates and stores the next version (or finds the same one).
pub async fn put_pipeline<C: GenericClient>(c: &C, name: &str, definition: &Value, status: &str) -> Result<Value> {
    let row = query_one(c, "select asyncflow.put_pipeline($1, $2, $3) as p", &[&name, definition, &status]).await?;
    get(&row, "p")
}

/// `asyncflow.set_pipeline_status`: the version with its new status.
pub async fn set_pipeline_status<C: GenericClient>(c: &C, name: &str, version: i32, status: &str) -> Result<Value> {
    let row = query_one(
        c,
        "select asyncflow.pipeline_json(asyncflow.set_pipeline_status($1, $2, $3)) as p",
        &[&name, &version, &status],
    )
    .await?;
    get(&row, "p")
}

/// `asyncflow.get_pipeline`: one version (default: the active one, else the latest).
pub async fn get_pipeline<C: GenericClient>(c: &C, name: &str, version: Option<i32>) -> Result<Option<Value>> {
    let row = query_one(c, "select asyncflow.get_pipeline($1, $2) as p", &[&name, &version]).await?;
    get(&row, "p")
}

/// `asyncflow.list_pipelines`: every version, without definitions.
pub async fn list_pipelines<C: GenericClient>(c: &C) -> Result<Vec<Value>> {
    let rows = query(c, "select p from asyncflow.list_pipelines() p", &[]).await?;
    rows.iter().map(|r| get(r, "p")).collect()
}

/// `asyncflow.start_run`: the new run's id.
pub async fn start_run<C: GenericClient>(c: &C, run: &StartRun, now: Option<DateTime<Utc>>) -> Result<String> {
    let input = run.input.clone().unwrap_or_else(|| Value::Object(Default::default()));
    let row = query_one(
        c,
        "select asyncflow.start_run($1, $2, $3, $4, $5, $6, $7, $8, $9) as id",
        &[
            &run.pipeline,
            &input,
            &run.notify_url,
            &run.run_at,
            &run.notify_key,
            &run.version,
            &now,
            &run.idempotency_key,
            &run.traceparent,
        ],
    )
    .await?;
    get(&row, "id")
}

/// `asyncflow.get_run`: the run with its events, segments, traces and callbacks.
pub async fn get_run<C: GenericClient>(c: &C, run_id: &str) -> Result<Option<Value>> {
    let row = query_one(c, "select asyncflow.get_run($1) as r", &[&run_id]).await?;
    get(&row, "r")
}

/// `asyncflow.list_runs`: one page, newest first.
pub async fn list_runs<C: GenericClient>(
    c: &C,
    pipeline: Option<&str>,
    status: Option<&str>,
    limit: i32,
    before: Option<&str>,
) -> Result<Vec<Value>> {
    let rows =
        query(c, "select r from asyncflow.list_runs($1, $2, $3, $4) r", &[&pipeline, &status, &limit, &before]).await?;
    rows.iter().map(|r| get(r, "r")).collect()
}

/// `asyncflow.cancel_run`: false when the run had already ended.
pub async fn cancel_run<C: GenericClient>(c: &C, run_id: &str) -> Result<bool> {
    let row = query_one(c, "select asyncflow.cancel_run($1) as done", &[&run_id]).await?;
    get(&row, "done")
}

/// `asyncflow.retry_run`: the new run's id.
pub async fn retry_run<C: GenericClient>(c: &C, run_id: &str) -> Result<String> {
    let row = query_one(c, "select asyncflow.retry_run($1) as id", &[&run_id]).await?;
    get(&row, "id")
}

/// `asyncflow.retry_node`: resumes a failed run from this node.
pub async fn retry_node<C: GenericClient>(c: &C, run_id: &str, node: &str) -> Result<bool> {
    let row = query_one(c, "select asyncflow.retry_node($1, $2) as done", &[&run_id, &node]).await?;
    get(&row, "done")
}

/// `asyncflow.complete_node`: an asynchronous node's external completion; the run afterwards.
pub async fn complete_node<C: GenericClient>(
    c: &C,
    run_id: &str,
    node: &str,
    result: Option<&Value>,
    error: Option<&str>,
) -> Result<Value> {
    let row =
        query_one(c, "select asyncflow.complete_node($1, $2, $3, $4) as r", &[&run_id, &node, &result, &error]).await?;
    get(&row, "r")
}

/// `asyncflow.check_runs`: (action, id, detail) of everything the checker did.
pub async fn check_runs<C: GenericClient>(
    c: &C,
    now: Option<DateTime<Utc>>,
    limit: i32,
) -> Result<Vec<(String, String, String)>> {
    let rows = query(c, "select action, id, detail from asyncflow.check_runs($1, $2)", &[&now, &limit]).await?;
    rows.iter().map(|r| Ok((get(r, "action")?, get(r, "id")?, get(r, "detail")?))).collect()
}

/// `asyncflow.claim_callbacks`: deliveries due now, held for `lease` seconds.
pub async fn claim_callbacks<C: GenericClient>(
    c: &C,
    owner: &str,
    limit: i32,
    lease: i32,
    now: Option<DateTime<Utc>>,
) -> Result<Vec<CallbackDelivery>> {
    let rows = query(
        c,
        "select callback_id, run_id, kind, url, payload, attempt from asyncflow.claim_callbacks($1, $2, $3, $4)",
        &[&owner, &limit, &lease, &now],
    )
    .await?;
    rows.iter()
        .map(|r| {
            Ok(CallbackDelivery {
                callback_id: get(r, "callback_id")?,
                run_id: get(r, "run_id")?,
                kind: get(r, "kind")?,
                url: get(r, "url")?,
                payload: get(r, "payload")?,
                attempt: get(r, "attempt")?,
            })
        })
        .collect()
}

/// `asyncflow.record_callback`: the callback's status after this attempt (None: stale attempt).
pub async fn record_callback<C: GenericClient>(
    c: &C,
    callback_id: &str,
    attempt: i32,
    outcome: &CallbackOutcome,
    now: Option<DateTime<Utc>>,
) -> Result<Option<String>> {
    let row = query_one(
        c,
        "select asyncflow.record_callback($1, $2, $3, $4, $5, $6, $7) as status",
        &[&callback_id, &attempt, &outcome.http_status, &outcome.error, &outcome.cost_ms, &outcome.give_up, &now],
    )
    .await?;
    get(&row, "status")
}

/// `asyncflow.drop_expired_runs`: the days of run records dropped.
pub async fn drop_expired_runs<C: GenericClient>(c: &C, now: Option<DateTime<Utc>>) -> Result<Vec<NaiveDate>> {
    let rows = query(c, "select d from asyncflow.drop_expired_runs($1) d", &[&now]).await?;
    rows.iter().map(|r| get(r, "d")).collect()
}

/// `asyncflow.workflow_figures`: (pipeline, kind, status, count) with kind `open` (scheduled and
/// running runs), `ended` (runs ended, a counter) or `callbacks` (pending deliveries).
pub async fn workflow_figures<C: GenericClient>(c: &C) -> Result<Vec<(String, String, String, i64)>> {
    let rows = query(c, "select pipeline, kind, status, n from asyncflow.workflow_figures()", &[]).await?;
    rows.iter().map(|r| Ok((get(r, "pipeline")?, get(r, "kind")?, get(r, "status")?, get(r, "n")?))).collect()
}

/// `asyncflow.maintenance_due`: whether workflow maintenance has work due now (a scheduled run to
/// begin, a callback to deliver or out, a node, segment or run past its deadline).
pub async fn maintenance_due<C: GenericClient>(c: &C) -> Result<bool> {
    let row = query_one(c, "select asyncflow.maintenance_due() as due", &[]).await?;
    get(&row, "due")
}

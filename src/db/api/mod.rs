//! The one seam between Rust and SQL: one async fn per `asyncflow.*` function, with the same
//! name, and no SQL text anywhere else in the crate. Every function takes any
//! [`GenericClient`], so a caller's own transaction works; statements are prepared once per
//! connection (`prepare_cached`).

use chrono::{DateTime, Utc};
use serde_json::Value;
use tokio_postgres::Row;

mod bench;
mod bench_limit;
mod children;
mod events;
mod explain;
mod migration;
mod monitoring;
mod presence;
mod progress;
mod rate_limit;
mod schedule;
mod session;
mod stats;
mod task_search;
mod workflow;

pub use bench::*;
pub use bench_limit::*;
pub use children::*;
pub use events::*;
pub use explain::*;
pub use migration::*;
pub use monitoring::*;
pub use presence::*;
pub use progress::*;
pub use rate_limit::*;
pub use schedule::*;
pub use session::*;
pub use stats::*;
pub use task_search::*;
pub use workflow::*;

use super::GenericClient;
use crate::error::{Error, Result};
use crate::ids::{TaskId, TypeName, WorkerId};
use crate::task::{
    ClaimedTask, HeldTask, NewTask, QueueDepth, QueueKeyDepth, QueueLimit, Report, ReportKind, ReportResult,
    RescuedTask, Task, TaskStatus,
};
use crate::task_type::{TaskTypeSettings, TaskTypeUpdate};

/// Runs `sql`: prepared once per connection, or sent unnamed through a pooler in transaction
/// mode (see [`crate::db::pooling`]).
async fn query<C: GenericClient>(
    c: &C,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> Result<Vec<Row>> {
    run(c, sql, params).await.map_err(Error::from_db)
}

async fn query_one<C: GenericClient>(
    c: &C,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> Result<Row> {
    one_row(query(c, sql, params).await?)
}

/// The one row of a statement that returns one.
fn one_row(mut rows: Vec<Row>) -> Result<Row> {
    match rows.len() {
        1 => Ok(rows.remove(0)),
        n => Err(Error::Unexpected(format!("a statement that returns one row returned {n}"))),
    }
}

/// [`query`], its error left as the driver's (for callers that look at its SQLSTATE).
async fn run<C: GenericClient>(
    c: &C,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> std::result::Result<Vec<Row>, tokio_postgres::Error> {
    if crate::db::pooling::unnamed_statements() {
        match crate::db::pooling::typed(params) {
            Ok(typed) => return c.query_unnamed(sql, &typed).await,
            // not reached with asyncflow's parameters: the named statement tells the error
            Err(e) => tracing::warn!(error = %e, "sending a named statement"),
        }
    }
    let stmt = c.prepare_cached(sql).await?;
    c.query(&stmt, params).await
}

/// [`query`] on a connection of its own (not pooled): a named statement, or an unnamed one
/// through a pooler in transaction mode.
async fn query_direct(
    c: &tokio_postgres::Client,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> Result<Vec<Row>> {
    if crate::db::pooling::unnamed_statements() {
        let typed = crate::db::pooling::typed(params)?;
        return c.query_typed(sql, &typed).await.map_err(Error::from_db);
    }
    c.query(sql, params).await.map_err(Error::from_db)
}

/// [`query_direct`] of a statement that returns one row.
async fn query_direct_one(
    c: &tokio_postgres::Client,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> Result<Row> {
    one_row(query_direct(c, sql, params).await?)
}

/// Runs `sql`, a call of a type's own function (`type_claim__<type>`, `type_report__<type>`,
/// created when the type is registered); None when there is no such function, that is when the
/// type is not registered.
async fn query_type_function<C: GenericClient>(
    c: &C,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> Result<Option<Vec<Row>>> {
    match run(c, sql, params).await {
        Ok(rows) => Ok(Some(rows)),
        Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::UNDEFINED_FUNCTION) => Ok(None),
        Err(e) => Err(Error::from_db(e)),
    }
}

/// The error of a type with no function of its own (see [`query_type_function`]).
fn unknown_type(task_type: impl std::fmt::Display) -> Error {
    Error::UnknownTaskType(format!("unknown task type '{task_type}'"))
}

fn get<'a, T: tokio_postgres::types::FromSql<'a>>(row: &'a Row, column: &str) -> Result<T> {
    row.try_get(column).map_err(Error::from_db)
}

fn from_json<T: serde::de::DeserializeOwned>(value: Value, what: &str) -> Result<T> {
    serde_json::from_value(value).map_err(|e| Error::Unexpected(format!("{what}: {e}")))
}

fn status(text: Option<String>) -> Result<Option<TaskStatus>> {
    match text {
        None => Ok(None),
        Some(t) => {
            TaskStatus::parse(&t).map(Some).ok_or_else(|| Error::Unexpected(format!("unknown task status {t:?}")))
        }
    }
}

/// `asyncflow.register_task_type`: creates the type or updates the settings named.
pub async fn register_task_type<C: GenericClient>(
    c: &C,
    task_type: &TypeName,
    settings: &TaskTypeUpdate,
) -> Result<TaskTypeSettings> {
    let settings = serde_json::to_value(settings).map_err(|e| Error::InvalidArgument(e.to_string()))?;
    let row =
        query_one(c, "select asyncflow.register_task_type($1, $2) as t", &[&task_type.as_str(), &settings]).await?;
    from_json(get(&row, "t")?, "task type")
}

/// `asyncflow.create_task`: one task; its id.
pub async fn create_task<C: GenericClient>(c: &C, task_type: &str, task: &NewTask) -> Result<TaskId> {
    // seconds as an interval; what SQL takes apart is a number JSON can hold
    let debounce_for = match task.debounce_for {
        Some(secs) if !secs.is_finite() => {
            return Err(Error::InvalidArgument(format!("debounce_for must be a number of seconds, got {secs}")))
        }
        other => other,
    };
    let row = query_one(
        c,
        "select asyncflow.create_task($1, $2, $3, $4, $5, $6, $7, queue_key => $8, unique_key => $9, unique_for => $10, \
         traceparent => $11, debounce_key => $12, debounce_for => make_interval(secs => $13)) as id",
        &[
            &task_type,
            &task.context,
            &task.priority,
            &task.run_at,
            &task.stage,
            &task.idempotency_key,
            &task.user_id,
            &task.queue_key,
            &task.unique_key,
            &task.unique_for,
            &task.traceparent,
            &task.debounce_key,
            &debounce_for,
        ],
    )
    .await?;
    TaskId::parse(&get::<String>(&row, "id")?)
}

/// `asyncflow.create_task`, and whether it created the task (true) or found one its key already
/// named (false): the idempotency key's task, the unique key's task while it blocks, or the
/// debounce key's task it replaced. All are told apart the same way, by
/// `asyncflow.task_created_here` in the same transaction (the task row is this transaction's own
/// or not; a debounce marks the task it replaced). Without any key, always created.
pub async fn create_task_found(
    c: &mut deadpool_postgres::Object,
    task_type: &str,
    task: &NewTask,
) -> Result<(TaskId, bool)> {
    if task.idempotency_key.is_none() && task.unique_key.is_none() && task.debounce_key.is_none() {
        return Ok((create_task(&*c, task_type, task).await?, true));
    }
    let tx = c.transaction().await.map_err(Error::from_db)?;
    let id = create_task(&tx, task_type, task).await?;
    let row = query_one(&tx, "select asyncflow.task_created_here($1) as created", &[&id.as_str()]).await?;
    let created = get(&row, "created")?;
    tx.commit().await.map_err(Error::from_db)?;
    Ok((id, created))
}

/// `asyncflow.create_tasks`: many tasks in one statement; their ids in input order.
pub async fn create_tasks<C: GenericClient>(c: &C, task_type: &str, tasks: &[NewTask]) -> Result<Vec<TaskId>> {
    let tasks = serde_json::to_value(tasks).map_err(|e| Error::InvalidArgument(e.to_string()))?;
    let rows = query(c, "select asyncflow.create_tasks($1, $2) as id", &[&task_type, &tasks]).await?;
    rows.iter().map(|r| TaskId::parse(&get::<String>(r, "id")?)).collect()
}

/// `asyncflow.task_created_here`: whether the calling transaction created the task.
pub async fn task_created_here<C: GenericClient>(c: &C, task_id: &str) -> Result<bool> {
    get(&query_one(c, "select asyncflow.task_created_here($1) as created", &[&task_id]).await?, "created")
}

/// `asyncflow.get_task`: the task, or None.
pub async fn get_task<C: GenericClient>(c: &C, task_id: &str) -> Result<Option<Task>> {
    let row = query_one(c, "select asyncflow.get_task($1) as t", &[&task_id]).await?;
    match get::<Option<Value>>(&row, "t")? {
        None => Ok(None),
        Some(v) => from_json(v, "task").map(Some),
    }
}

/// `asyncflow.watch_task`: the task (None when there is none), a waiter registered for
/// `seconds` unless it has ended: its end is then notified on `asyncflow_ended`.
pub async fn watch_task<C: GenericClient>(c: &C, task_id: &str, seconds: f64) -> Result<Option<Task>> {
    let row = query_one(c, "select asyncflow.watch_task($1, $2) as t", &[&task_id, &seconds]).await?;
    match get::<Option<Value>>(&row, "t")? {
        None => Ok(None),
        Some(v) => from_json(v, "task").map(Some),
    }
}

/// `asyncflow.cancel_task`: true when cancelled, false when it had already ended.
pub async fn cancel_task<C: GenericClient>(c: &C, task_id: &str) -> Result<bool> {
    let row = query_one(c, "select asyncflow.cancel_task($1) as done", &[&task_id]).await?;
    get(&row, "done")
}

/// `asyncflow.retry_task`: true when queued again, false when it was not failed or cancelled.
pub async fn retry_task<C: GenericClient>(c: &C, task_id: &str) -> Result<bool> {
    let row = query_one(c, "select asyncflow.retry_task($1) as done", &[&task_id]).await?;
    get(&row, "done")
}

/// `asyncflow.claim_tasks` (the worker protocol's "hold"): up to `limit` ready tasks.
///
/// Goes straight to the type's own claim function, `asyncflow.type_claim__<type>` (what
/// claim_tasks calls by a statement built at each call: about 0.25 ms more on an idle server, on
/// the path from an insert to the function's start). Every registered type has one, so a type
/// without it is unknown (the error claim_tasks gives, without a second statement that would
/// fail anyway in the caller's transaction); a name that is not a type name goes through
/// claim_tasks for its error.
pub async fn claim_tasks<C: GenericClient>(
    c: &C,
    task_type: &str,
    owner: &WorkerId,
    limit: i32,
    now: Option<DateTime<Utc>>,
) -> Result<Vec<ClaimedTask>> {
    let rows = match TypeName::new(task_type) {
        // the name matched ^[a-z][a-z0-9_]{0,39}$: safe inside a quoted identifier
        Ok(name) => {
            let sql = format!("select * from asyncflow.\"type_claim__{}\"($1, $2, $3)", name.as_str());
            query_type_function(c, &sql, &[&owner.as_str(), &limit, &now])
                .await?
                .ok_or_else(|| unknown_type(task_type))?
        }
        Err(_) => {
            query(
                c,
                "select * from asyncflow.claim_tasks($1, $2, $3, $4)",
                &[&task_type, &owner.as_str(), &limit, &now],
            )
            .await?
        }
    };
    rows.iter().map(claimed_task).collect()
}

fn claimed_task(r: &Row) -> Result<ClaimedTask> {
    Ok(ClaimedTask {
        task_id: TaskId::parse(&get::<String>(r, "task_id")?)?,
        task_type: get(r, "task_type")?,
        stage: get(r, "stage")?,
        context: get(r, "context")?,
        priority: get(r, "priority")?,
        attempt: get(r, "attempt")?,
        claim_seq: get(r, "claim_seq")?,
        user_id: get(r, "user_id")?,
        lease_until: get(r, "lease_until")?,
        claimed_at: get(r, "claimed_at")?,
        queue_key: get(r, "queue_key")?,
        traceparent: get(r, "traceparent")?,
        wake: get(r, "wake")?,
    })
}

/// `asyncflow.type_hold__<type>`: up to `limit` ready tasks locked by the caller's open
/// transaction, which must have just begun; each with whether it is held (false: the type is
/// claimed the usual way, and the tasks are running once the transaction commits).
pub async fn hold_tasks<C: GenericClient>(
    c: &C,
    task_type: &TypeName,
    owner: &WorkerId,
    limit: i32,
) -> Result<Vec<(ClaimedTask, bool)>> {
    // the name matched ^[a-z][a-z0-9_]{0,39}$: safe inside a quoted identifier
    let sql = format!("select * from asyncflow.\"type_hold__{}\"($1, $2)", task_type.as_str());
    let rows =
        query_type_function(c, &sql, &[&owner.as_str(), &limit]).await?.ok_or_else(|| unknown_type(task_type))?;
    rows.iter().map(|r| Ok((claimed_task(r)?, get(r, "held")?))).collect()
}

/// `asyncflow.type_finish__<type>`, in the hold's transaction: per task its id,
/// claim_seq, and its call's reply if it came while the hold was open (a success or an advance,
/// with the call's seconds since the claim; it is written as its report would have been), None
/// if it is still to report (it is claimed as running). Any other reply is refused whole. The
/// last field is the task's stages chained in the worker during the hold, as the finish's
/// `passed` argument reads them (see `sql/api/templates/finish.sql`), None when there were none.
/// Answers only for the tasks that did not end so: refused, or claimed although their call
/// replied (a result too large, a bad stage).
pub async fn finish_held<C: GenericClient>(
    c: &C,
    task_type: &TypeName,
    owner: &WorkerId,
    tasks: &[(&TaskId, i64, Option<&ReportKind>, Option<f64>, Option<&Value>)],
) -> Result<Vec<ReportResult>> {
    let n = tasks.len();
    let (mut shards, mut numbers, mut claim_seqs) =
        (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
    let (mut outcomes, mut results, mut stages, mut contexts, mut seconds, mut passed) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    for (id, claim_seq, reply, secs, chain) in tasks {
        shards.push(id.shard());
        numbers.push(id.number());
        claim_seqs.push(*claim_seq);
        let (outcome, result, stage, context): (Option<&str>, Option<&Value>, Option<&str>, Option<&Value>) =
            match reply {
                None => (None, None, None, None),
                Some(ReportKind::Succeed { result }) => (Some("succeed"), Some(result), None, None),
                Some(ReportKind::Advance { stage, context }) => (Some("advance"), None, Some(stage), context.as_ref()),
                Some(_) => return Err(Error::InvalidArgument("a hold writes only successes and advances".into())),
            };
        outcomes.push(outcome);
        results.push(result);
        stages.push(stage);
        contexts.push(context);
        seconds.push(*secs);
        passed.push(*chain);
    }
    let sql = format!(
        "select task_id, accepted, status::text as status, lease_until \
         from asyncflow.\"type_finish__{}\"($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
        task_type.as_str()
    );
    let rows = query_type_function(
        c,
        &sql,
        &[&owner.as_str(), &shards, &numbers, &claim_seqs, &outcomes, &results, &stages, &contexts, &seconds, &passed],
    )
    .await?
    .ok_or_else(|| unknown_type(task_type))?;
    rows.iter().map(report_result).collect()
}

fn report_result(r: &Row) -> Result<ReportResult> {
    Ok(ReportResult {
        task_id: get(r, "task_id")?,
        accepted: get(r, "accepted")?,
        status: status(get(r, "status")?)?,
        lease_until: get(r, "lease_until")?,
        failed_instead: false,
    })
}

/// `asyncflow.report_task_arrays`: a batch of fenced reports in one statement, sent as one typed
/// array per field (no JSON to build, parse and check key by key); one result per report, in
/// order.
pub async fn report_tasks<C: GenericClient>(
    c: &C,
    owner: &WorkerId,
    reports: &[Report],
    now: Option<DateTime<Utc>>,
) -> Result<Vec<ReportResult>> {
    let n = reports.len();
    let mut task_ids: Vec<&str> = Vec::with_capacity(n);
    let mut claim_seqs: Vec<i64> = Vec::with_capacity(n);
    let mut outcomes: Vec<&str> = Vec::with_capacity(n);
    let mut stages: Vec<Option<&str>> = Vec::with_capacity(n);
    let mut contexts: Vec<Option<&Value>> = Vec::with_capacity(n);
    let mut results: Vec<Option<&Value>> = Vec::with_capacity(n);
    let mut errors: Vec<Option<&str>> = Vec::with_capacity(n);
    let mut retries: Vec<Option<bool>> = Vec::with_capacity(n);
    let mut delays: Vec<Option<f64>> = Vec::with_capacity(n);
    let mut progress: Vec<Option<&Value>> = Vec::with_capacity(n);
    // a spawn's children travel in the results array, as one JSON array
    let spawns: Vec<Option<Value>> = reports
        .iter()
        .map(|r| match &r.kind {
            ReportKind::Spawn { spawn, .. } => Some(Value::Array(spawn.clone())),
            _ => None,
        })
        .collect();
    for (r, spawn) in reports.iter().zip(&spawns) {
        task_ids.push(r.task_id.as_str());
        claim_seqs.push(r.claim_seq);
        let (outcome, stage, context, result, error, retry, delay) = match &r.kind {
            ReportKind::Advance { stage, context } => {
                ("advance", Some(stage.as_str()), context.as_ref(), None, None, None, None)
            }
            ReportKind::Succeed { result } => ("succeed", None, None, Some(result), None, None, None),
            ReportKind::Fail { error, retry } => ("fail", None, None, None, Some(error.as_str()), Some(*retry), None),
            ReportKind::Later { delay, context } => ("later", None, context.as_ref(), None, None, None, Some(*delay)),
            // a wait's event key and timeout travel in the error and delay arrays
            ReportKind::Wait { stage, event, timeout, context } => {
                ("wait", Some(stage.as_str()), context.as_ref(), None, Some(event.as_str()), None, Some(*timeout))
            }
            ReportKind::Spawn { stage, context, .. } => {
                ("spawn", Some(stage.as_str()), context.as_ref(), spawn.as_ref(), None, None, None)
            }
            ReportKind::Release => ("release", None, None, None, None, None, None),
            ReportKind::Heartbeat => ("heartbeat", None, None, None, None, None, None),
        };
        progress.push(r.progress.as_ref());
        outcomes.push(outcome);
        stages.push(stage);
        contexts.push(context);
        results.push(result);
        errors.push(error);
        retries.push(retry);
        delays.push(delay);
    }
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 12] = [
        &owner.as_str(),
        &task_ids,
        &claim_seqs,
        &outcomes,
        &stages,
        &contexts,
        &results,
        &errors,
        &retries,
        &delays,
        &now,
        &progress,
    ];
    const ANSWERS: &str = "select task_id, accepted, status::text as status, lease_until from asyncflow.";
    const ARGS: &str = "($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)";
    // A batch of one type (the worker's, always) goes straight to the type's report function,
    // which checks it as report_task_arrays does: no statement built per call around it and
    // no second pass over the answers (about 2 ms of 18 per 1,000 successes). A type without
    // it does not exist: report_task_arrays refuses its reports (in autocommit, as every caller
    // here reports; inside a transaction the failed lookup has already failed the transaction).
    let one_type =
        reports.first().map(|r| r.task_id.task_type()).filter(|t| reports.iter().all(|r| r.task_id.task_type() == *t));
    // a parsed task id's type matched ^[a-z][a-z0-9_]{0,39}$: safe inside a quoted identifier
    let direct = match one_type {
        Some(ty) => query_type_function(c, &format!("{ANSWERS}\"type_report__{ty}\"{ARGS}"), &params).await?,
        None => None,
    };
    let rows = match direct {
        Some(rows) => rows,
        None => query(c, &format!("{ANSWERS}report_task_arrays{ARGS}"), &params).await?,
    };
    rows.iter().map(report_result).collect()
}

/// `asyncflow.next_due`: the earliest order_time among pending tasks of the type.
pub async fn next_due<C: GenericClient>(c: &C, task_type: &str) -> Result<Option<DateTime<Utc>>> {
    let row = query_one(c, "select asyncflow.next_due($1) as due", &[&task_type]).await?;
    get(&row, "due")
}

/// `asyncflow.next_due` of each of `task_types`, in one statement: (type, next due time).
pub async fn next_due_each<C: GenericClient>(
    c: &C,
    task_types: &[String],
) -> Result<Vec<(String, Option<DateTime<Utc>>)>> {
    let rows = query(c, "select t, asyncflow.next_due(t) as due from unnest($1::text[]) t", &[&task_types]).await?;
    rows.iter().map(|r| Ok((get(r, "t")?, get(r, "due")?))).collect()
}

/// `asyncflow.rescue_expired`: each task whose lease ran out, its new status and the try rescued.
pub async fn rescue_expired<C: GenericClient>(
    c: &C,
    now: Option<DateTime<Utc>>,
    limit: i32,
    skip_owners: &[WorkerId],
) -> Result<Vec<RescuedTask>> {
    let skip: Vec<&str> = skip_owners.iter().map(WorkerId::as_str).collect();
    let rows = query(
        c,
        "select task_id, task_type, status::text as status, stage, attempt, error \
         from asyncflow.rescue_expired($1, $2, $3)",
        &[&now, &limit, &skip],
    )
    .await?;
    rows.iter()
        .map(|r| {
            let st = status(get(r, "status")?)?.ok_or_else(|| Error::Unexpected("rescue without status".into()))?;
            Ok(RescuedTask {
                task_id: get(r, "task_id")?,
                task_type: get(r, "task_type")?,
                status: st,
                stage: get(r, "stage")?,
                attempt: get(r, "attempt")?,
                error: get::<Option<String>>(r, "error")?.unwrap_or_default(),
            })
        })
        .collect()
}

/// `asyncflow.roll_shard`: the new end_pos when a shard was started.
pub async fn roll_shard<C: GenericClient>(c: &C, task_type: &str, now: Option<DateTime<Utc>>) -> Result<Option<i32>> {
    let row = query_one(c, "select asyncflow.roll_shard($1, $2) as pos", &[&task_type, &now]).await?;
    get(&row, "pos")
}

/// `asyncflow.advance_begin_pos`: the (re)computed begin_pos.
pub async fn advance_begin_pos<C: GenericClient>(c: &C, task_type: &str, now: Option<DateTime<Utc>>) -> Result<i32> {
    let row = query_one(c, "select asyncflow.advance_begin_pos($1, $2) as pos", &[&task_type, &now]).await?;
    get(&row, "pos")
}

/// `asyncflow.drop_expired_shards`: the shards dropped.
pub async fn drop_expired_shards<C: GenericClient>(
    c: &C,
    task_type: &str,
    now: Option<DateTime<Utc>>,
) -> Result<Vec<i32>> {
    let rows = query(c, "select s from asyncflow.drop_expired_shards($1, $2) s", &[&task_type, &now]).await?;
    rows.iter().map(|r| get(r, "s")).collect()
}

/// The registered task types' settings, by name.
pub async fn list_task_types<C: GenericClient>(c: &C) -> Result<Vec<TaskTypeSettings>> {
    let rows = query(c, "select t from asyncflow.list_task_types() t", &[]).await?;
    rows.iter().map(|r| from_json(get(r, "t")?, "task type")).collect()
}

/// The `asyncflow.queue_depth` view.
pub async fn queue_depth<C: GenericClient>(c: &C) -> Result<Vec<QueueDepth>> {
    Ok(queue_depth_held(c).await?.into_iter().map(|(d, _)| d).collect())
}

/// The `asyncflow.queue_depth` view with its `held` column: per type, the pending tasks of
/// queue keys held at 0.
pub async fn queue_depth_held<C: GenericClient>(c: &C) -> Result<Vec<(QueueDepth, i64)>> {
    let rows = query(c, "select task_type, ready, delayed, running, oldest_ready_age, paused, held from asyncflow.queue_depth order by task_type", &[]).await?;
    rows.iter()
        .map(|r| {
            let depth = QueueDepth {
                task_type: get(r, "task_type")?,
                ready: get(r, "ready")?,
                delayed: get(r, "delayed")?,
                running: get(r, "running")?,
                oldest_ready_age: get(r, "oldest_ready_age")?,
                paused: get(r, "paused")?,
            };
            Ok((depth, get(r, "held")?))
        })
        .collect()
}

/// `asyncflow.queue_keys`: the queues of a type with fair_queues, in key order after `after`, at
/// most `limit` (1..=1000).
pub async fn queue_keys<C: GenericClient>(
    c: &C,
    task_type: &str,
    after: Option<&str>,
    limit: i32,
) -> Result<Vec<QueueKeyDepth>> {
    let rows = query(c, "select * from asyncflow.queue_keys($1, $2, $3)", &[&task_type, &after, &limit]).await?;
    rows.iter()
        .map(|r| {
            Ok(QueueKeyDepth {
                queue_key: get(r, "queue_key")?,
                ready: get(r, "ready")?,
                delayed: get(r, "delayed")?,
                running: get(r, "running")?,
                oldest_ready_age: get(r, "oldest_ready_age")?,
                concurrency: get(r, "concurrency")?,
            })
        })
        .collect()
}

/// `asyncflow.set_queue_limit`: one key's own limit set (or removed with None); the limit that
/// now applies to the key.
pub async fn set_queue_limit<C: GenericClient>(c: &C, task_type: &str, limit: &QueueLimit) -> Result<Option<i32>> {
    let row = query_one(
        c,
        "select asyncflow.set_queue_limit($1, $2, $3) as concurrency",
        &[&task_type, &limit.queue_key, &limit.concurrency],
    )
    .await?;
    get(&row, "concurrency")
}

/// Shard positions of one type (its row in `asyncflow.positions`), with the live shards' count.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Positions {
    /// Task type.
    pub task_type: String,
    /// Oldest shard that may hold a live task.
    pub begin_pos: i32,
    /// Shard receiving inserts.
    pub end_pos: i32,
    /// Shards not dropped.
    pub shards: i64,
}

const POSITIONS_SQL: &str = "select task_type, begin_pos, end_pos, shards from asyncflow.shard_positions($1)";

fn positions_row(r: &Row) -> Result<Positions> {
    Ok(Positions {
        task_type: get(r, "task_type")?,
        begin_pos: get(r, "begin_pos")?,
        end_pos: get(r, "end_pos")?,
        shards: get(r, "shards")?,
    })
}

/// The positions row of every type.
pub async fn positions<C: GenericClient>(c: &C) -> Result<Vec<Positions>> {
    let rows = query(c, POSITIONS_SQL, &[&None::<String>]).await?;
    rows.iter().map(positions_row).collect()
}

/// The positions row of one type.
pub async fn positions_of<C: GenericClient>(c: &C, task_type: &str) -> Result<Option<Positions>> {
    let rows = query(c, POSITIONS_SQL, &[&Some(task_type)]).await?;
    rows.first().map(positions_row).transpose()
}

/// Count of tasks per (type, status): a full count, for reports and the demo, not the hot path.
pub async fn count_by_status<C: GenericClient>(c: &C, task_type: &str) -> Result<Vec<(TaskStatus, i64)>> {
    let rows = query(c, "select status, n from asyncflow.count_by_status($1)", &[&task_type]).await?;
    rows.iter()
        .map(|r| {
            let st = status(get(r, "status")?)?.ok_or_else(|| Error::Unexpected("count without status".into()))?;
            Ok((st, get(r, "n")?))
        })
        .collect()
}

/// Counts per status of the given tasks (unknown ids are not counted).
pub async fn count_by_status_of<C: GenericClient>(c: &C, task_ids: &[TaskId]) -> Result<Vec<(TaskStatus, i64)>> {
    let ids: Vec<&str> = task_ids.iter().map(TaskId::as_str).collect();
    let rows = query(
        c,
        "select t.status::text as status, count(*) as n from unnest($1::text[]) x(task_id) \
         cross join lateral asyncflow.parse_task_id(x.task_id) k \
         join asyncflow.tasks t on t.task_type = k.task_type and t.shard = k.shard and t.id = k.id group by t.status",
        &[&ids],
    )
    .await?;
    rows.iter()
        .map(|r| {
            let st = status(get(r, "status")?)?.ok_or_else(|| Error::Unexpected("count without status".into()))?;
            Ok((st, get(r, "n")?))
        })
        .collect()
}

/// The given tasks, in the order given (unknown ids are left out).
pub async fn get_tasks<C: GenericClient>(c: &C, task_ids: &[TaskId]) -> Result<Vec<Task>> {
    let ids: Vec<&str> = task_ids.iter().map(TaskId::as_str).collect();
    let rows = query(c, "select t from unnest($1::text[]) with ordinality x(task_id, n) cross join lateral asyncflow.get_task(x.task_id) t where t is not null order by x.n", &[&ids]).await?;
    rows.iter().map(|r| from_json(get(r, "t")?, "task")).collect()
}

/// `asyncflow.held_tasks`: the running tasks of a type that `owner` holds, in id order.
pub async fn held_tasks<C: GenericClient>(c: &C, task_type: &str, owner: &WorkerId) -> Result<Vec<HeldTask>> {
    let rows = query(c, "select * from asyncflow.held_tasks($1, $2)", &[&task_type, &owner.as_str()]).await?;
    rows.iter()
        .map(|r| {
            Ok(HeldTask {
                task_id: TaskId::parse(&get::<String>(r, "task_id")?)?,
                claim_seq: get(r, "claim_seq")?,
                stage: get(r, "stage")?,
                attempt: get(r, "attempt")?,
                lease_until: get(r, "lease_until")?,
            })
        })
        .collect()
}

//! The benchmark's part of the SQL seam (`asyncflow bench`): its baseline tables and
//! statements, its own database, and the set-based fills, vacuums and counts of its phases.
//! Outside the product's API: nothing here is called by a worker, a server or a client.

use chrono::{DateTime, Utc};

use super::{get, query, query_one};
use crate::db::GenericClient;
use crate::error::{Error, Result};
use crate::ids::TypeName;

/// Benchmark baseline table: 100,000 one-int rows (`asyncflow_bench.rows`), and an empty
/// insert target (`asyncflow_bench.inserts`). Outside the asyncflow schema on purpose.
pub async fn bench_prepare<C: GenericClient>(c: &C) -> Result<()> {
    c.batch_execute(
        "create schema if not exists asyncflow_bench; \
         drop table if exists asyncflow_bench.rows, asyncflow_bench.inserts; \
         create table asyncflow_bench.rows (id int primary key, n bigint not null default 0); \
         insert into asyncflow_bench.rows (id) select generate_series(1, 100000); \
         create table asyncflow_bench.inserts (id bigint generated always as identity primary key, n int not null, at timestamptz not null default now())",
    )
    .await
    .map_err(Error::from_db)?;
    c.batch_execute("vacuum analyze asyncflow_bench.rows").await.map_err(Error::from_db)
}

/// The UPDATE baseline's statement.
pub async fn bench_update<C: GenericClient>(c: &C, id: i32) -> Result<()> {
    query(c, "update asyncflow_bench.rows set n = n + 1 where id = $1", &[&id]).await.map(|_| ())
}

/// The INSERT baseline's statement.
pub async fn bench_insert<C: GenericClient>(c: &C, n: i32) -> Result<()> {
    query(c, "insert into asyncflow_bench.inserts (n) values ($1)", &[&n]).await.map(|_| ())
}

/// Empties the INSERT baseline's table (its rows are not read again).
pub async fn bench_truncate_inserts<C: GenericClient>(c: &C) -> Result<()> {
    c.batch_execute("truncate asyncflow_bench.inserts").await.map_err(Error::from_db)
}

/// Creates `asyncflow_bench.insert_row`: the INSERT baseline's statement inside the thinnest
/// function an enqueue could be (PL/pgSQL, SECURITY DEFINER, no SET clause). What any enqueue
/// function pays before it does any work of its own.
pub async fn bench_insert_function_prepare<C: GenericClient>(c: &C) -> Result<()> {
    c.batch_execute(
        "create or replace function asyncflow_bench.insert_row(p_n integer) returns void \
         language plpgsql security definer as $$ \
         begin \
           insert into asyncflow_bench.inserts (n) values (p_n); \
         end $$",
    )
    .await
    .map_err(Error::from_db)
}

/// The INSERT baseline's statement through `asyncflow_bench.insert_row`.
pub async fn bench_insert_in_function<C: GenericClient>(c: &C, n: i32) -> Result<()> {
    query(c, "select asyncflow_bench.insert_row($1)", &[&n]).await.map(|_| ())
}

/// What the enqueue-parts phase writes for one task: the values `create_task` would give a task
/// of the type with no arguments but its name.
#[derive(Debug, Clone)]
pub struct BenchTaskRow {
    /// The type.
    pub task_type: String,
    /// Its shard receiving inserts (end_pos).
    pub shard: i32,
    /// The type's id sequence, as an OID (nextval takes it without a name lookup, as
    /// create_task's regclass does).
    pub seq: u32,
    /// Its initial stage.
    pub stage: String,
    /// Its max_retry_num setting.
    pub max_retry_num: i32,
    /// Its max_retry_interval setting.
    pub max_retry_interval: i32,
}

/// Reads a registered type's row of `enqueue_info` and creates the benchmark's wrapping function
/// `asyncflow_bench.task_row`: the INSERT create_task writes, inside the smallest PL/pgSQL
/// function that could hold it (SECURITY DEFINER with every name schema-qualified and no SET
/// clause, as create_task is).
pub async fn bench_task_row_prepare<C: GenericClient>(c: &C, task_type: &str) -> Result<BenchTaskRow> {
    c.batch_execute(
        "create schema if not exists asyncflow_bench; \
         create or replace function asyncflow_bench.task_row(p_type text, p_shard integer, p_seq regclass, \
           p_stage text, p_retry_num integer, p_retry_interval integer) returns text \
         language plpgsql security definer as $$ \
         declare v_id bigint; \
         begin \
           v_id := pg_catalog.nextval(p_seq); \
           insert into asyncflow.tasks (task_type, shard, id, stage, status, priority, max_retry_num, \
             max_retry_interval, order_time, user_id, context, created_at, updated_at) \
           values (p_type, p_shard, v_id, p_stage, 'pending', 0, p_retry_num, p_retry_interval, pg_catalog.now(), \
             null, '{}'::pg_catalog.jsonb, pg_catalog.now(), pg_catalog.now()); \
           return p_type operator(pg_catalog.||) '-' operator(pg_catalog.||) p_shard::pg_catalog.text \
             operator(pg_catalog.||) '-' operator(pg_catalog.||) v_id::pg_catalog.text; \
         end $$",
    )
    .await
    .map_err(Error::from_db)?;
    let row = query_one(
        c,
        "select e.end_pos, e.id_seq::oid as seq, e.initial_stage, e.max_retry_num, e.max_retry_interval \
         from asyncflow.enqueue_info e where e.task_type = $1",
        &[&task_type],
    )
    .await?;
    Ok(BenchTaskRow {
        task_type: task_type.to_string(),
        shard: get(&row, "end_pos")?,
        seq: get(&row, "seq")?,
        stage: get(&row, "initial_stage")?,
        max_retry_num: get(&row, "max_retry_num")?,
        max_retry_interval: get(&row, "max_retry_interval")?,
    })
}

/// The task row of `create_task`, inserted by the client in one statement.
pub async fn bench_task_row<C: GenericClient>(c: &C, row: &BenchTaskRow) -> Result<()> {
    query(
        c,
        "insert into asyncflow.tasks (task_type, shard, id, stage, status, priority, max_retry_num, \
           max_retry_interval, order_time, user_id, context, created_at, updated_at) \
         values ($1, $2, nextval($3::oid::regclass), $4, 'pending', 0, $5, $6, now(), null, '{}'::jsonb, now(), now())",
        &[&row.task_type, &row.shard, &row.seq, &row.stage, &row.max_retry_num, &row.max_retry_interval],
    )
    .await
    .map(|_| ())
}

/// The same row through `asyncflow_bench.task_row` (made by [`bench_task_row_prepare`]).
pub async fn bench_task_row_in_function<C: GenericClient>(c: &C, row: &BenchTaskRow) -> Result<()> {
    query(
        c,
        "select asyncflow_bench.task_row($1, $2, $3::oid::regclass, $4, $5, $6)",
        &[&row.task_type, &row.shard, &row.seq, &row.stage, &row.max_retry_num, &row.max_retry_interval],
    )
    .await
    .map(|_| ())
}

/// The server's version, e.g. "PostgreSQL 15.19".
pub async fn server_version<C: GenericClient>(c: &C) -> Result<String> {
    let row = query_one(c, "select 'PostgreSQL ' || current_setting('server_version') as v", &[]).await?;
    get(&row, "v")
}

/// The benchmark's own database. `name` is made by the benchmark ([a-z0-9_] only), and is
/// checked again here since it is spliced into the statement.
pub async fn bench_create_database<C: GenericClient>(c: &C, name: &str) -> Result<()> {
    check_bench_name(name)?;
    c.batch_execute(&format!("create database \"{name}\"")).await.map_err(Error::from_db)
}

/// Drops the benchmark's database, closing what is still connected to it.
pub async fn bench_drop_database<C: GenericClient>(c: &C, name: &str) -> Result<()> {
    check_bench_name(name)?;
    c.batch_execute(&format!("drop database if exists \"{name}\" with (force)")).await.map_err(Error::from_db)
}

fn check_bench_name(name: &str) -> Result<()> {
    if name.is_empty()
        || name.len() > 60
        || !name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    {
        return Err(Error::InvalidArgument(format!("not a benchmark name: {name:?}")));
    }
    Ok(())
}

/// Appends `rows` finished tasks to the newest shard of `task_type` in one set-based insert,
/// taking their ids from the type's sequence.
pub async fn bench_fill_finished<C: GenericClient>(
    c: &C,
    task_type: &str,
    rows: i64,
    finished_at: DateTime<Utc>,
) -> Result<()> {
    let row = query_one(
        c,
        "select y.id_seq::text as seq, p.end_pos from asyncflow.task_types y \
         join asyncflow.positions p on p.task_type = y.task_type where y.task_type = $1",
        &[&task_type],
    )
    .await?;
    let seq: String = get(&row, "seq")?;
    let shard: i32 = get(&row, "end_pos")?;
    let first: i64 = get(&query_one(c, "select nextval(($1::text)::regclass) as n", &[&seq]).await?, "n")?;
    let last = first + rows - 1;
    query(c, "select setval(($1::text)::regclass, $2)", &[&seq, &last]).await?;
    let log = serde_json::json!([{"worker": "bench", "stage": "start", "attempt": 1, "start": finished_at,
        "cost_ms": 1, "outcome": "succeed"}]);
    query(
        c,
        "insert into asyncflow.tasks (task_type, shard, id, stage, status, attempt, max_retry_num, \
           max_retry_interval, claim_seq, order_time, context, result, schedule_log, created_at, updated_at, finished_at) \
         select $1, $2, g, 'start', 'succeeded', 1, 3, 10, 1, $5, '{}'::jsonb, 'null'::jsonb, $6, $5, $5, $5 \
         from generate_series($3::bigint, $4::bigint) g",
        &[&task_type, &shard, &first, &last, &finished_at, &log],
    )
    .await?;
    // the counters every transition keeps (see asyncflow.status_counts) count these rows too
    query(c, "insert into asyncflow.status_deltas (task_type, in_succeeded) values ($1, $2)", &[&task_type, &rows])
        .await
        .map(|_| ())
}

/// ANALYZE of a type's partition set.
pub async fn bench_analyze<C: GenericClient>(c: &C, task_type: &str) -> Result<()> {
    let ty = TypeName::new(task_type)?;
    c.batch_execute(&format!("analyze asyncflow.\"tasks_{}\"", ty.as_str())).await.map_err(Error::from_db)
}

/// VACUUM ANALYZE of every shard of a type (the benchmark's closed aged shards).
pub async fn bench_vacuum_analyze<C: GenericClient>(c: &C, task_type: &str) -> Result<()> {
    let ty = TypeName::new(task_type)?;
    c.batch_execute(&format!("vacuum analyze asyncflow.\"tasks_{}\"", ty.as_str())).await.map_err(Error::from_db)
}

/// Empties a type's partition set, and its waits and status counts with it.
pub async fn bench_truncate<C: GenericClient>(c: &C, task_type: &str) -> Result<()> {
    let ty = TypeName::new(task_type)?;
    c.batch_execute(&format!("truncate asyncflow.\"tasks_{}\"", ty.as_str())).await.map_err(Error::from_db)?;
    query(c, "delete from asyncflow.status_deltas where task_type = $1", &[&task_type]).await?;
    query(c, "delete from asyncflow.waits where task_type = $1", &[&task_type]).await?;
    query(
        c,
        "update asyncflow.type_counters set in_pending = 0, in_running = 0, in_succeeded = 0, in_failed = 0, \
         in_cancelled = 0, in_waiting = 0 where task_type = $1",
        &[&task_type],
    )
    .await
    .map(|_| ())
}

/// Dead tuples the statistics count in a type's task partitions.
pub async fn bench_dead_tuples<C: GenericClient>(c: &C, task_type: &str) -> Result<i64> {
    c.batch_execute("select pg_stat_clear_snapshot()").await.map_err(Error::from_db)?;
    let row = query_one(
        c,
        "select coalesce(sum(n_dead_tup), 0)::bigint as n from pg_stat_user_tables \
         where schemaname = 'asyncflow' and starts_with(relname::text, 'tasks_' || $1::text || '_')",
        &[&task_type],
    )
    .await?;
    get(&row, "n")
}

/// CHECKPOINT, so that a timed phase does not inherit the previous phase's WAL debt (full-page
/// images after a checkpoint that the previous phase's volume triggered). Needs superuser or
/// Autovacuum workers busy in the current database.
pub async fn bench_autovacuum_workers<C: GenericClient>(c: &C) -> Result<i64> {
    let row = query_one(
        c,
        "select count(*) as n from pg_stat_activity \
         where backend_type = 'autovacuum worker' and datname = current_database()",
        &[],
    )
    .await?;
    get(&row, "n")
}

/// pg_checkpoint; false when not allowed.
pub async fn bench_checkpoint<C: GenericClient>(c: &C) -> Result<bool> {
    match c.batch_execute("checkpoint").await {
        Ok(()) => Ok(true),
        Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE) => Ok(false),
        Err(e) => Err(Error::from_db(e)),
    }
}

/// The span of a type's burn-down, as the database recorded it: tasks succeeded, and seconds from
/// the first claim to the last end (the children phase, where the worker's own start and exit
/// would blur a burn-down of 10,000 tasks).
pub async fn bench_burn_span<C: GenericClient>(c: &C, task_type: &str) -> Result<(i64, f64)> {
    let row = query_one(
        c,
        "select count(*) filter (where status = 'succeeded') as n, \
         coalesce(date_part('epoch', max(finished_at) - min(claimed_at)), 0)::float8 as secs \
         from asyncflow.tasks where task_type = $1",
        &[&task_type],
    )
    .await?;
    Ok((get(&row, "n")?, get(&row, "secs")?))
}

/// Seconds to the claim of a parent's join call (the children phase) from the last of its
/// children ending: from that end's write (the "children ended" entry of the parent's log, made
/// in the transaction that ended the last child, just before its commit), and from the end of
/// that child's call (its finished_at, before its hold's finish or its report); None while it
/// has not joined.
pub async fn bench_join_latency<C: GenericClient>(
    c: &C,
    parent_id: &str,
    child_type: &str,
) -> Result<Option<(f64, f64)>> {
    let row = query_one(
        c,
        "select date_part('epoch', p.claimed_at - (select max((e ->> 'at')::timestamptz) \
           from jsonb_array_elements(p.schedule_log) e where e ->> 'event' = 'children ended'))::float8 as written, \
         date_part('epoch', p.claimed_at - (select max(k.finished_at) from asyncflow.tasks k \
           where k.task_type = $2 and k.parent_id = $1))::float8 as ended \
         from asyncflow.parse_task_id($1) x \
         left join asyncflow.tasks p on p.task_type = x.task_type and p.shard = x.shard and p.id = x.id \
           and p.status = 'succeeded'",
        &[&parent_id, &child_type],
    )
    .await?;
    let written: Option<f64> = get(&row, "written")?;
    let ended: Option<f64> = get(&row, "ended")?;
    Ok(written.zip(ended))
}

/// Re-creates the type's report and finish functions from their templates without their call of
/// `asyncflow.notify_waiters` (the check for clients waiting on tasks that end): the reference
/// beside which the waiters phase measures what that check costs. An error when a template has
/// no such call: the comparison would measure nothing.
pub async fn bench_without_waiters_check<C: GenericClient>(c: &C, task_type: &TypeName) -> Result<()> {
    for template in ["report", "finish"] {
        let row =
            query_one(c, "select asyncflow.render_template($1, $2) as body", &[&template, &task_type.as_str()]).await?;
        let body: String = get(&row, "body")?;
        let kept: Vec<&str> = body.lines().filter(|l| !l.contains("asyncflow.notify_waiters(")).collect();
        if kept.len() == body.lines().count() {
            return Err(Error::Config(format!("the {template} template calls no asyncflow.notify_waiters")));
        }
        c.batch_execute(&kept.join("\n")).await.map_err(Error::from_db)?;
    }
    Ok(())
}

/// A client waiting, for an hour, on a task of the type that does not exist: each report and
/// finish of the type then finds a waiter and looks its tasks up (and notifies none).
pub async fn bench_waiter_elsewhere<C: GenericClient>(c: &C, task_type: &TypeName) -> Result<()> {
    query(
        c,
        "insert into asyncflow.task_waiters (task_type, shard, id, until) values ($1, 1, 0, now() + interval '1 hour') \
         on conflict (task_type, shard, id) do update set until = excluded.until",
        &[&task_type.as_str()],
    )
    .await
    .map(|_| ())
}

/// The transactions the server ended in this database so far (`pg_stat_database`: commits and
/// rollbacks), for the idle phase; each call is one more.
pub async fn bench_transactions<C: GenericClient>(c: &C) -> Result<i64> {
    let row = query_one(
        c,
        "select (xact_commit + xact_rollback)::bigint as n from pg_catalog.pg_stat_database \
         where datname = pg_catalog.current_database()",
        &[],
    )
    .await?;
    get(&row, "n")
}

/// The server's data directory (its `postmaster.pid` names the process whose CPU the idle phase
/// counts); None for a role that may not read it.
pub async fn bench_data_directory<C: GenericClient>(c: &C) -> Result<Option<String>> {
    let row = query_one(c, "select pg_catalog.current_setting('data_directory', true) as dir", &[]).await?;
    get(&row, "dir")
}

/// The connections the server has now (pg_stat_activity's client backends).
pub async fn server_connections<C: GenericClient>(c: &C) -> Result<i64> {
    let row = query_one(
        c,
        "select count(*) as n from pg_catalog.pg_stat_activity where backend_type = 'client backend'",
        &[],
    )
    .await?;
    get(&row, "n")
}

/// What a drain left of the type `task_type`: tasks succeeded, and tasks whose last error says
/// the connection went wrong (a worker's statement lost to the pooler or the server).
pub async fn bench_drain_outcome<C: GenericClient>(c: &C, task_type: &str) -> Result<(i64, i64)> {
    let row = query_one(
        c,
        "select count(*) filter (where status = 'succeeded') as succeeded, \
           count(*) filter (where last_error ilike '%connection%' or last_error ilike '%closed%' \
             or last_error ilike '%timed out%') as connection_errors \
         from asyncflow.tasks where task_type = $1",
        &[&task_type],
    )
    .await?;
    Ok((get(&row, "succeeded")?, get(&row, "connection_errors")?))
}

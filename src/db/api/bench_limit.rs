//! The benchmark's physical-limit baseline (`asyncflow bench --only limit`): the cheapest SQL
//! that makes the state change of a burn-down, on a plain table of task rows with only the
//! indexes that change needs. Outside the product's API, like the rest of `bench`.

use super::{get, query, query_one};
use crate::db::GenericClient;
use crate::error::{Error, Result};
use crate::ids::TypeName;

/// (Re)creates `asyncflow_bench.limit_tasks`, the task table's columns and defaults, with the
/// two indexes a claim and a finish need: the primary key (id, shard) the finish names rows
/// by, and the ready index (order_time of pending rows) the claim walks. Then copies the rows
/// of `task_type` (queued by `create_tasks`: the same rows, the same width) into it.
pub async fn bench_limit_prepare<C: GenericClient>(c: &C, task_type: &str) -> Result<i64> {
    let ty = TypeName::new(task_type)?;
    c.batch_execute(
        "create schema if not exists asyncflow_bench; \
         drop table if exists asyncflow_bench.limit_tasks; \
         create table asyncflow_bench.limit_tasks (like asyncflow.tasks including defaults); \
         alter table asyncflow_bench.limit_tasks add primary key (id, shard); \
         create index limit_tasks_ready on asyncflow_bench.limit_tasks (order_time) where status = 'pending'",
    )
    .await
    .map_err(Error::from_db)?;
    c.batch_execute(&format!(
        "insert into asyncflow_bench.limit_tasks select * from asyncflow.\"tasks_{}\"",
        ty.as_str()
    ))
    .await
    .map_err(Error::from_db)?;
    let row =
        query_one(c, "select count(*) as n from asyncflow_bench.limit_tasks where status = 'pending'", &[]).await?;
    get(&row, "n")
}

/// Locks up to `limit` ready rows of the baseline's table in order_time order (FOR UPDATE SKIP
/// LOCKED, as a claim takes them), in the caller's transaction: their ids and shards, None when
/// none is ready.
async fn lock_ready<C: GenericClient>(c: &C, limit: i64) -> Result<Option<(Vec<i64>, Vec<i32>)>> {
    let rows = query(
        c,
        "select id, shard from asyncflow_bench.limit_tasks where status = 'pending' and order_time <= now() \
         order by order_time limit $1 for update skip locked",
        &[&limit],
    )
    .await?;
    if rows.is_empty() {
        return Ok(None);
    }
    let mut ids = Vec::with_capacity(rows.len());
    let mut shards = Vec::with_capacity(rows.len());
    for r in &rows {
        ids.push(get::<i64>(r, "id")?);
        shards.push(get::<i32>(r, "shard")?);
    }
    Ok(Some((ids, shards)))
}

/// One batch of the baseline, in the caller's transaction: up to `limit` ready rows locked
/// ([`lock_ready`]), then written as a finished burn-down leaves them (succeeded, its try
/// counted, a new claim_seq, the worker, the claim's and the finish's times, a result), one
/// statement each. The rows changed.
pub async fn bench_limit_batch<C: GenericClient>(c: &C, owner: &str, limit: i64) -> Result<u64> {
    let Some((ids, shards)) = lock_ready(c, limit).await? else { return Ok(0) };
    let stmt = c
        .prepare_cached(
            "update asyncflow_bench.limit_tasks t set status = 'succeeded', attempt = t.attempt + 1, \
               claim_seq = t.claim_seq + 1, owner = $1, claimed_at = now(), result = 'null'::jsonb, \
               finished_at = clock_timestamp(), updated_at = clock_timestamp() \
             from unnest($2::bigint[], $3::integer[]) u(id, shard) where t.id = u.id and t.shard = u.shard",
        )
        .await
        .map_err(Error::from_db)?;
    c.execute(&stmt, &[&owner, &ids, &shards]).await.map_err(Error::from_db)
}

/// One batch of the 3-stage baseline, in the caller's transaction: up to `limit` ready rows
/// locked ([`lock_ready`]), then each written as the 3-stage burn-down's stage call
/// leaves it: a row at `last` ends succeeded; any other goes on to its next stage (`second`
/// after the first, `last` after `second`), pending, ready now at the back of the queue, its
/// try reset, a new claim_seq and one schedule-log entry appended, as an advance writes them.
/// The rows changed and, of them, those that ended.
pub async fn bench_limit_batch_staged<C: GenericClient>(
    c: &C,
    owner: &str,
    limit: i64,
    second: &str,
    last: &str,
) -> Result<(u64, u64)> {
    let Some((ids, shards)) = lock_ready(c, limit).await? else { return Ok((0, 0)) };
    let stmt = c
        .prepare_cached(
            "with u as ( \
               update asyncflow_bench.limit_tasks t set \
                 status = (case when t.stage = $5 then 'succeeded' else 'pending' end)::asyncflow.task_status, \
                 stage = case when t.stage = $5 then t.stage when t.stage = $4 then $5 else $4 end, \
                 attempt = case when t.stage = $5 then t.attempt + 1 else 0 end, claim_seq = t.claim_seq + 1, \
                 owner = case when t.stage = $5 then $1 end, claimed_at = now(), \
                 order_time = case when t.stage = $5 then t.order_time else clock_timestamp() end, \
                 schedule_log = case when t.stage = $5 then t.schedule_log else coalesce(t.schedule_log, '[]') \
                   || jsonb_build_object('worker', $1::text, 'start', now(), 'outcome', 'advance', \
                        'stage', t.stage, 'attempt', t.attempt + 1, 'cost_ms', 0) end, \
                 result = case when t.stage = $5 then 'null'::jsonb else t.result end, \
                 finished_at = case when t.stage = $5 then clock_timestamp() end, updated_at = clock_timestamp() \
               from unnest($2::bigint[], $3::integer[]) u(id, shard) where t.id = u.id and t.shard = u.shard \
               returning t.status) \
             select count(*) as changed, count(*) filter (where status = 'succeeded') as ended from u",
        )
        .await
        .map_err(Error::from_db)?;
    let row = c.query_one(&stmt, &[&owner, &ids, &shards, &second, &last]).await.map_err(Error::from_db)?;
    let changed: i64 = get(&row, "changed")?;
    let ended: i64 = get(&row, "ended")?;
    Ok((changed.max(0) as u64, ended.max(0) as u64))
}

/// The server's WAL position, in bytes from the start: the difference of two readings is what
/// every session of the server wrote between them. Not `pg_stat_wal`: a backend adds its own
/// WAL there only when it flushes its statistics (at most once a second, when idle), so a
/// reading taken just after a phase misses part of that phase's WAL and counts part of the one
/// before.
pub async fn bench_wal_bytes<C: GenericClient>(c: &C) -> Result<f64> {
    let row = query_one(c, "select pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::float8 as b", &[]).await?;
    get(&row, "b")
}

/// Drops the baseline's table.
pub async fn bench_limit_drop<C: GenericClient>(c: &C) -> Result<()> {
    c.batch_execute("drop table if exists asyncflow_bench.limit_tasks").await.map_err(Error::from_db)
}

//! The monitoring reads of the SQL seam (sql/api/65_monitoring.sql): per-type figures, the
//! monotonic counters and stage times for `GET /metrics` and the dashboard, and whether any task
//! is live (maintenance's quiet probe).

use super::{get, query, query_one};
use crate::db::GenericClient;
use crate::error::Result;

/// Tasks pending, running or waiting, of every type, from the status counters
/// (`asyncflow.status_counts`): zero when the task engine has nothing to do (a waiting task
/// counts: its wait's timeout is maintenance's to end on time).
pub async fn live_tasks<C: GenericClient>(c: &C) -> Result<i64> {
    let row = query_one(
        c,
        "select coalesce(sum(pending + running + waiting), 0)::bigint as n from asyncflow.status_counts()",
        &[],
    )
    .await?;
    get(&row, "n")
}

/// Per-type figures for `GET /metrics` that `queue_depth` does not give.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskTypeFigures {
    /// Task type.
    pub task_type: String,
    /// Ids handed out by the type's sequence: tasks created, plus creations rolled back (0 when
    /// this role may not read the sequence).
    pub created: i64,
    /// Stored tasks per status (finished tasks leave when retention drops their shard).
    pub pending: i64,
    /// See `pending`.
    pub running: i64,
    /// See `pending`.
    pub succeeded: i64,
    /// See `pending`.
    pub failed: i64,
    /// See `pending`.
    pub cancelled: i64,
    /// Seconds since the longest-held running task was claimed (0 when none runs).
    pub oldest_running_age: f64,
    /// See `pending`: tasks waiting for an event or for their children.
    pub waiting: i64,
}

/// Figures of every registered type, by name. The counts per status come from the counters the
/// SQL API keeps (`asyncflow.status_counts`), so they cost the same at any number of tasks.
pub async fn task_type_figures<C: GenericClient>(c: &C) -> Result<Vec<TaskTypeFigures>> {
    let rows = query(
        c,
        "select task_type, created, pending, running, succeeded, failed, cancelled, oldest_running_age, waiting \
         from asyncflow.task_type_figures()",
        &[],
    )
    .await?;
    rows.iter()
        .map(|r| {
            Ok(TaskTypeFigures {
                task_type: get(r, "task_type")?,
                created: get(r, "created")?,
                pending: get(r, "pending")?,
                running: get(r, "running")?,
                succeeded: get(r, "succeeded")?,
                failed: get(r, "failed")?,
                cancelled: get(r, "cancelled")?,
                oldest_running_age: get(r, "oldest_running_age")?,
                waiting: get(r, "waiting")?,
            })
        })
        .collect()
}

/// Monotonic per-type counters (summed over their slots), for `GET /metrics`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TypeCounters {
    /// Task type.
    pub task_type: String,
    /// Claims.
    pub claimed: i64,
    /// Tasks that succeeded.
    pub succeeded: i64,
    /// Tasks failed for good (by a report or by the rescuer).
    pub failed: i64,
    /// Failed tries that will be tried again.
    pub retried: i64,
    /// Leases that ran out.
    pub rescued: i64,
}

/// Stage call durations of one (type, stage): `buckets[k]` counts the calls with exactly k of
/// `bounds` below their duration.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StageTimes {
    /// Task type.
    pub task_type: String,
    /// Stage.
    pub stage: String,
    /// Calls reported.
    pub calls: i64,
    /// Their total duration.
    pub seconds: f64,
    /// Bucket upper bounds, seconds.
    pub bounds: Vec<f64>,
    /// Non-cumulative counts, one more than `bounds`.
    pub buckets: Vec<i64>,
}

/// The counters of every type.
pub async fn type_counters<C: GenericClient>(c: &C) -> Result<Vec<TypeCounters>> {
    let rows = query(
        c,
        "select task_type, claimed, succeeded, failed, retried, rescued from asyncflow.task_counter_totals()",
        &[],
    )
    .await?;
    rows.iter()
        .map(|r| {
            Ok(TypeCounters {
                task_type: get(r, "task_type")?,
                claimed: get(r, "claimed")?,
                succeeded: get(r, "succeeded")?,
                failed: get(r, "failed")?,
                retried: get(r, "retried")?,
                rescued: get(r, "rescued")?,
            })
        })
        .collect()
}

/// Stage call durations of every (type, stage).
pub async fn stage_times<C: GenericClient>(c: &C) -> Result<Vec<StageTimes>> {
    let rows =
        query(c, "select task_type, stage, calls, seconds, bounds, buckets from asyncflow.stage_time_totals()", &[])
            .await?;
    rows.iter()
        .map(|r| {
            Ok(StageTimes {
                task_type: get(r, "task_type")?,
                stage: get(r, "stage")?,
                calls: get(r, "calls")?,
                seconds: get(r, "seconds")?,
                bounds: get(r, "bounds")?,
                buckets: get(r, "buckets")?,
            })
        })
        .collect()
}

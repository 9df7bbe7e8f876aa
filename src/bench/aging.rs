//! Aging: a queue that has run for a long time keeps millions of finished tasks until retention
//! drops their shard. These phases fill shards with finished tasks by set-based inserts (what
//! years of traffic would leave, minus the wait), and time retention dropping one.

use std::time::Instant;

use chrono::{Duration as ChronoDuration, Utc};

use super::Progress;
use crate::db::{api, DbPool};
use crate::error::Result;
use crate::ids::TypeName;
use crate::task_type::TaskTypeUpdate;

/// Rows per insert statement while filling.
const FILL_BATCH: i64 = 1_000_000;

/// Adds `rows` finished tasks to the newest shard of `task_type` (ids continue its sequence),
/// then analyzes the shard so the planner sees it as it is.
pub(super) async fn fill_finished(pool: &DbPool, task_type: &str, rows: i64, progress: &mut Progress) -> Result<()> {
    fill(pool, task_type, rows, false, progress).await?;
    api::bench_analyze(&pool.get().await?, task_type).await
}

/// Adds `rows` finished tasks to `task_type` where a long-running queue of the type keeps them:
/// in shards of the type's `shard_max_rows` (5 M by default), rolled by `roll_shard` as each one
/// fills, with begin_pos moved past them, so the tasks queued afterwards go to a fresh live shard
/// beside closed ones full of finished tasks. A closed shard no longer changes, and autovacuum
/// would have visited it long ago: it is vacuumed and analyzed once here, rather than in the
/// middle of the timed burn-down.
pub(super) async fn fill_finished_rolling(
    pool: &DbPool,
    task_type: &str,
    rows: i64,
    progress: &mut Progress,
) -> Result<()> {
    fill(pool, task_type, rows, true, progress).await?;
    let c = pool.get().await?;
    api::advance_begin_pos(&c, task_type, None).await?;
    api::bench_vacuum_analyze(&c, task_type).await
}

async fn fill(pool: &DbPool, task_type: &str, rows: i64, roll: bool, progress: &mut Progress) -> Result<()> {
    let c = pool.get().await?;
    let finished_at = Utc::now() - ChronoDuration::days(1);
    let mut done = 0;
    while done < rows {
        let n = FILL_BATCH.min(rows - done);
        api::bench_fill_finished(&c, task_type, n, finished_at).await?;
        done += n;
        if roll {
            api::roll_shard(&c, task_type, None).await?;
        }
        progress.detail(&format!("{:.1} of {:.1} M rows", done as f64 / 1e6, rows as f64 / 1e6));
    }
    Ok(())
}

/// Drops the benchmark type's shards' rows (the aged table would otherwise slow later phases).
pub(super) async fn clear(pool: &DbPool, task_type: &str) -> Result<()> {
    api::bench_truncate(&pool.get().await?, task_type).await
}

/// What dropping the shard cost.
pub(super) struct Dropped {
    pub seconds: f64,
    pub dead_tuples: i64,
}

/// Fills shard 1 of a fresh type with `rows` finished tasks, rolls to shard 2, moves begin_pos
/// past shard 1, and times `drop_expired_shards` dropping it once retention has passed.
pub(super) async fn drop_expired_shard(pool: &DbPool, rows: i64, progress: &mut Progress) -> Result<Dropped> {
    let ty = "bench_drop";
    let settings = TaskTypeUpdate { shard_max_rows: Some(1000), retention: Some(3600), ..Default::default() };
    let c = pool.get().await?;
    api::register_task_type(&c, &TypeName::new(ty)?, &settings).await?;
    drop(c);
    fill_finished(pool, ty, rows, progress).await?;
    let c = pool.get().await?;
    let later = Utc::now() + ChronoDuration::hours(2);
    api::roll_shard(&c, ty, Some(Utc::now())).await?;
    api::advance_begin_pos(&c, ty, Some(Utc::now())).await?;
    let start = Instant::now();
    let dropped = api::drop_expired_shards(&c, ty, Some(later)).await?;
    let seconds = start.elapsed().as_secs_f64();
    if dropped != [1] {
        return Err(crate::Error::Config(format!("drop phase: expected shard 1 dropped, got {dropped:?}")));
    }
    let dead_tuples = api::bench_dead_tuples(&c, ty).await?;
    Ok(Dropped { seconds, dead_tuples })
}

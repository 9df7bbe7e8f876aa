//! `asyncflow status`: per task type, what is ready, delayed, running, succeeded and failed, the
//! age of the oldest ready task, and the shard positions.

use std::collections::HashMap;

use crate::db::{api, DbPool};
use crate::error::Result;
use crate::task::TaskStatus;

/// Prints the status table to stdout.
pub async fn print(pool: &DbPool) -> Result<()> {
    let client = pool.get().await?;
    let depth = api::queue_depth(&client).await?;
    let positions: HashMap<String, api::Positions> =
        api::positions(&client).await?.into_iter().map(|p| (p.task_type.clone(), p)).collect();
    println!(
        "{:<24} {:>8} {:>8} {:>8} {:>10} {:>8} {:>10} {:>12}  shards (begin..end, live)",
        "type", "ready", "delayed", "running", "succeeded", "failed", "cancelled", "oldest ready"
    );
    for d in depth {
        let counts: HashMap<TaskStatus, i64> = api::count_by_status(&client, &d.task_type).await?.into_iter().collect();
        let count = |s| counts.get(&s).copied().unwrap_or(0);
        let shards = positions
            .get(&d.task_type)
            .map(|p| format!("{}..{}, {}", p.begin_pos, p.end_pos, p.shards))
            .unwrap_or_default();
        println!(
            "{:<24} {:>8} {:>8} {:>8} {:>10} {:>8} {:>10} {:>11.1}s  {}{}",
            d.task_type,
            d.ready,
            d.delayed,
            d.running,
            count(TaskStatus::Succeeded),
            count(TaskStatus::Failed),
            count(TaskStatus::Cancelled),
            d.oldest_ready_age,
            shards,
            if d.paused { "  (paused)" } else { "" }
        );
    }
    Ok(())
}

//! `asyncflow status`: per task type, what is ready, delayed, running, succeeded and failed, the
//! age of the oldest ready task, and the shard positions; then the periodic schedules with their
//! next and last tick and their last task or run.

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
    let schedules = api::list_schedules(&client).await?;
    if !schedules.is_empty() {
        let time = |t: Option<chrono::DateTime<chrono::Utc>>| {
            t.map_or_else(|| "-".to_string(), |t| t.format("%Y-%m-%d %H:%M:%S").to_string())
        };
        println!();
        println!(
            "{:<24} {:<20} {:<16} {:<20} {:<20} {:<28}  state",
            "schedule", "cron", "releases", "next tick (UTC)", "last tick (UTC)", "last task or run"
        );
        for s in schedules {
            let target = s.spec["type"].as_str().or(s.spec["pipeline"].as_str()).unwrap_or_default().to_string();
            let state = match (&s.error, s.paused) {
                (Some(e), _) => format!("error: {e}"),
                (None, true) => "paused".to_string(),
                (None, false) => format!("missed: {}", s.missed.as_str()),
            };
            println!(
                "{:<24} {:<20} {:<16} {:<20} {:<20} {:<28}  {}",
                s.name,
                s.cron,
                target,
                time(s.next_tick),
                time(s.last_tick),
                s.last_task_id.or(s.last_run_id).unwrap_or_else(|| "-".into()),
                state
            );
        }
    }
    Ok(())
}

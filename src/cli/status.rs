//! `asyncflow status`: per task type, what is ready, delayed, running, succeeded and failed, the
//! age of the oldest ready task, and the shard positions, then the periodic schedules with their
//! next and last tick and their last task or run; from the database, or from a server's
//! `GET /v1/dashboard` with `--server` (without the schedules).

use std::collections::HashMap;

use serde_json::Value;

use super::remote::{call, Target};
use crate::db::{api, DbPool};
use crate::error::{Error, Result};
use crate::task::TaskStatus;

/// One line of the table.
struct Line {
    task_type: String,
    ready: i64,
    delayed: i64,
    running: i64,
    succeeded: i64,
    failed: i64,
    cancelled: i64,
    oldest_ready_age: f64,
    /// `begin..end, live shards`, empty when the type has no positions.
    shards: String,
    paused: bool,
}

/// Prints the status table of the database to stdout.
pub async fn print(pool: &DbPool) -> Result<()> {
    let client = pool.get().await?;
    let depth = api::queue_depth(&client).await?;
    let positions: HashMap<String, api::Positions> =
        api::positions(&client).await?.into_iter().map(|p| (p.task_type.clone(), p)).collect();
    let mut lines = Vec::with_capacity(depth.len());
    for d in depth {
        let counts: HashMap<TaskStatus, i64> = api::count_by_status(&client, &d.task_type).await?.into_iter().collect();
        let count = |s| counts.get(&s).copied().unwrap_or(0);
        let shards = positions
            .get(&d.task_type)
            .map(|p| format!("{}..{}, {}", p.begin_pos, p.end_pos, p.shards))
            .unwrap_or_default();
        lines.push(Line {
            succeeded: count(TaskStatus::Succeeded),
            failed: count(TaskStatus::Failed),
            cancelled: count(TaskStatus::Cancelled),
            ready: d.ready,
            delayed: d.delayed,
            running: d.running,
            oldest_ready_age: d.oldest_ready_age,
            shards,
            paused: d.paused,
            task_type: d.task_type,
        });
    }
    print_lines(&lines);
    let schedules = api::list_schedules(&client).await?;
    if !schedules.is_empty() {
        let time = |t: Option<chrono::DateTime<chrono::Utc>>| {
            t.map_or_else(|| "-".to_string(), |t| t.format("%Y-%m-%d %H:%M:%S").to_string())
        };
        crate::outln!();
        crate::outln!(
            "{:<24} {:<20} {:<16} {:<20} {:<20} {:<28}  state",
            "schedule",
            "cron",
            "releases",
            "next tick (UTC)",
            "last tick (UTC)",
            "last task or run"
        );
        for s in schedules {
            let target = s.spec["type"].as_str().or(s.spec["pipeline"].as_str()).unwrap_or_default().to_string();
            let state = match (&s.error, s.paused) {
                (Some(e), _) => format!("error: {e}"),
                (None, true) => "paused".to_string(),
                (None, false) => format!("missed: {}", s.missed.as_str()),
            };
            crate::outln!(
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

/// Prints the status table of the server `target` names (its `GET /v1/dashboard`).
pub async fn print_remote(target: &Target) -> Result<()> {
    let overview = call(target, reqwest::Method::GET, "/v1/dashboard", None).await?;
    let types = overview["types"]
        .as_array()
        .ok_or_else(|| Error::Unexpected("the server's /v1/dashboard has no list of types".into()))?;
    let lines: Vec<Line> = types.iter().map(remote_line).collect();
    print_lines(&lines);
    Ok(())
}

fn remote_line(t: &Value) -> Line {
    let n = |k: &str| t[k].as_i64().unwrap_or(0);
    let shards = match (t["begin_pos"].as_i64(), t["end_pos"].as_i64()) {
        (Some(b), Some(e)) => format!("{b}..{e}, {}", n("shards")),
        _ => String::new(),
    };
    Line {
        task_type: t["type"].as_str().or(t["task_type"].as_str()).unwrap_or_default().to_string(),
        ready: n("ready"),
        delayed: n("delayed"),
        running: n("running"),
        succeeded: n("succeeded"),
        failed: n("failed"),
        cancelled: n("cancelled"),
        oldest_ready_age: t["oldest_ready_age"].as_f64().unwrap_or(0.0),
        shards,
        paused: t["paused"].as_bool().unwrap_or(false),
    }
}

fn print_lines(lines: &[Line]) {
    crate::outln!(
        "{:<24} {:>8} {:>8} {:>8} {:>10} {:>8} {:>10} {:>12}  shards (begin..end, live)",
        "type",
        "ready",
        "delayed",
        "running",
        "succeeded",
        "failed",
        "cancelled",
        "oldest ready"
    );
    for l in lines {
        crate::outln!(
            "{:<24} {:>8} {:>8} {:>8} {:>10} {:>8} {:>10} {:>11.1}s  {}{}",
            l.task_type,
            l.ready,
            l.delayed,
            l.running,
            l.succeeded,
            l.failed,
            l.cancelled,
            l.oldest_ready_age,
            l.shards,
            if l.paused { "  (paused)" } else { "" }
        );
    }
}

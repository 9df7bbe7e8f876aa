//! `asyncflow status`: per task type, what is ready, delayed, running, succeeded and failed, the
//! age of the oldest ready task, and the shard positions (the dashboard's overview), then the
//! periodic schedules with their next and last tick and their last task or run; from the
//! database, or from a server with `--server`.

use crate::client::Client;
use crate::error::Result;
use crate::protocol::dashboard::TypeSummary;

/// Prints the status table to stdout.
pub async fn print(client: &Client) -> Result<()> {
    let overview = client.overview().await?;
    print_lines(&overview.types);
    let schedules = client.list_schedules().await?;
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

fn print_lines(lines: &[TypeSummary]) {
    crate::outln!(
        "{:<24} {:>8} {:>8} {:>8} {:>8} {:>10} {:>8} {:>10} {:>12}  shards (begin..end, live)",
        "type",
        "ready",
        "delayed",
        "running",
        "waiting",
        "succeeded",
        "failed",
        "cancelled",
        "oldest ready"
    );
    for l in lines {
        let shards = match (l.begin_pos, l.end_pos) {
            (Some(begin), Some(end)) => format!("{begin}..{end}, {}", l.shards),
            _ => String::new(),
        };
        crate::outln!(
            "{:<24} {:>8} {:>8} {:>8} {:>8} {:>10} {:>8} {:>10} {:>11.1}s  {}{}",
            l.task_type,
            l.counts.ready,
            l.counts.delayed,
            l.counts.running,
            l.counts.waiting,
            l.counts.succeeded,
            l.counts.failed,
            l.counts.cancelled,
            l.oldest_ready_age,
            shards,
            if l.paused { "  (paused)" } else { "" }
        );
    }
}

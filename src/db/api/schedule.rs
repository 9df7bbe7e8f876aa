//! The schedules part of the SQL seam: one async fn per `asyncflow.*` schedule function.

use chrono::{DateTime, Utc};

use super::{from_json, get, query, query_one};
use crate::db::GenericClient;
use crate::error::{Error, Result};
use crate::schedule::{Schedule, ScheduleSpec};

/// `asyncflow.set_schedule`: creates or replaces the schedule; the schedule as stored.
pub async fn set_schedule<C: GenericClient>(
    c: &C,
    name: &str,
    cron: &str,
    spec: &ScheduleSpec,
    now: Option<DateTime<Utc>>,
) -> Result<Schedule> {
    let spec = serde_json::to_value(spec).map_err(|e| Error::InvalidArgument(e.to_string()))?;
    let row = query_one(c, "select asyncflow.set_schedule($1, $2, $3, $4) as s", &[&name, &cron, &spec, &now]).await?;
    from_json(get(&row, "s")?, "schedule")
}

/// `asyncflow.remove_schedule`: true when the schedule existed.
pub async fn remove_schedule<C: GenericClient>(c: &C, name: &str) -> Result<bool> {
    let row = query_one(c, "select asyncflow.remove_schedule($1) as removed", &[&name]).await?;
    get(&row, "removed")
}

/// `asyncflow.list_schedules`: every schedule by name.
pub async fn list_schedules<C: GenericClient>(c: &C) -> Result<Vec<Schedule>> {
    let rows = query(c, "select s from asyncflow.list_schedules() s", &[]).await?;
    rows.iter().map(|r| from_json(get(r, "s")?, "schedule")).collect()
}

/// `asyncflow.release_schedule_tick`: the task or run id released for the tick; None when the
/// tick had been released already (or the schedule changed since).
pub async fn release_schedule_tick<C: GenericClient>(
    c: &C,
    name: &str,
    tick: DateTime<Utc>,
    now: Option<DateTime<Utc>>,
) -> Result<Option<String>> {
    let row = query_one(c, "select asyncflow.release_schedule_tick($1, $2, $3) as id", &[&name, &tick, &now]).await?;
    get(&row, "id")
}

/// `asyncflow.note_schedule`: the next tick a scheduler pass found, or why it could not use the
/// schedule.
pub async fn note_schedule<C: GenericClient>(
    c: &C,
    name: &str,
    next_tick: Option<DateTime<Utc>>,
    error: Option<&str>,
) -> Result<()> {
    query(c, "select asyncflow.note_schedule($1, $2, $3)", &[&name, &next_tick, &error]).await?;
    Ok(())
}

/// The database's clock: the scheduler computes ticks on the same clock that stamps tasks.
pub async fn database_now<C: GenericClient>(c: &C) -> Result<DateTime<Utc>> {
    let row = query_one(c, "select now() as now", &[]).await?;
    get(&row, "now")
}

/// `asyncflow.pause_schedule`: pauses or resumes the schedule (AF014 when there is none).
pub async fn pause_schedule<C: GenericClient>(c: &C, name: &str, paused: bool) -> Result<Schedule> {
    let row = query_one(c, "select asyncflow.pause_schedule($1, $2) as s", &[&name, &paused]).await?;
    from_json(get(&row, "s")?, "schedule")
}

/// `asyncflow.drop_expired_unique_keys`: how many uniqueness keys whose window ended went.
pub async fn drop_expired_unique_keys<C: GenericClient>(c: &C, now: Option<DateTime<Utc>>, limit: i32) -> Result<i32> {
    let row = query_one(c, "select asyncflow.drop_expired_unique_keys($1, $2) as n", &[&now, &limit]).await?;
    get(&row, "n")
}

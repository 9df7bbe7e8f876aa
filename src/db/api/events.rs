//! The events part of the SQL seam (`sql/api/45_events.sql`): one async fn per `asyncflow.*`
//! function of tasks that wait for an event.

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::{get, query, query_one};
use crate::db::GenericClient;
use crate::error::Result;

/// `asyncflow.send_event`: records the event and wakes every task waiting for `key`; the number
/// woken now (a wait that begins later, within the retention, finds the event by itself).
pub async fn send_event<C: GenericClient>(
    c: &C,
    key: &str,
    payload: &Value,
    now: Option<DateTime<Utc>>,
) -> Result<i32> {
    let row = query_one(c, "select asyncflow.send_event($1, $2, $3) as woken", &[&key, payload, &now]).await?;
    get(&row, "woken")
}

/// One wait ended by [`expire_waits`].
#[derive(Debug, Clone, PartialEq)]
pub struct ExpiredWait {
    /// The task that waited.
    pub task_id: String,
    /// The key it waited for.
    pub event_key: String,
    /// True: timed out; false: it took an event it had not been given.
    pub timed_out: bool,
}

/// `asyncflow.expire_waits`: waits past their timeout end (at most `limit`).
pub async fn expire_waits<C: GenericClient>(c: &C, now: Option<DateTime<Utc>>, limit: i32) -> Result<Vec<ExpiredWait>> {
    let rows =
        query(c, "select task_id, event_key, timed_out from asyncflow.expire_waits($1, $2)", &[&now, &limit]).await?;
    rows.iter()
        .map(|r| {
            Ok(ExpiredWait {
                task_id: get(r, "task_id")?,
                event_key: get(r, "event_key")?,
                timed_out: get(r, "timed_out")?,
            })
        })
        .collect()
}

/// `asyncflow.drop_expired_events`: how many events past the retention went (at most `limit`).
pub async fn drop_expired_events<C: GenericClient>(c: &C, now: Option<DateTime<Utc>>, limit: i32) -> Result<i32> {
    let row = query_one(c, "select asyncflow.drop_expired_events($1, $2) as n", &[&now, &limit]).await?;
    get(&row, "n")
}

//! The history part of the SQL seam: sampling the counters into the minute and hour rings, and
//! reading them back.

use chrono::{DateTime, Utc};

use super::{get, query, query_one};
use crate::db::GenericClient;
use crate::error::Result;

/// `asyncflow.fold_status_deltas`: moves the status deltas appended by creates, cancels and
/// retries into the counters' rows; how many were folded.
pub async fn fold_status_deltas<C: GenericClient>(c: &C) -> Result<i64> {
    let row = query_one(c, "select asyncflow.fold_status_deltas() as n", &[]).await?;
    get(&row, "n")
}

/// `asyncflow.sample_stats`: one sample of every type's figures into the history rings at
/// `now` (None: the database's clock); the points written.
pub async fn sample_stats<C: GenericClient>(c: &C, now: Option<DateTime<Utc>>) -> Result<i32> {
    let row = query_one(c, "select asyncflow.sample_stats($1) as n", &[&now]).await?;
    get(&row, "n")
}

/// One point of a type's history (or of all types summed).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct StatsPoint {
    /// Start of the interval (RFC 3339).
    pub at: DateTime<Utc>,
    /// Tasks that succeeded in the interval.
    pub succeeded: i64,
    /// Tasks that failed for good in the interval.
    pub failed: i64,
    /// Failed tries that will be tried again, in the interval.
    pub retried: i64,
    /// Ready tasks at the interval's last sample.
    pub ready: i64,
    /// Running tasks at the interval's last sample.
    pub running: i64,
    /// Seconds the oldest ready task had waited, at the interval's last sample.
    pub lag_seconds: f64,
}

/// `asyncflow.stats_history`: the points of `task_type` (None: all types summed) over `range`
/// (`hour`, `day` or `month`) before `now`, oldest first. An unknown type or range is an error.
pub async fn stats_history<C: GenericClient>(
    c: &C,
    task_type: Option<&str>,
    range: &str,
    now: Option<DateTime<Utc>>,
) -> Result<Vec<StatsPoint>> {
    let rows = query(
        c,
        "select at, succeeded, failed, retried, ready, running, lag_seconds from asyncflow.stats_history($1, $2, $3)",
        &[&task_type, &range, &now],
    )
    .await?;
    rows.iter()
        .map(|r| {
            Ok(StatsPoint {
                at: get(r, "at")?,
                succeeded: get(r, "succeeded")?,
                failed: get(r, "failed")?,
                retried: get(r, "retried")?,
                ready: get(r, "ready")?,
                running: get(r, "running")?,
                lag_seconds: get(r, "lag_seconds")?,
            })
        })
        .collect()
}

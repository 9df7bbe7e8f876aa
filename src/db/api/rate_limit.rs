//! The rate-limit part of the SQL seam.

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use super::{get, query_one};
use crate::db::GenericClient;
use crate::error::{Error, Result};
use crate::task_type::{QueueRateLimit, RateLimit};

/// `asyncflow.set_rate_limit`: at most `max_starts` task starts per `period` seconds for the
/// type, across all workers (`max_starts` None removes the limit); the limit as stored.
pub async fn set_rate_limit<C: GenericClient>(c: &C, task_type: &str, limit: &RateLimit) -> Result<RateLimit> {
    let row = query_one(
        c,
        "select asyncflow.set_rate_limit($1, $2, $3) as r",
        &[&task_type, &limit.max_starts, &limit.period],
    )
    .await?;
    let stored: Value = get(&row, "r")?;
    let max_starts = match &stored["max_starts"] {
        Value::Null => None,
        v => Some(
            v.as_i64()
                .and_then(|n| i32::try_from(n).ok())
                .ok_or_else(|| Error::Unexpected(format!("set_rate_limit answered max_starts {v}")))?,
        ),
    };
    Ok(RateLimit { max_starts, period: stored["period"].as_f64().unwrap_or(limit.period) })
}

/// `asyncflow.set_queue_rate_limit`: at most `max_starts` starts per `period` seconds for one
/// queue key of a type with `fair_queues`, or for every key without a limit of its own
/// (`queue_key` None); `max_starts` None removes that limit. The limit that now applies.
pub async fn set_queue_rate_limit<C: GenericClient>(
    c: &C,
    task_type: &str,
    limit: &QueueRateLimit,
) -> Result<QueueRateLimit> {
    let row = query_one(
        c,
        "select asyncflow.set_queue_rate_limit($1, $2, $3, $4) as r",
        &[&task_type, &limit.queue_key, &limit.max_starts, &limit.period.unwrap_or(1.0)],
    )
    .await?;
    let stored: Value = get(&row, "r")?;
    serde_json::from_value(json!({
        "queue_key": stored["queue_key"],
        "max_starts": stored["max_starts"],
        "period": stored["period"],
    }))
    .map_err(|e| Error::Unexpected(format!("set_queue_rate_limit answered {stored}: {e}")))
}

/// `asyncflow.prune_rate_buckets` (maintenance): removes the full buckets of keys under a type's
/// limit for every key; how many.
pub async fn prune_rate_buckets<C: GenericClient>(c: &C, now: Option<DateTime<Utc>>) -> Result<i32> {
    let row = query_one(c, "select asyncflow.prune_rate_buckets($1) as n", &[&now]).await?;
    get(&row, "n")
}

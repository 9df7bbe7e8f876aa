//! The rate-limit part of the SQL seam.

use serde_json::Value;

use super::{get, query_one};
use crate::db::GenericClient;
use crate::error::{Error, Result};
use crate::task_type::RateLimit;

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

//! The rate-limit part of the SQL seam.

use serde_json::Value;

use super::{get, query_one};
use crate::db::GenericClient;
use crate::error::Result;

/// `asyncflow.set_rate_limit`: at most `max_starts` task starts per `period` seconds for the
/// type, across all workers (None removes the limit); `{task_type, max_starts, period}`.
pub async fn set_rate_limit<C: GenericClient>(
    c: &C,
    task_type: &str,
    max_starts: Option<i32>,
    period: f64,
) -> Result<Value> {
    let row =
        query_one(c, "select asyncflow.set_rate_limit($1, $2, $3) as r", &[&task_type, &max_starts, &period]).await?;
    get(&row, "r")
}

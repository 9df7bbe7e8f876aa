//! The explain part of the SQL seam (`sql/api/62_explain.sql`).

use chrono::{DateTime, Utc};

use super::{from_json, get, query_one};
use crate::db::GenericClient;
use crate::error::Result;
use crate::explain::Explanation;

/// `asyncflow.explain_task`: why the task is not running; None when there is no such task.
pub async fn explain_task<C: GenericClient>(
    c: &C,
    task_id: &str,
    now: Option<DateTime<Utc>>,
) -> Result<Option<Explanation>> {
    let row = query_one(c, "select asyncflow.explain_task($1, $2) as e", &[&task_id, &now]).await?;
    match get::<Option<serde_json::Value>>(&row, "e")? {
        Some(v) => Ok(Some(from_json(v, "explanation")?)),
        None => Ok(None),
    }
}

//! The children part of the SQL seam (`sql/api/46_children.sql`).

use super::{from_json, get, query_one};
use crate::db::GenericClient;
use crate::error::Result;
use crate::protocol::children::TaskChildren;

/// `asyncflow.task_children`: the tasks a task spawned, at most `limit` (1..=1000); None when
/// there is no such task.
pub async fn task_children<C: GenericClient>(c: &C, task_id: &str, limit: i32) -> Result<Option<TaskChildren>> {
    let row = query_one(c, "select asyncflow.task_children($1, $2) as c", &[&task_id, &limit]).await?;
    match get::<Option<serde_json::Value>>(&row, "c")? {
        Some(v) => Ok(Some(from_json(v, "task children")?)),
        None => Ok(None),
    }
}

//! The task-search part of the SQL seam: a filter of tasks (`asyncflow.find_tasks`, and
//! `list_tasks` for its older four-field form) and bulk retry / cancel of what a filter selects
//! (`asyncflow.bulk_change_tasks`). The filter travels as one JSON object, the form the SQL
//! functions take, so a new condition needs no new parameter.

use chrono::{DateTime, Utc};
use serde_json::{Map, Value};

use super::{from_json, get, query, query_one};
use crate::db::GenericClient;
use crate::error::Result;
use crate::task::{Task, TaskStatus};

/// Most tasks one bulk call changes; the answer says whether more remain.
pub const BULK_LIMIT_MAX: i32 = 1000;

/// Filters for [`list_tasks`] and the bulk calls; every condition that is set must hold.
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
pub struct TaskFilter {
    /// Only this type.
    #[serde(rename = "type")]
    pub task_type: Option<String>,
    /// Only this status.
    pub status: Option<TaskStatus>,
    /// Only this stage.
    pub stage: Option<String>,
    /// Only this user.
    pub user_id: Option<String>,
    /// Only this queue key.
    #[serde(default)]
    pub queue_key: Option<String>,
    /// Only tasks created at or after this time.
    #[serde(default)]
    pub created_after: Option<DateTime<Utc>>,
    /// Only tasks created before this time.
    #[serde(default)]
    pub created_before: Option<DateTime<Utc>>,
    /// An exact task id, an idempotency key, or text in the last error (looked for in a window of
    /// at most 10,000 tasks that match the rest).
    #[serde(default)]
    pub q: Option<String>,
    /// Start after this task id (the last id of the previous page, in the same order).
    pub after: Option<String>,
    /// Page size, 1..=1000 (default 100).
    pub limit: Option<i32>,
    /// Newest first (the default) or oldest first, within a type (types by name).
    #[serde(default)]
    pub order: Option<TaskOrder>,
}

/// The order of a page of tasks: types by name, and within a type newest first (by id, the
/// order its tasks were created) or oldest first. Ids count per type, so there is no order by age
/// across types that an index keeps.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskOrder {
    /// The newest task of a type first (the default).
    #[default]
    Newest,
    /// The oldest task of a type first.
    Oldest,
}

impl TaskOrder {
    /// The spelling `find_tasks` and `GET /v1/tasks?order=` take.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskOrder::Newest => "newest",
            TaskOrder::Oldest => "oldest",
        }
    }

    /// Reads `newest` or `oldest`.
    pub fn parse(text: &str) -> Option<TaskOrder> {
        match text {
            "newest" => Some(TaskOrder::Newest),
            "oldest" => Some(TaskOrder::Oldest),
            _ => None,
        }
    }
}

impl TaskFilter {
    /// The conditions as the JSON object the SQL functions take (paging left out).
    pub fn conditions(&self) -> Value {
        let mut m = Map::new();
        let mut put = |key: &str, value: Option<String>| {
            if let Some(v) = value {
                m.insert(key.to_string(), Value::String(v));
            }
        };
        put("type", self.task_type.clone());
        put("status", self.status.map(|s| format!("{s:?}").to_lowercase()));
        put("stage", self.stage.clone());
        put("user_id", self.user_id.clone());
        put("queue_key", self.queue_key.clone());
        put("created_after", self.created_after.map(|t| t.to_rfc3339()));
        put("created_before", self.created_before.map(|t| t.to_rfc3339()));
        put("q", self.q.clone());
        Value::Object(m)
    }
}

/// `asyncflow.find_tasks`: one page of the tasks that match, types by name and each type's
/// tasks in the filter's order (newest first unless it says otherwise).
pub async fn list_tasks<C: GenericClient>(c: &C, filter: &TaskFilter) -> Result<Vec<Task>> {
    let order = filter.order.unwrap_or_default().as_str();
    let rows = query(
        c,
        "select t from asyncflow.find_tasks($1, $2, $3, $4) t",
        &[&filter.conditions(), &filter.after, &filter.limit.unwrap_or(100), &order],
    )
    .await?;
    rows.iter().map(|r| from_json(get(r, "t")?, "task")).collect()
}

/// What a bulk call may do to a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BulkAction {
    /// `retry_task` on failed and cancelled tasks (not those of workflow nodes).
    Retry,
    /// `cancel_task` on pending and running tasks.
    Cancel,
}

/// What a bulk call did, or would do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct BulkOutcome {
    /// Dry run: the tasks that would change (counted up to 100,000). Otherwise: the tasks taken
    /// in this call (at most its limit).
    pub matched: i64,
    /// Tasks changed (0 on a dry run).
    pub changed: i64,
    /// More tasks match than this call took (or counted): call again.
    pub more: bool,
}

/// `asyncflow.bulk_change_tasks`: retries or cancels at most `limit` (1..=[`BULK_LIMIT_MAX`])
/// tasks that match `filter` (its paging ignored), or with `dry_run` only counts them.
pub async fn bulk_change_tasks<C: GenericClient>(
    c: &C,
    action: BulkAction,
    filter: &TaskFilter,
    dry_run: bool,
    limit: i32,
) -> Result<BulkOutcome> {
    let action = match action {
        BulkAction::Retry => "retry",
        BulkAction::Cancel => "cancel",
    };
    let row = query_one(
        c,
        "select matched, changed, more from asyncflow.bulk_change_tasks($1, $2, $3, $4)",
        &[&action, &filter.conditions(), &dry_run, &limit],
    )
    .await?;
    Ok(BulkOutcome { matched: get(&row, "matched")?, changed: get(&row, "changed")?, more: get(&row, "more")? })
}

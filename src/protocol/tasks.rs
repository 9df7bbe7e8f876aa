//! The tasks resource (`/v1/tasks`): what a client sends and what it gets back, one set of types
//! for the server's handlers, [`crate::client::Client`]'s two backends and the OpenAPI document.

use serde::{Deserialize, Serialize};

use crate::db::api::{TaskFilter, TaskOrder};
use crate::ids::TaskId;
use crate::task::{NewTask, Task};

/// A task to create: its type, and the optional fields of one task (`NewTask`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateTaskRequest {
    /// A task type (registered with the default settings if nothing has registered it).
    #[serde(rename = "type", alias = "task_type")]
    pub task_type: String,
    /// The task's optional fields.
    #[serde(flatten)]
    pub task: NewTask,
}

/// Many tasks of one type, created in one statement (at most 10,000).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateTasksRequest {
    /// A task type (registered with the default settings if nothing has registered it).
    #[serde(rename = "type", alias = "task_type")]
    pub task_type: String,
    /// The tasks, each with the optional fields of one task.
    pub tasks: Vec<NewTask>,
}

/// Most tasks one `create_tasks` call takes.
pub const CREATE_TASKS_MAX: usize = 10_000;

/// The id of the created task, or of the task its idempotency key or unique key already named.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct TaskCreated {
    /// Task id.
    #[cfg_attr(feature = "server", schema(value_type = String, example = "video-1-42"))]
    pub id: TaskId,
    /// True when this call created the task (201); false when its idempotency key already
    /// named a task of the type, or its unique key's task still blocks (pending or running, or
    /// inside `unique_for`): that task is returned and nothing is created (200).
    pub created: bool,
}

/// The ids of the created tasks, in input order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct TasksCreated {
    /// Task ids.
    #[cfg_attr(feature = "server", schema(value_type = Vec<String>))]
    pub ids: Vec<TaskId>,
}

/// One page of tasks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct TaskPage {
    /// The tasks, in (type, id) order.
    pub tasks: Vec<Task>,
    /// `after` for the next page; null on the last page.
    pub next: Option<String>,
}

impl TaskPage {
    /// The page of `tasks` a list asked with `limit` found: a full page has a next one, which
    /// starts after its last task.
    pub fn new(tasks: Vec<Task>, limit: i32) -> Self {
        let next = if tasks.len() as i32 == limit { tasks.last().map(|t| t.id.to_string()) } else { None };
        TaskPage { tasks, next }
    }
}

/// The query string of a task's read: how long to wait for it to end.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::IntoParams))]
#[cfg_attr(feature = "server", into_params(parameter_in = Query))]
#[serde(deny_unknown_fields)]
pub struct TaskReadQuery {
    /// Seconds (0 to 60, fractions allowed) to hold the answer until the task ends: a long-poll
    /// that answers as soon as it has ended, or with the task as it is when the wait runs out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wait: Option<f64>,
}

/// The outcome of a cancel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct TaskCancelled {
    /// Task id.
    pub id: String,
    /// False when the task had already ended.
    pub cancelled: bool,
}

/// The outcome of a retry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct TaskRetried {
    /// Task id.
    pub id: String,
    /// False when the task was neither failed nor cancelled.
    pub retried: bool,
}

/// The query string of a list, and the filter of a bulk call: like [`TaskFilter`], with the
/// status as text so that a bad one gets an error naming the field.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::IntoParams, utoipa::ToSchema))]
#[cfg_attr(feature = "server", into_params(parameter_in = Query))]
#[cfg_attr(feature = "server", schema(as = TaskFilter))]
#[serde(deny_unknown_fields)]
pub struct TaskQuery {
    /// Only this type.
    #[serde(rename = "type", alias = "task_type", skip_serializing_if = "Option::is_none")]
    pub task_type: Option<String>,
    /// Only this status: pending, running, waiting, succeeded, failed or cancelled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// Only this stage.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stage: Option<String>,
    /// Only this user.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
    /// Only this queue key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue_key: Option<String>,
    /// Only tasks created at or after this time (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_after: Option<chrono::DateTime<chrono::Utc>>,
    /// Only tasks created before this time (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_before: Option<chrono::DateTime<chrono::Utc>>,
    /// An exact task id, an idempotency key, or text in the last error (looked for in at most
    /// 10,000 tasks that match the other conditions, from `after` on).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub q: Option<String>,
    /// Start after this task id (`next` of the previous page, asked in the same order).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    /// Page size, 1..=1000 (default 100).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<i32>,
    /// `newest` (the default) or `oldest`: each type's tasks newest or oldest first (types by
    /// name; ids count per type, so no index orders tasks of several types by age).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub order: Option<String>,
}

impl From<&TaskFilter> for TaskQuery {
    fn from(f: &TaskFilter) -> Self {
        TaskQuery {
            task_type: f.task_type.clone(),
            status: f.status.map(|s| s.as_str().to_string()),
            stage: f.stage.clone(),
            user_id: f.user_id.clone(),
            queue_key: f.queue_key.clone(),
            created_after: f.created_after,
            created_before: f.created_before,
            q: f.q.clone(),
            after: f.after.clone(),
            limit: f.limit,
            order: f.order.map(|o| TaskOrder::as_str(o).to_string()),
        }
    }
}

/// A bulk retry or cancel: which tasks, whether only to count them, and how many at most.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct BulkChangeRequest {
    /// The tasks to act on: the conditions of `GET /v1/tasks` (none at all selects every task the
    /// action can take); its paging fields `after`, `limit` and `order` are refused.
    #[serde(default)]
    pub filter: TaskQuery,
    /// Only count the tasks that would change; change nothing.
    #[serde(default)]
    pub dry_run: bool,
    /// Most tasks this call changes, 1..=1000 (default 1000); `more` says whether others remain.
    pub limit: Option<i32>,
}

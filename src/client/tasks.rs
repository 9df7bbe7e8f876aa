//! [`Client`]'s calls on tasks (`/v1/tasks`).

use reqwest::Method;

use super::{Client, NONE};
use crate::db::api::{self, BulkAction, BulkOutcome, TaskFilter};
use crate::error::Result;
use crate::protocol::tasks::{
    BulkChangeRequest, CreateTaskRequest, CreateTasksRequest, TaskCancelled, TaskCreated, TaskPage, TaskQuery,
    TaskRetried, TasksCreated,
};
use crate::task::{NewTask, Task};

/// Default page size of a task list.
const TASK_PAGE_DEFAULT: i32 = 100;

impl Client {
    /// Creates one task (registering its type with the default settings if nothing has); with
    /// an idempotency key or unique key that already names a task, that task's id, nothing
    /// created (`created`: false).
    pub async fn create_task(&self, task_type: &str, task: &NewTask) -> Result<TaskCreated> {
        match self {
            Client::Database(pool) => {
                let (id, created) = api::create_task_found(&mut pool.get().await?, task_type, task).await?;
                Ok(TaskCreated { id, created })
            }
            Client::Server(r) => {
                let body = CreateTaskRequest { task_type: task_type.to_string(), task: task.clone() };
                r.call(Method::POST, &r.url(&["v1", "tasks"]), NONE, Some(&body)).await
            }
        }
    }

    /// Creates many tasks of one type in one statement; their ids in input order.
    pub async fn create_tasks(&self, task_type: &str, tasks: &[NewTask]) -> Result<TasksCreated> {
        match self {
            Client::Database(pool) => {
                Ok(TasksCreated { ids: api::create_tasks(&pool.get().await?, task_type, tasks).await? })
            }
            Client::Server(r) => {
                let body = CreateTasksRequest { task_type: task_type.to_string(), tasks: tasks.to_vec() };
                r.call(Method::POST, &r.url(&["v1", "tasks", "bulk"]), NONE, Some(&body)).await
            }
        }
    }

    /// The task, or None.
    pub async fn get_task(&self, task_id: &str) -> Result<Option<Task>> {
        match self {
            Client::Database(pool) => api::get_task(&pool.get().await?, task_id).await,
            Client::Server(r) => r.get_optional(&r.url(&["v1", "tasks", task_id])).await,
        }
    }

    /// One page of the tasks `filter` selects (100 unless it says); `next` names the next page.
    pub async fn list_tasks(&self, filter: &TaskFilter) -> Result<TaskPage> {
        match self {
            Client::Database(pool) => {
                let tasks = api::list_tasks(&pool.get().await?, filter).await?;
                Ok(TaskPage::new(tasks, filter.limit.unwrap_or(TASK_PAGE_DEFAULT)))
            }
            Client::Server(r) => {
                r.call(Method::GET, &r.url(&["v1", "tasks"]), Some(&TaskQuery::from(filter)), NONE).await
            }
        }
    }

    /// Cancels a pending or running task; `cancelled` is false when it had already ended.
    pub async fn cancel_task(&self, task_id: &str) -> Result<TaskCancelled> {
        match self {
            Client::Database(pool) => {
                let cancelled = api::cancel_task(&pool.get().await?, task_id).await?;
                Ok(TaskCancelled { id: task_id.to_string(), cancelled })
            }
            Client::Server(r) => r.call(Method::POST, &r.url(&["v1", "tasks", task_id, "cancel"]), NONE, NONE).await,
        }
    }

    /// Queues a failed or cancelled task again; `retried` is false when it was neither.
    pub async fn retry_task(&self, task_id: &str) -> Result<TaskRetried> {
        match self {
            Client::Database(pool) => {
                let retried = api::retry_task(&pool.get().await?, task_id).await?;
                Ok(TaskRetried { id: task_id.to_string(), retried })
            }
            Client::Server(r) => r.call(Method::POST, &r.url(&["v1", "tasks", task_id, "retry"]), NONE, NONE).await,
        }
    }

    /// Retries or cancels at most `limit` of the tasks `filter` selects (its paging is not
    /// used), or with `dry_run` only counts them.
    pub async fn bulk_change_tasks(
        &self,
        action: BulkAction,
        filter: &TaskFilter,
        dry_run: bool,
        limit: i32,
    ) -> Result<BulkOutcome> {
        match self {
            Client::Database(pool) => api::bulk_change_tasks(&pool.get().await?, action, filter, dry_run, limit).await,
            Client::Server(r) => {
                let path = match action {
                    BulkAction::Retry => "bulk-retry",
                    BulkAction::Cancel => "bulk-cancel",
                };
                let body = BulkChangeRequest { filter: TaskQuery::from(filter), dry_run, limit: Some(limit) };
                r.call(Method::POST, &r.url(&["v1", "tasks", path]), NONE, Some(&body)).await
            }
        }
    }
}

//! The Rust client: enqueue and administer tasks, on the database or on an `asyncflow serve`.
//! One [`Client`], two backends, like the worker's: [`Client::Database`] calls the SQL API over a
//! pool and composes each answer (a task's `created`, a page's `next`) once; [`Client::Server`]
//! sends the same operation to the HTTP API, whose handlers answer with that same composition.
//! Both give the typed answers of [`crate::protocol`]'s resource modules. Each call takes a
//! connection from the pool; to enqueue inside your own transaction, call [`crate::db::api`] with
//! the transaction instead.

pub mod remote;

use reqwest::Method;

pub use remote::RemoteClient;

use crate::db::api::{self, BulkAction, BulkOutcome, TaskFilter};
use crate::db::DbPool;
use crate::error::Result;
use crate::ids::TypeName;
use crate::protocol::tasks::{
    BulkChangeRequest, CreateTaskRequest, CreateTasksRequest, TaskCancelled, TaskCreated, TaskPage, TaskQuery,
    TaskRetried, TasksCreated,
};
use crate::task::{NewTask, QueueDepth, Task};
use crate::task_type::{TaskTypeSettings, TaskTypeUpdate};

/// Default page size of a task list.
const TASK_PAGE_DEFAULT: i32 = 100;

/// Enqueue and admin calls, on the database or on a server.
#[derive(Clone)]
pub enum Client {
    /// The SQL API over a pool.
    Database(DbPool),
    /// An `asyncflow serve`'s HTTP API.
    Server(RemoteClient),
}

/// No body, or no query string.
const NONE: Option<&()> = None;

impl Client {
    /// A client of the database over `pool`.
    pub fn new(pool: DbPool) -> Self {
        Client::Database(pool)
    }

    /// A client of the server at `server` (`http://host:port`), with a bearer token if it needs one.
    pub fn server(server: &str, token: Option<String>) -> Result<Self> {
        Ok(Client::Server(RemoteClient::new(server, token)?))
    }

    /// Creates the type or updates the settings named.
    pub async fn register_type(&self, task_type: &str, settings: &TaskTypeUpdate) -> Result<TaskTypeSettings> {
        let name = TypeName::new(task_type)?;
        match self {
            Client::Database(pool) => api::register_task_type(&pool.get().await?, &name, settings).await,
            Client::Server(r) => {
                r.call(Method::PUT, &r.url(&["v1", "task-types", task_type]), NONE, Some(settings)).await
            }
        }
    }

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

    /// Queue depth per type.
    pub async fn queue_depth(&self) -> Result<Vec<QueueDepth>> {
        match self {
            Client::Database(pool) => api::queue_depth(&pool.get().await?).await,
            Client::Server(r) => r.call(Method::GET, &r.url(&["v1", "queue-depth"]), NONE, NONE).await,
        }
    }
}

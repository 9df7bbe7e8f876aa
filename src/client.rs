//! The Rust client: enqueue and administer tasks through the SQL API. Each call takes a
//! connection from the pool; to enqueue inside your own transaction, call [`crate::db::api`]
//! with the transaction instead.

use crate::db::{api, DbPool};
use crate::error::Result;
use crate::ids::{TaskId, TypeName};
use crate::task::{NewTask, QueueDepth, Task};
use crate::task_type::{TaskTypeSettings, TaskTypeUpdate};

/// Enqueue and admin calls over a pool.
#[derive(Clone)]
pub struct Client {
    pool: DbPool,
}

impl Client {
    /// A client over `pool`.
    pub fn new(pool: DbPool) -> Self {
        Client { pool }
    }

    /// Creates the type or updates the settings named.
    pub async fn register_type(&self, task_type: &str, settings: &TaskTypeUpdate) -> Result<TaskTypeSettings> {
        let name = TypeName::new(task_type)?;
        api::register_task_type(&self.pool.get().await?, &name, settings).await
    }

    /// Creates one task.
    pub async fn create_task(&self, task_type: &str, task: &NewTask) -> Result<TaskId> {
        api::create_task(&self.pool.get().await?, task_type, task).await
    }

    /// Creates many tasks in one statement.
    pub async fn create_tasks(&self, task_type: &str, tasks: &[NewTask]) -> Result<Vec<TaskId>> {
        api::create_tasks(&self.pool.get().await?, task_type, tasks).await
    }

    /// The task, or None.
    pub async fn get_task(&self, task_id: &str) -> Result<Option<Task>> {
        api::get_task(&self.pool.get().await?, task_id).await
    }

    /// Cancels a pending or running task; false when it had already ended.
    pub async fn cancel_task(&self, task_id: &str) -> Result<bool> {
        api::cancel_task(&self.pool.get().await?, task_id).await
    }

    /// Queues a failed or cancelled task again; false when it was neither.
    pub async fn retry_task(&self, task_id: &str) -> Result<bool> {
        api::retry_task(&self.pool.get().await?, task_id).await
    }

    /// Queue depth per type.
    pub async fn queue_depth(&self) -> Result<Vec<QueueDepth>> {
        api::queue_depth(&self.pool.get().await?).await
    }
}

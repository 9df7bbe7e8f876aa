//! [`Client`]'s calls on task types (`/v1/task-types`, `/v1/queue-depth`).

use reqwest::Method;

use super::{Client, NONE};
use crate::db::api;
use crate::error::{echo, Error, Result};
use crate::ids::TypeName;
use crate::protocol::task_types::QueuesQuery;
use crate::task::{QueueDepth, QueueKeyDepth, QueueLimit};
use crate::task_type::{QueueRateLimit, RateLimit, TaskTypeSettings, TaskTypeUpdate};

/// Default page size of a list of queues.
const QUEUE_PAGE_DEFAULT: i32 = 100;

impl Client {
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

    /// Every registered task type's settings, by name.
    pub async fn list_types(&self) -> Result<Vec<TaskTypeSettings>> {
        match self {
            Client::Database(pool) => api::list_task_types(&pool.get().await?).await,
            Client::Server(r) => r.call(Method::GET, &r.url(&["v1", "task-types"]), NONE, NONE).await,
        }
    }

    /// One task type's settings, or None.
    pub async fn get_type(&self, task_type: &str) -> Result<Option<TaskTypeSettings>> {
        match self {
            Client::Database(pool) => {
                let all = api::list_task_types(&pool.get().await?).await?;
                Ok(all.into_iter().find(|t| t.task_type == task_type))
            }
            Client::Server(r) => r.get_optional(&r.url(&["v1", "task-types", task_type])).await,
        }
    }

    /// Pauses claims of an existing type (tasks can still be created); its settings after.
    pub async fn pause_type(&self, task_type: &str) -> Result<TaskTypeSettings> {
        self.set_paused(task_type, true).await
    }

    /// Resumes claims of an existing type; its settings after.
    pub async fn resume_type(&self, task_type: &str) -> Result<TaskTypeSettings> {
        self.set_paused(task_type, false).await
    }

    /// Pauses or resumes a type, never creating one.
    async fn set_paused(&self, task_type: &str, paused: bool) -> Result<TaskTypeSettings> {
        match self {
            Client::Database(pool) => {
                let c = pool.get().await?;
                if !api::list_task_types(&c).await?.iter().any(|t| t.task_type == task_type) {
                    return Err(Error::UnknownTaskType(format!("unknown task type {}", echo(task_type))));
                }
                let update = TaskTypeUpdate { paused: Some(paused), ..Default::default() };
                api::register_task_type(&c, &TypeName::new(task_type)?, &update).await
            }
            Client::Server(r) => {
                let action = if paused { "pause" } else { "resume" };
                r.call(Method::POST, &r.url(&["v1", "task-types", task_type, action]), NONE, NONE).await
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

    /// One page of the queues of a type with `fair_queues` that have pending or running tasks,
    /// in key order, after the key `after` (100 unless `limit` says).
    pub async fn list_queues(&self, task_type: &str, query: &QueuesQuery) -> Result<Vec<QueueKeyDepth>> {
        match self {
            Client::Database(pool) => {
                let limit = query.limit.unwrap_or(QUEUE_PAGE_DEFAULT);
                api::queue_keys(&pool.get().await?, task_type, query.after.as_deref(), limit).await
            }
            Client::Server(r) => {
                r.call(Method::GET, &r.url(&["v1", "task-types", task_type, "queues"]), Some(query), NONE).await
            }
        }
    }

    /// Sets one queue key's own limit on running tasks, or removes it; the key and the limit
    /// that now applies to it.
    pub async fn set_queue_limit(&self, task_type: &str, limit: &QueueLimit) -> Result<QueueLimit> {
        match self {
            Client::Database(pool) => {
                let applies = api::set_queue_limit(&pool.get().await?, task_type, limit).await?;
                Ok(QueueLimit { queue_key: limit.queue_key.clone(), concurrency: applies })
            }
            Client::Server(r) => {
                r.call(Method::PUT, &r.url(&["v1", "task-types", task_type, "queue-limit"]), NONE, Some(limit)).await
            }
        }
    }

    /// Sets or removes the type's rate limit; the limit as stored.
    pub async fn set_rate_limit(&self, task_type: &str, limit: &RateLimit) -> Result<RateLimit> {
        match self {
            Client::Database(pool) => api::set_rate_limit(&pool.get().await?, task_type, limit).await,
            Client::Server(r) => {
                r.call(Method::PUT, &r.url(&["v1", "task-types", task_type, "rate-limit"]), NONE, Some(limit)).await
            }
        }
    }

    /// Sets or removes the rate limit of one queue key, or of every key without one of its own;
    /// the limit that now applies to the key.
    pub async fn set_queue_rate_limit(&self, task_type: &str, limit: &QueueRateLimit) -> Result<QueueRateLimit> {
        match self {
            Client::Database(pool) => api::set_queue_rate_limit(&pool.get().await?, task_type, limit).await,
            Client::Server(r) => {
                let url = r.url(&["v1", "task-types", task_type, "queue-rate-limit"]);
                r.call(Method::PUT, &url, NONE, Some(limit)).await
            }
        }
    }
}

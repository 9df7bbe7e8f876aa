//! [`Client`]'s calls on events (`/v1/events`) and on why a task is not running
//! (`/v1/tasks/{id}/explain`).

use reqwest::Method;
use serde_json::Value;

use super::{Client, NONE};
use crate::db::api;
use crate::error::{echo, Error, Result};
use crate::event::{EventSent, SendEvent};
use crate::explain::Explanation;

impl Client {
    /// Sends an event: every task waiting for `key` goes on to the stage it named; how many it woke.
    pub async fn send_event(&self, key: &str, payload: &Value) -> Result<EventSent> {
        match self {
            Client::Database(pool) => {
                let woken = api::send_event(&pool.get().await?, key, payload, None).await?;
                Ok(EventSent { key: key.to_string(), woken })
            }
            Client::Server(r) => {
                let body = SendEvent { key: key.to_string(), payload: Some(payload.clone()) };
                r.call(Method::POST, &r.url(&["v1", "events"]), NONE, Some(&body)).await
            }
        }
    }

    /// Why the task is not running (or that it is, or has ended); an unknown task is an error.
    pub async fn explain_task(&self, task_id: &str) -> Result<Explanation> {
        match self {
            Client::Database(pool) => api::explain_task(&pool.get().await?, task_id, None)
                .await?
                .ok_or_else(|| Error::UnknownTask(format!("unknown task {}", echo(task_id)))),
            Client::Server(r) => r.call(Method::GET, &r.url(&["v1", "tasks", task_id, "explain"]), NONE, NONE).await,
        }
    }
}

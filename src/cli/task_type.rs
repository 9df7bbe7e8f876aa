//! `asyncflow type ...`: list task types, change their settings, pause and resume them, and
//! read and limit their queues, on the database directly or on an `asyncflow serve` with
//! `--server URL` (same operations, same JSON). Output is JSON on stdout.

use clap::Subcommand;
use serde_json::{json, Value};

use super::remote::{call, encode, json_arg, Target};
use crate::db::api;
use crate::db::DbPool;
use crate::error::{Error, Result};
use crate::ids::TypeName;
use crate::task::QueueLimit;
use crate::task_type::{QueueRateLimit, RateLimit, TaskTypeUpdate};

/// `type` subcommands.
#[derive(Debug, Subcommand)]
pub enum TypeCommand {
    /// List task types and their settings.
    List,
    /// Create a type or change the settings named (a JSON object).
    Set {
        /// Type name.
        name: String,
        /// Settings, e.g. '{"max_retry_num": 5}'.
        #[arg(default_value = "{}")]
        settings: String,
    },
    /// Stop claims of a type.
    Pause {
        /// Type name.
        name: String,
    },
    /// Let claims of a type go on.
    Resume {
        /// Type name.
        name: String,
    },
    /// The queues of a type with fair_queues, in key order: ready, delayed, running, the limit.
    Queues {
        /// Type name.
        name: String,
        /// Start after this queue key.
        #[arg(long)]
        after: Option<String>,
        /// Page size (1..1000).
        #[arg(long, default_value_t = 100)]
        limit: i32,
    },
    /// Limit the type to N task starts per period across all workers, or remove its limit; with
    /// --queue-key or --every-key (a type with fair_queues), one queue key or every key instead.
    RateLimit {
        /// Type name.
        name: String,
        /// Limit this queue key ("" for the tasks created without one) rather than the type.
        #[arg(long, conflicts_with = "every_key")]
        queue_key: Option<String>,
        /// Limit every queue key that has no limit of its own, each on its own.
        #[arg(long)]
        every_key: bool,
        /// Most starts per period, 1..1000000.
        #[arg(long, conflicts_with = "remove", required_unless_present = "remove")]
        max_starts: Option<i32>,
        /// The period in seconds.
        #[arg(long, default_value_t = 1.0)]
        period: f64,
        /// Remove the type's rate limit.
        #[arg(long)]
        remove: bool,
    },
    /// Give one queue key a limit of its own on running tasks (0 holds the key), or remove it.
    QueueLimit {
        /// Type name.
        name: String,
        /// The queue key ("" for the tasks created without one).
        queue_key: String,
        /// Most of its tasks running at once, 0..1000000.
        #[arg(long, conflicts_with = "remove", required_unless_present = "remove")]
        concurrency: Option<i32>,
        /// Remove the key's own limit: the type's queue_concurrency applies again.
        #[arg(long)]
        remove: bool,
    },
}

/// Runs a `type` command; the JSON to print.
pub async fn task_type(pool: Option<&DbPool>, target: &Target, command: TypeCommand) -> Result<Value> {
    use reqwest::Method;
    match (pool, command) {
        (Some(p), TypeCommand::List) => Ok(json!(api::list_task_types(&p.get().await?).await?)),
        (None, TypeCommand::List) => call(target, Method::GET, "/v1/task-types", None).await,
        (pool, TypeCommand::Set { name, settings }) => {
            let update: TaskTypeUpdate = json_arg("settings", &settings)?;
            let type_name = TypeName::new(&name)?;
            match pool {
                Some(p) => Ok(json!(api::register_task_type(&p.get().await?, &type_name, &update).await?)),
                None => call(target, Method::PUT, &format!("/v1/task-types/{type_name}"), Some(json!(update))).await,
            }
        }
        (Some(p), TypeCommand::Pause { name }) => set_paused(p, &name, true).await,
        (Some(p), TypeCommand::Resume { name }) => set_paused(p, &name, false).await,
        (None, TypeCommand::Pause { name }) => {
            call(target, Method::POST, &format!("/v1/task-types/{}/pause", encode(&name)), None).await
        }
        (None, TypeCommand::Resume { name }) => {
            call(target, Method::POST, &format!("/v1/task-types/{}/resume", encode(&name)), None).await
        }
        (Some(p), TypeCommand::Queues { name, after, limit }) => {
            Ok(json!(api::queue_keys(&p.get().await?, &name, after.as_deref(), limit).await?))
        }
        (None, TypeCommand::Queues { name, after, limit }) => {
            let mut path = format!("/v1/task-types/{}/queues?limit={limit}", encode(&name));
            if let Some(after) = after {
                path.push_str(&format!("&after={}", encode(&after)));
            }
            call(target, Method::GET, &path, None).await
        }
        (pool, TypeCommand::RateLimit { name, queue_key, every_key, max_starts, period, remove })
            if queue_key.is_some() || every_key =>
        {
            let limit =
                QueueRateLimit { queue_key, max_starts: if remove { None } else { max_starts }, period: Some(period) };
            match pool {
                Some(p) => Ok(json!(api::set_queue_rate_limit(&p.get().await?, &name, &limit).await?)),
                None => {
                    let path = format!("/v1/task-types/{}/queue-rate-limit", encode(&name));
                    call(target, Method::PUT, &path, Some(json!(limit))).await
                }
            }
        }
        (pool, TypeCommand::RateLimit { name, max_starts, period, remove, .. }) => {
            let limit = RateLimit { max_starts: if remove { None } else { max_starts }, period };
            match pool {
                Some(p) => Ok(json!(api::set_rate_limit(&p.get().await?, &name, &limit).await?)),
                None => {
                    let path = format!("/v1/task-types/{}/rate-limit", encode(&name));
                    call(target, Method::PUT, &path, Some(json!(limit))).await
                }
            }
        }
        (pool, TypeCommand::QueueLimit { name, queue_key, concurrency, remove }) => {
            let limit = QueueLimit { queue_key, concurrency: if remove { None } else { concurrency } };
            match pool {
                Some(p) => {
                    let applies = api::set_queue_limit(&p.get().await?, &name, &limit).await?;
                    Ok(json!(QueueLimit { concurrency: applies, ..limit }))
                }
                None => {
                    let path = format!("/v1/task-types/{}/queue-limit", encode(&name));
                    call(target, Method::PUT, &path, Some(json!(limit))).await
                }
            }
        }
    }
}

/// Pauses or resumes an existing type (never creates one).
async fn set_paused(pool: &DbPool, name: &str, paused: bool) -> Result<Value> {
    let c = pool.get().await?;
    if !api::list_task_types(&c).await?.iter().any(|t| t.task_type == name) {
        return Err(Error::UnknownTaskType(format!("unknown task type {}", crate::error::echo(name))));
    }
    let update = TaskTypeUpdate { paused: Some(paused), ..Default::default() };
    Ok(json!(api::register_task_type(&c, &TypeName::new(name)?, &update).await?))
}

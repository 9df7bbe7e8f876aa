//! `asyncflow task ...` and `asyncflow type ...`: admin commands that talk to the database
//! directly, or to an `asyncflow serve` with `--server URL` (same operations, same JSON). Output
//! is JSON on stdout, one document per command.

use clap::{Args, Subcommand};
use serde_json::{json, Value};

use crate::db::api::{self, TaskFilter};
use crate::db::DbPool;
use crate::error::{Error, Result};
use crate::ids::TypeName;
use crate::task::{NewTask, QueueLimit, TaskStatus};
use crate::task_type::TaskTypeUpdate;

/// Where admin commands go.
#[derive(Debug, Clone, Args)]
pub struct Target {
    /// Talk to an asyncflow server (its HTTP API) instead of the database.
    #[arg(long, env = "ASYNCFLOW_SERVER")]
    pub server: Option<String>,
    /// Bearer token for --server.
    #[arg(long, env = "ASYNCFLOW_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
}

/// `task` subcommands.
#[derive(Debug, Subcommand)]
pub enum TaskCommand {
    /// Create a task; prints {"id"}.
    Create {
        /// Task type.
        task_type: String,
        /// Context, a JSON object.
        #[arg(long, default_value = "{}")]
        context: String,
        /// Seconds ahead in the queue.
        #[arg(long)]
        priority: Option<i32>,
        /// Not before this time (RFC 3339).
        #[arg(long)]
        run_at: Option<chrono::DateTime<chrono::Utc>>,
        /// First stage.
        #[arg(long)]
        stage: Option<String>,
        /// Same key, same type: the existing task.
        #[arg(long)]
        idempotency_key: Option<String>,
        /// Client-side owner.
        #[arg(long)]
        user_id: Option<String>,
        /// The queue within the type (taken by turns when the type has fair_queues).
        #[arg(long)]
        queue_key: Option<String>,
    },
    /// Show a task.
    Get {
        /// Task id.
        id: String,
    },
    /// List tasks (one page; pass the printed "next" as --after for the next).
    List {
        /// Only this type.
        #[arg(long = "type")]
        task_type: Option<String>,
        /// Only this status.
        #[arg(long)]
        status: Option<String>,
        /// Only this stage.
        #[arg(long)]
        stage: Option<String>,
        /// Only this user.
        #[arg(long)]
        user_id: Option<String>,
        /// Start after this task id.
        #[arg(long)]
        after: Option<String>,
        /// Page size (1..1000).
        #[arg(long, default_value_t = 100)]
        limit: i32,
    },
    /// Cancel a pending or running task.
    Cancel {
        /// Task id.
        id: String,
    },
    /// Queue a failed or cancelled task again.
    Retry {
        /// Task id.
        id: String,
    },
}

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

pub(crate) fn json_arg<T: serde::de::DeserializeOwned>(what: &str, text: &str) -> Result<T> {
    serde_json::from_str(text).map_err(|e| Error::InvalidArgument(format!("{what}: {e}")))
}

fn status_arg(text: Option<String>) -> Result<Option<TaskStatus>> {
    text.map(|s| {
        TaskStatus::parse(&s).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "--status must be one of pending, running, succeeded, failed, cancelled; got {}",
                crate::error::echo(&s)
            ))
        })
    })
    .transpose()
}

/// A server's answer: the body on 2xx, its message as an error otherwise.
pub(crate) async fn call(target: &Target, method: reqwest::Method, path: &str, body: Option<Value>) -> Result<Value> {
    let base = target.server.as_deref().unwrap_or_default().trim_end_matches('/');
    let mut request = reqwest::Client::new().request(method, format!("{base}{path}"));
    if let Some(token) = &target.token {
        request = request.bearer_auth(token);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response =
        request.send().await.map_err(|e| Error::Config(format!("{base}: {}", crate::error::with_causes(&e))))?;
    let status = response.status();
    let value: Value = response.json().await.unwrap_or(Value::Null);
    if status.is_success() {
        return Ok(value);
    }
    let message = value["message"].as_str().unwrap_or("no message").to_string();
    Err(match status.as_u16() {
        404 if value["code"] == "unknown_task_type" => Error::UnknownTaskType(message),
        404 if value["code"] == "unknown_run" => Error::UnknownRun(message),
        404 if value["code"] == "unknown_pipeline" => Error::UnknownPipeline(message),
        400 if value["code"] == "invalid_pipeline" => Error::InvalidPipeline(message),
        409 if value["code"] == "wrong_state" => Error::WrongState(message),
        404 => Error::UnknownTask(message),
        400 | 413 | 409 | 401 => Error::InvalidArgument(format!("HTTP {status}: {message}")),
        _ => Error::Config(format!("HTTP {status}: {message}")),
    })
}

/// Percent-encodes `s` for a URL's path segment or query value: every byte of its UTF-8 form
/// but the unreserved ones.
pub(crate) fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Runs a `task` command; the JSON to print.
pub async fn task(pool: Option<&DbPool>, target: &Target, command: TaskCommand) -> Result<Value> {
    use reqwest::Method;
    match (pool, command) {
        (
            _,
            TaskCommand::Create { task_type, context, priority, run_at, stage, idempotency_key, user_id, queue_key },
        ) => {
            let task = NewTask {
                context: Some(json_arg("--context", &context)?),
                priority,
                run_at,
                stage,
                idempotency_key,
                user_id,
                queue_key,
            };
            match pool {
                Some(p) => Ok(json!({"id": api::create_task(&p.get().await?, &task_type, &task).await?})),
                None => {
                    let mut body = serde_json::to_value(&task).map_err(|e| Error::InvalidArgument(e.to_string()))?;
                    body["type"] = json!(task_type);
                    call(target, Method::POST, "/v1/tasks", Some(body)).await
                }
            }
        }
        (Some(p), TaskCommand::Get { id }) => match api::get_task(&p.get().await?, &id).await? {
            Some(t) => Ok(json!(t)),
            None => Err(Error::UnknownTask(format!("unknown task {}", crate::error::echo(&id)))),
        },
        (None, TaskCommand::Get { id }) => call(target, Method::GET, &format!("/v1/tasks/{}", encode(&id)), None).await,
        (_, TaskCommand::List { task_type, status, stage, user_id, after, limit }) => {
            let filter =
                TaskFilter { task_type, status: status_arg(status)?, stage, user_id, after, limit: Some(limit) };
            match pool {
                Some(p) => {
                    let tasks = api::list_tasks(&p.get().await?, &filter).await?;
                    let next = if tasks.len() as i32 == limit { tasks.last().map(|t| t.id.to_string()) } else { None };
                    Ok(json!({"tasks": tasks, "next": next}))
                }
                None => {
                    let mut query = vec![format!("limit={limit}")];
                    let pairs = [
                        ("type", &filter.task_type),
                        ("stage", &filter.stage),
                        ("user_id", &filter.user_id),
                        ("after", &filter.after),
                    ];
                    for (k, v) in pairs {
                        if let Some(v) = v {
                            query.push(format!("{k}={}", encode(v)));
                        }
                    }
                    if let Some(s) = filter.status {
                        query.push(format!("status={}", format!("{s:?}").to_lowercase()));
                    }
                    call(target, Method::GET, &format!("/v1/tasks?{}", query.join("&")), None).await
                }
            }
        }
        (Some(p), TaskCommand::Cancel { id }) => {
            Ok(json!({"id": id, "cancelled": api::cancel_task(&p.get().await?, &id).await?}))
        }
        (None, TaskCommand::Cancel { id }) => {
            call(target, Method::POST, &format!("/v1/tasks/{}/cancel", encode(&id)), None).await
        }
        (Some(p), TaskCommand::Retry { id }) => {
            Ok(json!({"id": id, "retried": api::retry_task(&p.get().await?, &id).await?}))
        }
        (None, TaskCommand::Retry { id }) => {
            call(target, Method::POST, &format!("/v1/tasks/{}/retry", encode(&id)), None).await
        }
    }
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

#[cfg(test)]
mod tests {
    use super::encode;

    #[test]
    fn encode_writes_each_utf8_byte() {
        assert_eq!(encode("a-Z_0.~"), "a-Z_0.~");
        assert_eq!(encode("a b/c&d=e"), "a%20b%2Fc%26d%3De");
        assert_eq!(encode("José"), "Jos%C3%A9");
        assert_eq!(encode("€"), "%E2%82%AC");
    }
}

//! `asyncflow task ...`: create, show, list, cancel or retry tasks, on the database directly or
//! on an `asyncflow serve` with `--server URL` (same operations, same JSON). Output is JSON on
//! stdout, one document per command.

use clap::Subcommand;

use super::args::json_arg;
use super::print;
use crate::client::Client;
use crate::db::api::{TaskFilter, TaskOrder};
use crate::error::{Error, Result};
use crate::task::{NewTask, TaskStatus};

/// `task` subcommands.
#[derive(Debug, Subcommand)]
pub enum TaskCommand {
    /// Create a task; prints {"id", "created"} (false: the idempotency or unique key's existing task).
    Create {
        /// Task type.
        task_type: String,
        /// Context, a JSON object.
        #[arg(long, default_value = "{}")]
        context: String,
        /// Seconds ahead in the queue.
        #[arg(long)]
        priority: Option<i32>,
        /// Not before this time: RFC 3339 (2030-01-01T09:00:00Z), or a delay from now (90s, 10m).
        #[arg(long, value_parser = super::args::run_at)]
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
        /// Uniqueness key: while its newest task blocks, that task's id and nothing created.
        #[arg(long)]
        unique_key: Option<String>,
        /// With --unique-key: the window in seconds (default: while the task is pending or running).
        #[arg(long, requires = "unique_key")]
        unique_for: Option<i32>,
        /// The W3C trace context the task continues (00-<trace id>-<parent id>-<flags>).
        #[arg(long)]
        traceparent: Option<String>,
        /// Debounce key: while its task is pending and not started, a create with it replaces
        /// that task's context and moves its start (prints "created": false).
        #[arg(long, requires = "debounce_for")]
        debounce_key: Option<String>,
        /// With --debounce-key: how long after this create the task starts (5s, 2m, 1h, or seconds).
        #[arg(long, requires = "debounce_key", value_parser = super::args::interval)]
        debounce_for: Option<std::time::Duration>,
    },
    /// Show a task.
    Get {
        /// Task id.
        id: String,
    },
    /// Why a task is not running: {"reason", ...detail} (see docs/sql-api.md, explain_task).
    Explain {
        /// Task id.
        id: String,
    },
    /// List tasks, each type's newest first (one page; pass the printed "next" as --after for the
    /// next, with the same --order).
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
        /// newest (the default) or oldest: each type's tasks newest or oldest first (types by name).
        #[arg(long, value_parser = ["newest", "oldest"])]
        order: Option<String>,
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

fn status_arg(text: Option<String>) -> Result<Option<TaskStatus>> {
    text.map(|s| {
        TaskStatus::parse(&s).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "--status must be one of {}; got {}",
                TaskStatus::names(),
                crate::error::echo(&s)
            ))
        })
    })
    .transpose()
}

/// Runs a `task` command and prints its answer.
pub async fn task(client: &Client, command: TaskCommand) -> Result<()> {
    match command {
        TaskCommand::Create {
            task_type,
            context,
            priority,
            run_at,
            stage,
            idempotency_key,
            user_id,
            queue_key,
            unique_key,
            unique_for,
            traceparent,
            debounce_key,
            debounce_for,
        } => {
            let task = NewTask {
                context: Some(json_arg("--context", &context)?),
                priority,
                run_at,
                stage,
                idempotency_key,
                user_id,
                queue_key,
                unique_key,
                unique_for,
                traceparent,
                debounce_key,
                debounce_for: debounce_for.map(|d| d.as_secs_f64()),
            };
            print(&client.create_task(&task_type, &task).await?)
        }
        TaskCommand::Get { id } => match client.get_task(&id).await? {
            Some(task) => print(&task),
            None => Err(Error::UnknownTask(format!("unknown task {}", crate::error::echo(&id)))),
        },
        TaskCommand::Explain { id } => print(&client.explain_task(&id).await?),
        TaskCommand::List { task_type, status, stage, user_id, after, limit, order } => {
            let filter = TaskFilter {
                task_type,
                status: status_arg(status)?,
                stage,
                user_id,
                after,
                limit: Some(limit),
                order: order.as_deref().and_then(TaskOrder::parse),
                ..Default::default()
            };
            print(&client.list_tasks(&filter).await?)
        }
        TaskCommand::Cancel { id } => print(&client.cancel_task(&id).await?),
        TaskCommand::Retry { id } => print(&client.retry_task(&id).await?),
    }
}

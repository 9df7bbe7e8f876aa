//! `asyncflow type ...`: list task types, change their settings, pause and resume them, and
//! read and limit their queues, on the database directly or on an `asyncflow serve` with
//! `--server URL` (same operations, same JSON). Output is JSON on stdout.

use clap::Subcommand;

use super::args::json_arg;
use super::print;
use crate::client::Client;
use crate::error::Result;
use crate::protocol::task_types::QueuesQuery;
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

/// Runs a `type` command and prints its answer.
pub async fn task_type(client: &Client, command: TypeCommand) -> Result<()> {
    match command {
        TypeCommand::List => print(&client.list_types().await?),
        TypeCommand::Set { name, settings } => {
            let update: TaskTypeUpdate = json_arg("settings", &settings)?;
            print(&client.register_type(&name, &update).await?)
        }
        TypeCommand::Pause { name } => print(&client.pause_type(&name).await?),
        TypeCommand::Resume { name } => print(&client.resume_type(&name).await?),
        TypeCommand::Queues { name, after, limit } => {
            print(&client.list_queues(&name, &QueuesQuery { after, limit: Some(limit) }).await?)
        }
        TypeCommand::RateLimit { name, queue_key, every_key, max_starts, period, remove }
            if queue_key.is_some() || every_key =>
        {
            let limit =
                QueueRateLimit { queue_key, max_starts: if remove { None } else { max_starts }, period: Some(period) };
            print(&client.set_queue_rate_limit(&name, &limit).await?)
        }
        TypeCommand::RateLimit { name, max_starts, period, remove, .. } => {
            let limit = RateLimit { max_starts: if remove { None } else { max_starts }, period };
            print(&client.set_rate_limit(&name, &limit).await?)
        }
        TypeCommand::QueueLimit { name, queue_key, concurrency, remove } => {
            let limit = QueueLimit { queue_key, concurrency: if remove { None } else { concurrency } };
            print(&client.set_queue_limit(&name, &limit).await?)
        }
    }
}

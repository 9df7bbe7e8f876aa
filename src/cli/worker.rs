//! `asyncflow worker`: its options, checked into the worker's settings, and the maintenance a
//! worker on the database runs beside its functions (the same services as `asyncflow maintain`).

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::maintain::{callback_config, services};
use super::target::Target;
use crate::db::DbPool;
use crate::error::Result;
use crate::maintenance::{Maintainer, MaintenanceConfig};
use crate::worker::folder::FolderOptions;
use crate::worker::WorkerConfig;
use crate::workflow::targets::Targets;

/// `worker` options.
#[derive(Debug, Args)]
pub struct WorkerArgs {
    /// The functions folder (one sub-folder with a function.toml per task type).
    #[arg(long, default_value = "functions")]
    pub functions: PathBuf,
    /// Only these task types (comma-separated); default: every function found.
    #[arg(long, value_delimiter = ',')]
    pub types: Vec<String>,
    /// Stage calls at once.
    #[arg(long, default_value_t = crate::worker::CONCURRENCY_DEFAULT)]
    pub concurrency: usize,
    /// Exit 0 once no task of the worker's types is ready and in-flight calls are done.
    #[arg(long)]
    pub exit_when_idle: bool,
    /// Exit after claiming and finishing this many tasks.
    #[arg(long)]
    pub max_tasks: Option<u64>,
    /// Exit after this long (e.g. 90s, 10m), handing back what is unfinished after the grace.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub max_runtime: Option<Duration>,
    /// Time in-flight calls get after SIGTERM/SIGINT before their tasks are handed back.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "30s")]
    pub shutdown_grace: Duration,
    /// How long a claim is held as row locks for its calls to end before it is written as
    /// running (calls that end within it cost one row change instead of two); 0s turns holding
    /// off. At most 1s.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "20ms")]
    pub hold_window: Duration,
    /// The longest a held claim waits: within it, each hold waits as long as the calls in flight
    /// are expected to take at the rate the worker's held calls have been replying (never less
    /// than --hold-window). At most 1s; at or below --hold-window, the window is --hold-window.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "200ms")]
    pub hold_window_max: Duration,
    /// Migrate the database first (as `asyncflow migrate`; needs the schema's owner). Without
    /// it, a database that is not current is refused.
    #[arg(long)]
    pub migrate: bool,
    /// Do not take part in the maintenance leader election (a worker on --server never does).
    #[arg(long)]
    pub no_maintenance: bool,
    /// This worker's id (default: host-pid-random).
    #[arg(long, env = "ASYNCFLOW_WORKER_ID")]
    pub worker_id: Option<String>,
    /// Key that signs workflow callbacks (HMAC-SHA256), when this worker runs maintenance.
    #[arg(long, env = "ASYNCFLOW_CALLBACK_SECRET", hide_env_values = true)]
    pub callback_secret: Option<String>,
    /// Where workflow callbacks may connect, when this worker runs maintenance: `any`, or
    /// `public` (no loopback, private or link-local address) and/or networks, comma-separated.
    #[arg(long, env = "ASYNCFLOW_CALLBACK_ALLOW", default_value = "any")]
    pub callback_allow: Targets,
    /// Claim and report through an asyncflow server (the HTTP worker protocol) instead of the
    /// database: no database connection is made.
    #[command(flatten)]
    pub target: Target,
}

impl WorkerArgs {
    /// The worker's settings and what to run, checked.
    pub(super) fn setup(&self) -> Result<(WorkerConfig, FolderOptions)> {
        if self.concurrency == 0 || self.concurrency > 10_000 {
            return Err(crate::Error::Config("--concurrency must be between 1 and 10000".into()));
        }
        if self.hold_window > Duration::from_secs(1) {
            return Err(crate::Error::Config("--hold-window must be at most 1s".into()));
        }
        if self.hold_window_max > Duration::from_secs(1) {
            return Err(crate::Error::Config("--hold-window-max must be at most 1s".into()));
        }
        let worker_id = match &self.worker_id {
            Some(id) => crate::WorkerId::new(id)?,
            None => crate::WorkerId::generate(),
        };
        let config = WorkerConfig {
            worker_id,
            concurrency: self.concurrency,
            shutdown_grace: self.shutdown_grace,
            exit_when_idle: self.exit_when_idle,
            max_tasks: self.max_tasks,
            max_runtime: self.max_runtime,
            hold_window: self.hold_window,
            hold_window_max: self.hold_window_max,
            ..WorkerConfig::default()
        };
        let options = FolderOptions { dir: self.functions.clone(), types: self.types.clone() };
        Ok((config, options))
    }

    /// The maintainer that runs beside the worker, on the database at `database_url`: none with
    /// --no-maintenance or on a server (maintenance belongs to processes with a database
    /// connection).
    pub(super) fn maintainer(&self, pool: &DbPool, database_url: &str) -> Option<Maintainer> {
        if self.no_maintenance || self.target.server.is_some() {
            return None;
        }
        let tasks = MaintenanceConfig::default();
        let workflows = crate::workflow::ServiceConfig {
            callbacks: callback_config(self.callback_secret.clone(), self.callback_allow.clone()),
            ..Default::default()
        };
        Some(
            Maintainer::new(database_url, tasks.leader_check, services(pool, &tasks, &workflows))
                .with_quiet_probe(pool.clone()),
        )
    }
}

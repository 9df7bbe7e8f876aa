//! Where the worker's tasks live: the database itself ([`Backend::Database`], the SQL API through
//! a pool) or an `asyncflow serve` ([`Backend::Server`], the HTTP worker protocol, for workers
//! that cannot reach the database). Producers, the reporter and the idle check call it once per
//! batch, never per task; it is an enum, so a mode costs the other one match per call.
//!
//! ```text
//!              register a type        claim ("hold")      report (batch)       next due
//!   Database   register_task_type     claim_tasks         report_tasks         next_due
//!   Server     PUT /v1/task-types/:n  POST /v1/worker/    POST /v1/worker/     GET /v1/worker/
//!                                     hold                report               next-due
//!   wake-ups   Database: LISTEN/NOTIFY + poll    Server: a hold that waits (long-poll) + the
//!                                                worker's own reports
//! ```
//!
//! The server side (the worker protocol's client, its hold that waits, what keeps it from losing
//! tasks) is in [`super::remote`].

use std::ops::Range;
use std::time::Duration;

use chrono::Utc;

use super::remote::{chunks_by_size, ServerBackend, REPORT_BYTES_MAX};
use crate::db::{api, DbPool};
use crate::error::{Error, Result};
use crate::ids::{TypeName, WorkerId};
use crate::protocol::REPORTS_PER_CALL_MAX;
use crate::schedule::SetSchedule;
use crate::task::{ClaimedTask, Report, ReportResult};
use crate::task_type::{TaskTypeSettings, TaskTypeUpdate};

/// The store the worker claims from and reports to.
#[derive(Clone)]
pub enum Backend {
    /// The database, through the SQL API.
    Database(DbPool),
    /// An `asyncflow serve`, through the HTTP worker protocol.
    Server(ServerBackend),
}

impl Backend {
    /// Registers every type with its settings, all or none where the backend allows it (the
    /// database: one transaction; a server takes them one by one). On an error, the index of
    /// the type refused and why.
    pub(super) async fn register_task_types(
        &self,
        types: &[(&TypeName, &TaskTypeUpdate)],
    ) -> std::result::Result<Vec<TaskTypeSettings>, (usize, Error)> {
        let mut registered = Vec::with_capacity(types.len());
        match self {
            Backend::Database(pool) => {
                let mut client = pool.get().await.map_err(|e| (0, Error::from(e)))?;
                let tx = client.transaction().await.map_err(|e| (0, Error::from_db(e)))?;
                for (i, (name, settings)) in types.iter().enumerate() {
                    registered.push(api::register_task_type(&tx, name, settings).await.map_err(|e| (i, e))?);
                }
                tx.commit().await.map_err(|e| (types.len().saturating_sub(1), Error::from_db(e)))?;
            }
            Backend::Server(remote) => {
                for (i, (name, settings)) in types.iter().enumerate() {
                    registered.push(remote.register_task_type(name, settings).await.map_err(|e| (i, e))?);
                }
            }
        }
        Ok(registered)
    }

    /// Refuses a database role that may not claim and report tasks of `types` (a role granted
    /// asyncflow_client but not asyncflow_worker), naming the grant it needs. A server checks
    /// its own role, so a server backend has nothing to check here.
    pub(super) async fn check_may_claim(&self, types: &[String]) -> Result<()> {
        match self {
            Backend::Database(pool) => {
                crate::db::migrate::check_grants(&pool.get().await?, crate::db::migrate::Grant::Worker, Some(types))
                    .await
            }
            Backend::Server(_) => Ok(()),
        }
    }

    /// Sets (creates or replaces) the periodic schedule `name`.
    pub(super) async fn set_schedule(&self, name: &str, set: &SetSchedule) -> Result<()> {
        match self {
            Backend::Database(pool) => {
                api::set_schedule(&pool.get().await?, name, &set.cron, &set.spec, None).await?;
            }
            Backend::Server(remote) => {
                crate::schedule::check_name(name).map_err(Error::InvalidArgument)?;
                remote.client().set_schedule(name, set).await?;
            }
        }
        Ok(())
    }

    /// Claims up to `want` ready tasks of `task_type` for `owner`.
    pub(super) async fn claim(&self, task_type: &TypeName, owner: &WorkerId, want: usize) -> Result<Vec<ClaimedTask>> {
        match self {
            Backend::Database(pool) => {
                let client = pool.get().await?;
                api::claim_tasks(&client, task_type.as_str(), owner, want as i32, None).await
            }
            Backend::Server(remote) => remote.claim(task_type, owner, want).await,
        }
    }

    /// Writes a batch of fenced reports; one result per report, in order.
    pub(super) async fn report(&self, owner: &WorkerId, reports: &[Report]) -> Result<Vec<ReportResult>> {
        match self {
            Backend::Database(pool) => match pool.get().await {
                Ok(client) => api::report_tasks(&client, owner, reports, None).await,
                Err(e) => Err(e.into()),
            },
            Backend::Server(remote) => remote.report(owner, reports).await,
        }
    }

    /// Saves a running call's context (`asyncflow.checkpoint_task`, `POST /v1/worker/checkpoint`):
    /// false, and nothing changed, when the task is no longer running under `claim_seq`.
    pub(super) async fn checkpoint(&self, task_id: &str, claim_seq: i64, context: &serde_json::Value) -> Result<bool> {
        match self {
            Backend::Database(pool) => api::checkpoint_task(&pool.get().await?, task_id, claim_seq, context).await,
            Backend::Server(remote) => remote.checkpoint(task_id, claim_seq, context).await,
        }
    }

    /// How `reports` is cut into calls: the database takes a batch whole; a server takes at
    /// most [`REPORTS_PER_CALL_MAX`] reports and [`REPORT_BYTES_MAX`] bytes per request.
    pub(super) fn chunks(&self, reports: &[Report]) -> Vec<Range<usize>> {
        match self {
            Backend::Database(_) => std::iter::once(0..reports.len()).collect(),
            Backend::Server(_) => chunks_by_size(reports, REPORTS_PER_CALL_MAX, REPORT_BYTES_MAX),
        }
    }

    /// Time until the earliest pending task of the type is due (zero when one already is), if
    /// any.
    pub(super) async fn next_due(&self, task_type: &TypeName) -> Result<Option<Duration>> {
        match self {
            Backend::Database(pool) => {
                let client = pool.get().await?;
                let Some(due) = api::next_due(&client, task_type.as_str()).await? else { return Ok(None) };
                let ms = (due - Utc::now()).num_milliseconds().max(0) as u64;
                Ok(Some(Duration::from_millis(ms)))
            }
            Backend::Server(remote) => remote.next_due(task_type).await,
        }
    }

    /// Whether a task of any of `types` is ready now (true when that cannot be known).
    pub(super) async fn any_ready(&self, types: &[TypeName]) -> bool {
        let mut ready = false;
        match self {
            Backend::Database(pool) => {
                let Ok(client) = pool.get().await else { return true };
                for ty in types {
                    match api::next_due(&client, ty.as_str()).await {
                        Ok(Some(due)) if due <= Utc::now() => ready = true,
                        Ok(_) => {}
                        Err(_) => ready = true,
                    }
                }
            }
            Backend::Server(remote) => {
                for ty in types {
                    match remote.next_due(ty).await {
                        Ok(Some(wait)) if wait.is_zero() => ready = true,
                        Ok(_) => {}
                        Err(_) => ready = true,
                    }
                }
            }
        }
        ready
    }

    /// Whether workflow maintenance has work due now (`asyncflow.maintenance_due`); false on a
    /// server, and when it cannot be known (a role that may not ask does not run maintenance).
    pub(super) async fn maintenance_due(&self) -> bool {
        match self {
            Backend::Database(pool) => match pool.get().await {
                Ok(client) => api::maintenance_due(&client).await.unwrap_or(false),
                Err(_) => false,
            },
            Backend::Server(_) => false,
        }
    }

    /// False while the backend may hold tasks nobody runs (a server's hold answer was lost and
    /// not yet looked into): the worker is not idle then.
    pub(super) fn settled(&self) -> bool {
        match self {
            Backend::Database(_) => true,
            Backend::Server(remote) => remote.settled(),
        }
    }
}

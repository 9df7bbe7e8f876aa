//! The rescuer: tasks running past their lease (their worker crashed, hung or lost its
//! connection) go back to pending with one more failed try, or to failed when out of tries.
//! The vanished worker's late report is then refused by the fence.
//!
//! The leases of workers running in the rescuer's own process are left alone
//! ([`Service::leave_leases_of`]): such a worker is alive, and a lease of its that expired did so
//! because the database could not be reached (a partition). Its reports are queued in this same
//! process; when the partition heals, a rescue sent before them could overtake them and run
//! finished calls again. Another process's rescuer still takes them, within the lease.
//!
//! It also ends the waits for events past their timeout (`asyncflow.expire_waits`): the task
//! goes on to the stage it named, its call told `"timed_out": true`.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{RunOnceReport, Service};
use crate::db::{api, DbPool};
use crate::error::Result;
use crate::ids::WorkerId;
use crate::task::TaskStatus;
use futures_util::future::BoxFuture;

/// Rescues expired leases.
pub struct Rescuer {
    pool: DbPool,
    interval: Duration,
    batch: i32,
    own_workers: Vec<WorkerId>,
}

impl Rescuer {
    /// A rescuer taking at most `batch` tasks per statement.
    pub fn new(pool: DbPool, interval: Duration, batch: i32) -> Self {
        Rescuer { pool, interval, batch: batch.max(1), own_workers: Vec::new() }
    }
}

impl Service for Rescuer {
    fn name(&self) -> &'static str {
        "rescuer"
    }

    fn interval(&self) -> Duration {
        self.interval
    }

    fn leave_leases_of(&mut self, workers: &[WorkerId]) {
        self.own_workers.extend(workers.iter().cloned());
    }

    fn run_once(&self, now: Option<DateTime<Utc>>) -> BoxFuture<'_, Result<RunOnceReport>> {
        Box::pin(async move {
            let client = self.pool.get().await?;
            let mut detail = Vec::new();
            loop {
                let rescued = api::rescue_expired(&client, now, self.batch, &self.own_workers).await?;
                let full = rescued.len() as i32 == self.batch;
                for task in rescued {
                    // one line per task, with the fields of the worker's lines for a failed call
                    let (task_id, task_type, stage, attempt, error) =
                        (&task.task_id, &task.task_type, &task.stage, task.attempt, &task.error);
                    if task.status == TaskStatus::Failed {
                        tracing::info!(task = %task_id, task_type, stage, attempt, error, outcome = "given_up",
                            "lease expired: task failed for good (no tries left)");
                    } else {
                        tracing::info!(task = %task_id, task_type, stage, attempt, error, outcome = "rescued",
                            "lease expired: the task will be tried again");
                    }
                    detail.push(format!("{} -> {:?}", task.task_id, task.status));
                }
                if !full {
                    break;
                }
            }
            loop {
                let ended = api::expire_waits(&client, now, self.batch).await?;
                let full = ended.len() as i32 == self.batch;
                for wait in ended {
                    let (task_id, event_key) = (&wait.task_id, &wait.event_key);
                    if wait.timed_out {
                        tracing::info!(task = %task_id, event_key, outcome = "timed_out", "wait timed out");
                    } else {
                        tracing::info!(task = %task_id, event_key, outcome = "event", "wait ended by an event at its timeout");
                    }
                    detail.push(format!("{task_id} wait for {event_key} ended (timed out: {})", wait.timed_out));
                }
                if !full {
                    break;
                }
            }
            Ok(RunOnceReport { service: self.name(), changed: detail.len() as u64, detail })
        })
    }
}

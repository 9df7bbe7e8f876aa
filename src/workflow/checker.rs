//! The workflow checker and run retention, as maintenance services.
//!
//! - [`RunChecker`]: begins scheduled runs that are due, restarts or fails nodes past their
//!   timeout, times out (or retries, as new runs) runs past their deadline, and creates the
//!   run partitions of today and tomorrow ahead of need (`asyncflow.check_runs`).
//! - [`RunRetention`]: drops whole days of run records past `config.run_retention` once all
//!   their runs ended (`asyncflow.drop_expired_runs`).

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::db::{api, DbPool};
use crate::error::Result;
use crate::maintenance::{RunOnceReport, Service};
use futures_util::future::BoxFuture;

/// Default checker interval.
pub const CHECK_INTERVAL_DEFAULT: Duration = Duration::from_secs(1);
/// Default run retention interval.
pub const RUN_RETENTION_INTERVAL_DEFAULT: Duration = Duration::from_secs(60);
/// Most rows of each kind one checker statement takes.
const CHECK_BATCH: i32 = 500;

/// Runs `asyncflow.check_runs` until a pass finds less than a batch.
pub struct RunChecker {
    pool: DbPool,
    interval: Duration,
}

impl RunChecker {
    /// A checker passing every `interval`.
    pub fn new(pool: DbPool, interval: Duration) -> Self {
        RunChecker { pool, interval }
    }
}

impl Service for RunChecker {
    fn name(&self) -> &'static str {
        "run_checker"
    }

    fn interval(&self) -> Duration {
        self.interval
    }

    fn run_once(&self, now: Option<DateTime<Utc>>) -> BoxFuture<'_, Result<RunOnceReport>> {
        Box::pin(async move {
            let client = self.pool.get().await?;
            let mut detail = Vec::new();
            loop {
                let actions = api::check_runs(&client, now, CHECK_BATCH).await?;
                let full = actions.len() as i32 >= CHECK_BATCH;
                detail.extend(actions.into_iter().map(|(action, id, why)| format!("{id}: {action} ({why})")));
                if !full {
                    break;
                }
            }
            Ok(RunOnceReport { service: self.name(), changed: detail.len() as u64, detail })
        })
    }
}

/// Runs `asyncflow.drop_expired_runs`.
pub struct RunRetention {
    pool: DbPool,
    interval: Duration,
}

impl RunRetention {
    /// Retention passing every `interval`.
    pub fn new(pool: DbPool, interval: Duration) -> Self {
        RunRetention { pool, interval }
    }
}

impl Service for RunRetention {
    fn name(&self) -> &'static str {
        "run_retention"
    }

    fn interval(&self) -> Duration {
        self.interval
    }

    fn run_once(&self, now: Option<DateTime<Utc>>) -> BoxFuture<'_, Result<RunOnceReport>> {
        Box::pin(async move {
            let client = self.pool.get().await?;
            let days = api::drop_expired_runs(&client, now).await?;
            let detail: Vec<String> = days.iter().map(|d| format!("run records of {d} dropped")).collect();
            Ok(RunOnceReport { service: self.name(), changed: detail.len() as u64, detail })
        })
    }
}

//! The rescuer: tasks running past their lease (their worker crashed, hung or lost its
//! connection) go back to pending with one more failed try, or to failed when out of tries.
//! The vanished worker's late report is then refused by the fence.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{RunOnceReport, Service};
use crate::db::{api, DbPool};
use crate::error::Result;
use crate::function::BoxFuture;

/// Rescues expired leases.
pub struct Rescuer {
    pool: DbPool,
    interval: Duration,
    batch: i32,
}

impl Rescuer {
    /// A rescuer taking at most `batch` tasks per statement.
    pub fn new(pool: DbPool, interval: Duration, batch: i32) -> Self {
        Rescuer { pool, interval, batch: batch.max(1) }
    }
}

impl Service for Rescuer {
    fn name(&self) -> &'static str {
        "rescuer"
    }

    fn interval(&self) -> Duration {
        self.interval
    }

    fn run_once(&self, now: Option<DateTime<Utc>>) -> BoxFuture<'_, Result<RunOnceReport>> {
        Box::pin(async move {
            let client = self.pool.get().await?;
            let mut detail = Vec::new();
            loop {
                let rescued = api::rescue_expired(&client, now, self.batch).await?;
                let full = rescued.len() as i32 == self.batch;
                detail.extend(rescued.into_iter().map(|(id, _, status)| format!("{id} -> {status:?}")));
                if !full {
                    break;
                }
            }
            Ok(RunOnceReport { service: self.name(), changed: detail.len() as u64, detail })
        })
    }
}

//! The worker pruner: heartbeat rows of workers that stopped without a clean exit (killed,
//! crashed, cut off) are removed once they have not been seen for a while, so the workers'
//! table holds live workers and a few just gone.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{RunOnceReport, Service};
use crate::db::{api, DbPool};
use crate::error::Result;
use futures_util::future::BoxFuture;

/// Default age after which a worker's row is removed (workers write theirs every few seconds).
pub const WORKER_STALE_DEFAULT: Duration = Duration::from_secs(60);

/// Removes stale worker rows.
pub struct WorkerPruner {
    pool: DbPool,
    interval: Duration,
    stale: Duration,
}

impl WorkerPruner {
    /// A pruner passing every `interval`, removing rows not seen for `stale`.
    pub fn new(pool: DbPool, interval: Duration, stale: Duration) -> Self {
        WorkerPruner { pool, interval, stale }
    }
}

impl Service for WorkerPruner {
    fn name(&self) -> &'static str {
        "worker_pruner"
    }

    fn interval(&self) -> Duration {
        self.interval
    }

    fn run_once(&self, now: Option<DateTime<Utc>>) -> BoxFuture<'_, Result<RunOnceReport>> {
        Box::pin(async move {
            let client = self.pool.get().await?;
            let pruned = api::prune_workers(&client, self.stale.as_secs_f64(), now).await?;
            Ok(RunOnceReport {
                service: self.name(),
                changed: u64::try_from(pruned).unwrap_or(0),
                detail: if pruned > 0 { vec![format!("{pruned} stale worker rows removed")] } else { vec![] },
            })
        })
    }
}

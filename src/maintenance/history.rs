//! The history sampler: every few seconds, the per-type counters go into the history rings
//! (`asyncflow.sample_stats`), which the dashboard's charts read.
//!
//! ```text
//!   type_counters (monotonic, per slot) ──┐
//!   queue_depth (ready, running, lag) ────┴─> sample_stats(now)
//!        per type: + increases since the last sample ──> minute point (ring of 1440: a day)
//!                  = gauges at this sample           ──> hour point   (ring of 744: 31 days)
//! ```
//!
//! A ring slot is overwritten when its time comes round again, so old points leave whole and
//! the rings never grow. A sample costs the same at any number of tasks: it reads counters, not
//! tasks. The same pass folds the status deltas that creates, cancels and retries append.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{RunOnceReport, Service};
use crate::db::{api, DbPool};
use crate::error::Result;
use futures_util::future::BoxFuture;

/// Default time between samples.
pub const HISTORY_INTERVAL_DEFAULT: Duration = Duration::from_secs(5);

/// Samples the counters into the history rings.
pub struct HistorySampler {
    pool: DbPool,
    interval: Duration,
}

impl HistorySampler {
    /// A sampler taking one sample every `interval`.
    pub fn new(pool: DbPool, interval: Duration) -> Self {
        HistorySampler { pool, interval }
    }
}

impl Service for HistorySampler {
    fn name(&self) -> &'static str {
        "history_sampler"
    }

    fn interval(&self) -> Duration {
        self.interval
    }

    fn run_once(&self, now: Option<DateTime<Utc>>) -> BoxFuture<'_, Result<RunOnceReport>> {
        Box::pin(async move {
            let client = self.pool.get().await?;
            let points = api::sample_stats(&client, now).await?;
            // points are rewritten on every sample: a report of them would be noise in the log
            Ok(RunOnceReport { service: self.name(), changed: 0, detail: vec![format!("{points} points")] })
        })
    }
}

//! The rate-bucket pruner: a type with a rate limit for every queue key keeps a token bucket per
//! key it has claimed; buckets that have refilled completely are removed (a missing bucket is a
//! full one), so keys that come and go do not leave a row each for ever.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{RunOnceReport, Service};
use crate::db::{api, DbPool};
use crate::error::Result;
use futures_util::future::BoxFuture;

/// Default time between passes.
pub const RATE_BUCKET_INTERVAL_DEFAULT: Duration = Duration::from_secs(60);

/// Removes full rate buckets.
pub struct RateBucketPruner {
    pool: DbPool,
    interval: Duration,
}

impl RateBucketPruner {
    /// A pruner passing every `interval`.
    pub fn new(pool: DbPool, interval: Duration) -> Self {
        RateBucketPruner { pool, interval }
    }
}

impl Service for RateBucketPruner {
    fn name(&self) -> &'static str {
        "rate_bucket_pruner"
    }

    fn interval(&self) -> Duration {
        self.interval
    }

    fn run_once(&self, now: Option<DateTime<Utc>>) -> BoxFuture<'_, Result<RunOnceReport>> {
        Box::pin(async move {
            let client = self.pool.get().await?;
            let pruned = api::prune_rate_buckets(&client, now).await?;
            Ok(RunOnceReport {
                service: self.name(),
                changed: u64::try_from(pruned).unwrap_or(0),
                detail: if pruned > 0 { vec![format!("{pruned} full rate buckets removed")] } else { vec![] },
            })
        })
    }
}

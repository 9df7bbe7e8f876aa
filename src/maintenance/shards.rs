//! Rolling shards: each type's tasks live in shards (partitions), between the begin_pos and
//! end_pos of the type's row in `asyncflow.positions`.
//!
//! ```text
//!   shard:     1        2        3        4        5
//!            [dropped][closed ][ live  ][ live  ][ end: inserts go here ]
//!                      ^begin_pos-1      ^begin_pos                ^end_pos
//! ```
//!
//! - [`ShardRoller`]: the end shard passed shard_max_rows -> a new shard, end_pos + 1.
//! - [`BeginAdvancer`]: begin_pos = oldest shard still holding a pending or running task.
//! - [`RetentionDropper`]: closed shards (no live task) below end_pos, closed longer than
//!   retention, are dropped whole: no DELETE, no vacuum, no bloat.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{RunOnceReport, Service};
use crate::db::{api, DbPool};
use crate::error::Result;
use futures_util::future::BoxFuture;

macro_rules! per_type_service {
    ($name:ident, $label:literal, $doc:literal, |$client:ident, $ty:ident, $now:ident, $detail:ident| $body:block) => {
        #[doc = $doc]
        pub struct $name {
            pool: DbPool,
            interval: Duration,
        }

        impl $name {
            /// The service, run every `interval`.
            pub fn new(pool: DbPool, interval: Duration) -> Self {
                $name { pool, interval }
            }
        }

        impl Service for $name {
            fn name(&self) -> &'static str {
                $label
            }

            fn interval(&self) -> Duration {
                self.interval
            }

            fn run_once(&self, $now: Option<DateTime<Utc>>) -> BoxFuture<'_, Result<RunOnceReport>> {
                Box::pin(async move {
                    let $client = self.pool.get().await?;
                    let mut $detail: Vec<String> = Vec::new();
                    // A type that fails does not hold up the others: each is done in turn, and
                    // the first failure is returned once all have been tried.
                    let mut failed = None;
                    for settings in api::list_task_types(&$client).await? {
                        let $ty = settings.task_type.as_str();
                        let done: Result<()> = async {
                            $body
                            Ok(())
                        }
                        .await;
                        if let Err(e) = done {
                            tracing::error!(service = $label, task_type = $ty, error = %e, "failed for this type");
                            failed.get_or_insert(e);
                        }
                    }
                    if let Some(e) = failed {
                        return Err(e);
                    }
                    Ok(RunOnceReport { service: $label, changed: $detail.len() as u64, detail: $detail })
                })
            }
        }
    };
}

per_type_service!(
    ShardRoller,
    "shard_roller",
    "Starts a new shard when the end shard is full.",
    |client, ty, now, detail| {
        if let Some(end) = api::roll_shard(&client, ty, now).await? {
            detail.push(format!("{ty}: end_pos -> {end}"));
        }
    }
);

per_type_service!(
    BeginAdvancer,
    "begin_advancer",
    "Moves begin_pos to the oldest shard with a live task.",
    |client, ty, now, detail| {
        let before = api::positions_of(&client, ty).await?.map(|p| p.begin_pos);
        let begin = api::advance_begin_pos(&client, ty, now).await?;
        if before != Some(begin) {
            detail.push(format!("{ty}: begin_pos -> {begin}"));
        }
    }
);

per_type_service!(
    RetentionDropper,
    "retention",
    "Drops closed shards older than the type's retention.",
    |client, ty, now, detail| {
        for shard in api::drop_expired_shards(&client, ty, now).await? {
            detail.push(format!("{ty}: shard {shard} dropped"));
        }
    }
);

//! Task type settings. The settings live in `asyncflow.task_types`;
//! registering a type creates it or changes only the settings named.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// A task type's settings, as `asyncflow.register_task_type` returns them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct TaskTypeSettings {
    /// Name (`type`; `task_type` is read too).
    #[serde(rename = "type", alias = "task_type")]
    pub task_type: String,
    /// Most tasks one claim takes.
    pub schedule_limit: i32,
    /// Poll interval in seconds (the fallback when no NOTIFY comes).
    pub schedule_interval: f64,
    /// Lease length in seconds; a heartbeat extends it by as much.
    pub max_processing_time: i32,
    /// Retries per stage.
    pub max_retry_num: i32,
    /// > 0 progressive back-off cap, < 0 uniform back-off, seconds.
    pub max_retry_interval: i32,
    /// Rows per shard before a new one is started.
    pub shard_max_rows: i64,
    /// Seconds a finished shard is kept.
    pub retention: i64,
    /// Most tasks of the type running at once (None: no limit).
    pub concurrency: Option<i32>,
    /// Claims return nothing while paused.
    pub paused: bool,
    /// Stage of a task created without one.
    pub initial_stage: String,
    /// Claims take the type's queue keys by turns, one task per key per round (tasks without a
    /// key are the queue `""`).
    #[serde(default)]
    pub fair_queues: bool,
    /// With `fair_queues`: most tasks of one queue key running at once (None: no limit).
    #[serde(default)]
    pub queue_concurrency: Option<i32>,
    /// The type's rate limit (`asyncflow.set_rate_limit`; None: no limit).
    #[serde(default)]
    pub rate_limit: Option<RateLimit>,
    /// With `fair_queues`: the rate limit of every queue key without one of its own
    /// (`asyncflow.set_queue_rate_limit` with no key; None: no limit).
    #[serde(default)]
    pub queue_rate_limit: Option<RateLimit>,
    /// With `fair_queues`: the queue keys with a rate limit of their own, by key.
    #[serde(default, deserialize_with = "null_is_empty")]
    pub queue_rate_limits: std::collections::BTreeMap<String, RateLimit>,
    /// A held call's next stage runs at once, in the same hold, before the hold that writes
    /// the call's advance has committed: faster, but a worker killed (or a database crash)
    /// before that commit forgets the advance, and the next stage will have run from a result
    /// that never existed. Only for types whose stages are idempotent in that sense; off by
    /// default (a stage then starts only from a durable completion of the stage before).
    pub speculative_chaining: bool,
    /// Created.
    pub created_at: DateTime<Utc>,
    /// Last changed.
    pub updated_at: DateTime<Utc>,
}

/// Settings to apply; the ones left `None` stay as they are.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct TaskTypeUpdate {
    /// See [`TaskTypeSettings::schedule_limit`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_limit: Option<i32>,
    /// See [`TaskTypeSettings::schedule_interval`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_interval: Option<f64>,
    /// See [`TaskTypeSettings::max_processing_time`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_processing_time: Option<i32>,
    /// See [`TaskTypeSettings::max_retry_num`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_retry_num: Option<i32>,
    /// See [`TaskTypeSettings::max_retry_interval`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_retry_interval: Option<i32>,
    /// See [`TaskTypeSettings::shard_max_rows`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard_max_rows: Option<i64>,
    /// See [`TaskTypeSettings::retention`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention: Option<i64>,
    /// See [`TaskTypeSettings::concurrency`]. `Some(None)` (JSON `null`) removes the limit;
    /// `None` (the field left out) leaves it as it is.
    #[serde(default, deserialize_with = "crate::task::present", skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "server", schema(value_type = Option<i32>, nullable))]
    pub concurrency: Option<Option<i32>>,
    /// See [`TaskTypeSettings::paused`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,
    /// See [`TaskTypeSettings::initial_stage`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initial_stage: Option<String>,
    /// See [`TaskTypeSettings::fair_queues`]. Turning it on builds two indexes on the type's
    /// tasks (writes to them wait meanwhile); turning it off drops them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fair_queues: Option<bool>,
    /// See [`TaskTypeSettings::queue_concurrency`]. `Some(None)` (JSON `null`) removes the
    /// limit; `None` (the field left out) leaves it as it is.
    #[serde(default, deserialize_with = "crate::task::present", skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "server", schema(value_type = Option<i32>, nullable))]
    pub queue_concurrency: Option<Option<i32>>,
    /// See [`TaskTypeSettings::speculative_chaining`]. Read by a worker when it starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speculative_chaining: Option<bool>,
}

/// A type's rate limit (`asyncflow.set_rate_limit`): at most `max_starts` task starts per
/// `period` seconds, across all workers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RateLimit {
    /// Most starts per period, 1 to 1,000,000; null removes the limit. Required: a body that
    /// leaves it out is refused rather than read as a removal.
    #[serde(deserialize_with = "crate::task::nullable")]
    #[cfg_attr(feature = "server", schema(nullable, required = true))]
    pub max_starts: Option<i32>,
    /// The period in seconds, 0.001 to 86,400 (default 1).
    #[serde(default = "one_second")]
    #[cfg_attr(feature = "server", schema(default = 1.0))]
    pub period: f64,
}

fn one_second() -> f64 {
    1.0
}

/// A rate limit per queue key of a type with `fair_queues` (`asyncflow.set_queue_rate_limit`):
/// at most `max_starts` starts of one key's tasks per `period` seconds, across all workers. As
/// an answer: the limit that now applies to the key (its own, else the one for every key; both
/// fields null when none does).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct QueueRateLimit {
    /// The queue key (`""`: the tasks created without one); null or left out: every key of the
    /// type that has no rate limit of its own.
    #[serde(default)]
    pub queue_key: Option<String>,
    /// Most starts per period, 1 to 1,000,000; null removes the limit. Required: a body that
    /// leaves it out is refused rather than read as a removal.
    #[serde(deserialize_with = "crate::task::nullable")]
    #[cfg_attr(feature = "server", schema(nullable, required = true))]
    pub max_starts: Option<i32>,
    /// The period in seconds, 0.001 to 86,400 (default 1).
    #[serde(default)]
    #[cfg_attr(feature = "server", schema(nullable, default = 1.0))]
    pub period: Option<f64>,
}

/// A JSON null read as an empty map.
fn null_is_empty<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

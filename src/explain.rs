//! Why a task is not running: the answer of `asyncflow.explain_task`, the one definition used by
//! the HTTP route (`GET /v1/tasks/{id}/explain`), its OpenAPI document and the command line
//! (`asyncflow task explain ID`).
//!
//! One reason, the first that applies, in this order:
//!
//! ```text
//!   ended · running · waiting_children · waiting_event · paused · backing_off · delayed · key_held · concurrency
//!   · rate_limited · ready
//! ```

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::task::TaskStatus;

/// The reason code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ExplainReason {
    /// Succeeded, failed or cancelled (`status`, `finished_at`).
    Ended,
    /// A worker runs it (`worker`, `lease_until`, `stage`).
    Running,
    /// It waits for an event (`key`, `since`, `until`, `next_stage`).
    WaitingEvent,
    /// It waits for the child tasks it spawned (`ended` of `total`, `since`, `next_stage`).
    WaitingChildren,
    /// Its type is paused.
    Paused,
    /// A failed try's back-off (`until`, `attempt`, `error`).
    BackingOff,
    /// Not due yet: `run_at`, a `later` reply (`until`).
    Delayed,
    /// Its queue key is held (a limit of 0; `queue_key`).
    KeyHeld,
    /// Its type's or key's concurrency limit is reached (`scope`, `running`, `limit`, `queue_key`).
    Concurrency,
    /// Its type's or key's rate limit has no start left now (`scope`, `next_start_at`, `queue_key`).
    RateLimited,
    /// Ready: the next claim may take it (`ahead`: ready tasks before it, up to `capped`).
    Ready,
}

/// `asyncflow.explain_task`: one reason and its detail (only the fields of that reason are set).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct Explanation {
    /// Why.
    pub reason: ExplainReason,
    /// ended: how it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<TaskStatus>,
    /// ended: when.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<DateTime<Utc>>,
    /// running: the worker holding it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
    /// running: the end of its lease unless extended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_until: Option<DateTime<Utc>>,
    /// running: the stage it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage: Option<String>,
    /// waiting_event: the event key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// waiting_event: since when an event counts (the claim of the call that asked to wait);
    /// waiting_children: when it spawned them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<DateTime<Utc>>,
    /// waiting_event: its timeout; delayed, backing_off: when it is due.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<DateTime<Utc>>,
    /// waiting_children: its children that have ended so far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended: Option<i64>,
    /// waiting_children: the children it spawned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<i64>,
    /// waiting_event, waiting_children: the stage it runs once the wait ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_stage: Option<String>,
    /// backing_off: the tries of its stage so far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<i32>,
    /// backing_off: the last try's error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// key_held, and concurrency or rate_limited of scope key: the task's queue key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_key: Option<String>,
    /// concurrency, rate_limited: `type` or `key`, whose limit it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// concurrency: running tasks of the type or key (counted up to the limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<i64>,
    /// concurrency: the limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<i64>,
    /// rate_limited: when the bucket has a start again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_start_at: Option<DateTime<Utc>>,
    /// ready: ready tasks of its type before it (earlier order_time), counted up to 10,000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ahead: Option<i64>,
    /// ready: true when there are more than `ahead`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capped: Option<bool>,
}

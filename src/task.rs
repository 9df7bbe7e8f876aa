//! The task as clients and workers see it: [`Task`] (from `asyncflow.get_task`), [`NewTask`]
//! (an element of `create_tasks`), [`ClaimedTask`] (what a claim hands a worker), [`Report`]
//! (what a worker says back) and [`QueueDepth`].

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ids::TaskId;

/// Where a task is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum TaskStatus {
    /// Waiting for its order_time (ready when it is in the past).
    Pending,
    /// Held by a worker until its lease ends.
    Running,
    /// Waiting for an event (or its timeout), then pending at the stage it named; holds no
    /// worker and is not claimed.
    Waiting,
    /// Finished with a result.
    Succeeded,
    /// Finished without success: out of tries, or refused retry.
    Failed,
    /// Stopped by hand.
    Cancelled,
}

impl TaskStatus {
    /// Every status, in the order of a task's life.
    pub const ALL: [TaskStatus; 6] = [
        TaskStatus::Pending,
        TaskStatus::Running,
        TaskStatus::Waiting,
        TaskStatus::Succeeded,
        TaskStatus::Failed,
        TaskStatus::Cancelled,
    ];

    /// The statuses' names, for an error that lists them ("pending, running, ...").
    pub fn names() -> String {
        Self::ALL.map(TaskStatus::as_str).join(", ")
    }

    /// Parses the SQL enum's text.
    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "pending" => TaskStatus::Pending,
            "running" => TaskStatus::Running,
            "waiting" => TaskStatus::Waiting,
            "succeeded" => TaskStatus::Succeeded,
            "failed" => TaskStatus::Failed,
            "cancelled" => TaskStatus::Cancelled,
            _ => return None,
        })
    }

    /// The SQL enum's text (what `parse` reads).
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Pending => "pending",
            TaskStatus::Running => "running",
            TaskStatus::Succeeded => "succeeded",
            TaskStatus::Failed => "failed",
            TaskStatus::Cancelled => "cancelled",
            TaskStatus::Waiting => "waiting",
        }
    }

    /// Whether the task has ended.
    pub fn is_final(self) -> bool {
        matches!(self, TaskStatus::Succeeded | TaskStatus::Failed | TaskStatus::Cancelled)
    }
}

/// One entry of a task's schedule log: one attempt, or an event (cancel, manual retry).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct ScheduleLogEntry {
    /// Worker that held the attempt.
    #[serde(default)]
    pub worker: Option<String>,
    /// Stage the attempt ran.
    #[serde(default)]
    pub stage: Option<String>,
    /// Try number within the stage.
    #[serde(default)]
    pub attempt: Option<i32>,
    /// When the attempt was claimed.
    #[serde(default)]
    pub start: Option<DateTime<Utc>>,
    /// Milliseconds from claim to report.
    #[serde(default)]
    pub cost_ms: Option<f64>,
    /// advance, succeed, fail, later, release, rescued.
    #[serde(default)]
    pub outcome: Option<String>,
    /// The error of a failed attempt (at most 256 characters).
    #[serde(default)]
    pub error: Option<String>,
    /// For events: what happened (cancelled, retried by hand).
    #[serde(default)]
    pub event: Option<String>,
}

/// A task, as `asyncflow.get_task` returns it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct Task {
    /// Opaque id.
    #[cfg_attr(feature = "server", schema(value_type = String, example = "video-1-42"))]
    pub id: TaskId,
    /// Task type.
    #[serde(rename = "type")]
    pub task_type: String,
    /// Current stage.
    pub stage: String,
    /// Status.
    pub status: TaskStatus,
    /// Seconds ahead in the queue.
    pub priority: i32,
    /// Tries of the current stage.
    pub attempt: i32,
    /// Failed tries over the task's life.
    pub retry_count: i32,
    /// Retries allowed per stage.
    pub max_retry_num: i32,
    /// Back-off cap (> 0 progressive, < 0 uniform), seconds.
    pub max_retry_interval: i32,
    /// Fencing counter (claims so far).
    pub claim_seq: i64,
    /// Worker holding it, while running.
    pub owner: Option<String>,
    /// End of the current lease, while running.
    pub lease_until: Option<DateTime<Utc>>,
    /// The sort key.
    pub order_time: DateTime<Utc>,
    /// Owner of the task on the client side.
    pub user_id: Option<String>,
    /// The queue within the type it was created in, if any.
    #[serde(default)]
    pub queue_key: Option<String>,
    /// Idempotency key it was created with.
    pub idempotency_key: Option<String>,
    /// Context passed from stage to stage.
    pub context: Value,
    /// Result, once succeeded.
    pub result: Option<Value>,
    /// Last error.
    pub error: Option<String>,
    /// The last attempts and events.
    pub schedule_log: Vec<ScheduleLogEntry>,
    /// Created.
    pub created_at: DateTime<Utc>,
    /// Last changed.
    pub updated_at: DateTime<Utc>,
    /// When it ended.
    pub finished_at: Option<DateTime<Utc>>,
    /// Only on a row written past the API whose JSON no reader could parse (a number beyond
    /// ±1e308, nesting beyond 64 levels): which fields, and why. Those fields read as null (the
    /// schedule log as empty) and their text is in `raw`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_error: Option<String>,
    /// The text of each field named in `decode_error`, by field name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "server", schema(value_type = Option<Object>))]
    pub raw: Option<serde_json::Map<String, Value>>,
    /// The periodic schedule that released it, if any.
    #[serde(default)]
    pub schedule: Option<String>,
    /// The schedule's tick it was released for.
    #[serde(default)]
    pub tick: Option<DateTime<Utc>>,
    /// The latest progress its running call reported (with a heartbeat).
    #[serde(default)]
    #[cfg_attr(feature = "server", schema(value_type = Option<Object>))]
    pub progress: Option<Value>,
    /// The W3C trace context of its enqueue (`00-<trace id>-<parent id>-<flags>`), if it was
    /// given one: workers continue that trace.
    #[serde(default)]
    pub traceparent: Option<String>,
    /// The task whose `spawn` reply created it, if one did.
    #[serde(default)]
    pub parent_id: Option<String>,
}

/// For `#[serde(deserialize_with = "nullable")]` on an `Option<T>` that must be there: `null`
/// is None, and a field left out is an error (serde reads a plain `Option` left out as None).
pub(crate) fn nullable<'de, D: serde::Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    Option::<T>::deserialize(d)
}

/// For `#[serde(default, deserialize_with = "crate::task::present")]` on an `Option<T>`: a field
/// that is there is `Some`, `null` included (`Some(None)` for an `Option<Option<_>>`,
/// `Some(Value::Null)` for a `Value`), where a plain `Option` would read `null` as left out. For
/// the fields where `null` means something: no concurrency limit, a node's result.
pub(crate) fn present<'de, D: serde::Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

/// One task to create; every field is optional, and a field it does not know is refused (a
/// misspelt `priorty` would otherwise create the task without it).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct NewTask {
    /// Context for the first stage, a JSON object (default `{}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "server", schema(value_type = Option<Object>))]
    pub context: Option<Value>,
    /// Seconds ahead, 0..=31,104,000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    /// Not before this time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_at: Option<DateTime<Utc>>,
    /// First stage (default: the type's initial_stage).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage: Option<String>,
    /// Same key, same type: the existing task's id, nothing created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// Client-side owner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
    /// The queue within the type, 1 to 255 characters: a type with `fair_queues` takes its keys
    /// by turns (a crawler's site, a tenant).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_key: Option<String>,
    /// Uniqueness by key within the type (1 to 255 characters): while the key's newest task
    /// blocks (see `unique_for`), its id is answered and nothing is created. One task at a time
    /// (`create_task` only; `create_tasks` refuses it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unique_key: Option<String>,
    /// With `unique_key`: the window in seconds (1..=31,536,000) from the key's newest task's
    /// creation; absent: for as long as that task is pending or running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unique_for: Option<i32>,
    /// The W3C trace context of the enqueue, `00-<32 hex>-<16 hex>-<2 hex>` in lowercase (the
    /// `traceparent` header's value): the worker's spans continue its trace, and functions get it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// Debounce by key within the type (1 to 255 characters), with `debounce_for`: the task
    /// starts no earlier than `debounce_for` from now; while it is pending and has not started, a
    /// create with the same key replaces its context, moves its start to `debounce_for` from then
    /// and answers its id (`created`: false). Not with `idempotency_key`, `unique_key` or a
    /// priority.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub debounce_key: Option<String>,
    /// With `debounce_key`: seconds (more than 0, at most 31,536,000, fractions allowed) from
    /// the create to the task's start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub debounce_for: Option<f64>,
}

impl NewTask {
    /// A task with this context and defaults for the rest.
    pub fn with_context(context: Value) -> Self {
        NewTask { context: Some(context), ..Default::default() }
    }
}

/// A task handed to a worker by a claim, with the fencing token (`claim_seq`) its reports carry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct ClaimedTask {
    /// Task id.
    #[cfg_attr(feature = "server", schema(value_type = String))]
    pub task_id: TaskId,
    /// Task type (`type`; `task_type` is read too, from servers of earlier builds).
    #[serde(rename = "type", alias = "task_type")]
    pub task_type: String,
    /// Stage to run.
    pub stage: String,
    /// Context for the stage.
    pub context: Value,
    /// Priority.
    pub priority: i32,
    /// Try of this stage, from 1.
    pub attempt: i32,
    /// Fencing token.
    pub claim_seq: i64,
    /// Client-side owner.
    pub user_id: Option<String>,
    /// End of the lease unless extended.
    pub lease_until: DateTime<Utc>,
    /// When the claim was made.
    pub claimed_at: DateTime<Utc>,
    /// The task's queue key (None: none), for functions that act per queue (a crawler's site).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_key: Option<String>,
    /// The W3C trace context the task was enqueued with (None: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// What ended the wait that led to this stage, when one did: `{"event": {"key", "payload",
    /// "sent_at"} or null, "timed_out": bool}` after a wait for an event, `{"children": [...]}`
    /// after a spawn's join (the call carries these fields).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "server", schema(value_type = Option<Object>))]
    pub wake: Option<Value>,
}

/// A running task a worker holds, with the fencing token of its claim (`asyncflow.held_tasks`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct HeldTask {
    /// Task id.
    #[cfg_attr(feature = "server", schema(value_type = String))]
    pub task_id: TaskId,
    /// The fencing token of the worker's claim.
    pub claim_seq: i64,
    /// Stage being run.
    pub stage: String,
    /// Try of the stage.
    pub attempt: i32,
    /// End of the lease unless extended.
    pub lease_until: Option<DateTime<Utc>>,
}

/// What a worker reports about a claimed task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(tag = "outcome", rename_all = "lowercase")]
pub enum ReportKind {
    /// Go on to `stage` with `context`.
    Advance {
        /// Next stage.
        stage: String,
        /// Context for it, a JSON object (None keeps the current one).
        #[serde(skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "server", schema(value_type = Option<Object>))]
        context: Option<Value>,
    },
    /// Finished with a result.
    Succeed {
        /// The result.
        result: Value,
    },
    /// Failed; retried per the type's policy unless `retry` is false.
    Fail {
        /// Why (truncated to 256 characters).
        error: String,
        /// Whether a retry may help.
        retry: bool,
    },
    /// Not done yet, not a failure: again after `delay` seconds.
    Later {
        /// Seconds to wait.
        delay: f64,
        /// New context, a JSON object (None keeps the current one).
        #[serde(skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "server", schema(value_type = Option<Object>))]
        context: Option<Value>,
    },
    /// Wait for the event `event` (at most `timeout` seconds), then go on to `stage` with
    /// `context`; the task is `waiting` meanwhile and holds no worker.
    Wait {
        /// The stage to run once the wait ends.
        stage: String,
        /// The event key waited for.
        event: String,
        /// Seconds before the wait times out (above 0, at most a year).
        timeout: f64,
        /// Context for the next stage, a JSON object (None keeps the current one).
        #[serde(skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "server", schema(value_type = Option<Object>))]
        context: Option<Value>,
    },
    /// Create the child tasks `spawn` (in this report's transaction), then go on to `stage` with
    /// `context` once every child has ended; the task is `waiting` meanwhile and holds no worker,
    /// and the call of `stage` carries the children's outcomes (`children`).
    Spawn {
        /// The stage to run once every child has ended (the join).
        stage: String,
        /// The children, in order: each `{"type", "context", ...}` with the fields of a
        /// `create_tasks` element but `idempotency_key`.
        #[cfg_attr(feature = "server", schema(value_type = Vec<Object>))]
        spawn: Vec<Value>,
        /// Context for the next stage, a JSON object (None keeps the current one).
        #[serde(skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "server", schema(value_type = Option<Object>))]
        context: Option<Value>,
    },
    /// Handed back unfinished (shutdown): ready again at once, the try given back.
    Release,
    /// Still working: extend the lease (and set the task's progress when the report has one).
    Heartbeat,
}

impl ReportKind {
    /// Whether a report refused alone as malformed is followed by a failure of its task (a
    /// reply: advance, succeed, later), so that its call is not over yet. A failure, a heartbeat
    /// or a hand-back carries nothing a server could refuse.
    pub fn replaced_when_refused(&self) -> bool {
        matches!(
            self,
            ReportKind::Advance { .. }
                | ReportKind::Succeed { .. }
                | ReportKind::Later { .. }
                | ReportKind::Wait { .. }
                | ReportKind::Spawn { .. }
        )
    }
}

/// A report on one claimed task, fenced by its claim.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct Report {
    /// Task id.
    #[cfg_attr(feature = "server", schema(value_type = String))]
    pub task_id: TaskId,
    /// The claim_seq the task was claimed with.
    pub claim_seq: i64,
    /// What happened.
    #[serde(flatten)]
    pub kind: ReportKind,
    /// The call's progress, a small JSON value (at most 4096 bytes; shown by `get_task`), with
    /// any outcome: a heartbeat's, or the call's last one, written with its reply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "server", schema(value_type = Option<Object>))]
    pub progress: Option<Value>,
}

impl Report {
    /// A report without progress.
    pub fn new(task_id: TaskId, claim_seq: i64, kind: ReportKind) -> Report {
        Report { task_id, claim_seq, kind, progress: None }
    }
}

/// A task the rescuer took back: its lease ran out without a report.
#[derive(Debug, Clone, PartialEq)]
pub struct RescuedTask {
    /// Task id.
    pub task_id: String,
    /// Task type.
    pub task_type: String,
    /// Its status now: pending (tried again) or failed (out of tries).
    pub status: TaskStatus,
    /// The stage of the try that was rescued.
    pub stage: String,
    /// That try's number.
    pub attempt: i32,
    /// What was recorded as its error (`lease expired: ...`).
    pub error: String,
}

/// How a report was received.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportResult {
    /// Task id.
    pub task_id: String,
    /// False when the fence did not match: the task was rescued, cancelled or claimed again.
    pub accepted: bool,
    /// The task's status after the report (its current status when refused; None if unknown).
    pub status: Option<TaskStatus>,
    /// The new lease end, for an accepted heartbeat.
    pub lease_until: Option<DateTime<Utc>>,
    /// The report was refused as malformed and a failure of its task written in its place (the
    /// worker's reporter does this for a reply the server will not take).
    pub failed_instead: bool,
}

/// Queue depth of one task type (the `asyncflow.queue_depth` view).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct QueueDepth {
    /// Task type.
    #[serde(rename = "type")]
    pub task_type: String,
    /// Pending and due now.
    pub ready: i64,
    /// Pending, due later.
    pub delayed: i64,
    /// Held by workers.
    pub running: i64,
    /// Seconds since the oldest ready task's order_time.
    pub oldest_ready_age: f64,
    /// Whether claims are paused.
    pub paused: bool,
}

/// One queue of a task type with `fair_queues` (`asyncflow.queue_keys`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct QueueKeyDepth {
    /// The queue key (`""`: the tasks created without one).
    pub queue_key: String,
    /// Pending and due now.
    pub ready: i64,
    /// Pending, due later.
    pub delayed: i64,
    /// Held by workers.
    pub running: i64,
    /// Seconds since the oldest ready task's order_time (0 when none).
    pub oldest_ready_age: f64,
    /// Most of its tasks running at once: its own limit, else the type's `queue_concurrency`
    /// (None: no limit; 0: the key is held).
    pub concurrency: Option<i32>,
}

/// A per-key limit to set (`asyncflow.set_queue_limit`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct QueueLimit {
    /// The queue key (`""`: the tasks created without one).
    pub queue_key: String,
    /// Most of the key's tasks running at once, 0 to 1,000,000 (0 holds the key); null removes
    /// the key's own limit, so that the type's `queue_concurrency` applies again. Required: a
    /// body that leaves it out is refused rather than read as a removal.
    #[serde(deserialize_with = "nullable")]
    #[cfg_attr(feature = "server", schema(nullable, required = true))]
    pub concurrency: Option<i32>,
}

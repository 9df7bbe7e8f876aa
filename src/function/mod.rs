//! Functions: what runs one stage of a task. A function receives a [`StageCall`] and answers with
//! a [`StageReply`]. This module holds the contract and the in-process (Rust) kind; every other
//! kind (executables, HTTP endpoints) implements the same [`Function`] trait.

pub mod exec;
pub mod http;
mod process;
pub mod registry;
pub mod warm;
mod warm_shared;

use std::future::Future;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::task::{ClaimedTask, ReportKind};

/// A boxed, sendable future (futures-util's), what [`Function::call`] returns.
pub use futures_util::future::BoxFuture;

/// One stage call: JSON on stdin for executables, the POST body for HTTP functions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageCall {
    /// Task id.
    pub task_id: String,
    /// Task type.
    #[serde(rename = "type")]
    pub task_type: String,
    /// Stage to run.
    pub stage: String,
    /// Context from the previous stage (or creation).
    pub context: Value,
    /// 1 on the first try of this stage, then counts its retries.
    pub attempt: i32,
    /// Priority, seconds ahead.
    pub priority: i32,
    /// Client-side owner.
    pub user_id: Option<String>,
    /// When the current lease ends unless extended.
    pub deadline: DateTime<Utc>,
    /// The task's queue key, when it has one (many queues within a type).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_key: Option<String>,
    /// The W3C trace context to continue (`00-<trace id>-<span id>-<flags>`): the stage call's
    /// span when the worker exports traces, else the one the task was enqueued with; None when
    /// there is neither. Executables also get it as `TRACEPARENT`, HTTP functions as a header.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// The claim's fencing token: a call that posts its own progress (`POST
    /// /v1/worker/progress`) sends it with `task_id`, and it is refused once the claim is over.
    #[serde(default)]
    pub claim_seq: i64,
    /// When a wait led to this stage (a `wait` reply): the event that ended it, `{"key",
    /// "payload", "sent_at"}`, or null when it timed out. Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<Value>,
    /// When a wait led to this stage: whether it ended by its timeout. Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timed_out: Option<bool>,
    /// When a spawn's join led to this stage: the children's outcomes in spawn order, each
    /// `{"id", "type", "status", "result", "error"}` (a result past 4096 bytes of JSON, or past
    /// 1 MiB for all of them, is null with `"result_left_out": true`: read it with `get_task`).
    /// Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub children: Option<Value>,
    /// Fired when the call is to stop (not on the wire).
    #[serde(skip)]
    pub cancel: CallCancel,
    /// Where the call reports its progress (not on the wire): the worker sends the latest value
    /// with its next heartbeat (the last one with the reply), and `get_task` shows it as
    /// `progress`.
    #[serde(skip)]
    pub progress: Progress,
    /// Where the call saves its context (not on the wire): see [`StageCall::checkpoint`].
    #[serde(skip)]
    pub checkpoints: Checkpoints,
}

impl StageCall {
    /// Saves the call's context without ending the call: the task's whole context becomes
    /// `context` (a JSON object), and a retry of this stage (after a failure, a lost lease, a
    /// crash) starts from it. Written before this returns. Fenced like the call's reply: false,
    /// and nothing changed, when the task is no longer running under this call's claim (the
    /// call was cancelled, or its lease was lost). An error for a context the database refuses
    /// (not an object, larger than `max_context_bytes`), or for a call no worker made.
    pub async fn checkpoint(&self, context: Value) -> crate::error::Result<bool> {
        self.checkpoints.write(context).await
    }
}

/// What writes a call's checkpoints: the worker that made the call sets it (through its
/// backend: `asyncflow.checkpoint_task`, or `POST /v1/worker/checkpoint` on a server); a call
/// made otherwise (a test's) has none, and its checkpoints are refused.
#[derive(Clone, Default)]
pub struct Checkpoints(Option<std::sync::Arc<CheckpointWriter>>);

/// Writes one checkpoint's context: whether the fence let it through.
type CheckpointWriter = dyn Fn(Value) -> BoxFuture<'static, crate::error::Result<bool>> + Send + Sync;

impl Checkpoints {
    /// Checkpoints written by `write`.
    pub fn new(
        write: impl Fn(Value) -> BoxFuture<'static, crate::error::Result<bool>> + Send + Sync + 'static,
    ) -> Self {
        Checkpoints(Some(std::sync::Arc::new(write)))
    }

    /// Writes one checkpoint (see [`StageCall::checkpoint`]).
    pub async fn write(&self, context: Value) -> crate::error::Result<bool> {
        match &self.0 {
            Some(write) => write(context).await,
            None => Err(crate::error::Error::InvalidArgument(
                "this call was not made by a worker: it has nowhere to save a checkpoint".into(),
            )),
        }
    }
}

impl std::fmt::Debug for Checkpoints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "Checkpoints(worker)" } else { "Checkpoints(none)" })
    }
}

/// Two calls are equal whatever writes their checkpoints.
impl PartialEq for Checkpoints {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// Largest progress value, as JSON text: progress is a small value (a percentage, a message).
pub const PROGRESS_BYTES_MAX: usize = 4096;

/// A running call's progress: a small JSON value (e.g. `{"percent": 40, "message": "..."}`),
/// sent with the worker's next heartbeat (no round trip of its own), the last value with the
/// call's reply, and shown by `get_task`.
/// Rust handlers call [`Progress::report`] on [`StageCall::progress`]; executables write a line
/// `asyncflow:progress <json>` to stderr.
#[derive(Debug, Clone, Default)]
pub struct Progress(std::sync::Arc<std::sync::Mutex<(u64, Option<Value>)>>);

impl Progress {
    /// Sets the call's progress; refused (and the previous value kept) when its JSON is larger
    /// than [`PROGRESS_BYTES_MAX`].
    pub fn report(&self, value: Value) -> Result<(), String> {
        let size = value.to_string().len();
        if size > PROGRESS_BYTES_MAX {
            return Err(format!("progress is {size} bytes of JSON, the limit is {PROGRESS_BYTES_MAX}"));
        }
        let mut slot = self.0.lock().unwrap_or_else(|e| e.into_inner());
        slot.0 += 1;
        slot.1 = Some(value);
        Ok(())
    }

    /// Sets the call's progress from JSON text (a progress line's); refused as
    /// [`Progress::report`] refuses, or when the text is not JSON.
    pub fn report_json(&self, text: &str) -> Result<(), String> {
        let value: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        self.report(value)
    }

    /// The latest value and its version, when newer than version `seen`.
    pub fn newer_than(&self, seen: u64) -> Option<(u64, Value)> {
        let slot = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match &slot.1 {
            Some(v) if slot.0 > seen => Some((slot.0, v.clone())),
            _ => None,
        }
    }
}

impl PartialEq for Progress {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// Fired when a call is to stop: its task was cancelled (or its workflow run or node ended
/// without it), its lease was lost, it timed out, or the worker's shutdown grace ran out. The
/// worker drops the call's future right after, so a Rust handler needs it only for work it
/// started outside that future (a spawned task, a child process, a request it handed off).
#[derive(Debug, Clone, Default)]
pub struct CallCancel(tokio_util::sync::CancellationToken);

impl CallCancel {
    /// Completes when the call is to stop.
    pub async fn cancelled(&self) {
        self.0.cancelled().await
    }

    /// Whether the call is to stop.
    pub fn is_cancelled(&self) -> bool {
        self.0.is_cancelled()
    }

    /// Stops the call's outside work (the worker's side).
    pub(crate) fn cancel(&self) {
        self.0.cancel()
    }
}

/// Two calls are equal whatever their tokens.
impl PartialEq for CallCancel {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl From<ClaimedTask> for StageCall {
    fn from(t: ClaimedTask) -> Self {
        // a wake's event is Some(null) when the wait timed out: the call says "event": null; a
        // join's wake has only its children
        let children = t.wake.as_ref().and_then(|w| w.get("children")).cloned();
        let (event, timed_out) = match &t.wake {
            Some(w) if children.is_none() => {
                (Some(w.get("event").cloned().unwrap_or(Value::Null)), w.get("timed_out").and_then(Value::as_bool))
            }
            _ => (None, None),
        };
        StageCall {
            task_id: t.task_id.into_string(),
            task_type: t.task_type,
            stage: t.stage,
            context: t.context,
            attempt: t.attempt,
            priority: t.priority,
            user_id: t.user_id,
            deadline: t.lease_until,
            queue_key: t.queue_key,
            traceparent: t.traceparent,
            claim_seq: t.claim_seq,
            event,
            timed_out,
            children,
            cancel: CallCancel::default(),
            progress: Progress::default(),
            checkpoints: Checkpoints::default(),
        }
    }
}

/// A stage's answer: exactly one of five forms.
#[derive(Debug, Clone, PartialEq)]
pub enum StageReply {
    /// `{"next_stage": "s", "context": {...}}`: go on to the next stage.
    Next {
        /// Next stage.
        next_stage: String,
        /// Context for it (None keeps the current one).
        context: Option<Value>,
    },
    /// `{"result": {...}}`: succeeded.
    Succeeded {
        /// The result.
        result: Value,
    },
    /// `{"error": "why", "retry": true|false}`: failed; retried per policy unless retry is false.
    Failed {
        /// Why.
        error: String,
        /// Whether a retry may help.
        retry: bool,
    },
    /// `{"later": seconds, "context": {...}}`: not done yet, look again later; not a failure.
    Later {
        /// Seconds to wait.
        later: f64,
        /// New context (None keeps the current one).
        context: Option<Value>,
    },
    /// `{"wait": {"event": KEY, "timeout": SECONDS}, "next_stage": "s", "context": {...}}`: the
    /// call ends and frees its slot; the task waits for the event `KEY` (`send_event`), or the
    /// timeout, and then runs `next_stage`, whose call carries `event` and `timed_out`.
    Wait {
        /// The event key waited for.
        event: String,
        /// Seconds before the wait times out.
        timeout: f64,
        /// The stage to run once the wait ends.
        next_stage: String,
        /// Context for it (None keeps the current one).
        context: Option<Value>,
    },
    /// `{"spawn": [{"type", "context", ...}, ...], "next_stage": "s", "context": {...}}`: the
    /// children are created with the reply (in its transaction, once), the call ends and frees
    /// its slot; the task waits until every child has ended, and then runs `next_stage`, whose
    /// call carries `children`. An empty list goes on to `next_stage` at once.
    Spawn {
        /// The children, in order: each `{"type", ...}` with the fields of a `create_tasks`
        /// element but `idempotency_key`.
        spawn: Vec<Value>,
        /// The stage to run once every child has ended.
        next_stage: String,
        /// Context for it (None keeps the current one).
        context: Option<Value>,
    },
}

/// Reads a reply's `"spawn"` list: an array of objects, each with a `"type"` naming a task type.
fn read_spawn(spawn: Value) -> Result<Vec<Value>, String> {
    let Value::Array(children) = spawn else {
        return Err("spawn must be an array of objects, each with a \"type\"".into());
    };
    for (i, child) in children.iter().enumerate() {
        match child.get("type") {
            Some(Value::String(t)) if crate::ids::TypeName::new(t).is_ok() => {}
            _ if !child.is_object() => return Err(format!("spawn[{i}] must be an object")),
            _ => return Err(format!("spawn[{i}].type must be a task type name")),
        }
        if !matches!(child.get("context"), None | Some(Value::Null) | Some(Value::Object(_))) {
            return Err(format!("spawn[{i}].context must be a JSON object"));
        }
    }
    Ok(children)
}

/// Whether `key` is an event key the server takes: 1 to 200 of `A-Za-z0-9_.:/@#=+-` (as
/// `send_event` and `report_tasks` check it).
pub fn is_event_key(key: &str) -> bool {
    (1..=200).contains(&key.len()) && key.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.:/@#=+-".contains(&b))
}

/// Reads a reply's `"wait"` object: `{"event": KEY, "timeout": SECONDS}`.
fn read_wait(wait: Value) -> Result<(String, f64), String> {
    let Value::Object(mut wait) = wait else {
        return Err("wait must be an object {\"event\": KEY, \"timeout\": SECONDS}".into());
    };
    let event = match wait.remove("event") {
        Some(Value::String(k)) if is_event_key(&k) => k,
        Some(Value::String(k)) => {
            return Err(format!(
                "wait.event must be 1 to 200 of A-Za-z0-9_.:/@#=+- (e.g. order:42/paid), got {}",
                crate::error::echo(&k)
            ))
        }
        _ => return Err("wait.event must be a string, the event key".into()),
    };
    let timeout = wait.remove("timeout").and_then(|v| v.as_f64()).filter(|s| *s > 0.0 && *s <= LATER_MAX_SECS as f64);
    let Some(timeout) = timeout else {
        return Err(format!("wait.timeout must be a number of seconds above 0 and at most {LATER_MAX_SECS}"));
    };
    if let Some(key) = wait.keys().next() {
        return Err(format!("unknown field {} in wait", crate::error::echo(key)));
    }
    Ok((event, timeout))
}

/// Longest `later` delay the server takes, in seconds (a year, as `report_tasks` checks it).
pub const LATER_MAX_SECS: i64 = 31_536_000;

/// Whether `name` is a stage name the server takes: 1 to 64 of `A-Za-z0-9_.:/-` (as
/// `report_tasks` and `create_task` check it).
pub fn is_stage_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'/' | b'-'))
}

impl StageReply {
    /// A retryable failure.
    pub fn fail(error: impl Into<String>) -> Self {
        StageReply::Failed { error: error.into(), retry: true }
    }

    /// Reads a reply object; the error says what is wrong with it. A reply the server would
    /// refuse (a stage name it does not allow, a delay past a year) is refused here already, so
    /// that the call fails with that reason.
    pub fn from_json(value: Value) -> Result<Self, String> {
        let Value::Object(mut map) = value else {
            return Err("the reply is not a JSON object".into());
        };
        let context = |map: &mut Map<String, Value>| -> Result<Option<Value>, String> {
            match map.remove("context") {
                None | Some(Value::Null) => Ok(None),
                Some(v @ Value::Object(_)) => Ok(Some(v)),
                Some(_) => Err("context must be a JSON object".into()),
            }
        };
        let forms = ["next_stage", "result", "error", "later"].iter().filter(|k| map.contains_key(**k)).count();
        let waits = ["wait", "spawn"].iter().filter(|k| map.contains_key(**k)).count();
        if forms != 1 || waits > 1 || (waits == 1 && !map.contains_key("next_stage")) {
            return Err("the reply must have exactly one of next_stage, result, error, later \
                        (a wait or a spawn goes with next_stage)"
                .into());
        }
        let wait = map.remove("wait").map(read_wait).transpose()?;
        let spawn = map.remove("spawn").map(read_spawn).transpose()?;
        let reply = if let Some(stage) = map.remove("next_stage") {
            let Value::String(next_stage) = stage else {
                return Err("next_stage must be a string".into());
            };
            if !is_stage_name(&next_stage) {
                return Err(format!(
                    "next_stage must match ^[A-Za-z0-9_.:/-]{{1,64}}$, got {}",
                    crate::error::echo(&next_stage)
                ));
            }
            match (wait, spawn) {
                (Some((event, timeout)), _) => {
                    StageReply::Wait { event, timeout, next_stage, context: context(&mut map)? }
                }
                (None, Some(spawn)) => StageReply::Spawn { spawn, next_stage, context: context(&mut map)? },
                (None, None) => StageReply::Next { next_stage, context: context(&mut map)? },
            }
        } else if let Some(result) = map.remove("result") {
            StageReply::Succeeded { result }
        } else if let Some(error) = map.remove("error") {
            let error = match error {
                Value::String(s) => s,
                other => other.to_string(),
            };
            let retry = match map.remove("retry") {
                None | Some(Value::Null) => true,
                Some(Value::Bool(b)) => b,
                Some(_) => return Err("retry must be true or false".into()),
            };
            StageReply::Failed { error, retry }
        } else {
            let later =
                map.remove("later").and_then(|v| v.as_f64()).filter(|s| (0.0..=LATER_MAX_SECS as f64).contains(s));
            let Some(later) = later else {
                return Err(format!("later must be a number of seconds between 0 and {LATER_MAX_SECS}"));
            };
            StageReply::Later { later, context: context(&mut map)? }
        };
        // `retry` belongs to the error form, which took it out above
        if let Some(key) = map.keys().next() {
            return Err(format!("unknown field {} in the reply", crate::error::echo(key)));
        }
        Ok(reply)
    }

    /// Reads the reply object of a function's call, as [`StageReply::from_json`], beside its
    /// optional `"progress"`: the call's last progress (a JSON value, at most
    /// [`PROGRESS_BYTES_MAX`] bytes; null is none), set on `progress` so that the worker writes
    /// it with the reply. A progress line sent just before a reply may be read after it (warm
    /// instances) or not reach a heartbeat; this one cannot be lost.
    pub fn read(value: Value, progress: &Progress) -> Result<Self, String> {
        let (value, last) = match value {
            Value::Object(mut map) => {
                let last = map.remove("progress").filter(|p| !p.is_null());
                (Value::Object(map), last)
            }
            other => (other, None),
        };
        let reply = Self::from_json(value)?;
        if let Some(last) = last {
            progress.report(last)?;
        }
        Ok(reply)
    }

    /// The reply as the JSON object a function writes (the inverse of [`StageReply::from_json`]).
    pub fn to_json(&self) -> Value {
        match self {
            StageReply::Next { next_stage, context } => match context {
                Some(c) => serde_json::json!({"next_stage": next_stage, "context": c}),
                None => serde_json::json!({"next_stage": next_stage}),
            },
            StageReply::Succeeded { result } => serde_json::json!({"result": result}),
            StageReply::Failed { error, retry } => serde_json::json!({"error": error, "retry": retry}),
            StageReply::Later { later, context } => match context {
                Some(c) => serde_json::json!({"later": later, "context": c}),
                None => serde_json::json!({"later": later}),
            },
            StageReply::Wait { event, timeout, next_stage, context } => {
                let mut reply =
                    serde_json::json!({"wait": {"event": event, "timeout": timeout}, "next_stage": next_stage});
                if let Some(c) = context {
                    reply["context"] = c.clone();
                }
                reply
            }
            StageReply::Spawn { spawn, next_stage, context } => {
                let mut reply = serde_json::json!({"spawn": spawn, "next_stage": next_stage});
                if let Some(c) = context {
                    reply["context"] = c.clone();
                }
                reply
            }
        }
    }

    /// The report that carries this reply.
    pub fn into_report(self) -> ReportKind {
        match self {
            StageReply::Next { next_stage, context } => ReportKind::Advance { stage: next_stage, context },
            StageReply::Succeeded { result } => ReportKind::Succeed { result },
            // PostgreSQL text cannot hold NUL, and a failure that could not be written would
            // leave its task running until the lease ends: the error is written without it
            StageReply::Failed { error, retry } => ReportKind::Fail { error: error.replace('\0', "\u{FFFD}"), retry },
            StageReply::Later { later, context } => ReportKind::Later { delay: later, context },
            StageReply::Wait { event, timeout, next_stage, context } => {
                ReportKind::Wait { stage: next_stage, event, timeout, context }
            }
            StageReply::Spawn { spawn, next_stage, context } => ReportKind::Spawn { stage: next_stage, spawn, context },
        }
    }
}

/// Something that runs stages of one task type.
pub trait Function: Send + Sync + 'static {
    /// Runs one stage. Dropping the future abandons the call (lease lost, shutdown). The worker
    /// polls it in the call's own task: a function must not block its thread (use
    /// `tokio::task::spawn_blocking` for blocking work), or its timeout, a lost lease and the
    /// shutdown grace act only when it next yields.
    fn call(&self, call: StageCall) -> BoxFuture<'static, StageReply>;

    /// Stops what the function keeps running between calls (the processes of a warm function);
    /// the worker calls it when it ends, after its last call. Nothing by default.
    fn stop(&self) -> BoxFuture<'static, ()> {
        Box::pin(async {})
    }
}

/// Any `Fn(StageCall) -> impl Future<Output = StageReply>` is a function (the Rust kind).
impl<F, Fut> Function for F
where
    F: Fn(StageCall) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = StageReply> + Send + 'static,
{
    fn call(&self, call: StageCall) -> BoxFuture<'static, StageReply> {
        Box::pin(self(call))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_replys_progress_is_the_calls_last() {
        let progress = Progress::default();
        let reply = StageReply::read(json!({"result": 1, "progress": {"percent": 100}}), &progress);
        assert_eq!(reply, Ok(StageReply::Succeeded { result: json!(1) }));
        assert_eq!(progress.newer_than(0).map(|(_, v)| v), Some(json!({"percent": 100})));
        let quiet = Progress::default();
        assert!(StageReply::read(json!({"later": 1, "progress": null}), &quiet).is_ok());
        assert_eq!(quiet.newer_than(0), None, "null is no progress");
        let big = json!({"result": 1, "progress": "x".repeat(PROGRESS_BYTES_MAX)});
        assert!(StageReply::read(big, &quiet).is_err(), "too large: the reply is malformed");
        assert!(StageReply::from_json(json!({"result": 1, "progress": 1})).is_err(), "only read() takes it");
    }

    #[test]
    fn each_reply_form_is_read() {
        assert_eq!(
            StageReply::from_json(json!({"next_stage": "b", "context": {"x": 1}})),
            Ok(StageReply::Next { next_stage: "b".into(), context: Some(json!({"x": 1})) })
        );
        assert_eq!(StageReply::from_json(json!({"result": 3})), Ok(StageReply::Succeeded { result: json!(3) }));
        assert_eq!(
            StageReply::from_json(json!({"error": "no", "retry": false})),
            Ok(StageReply::Failed { error: "no".into(), retry: false })
        );
        assert_eq!(StageReply::from_json(json!({"later": 2.5})), Ok(StageReply::Later { later: 2.5, context: None }));
        assert_eq!(
            StageReply::from_json(json!({"next_stage": "a-Z_0.9:/x"})),
            Ok(StageReply::Next { next_stage: "a-Z_0.9:/x".into(), context: None })
        );
        assert!(StageReply::from_json(json!({"next_stage": "x".repeat(64)})).is_ok());
        assert!(StageReply::from_json(json!({"later": LATER_MAX_SECS as f64})).is_ok());
    }

    #[test]
    fn replies_round_trip_through_json() {
        for reply in [
            StageReply::Next { next_stage: "b".into(), context: Some(json!({"x": 1})) },
            StageReply::Next { next_stage: "b".into(), context: None },
            StageReply::Succeeded { result: json!([1, 2]) },
            StageReply::Failed { error: "no".into(), retry: false },
            StageReply::Later { later: 1.5, context: None },
            StageReply::Spawn {
                spawn: vec![json!({"type": "page", "context": {"url": "a"}}), json!({"type": "page", "priority": 3})],
                next_stage: "join".into(),
                context: Some(json!({"x": 1})),
            },
            StageReply::Spawn { spawn: vec![], next_stage: "join".into(), context: None },
        ] {
            assert_eq!(StageReply::from_json(reply.to_json()), Ok(reply));
        }
    }

    #[test]
    fn malformed_replies_are_refused() {
        for bad in [
            json!([]),
            json!({}),
            json!({"result": 1, "error": "x"}),
            json!({"next_stage": 1}),
            json!({"later": -1}),
            json!({"error": "x", "retry": "yes"}),
            json!({"next_stage": "a", "context": [1]}),
            json!({"result": 1, "extra": true}),
            json!({"next_stage": ""}),
            json!({"next_stage": "two words"}),
            json!({"next_stage": "x".repeat(65)}),
            json!({"later": 4e7}),
            json!({"spawn": [{"type": "page"}]}),
            json!({"spawn": {"type": "page"}, "next_stage": "join"}),
            json!({"spawn": [{"type": "no such"}], "next_stage": "join"}),
            json!({"spawn": [[]], "next_stage": "join"}),
            json!({"spawn": [{"type": "page", "context": 1}], "next_stage": "join"}),
            json!({"spawn": [], "wait": {"event": "k", "timeout": 1}, "next_stage": "join"}),
        ] {
            assert!(StageReply::from_json(bad.clone()).is_err(), "{bad}");
        }
    }
}

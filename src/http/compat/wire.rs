//! The wire side of the flowsvr compatibility layer: reading requests in either key dialect
//! (query string and body, snake_case or camelCase) and writing replies in the caller's dialect,
//! with the original TaskData mapping (see the parent module's doc for the rules).

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::Query;
use axum::http::{header, HeaderMap, StatusCode, Uri};
use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{json, Map, Value};

use super::{Failure, LIMIT_DEFAULT, PRIORITY_MAX, TEXT_KEY};
use crate::task::{ScheduleLogEntry, Task, TaskStatus};
use crate::task_type::TaskTypeSettings;

// ---------------------------------------------------------------------------------------------
// Reading requests

/// Which key spelling a request used, and so which the reply uses.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Dialect {
    Snake,
    Camel,
    Both,
}

/// A key as compared: lower case, no underscores (`task_id`, `taskId`, `TaskId` are one key).
pub(super) fn norm(key: &str) -> String {
    key.chars().filter(|c| *c != '_').flat_map(char::to_lowercase).collect()
}

/// The value of `name` in `map` under any spelling; the snake_case spelling wins.
pub(super) fn find<'a>(map: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    let want = norm(name);
    let mut found = None;
    for (k, v) in map {
        if !v.is_null() && norm(k) == want {
            if k.contains('_') {
                return Some(v);
            }
            found = found.or(Some(v));
        }
    }
    found
}

/// Parameters from the query string and the body, in the order they win.
pub(super) struct Input {
    sources: Vec<Map<String, Value>>,
    pub(super) dialect: Dialect,
    /// Why the body could not be read, when it was not JSON and no JSON Content-Type claimed it.
    pub(super) unread_body: Option<String>,
}

impl Input {
    pub(super) fn read(headers: &HeaderMap, uri: &Uri, body: Result<Bytes, BytesRejection>) -> Result<Input, Failure> {
        let json_type = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.to_ascii_lowercase().contains("json"));
        let Query(query) = Query::<HashMap<String, String>>::try_from_uri(uri)
            .map_err(|e| Failure::bind(format!("unreadable query string: {}", e.body_text())))?;
        let query: Map<String, Value> = query.into_iter().map(|(k, v)| (k, Value::String(v))).collect();
        let bytes = body.map_err(|e| match e.status() {
            StatusCode::PAYLOAD_TOO_LARGE => Failure::bind("the request body is larger than the server accepts"),
            _ => Failure::bind(e.body_text()),
        })?;
        let parsed = match serde_json::from_slice::<Value>(&bytes) {
            _ if bytes.iter().all(u8::is_ascii_whitespace) => Ok(None),
            Ok(Value::Object(map)) => Ok(Some(map)),
            Ok(_) => Err("the body must be a JSON object".to_string()),
            Err(e) => Err(format!("invalid JSON body: {e}")),
        };
        // Without a JSON Content-Type a body that is not JSON is ignored (the Go worker's hold).
        let (body, unread_body) = match parsed {
            Ok(body) => (body, None),
            Err(why) if json_type => return Err(Failure::bind(why)),
            Err(why) => (None, Some(why)),
        };
        let sources: Vec<Map<String, Value>> = match (body, json_type) {
            (Some(b), true) => vec![b, query],
            (Some(b), false) => vec![query, b],
            (None, _) => vec![query],
        };
        let dialect = Self::dialect_of(&sources);
        Ok(Input { sources, dialect, unread_body })
    }

    /// Snake when any key (top level or in the task data) has an underscore, camel when any has a
    /// capital, both otherwise.
    pub(super) fn dialect_of(sources: &[Map<String, Value>]) -> Dialect {
        let mut keys: Vec<&str> = Vec::new();
        for map in sources {
            for (k, v) in map {
                keys.push(k);
                if norm(k) == "taskdata" {
                    if let Some(inner) = v.as_object() {
                        keys.extend(inner.keys().map(String::as_str));
                    }
                }
            }
        }
        if keys.iter().any(|k| k.contains('_')) {
            Dialect::Snake
        } else if keys.iter().any(|k| k.chars().any(|c| c.is_ascii_uppercase())) {
            Dialect::Camel
        } else {
            Dialect::Both
        }
    }

    pub(super) fn get(&self, name: &str) -> Option<&Value> {
        self.sources.iter().find_map(|m| find(m, name))
    }

    /// The task data object (`task_data`, `taskData`, `TaskData`), or the top level when the
    /// request sends the fields flat. Needs a readable body.
    pub(super) fn task_data(&self) -> Result<Map<String, Value>, Failure> {
        if let Some(why) = &self.unread_body {
            return Err(Failure::bind(why.clone()));
        }
        match self.get("task_data") {
            Some(Value::Object(m)) => Ok(m.clone()),
            Some(_) => Err(Failure::bind("task_data must be a JSON object")),
            None => {
                let mut flat = Map::new();
                for source in self.sources.iter().rev() {
                    flat.extend(source.clone());
                }
                Ok(flat)
            }
        }
    }
}

/// A text field: a string (empty means absent) or a number.
pub(super) fn text(v: Option<&Value>, name: &str) -> Result<Option<String>, Failure> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(Value::Number(n)) => Ok(Some(n.to_string())),
        Some(_) => Err(Failure::bind(format!("{name} must be a string"))),
    }
}

/// An integer field: a JSON integer or a string holding one (query strings, protobuf int64).
pub(super) fn int(v: Option<&Value>, name: &str) -> Result<Option<i64>, Failure> {
    let bad = || Failure::bind(format!("{name} must be an integer"));
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => Ok(Some(i)),
            (None, Some(f)) if f.fract() == 0.0 && f.abs() < 9.0e15 => Ok(Some(f as i64)),
            _ => Err(bad()),
        },
        Some(Value::String(s)) if s.trim().is_empty() => Ok(None),
        Some(Value::String(s)) => s.trim().parse().map(Some).map_err(|_| bad()),
        Some(_) => Err(bad()),
    }
}

pub(super) fn int32(v: Option<&Value>, name: &str) -> Result<Option<i32>, Failure> {
    int(v, name)?
        .map(|n| i32::try_from(n).map_err(|_| Failure::input(format!("{name} is out of range, got {n}"))))
        .transpose()
}

pub(super) fn number(v: Option<&Value>, name: &str) -> Result<Option<f64>, Failure> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => Ok(n.as_f64()),
        Some(Value::String(s)) => {
            s.trim().parse().map(Some).map_err(|_| Failure::bind(format!("{name} must be a number")))
        }
        Some(_) => Err(Failure::bind(format!("{name} must be a number"))),
    }
}

pub(super) fn required(v: Option<String>, name: &str) -> Result<String, Failure> {
    v.ok_or_else(|| Failure::input(format!("{name} is required")))
}

pub(super) fn priority(v: Option<&Value>) -> Result<Option<i32>, Failure> {
    match int(v, "priority")? {
        None => Ok(None),
        Some(p) if (0..=PRIORITY_MAX).contains(&p) => Ok(Some(p as i32)),
        Some(p) => Err(Failure::input(format!("priority must be between 0 and {PRIORITY_MAX} seconds, got {p}"))),
    }
}

/// limit: absent or 0 is the default, above the cap is the cap.
pub(super) fn limit(input: &Input) -> Result<i64, Failure> {
    match int(input.get("limit"), "limit")? {
        None | Some(0) => Ok(LIMIT_DEFAULT),
        Some(n) if n < 0 => Err(Failure::input(format!("limit must not be negative, got {n}"))),
        Some(n) => Ok(n.min(LIMIT_DEFAULT)),
    }
}

/// A wire context (a string, normally holding a JSON object) as our JSON object.
pub(super) fn context_in(v: Option<&Value>) -> Option<Value> {
    match v {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.trim().is_empty() => None,
        Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
            Ok(obj @ Value::Object(_)) => Some(obj),
            _ => Some(json!({ TEXT_KEY: s })),
        },
        Some(obj @ Value::Object(_)) => Some(obj.clone()),
        Some(other) => Some(json!({ TEXT_KEY: other.to_string() })),
    }
}

/// Our context (or result) as the wire's string.
pub(super) fn context_out(v: &Value) -> String {
    match v.as_object().filter(|m| m.len() == 1).and_then(|m| m.get(TEXT_KEY)) {
        Some(Value::String(s)) => s.clone(),
        _ => v.to_string(),
    }
}

/// The error an old worker wrote into its schedule_log (`LastData.ErrMsg`), if any.
pub(super) fn reported_error(log: Option<&str>) -> Option<String> {
    let log: Value = serde_json::from_str(log?).ok()?;
    let last = find(log.as_object()?, "LastData")?.as_object()?;
    let msg = find(last, "ErrMsg")?.as_str()?.trim();
    (!msg.is_empty()).then(|| msg.chars().take(256).collect())
}

// ---------------------------------------------------------------------------------------------
// Writing replies

pub(super) fn camel(snake: &str) -> String {
    let mut out = String::with_capacity(snake.len());
    let mut upper = false;
    for c in snake.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

/// A snake_case object with its keys in the dialect (Camel converts; Snake and Both keep).
pub(super) fn keyed(snake: Value, d: Dialect) -> Value {
    match (snake, d) {
        (Value::Object(m), Dialect::Camel) => Value::Object(m.into_iter().map(|(k, v)| (camel(&k), v)).collect()),
        (v, _) => v,
    }
}

/// Inserts a reply field under the dialect's key, or under both keys.
pub(super) fn put(
    reply: &mut Map<String, Value>,
    d: Dialect,
    snake: &str,
    camel_key: &str,
    make: impl Fn(Dialect) -> Value,
) {
    if d != Dialect::Camel {
        reply.insert(snake.to_string(), make(Dialect::Snake));
    }
    if d != Dialect::Snake {
        reply.insert(camel_key.to_string(), make(Dialect::Camel));
    }
}

pub(super) fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// The wire's status integers.
pub(super) const STATUSES: [(i64, TaskStatus); 5] = [
    (1, TaskStatus::Pending),
    (2, TaskStatus::Running),
    (3, TaskStatus::Succeeded),
    (4, TaskStatus::Failed),
    (5, TaskStatus::Cancelled),
];

pub(super) fn status_code(s: TaskStatus) -> i64 {
    STATUSES.iter().find(|(_, st)| *st == s).map_or(0, |(n, _)| *n)
}

pub(super) fn status_of(code: i64) -> Option<TaskStatus> {
    STATUSES.iter().find(|(n, _)| *n == code).map(|(_, s)| *s)
}

/// Failed tries of the current stage: a running (or succeeded) task's current try has not failed.
pub(super) fn crt_retry_num(t: &Task) -> i32 {
    match t.status {
        TaskStatus::Running | TaskStatus::Succeeded => (t.attempt - 1).max(0),
        _ => t.attempt,
    }
}

/// Our schedule log in the original `{"LastData", "HistoryDatas"}` shape.
pub(super) fn schedule_log_out(entries: &[ScheduleLogEntry]) -> String {
    let item = |e: &ScheduleLogEntry| {
        let start = e.start.map(rfc3339).unwrap_or_default();
        json!({
            "TraceId": format!("{}@{start}", e.worker.as_deref().unwrap_or("asyncflow")),
            "ErrMsg": e.error.clone().unwrap_or_default(),
            "Cost": format!("{}ms", e.cost_ms.unwrap_or(0.0).round() as i64),
            "Stage": e.stage.clone().unwrap_or_default(),
            "Outcome": e.outcome.clone().or_else(|| e.event.clone()).unwrap_or_default(),
        })
    };
    let Some((last, earlier)) = entries.split_last() else {
        return String::new();
    };
    let history: Vec<Value> = earlier.iter().rev().take(3).rev().map(item).collect();
    json!({"LastData": item(last), "HistoryDatas": history}).to_string()
}

pub(super) fn task_data(t: &Task, d: Dialect) -> Value {
    let shown = match (&t.status, &t.result) {
        (TaskStatus::Succeeded, Some(r)) if !r.is_null() => r,
        _ => &t.context,
    };
    keyed(
        json!({
            "user_id": t.user_id.clone().unwrap_or_default(),
            "task_id": t.id,
            "task_type": t.task_type,
            "task_stage": t.stage,
            "status": status_code(t.status),
            "priority": t.priority,
            "crt_retry_num": crt_retry_num(t),
            "max_retry_num": t.max_retry_num,
            "max_retry_interval": t.max_retry_interval,
            "schedule_log": schedule_log_out(&t.schedule_log),
            "context": context_out(shown),
            "order_time": t.order_time.timestamp(),
            "create_time": rfc3339(t.created_at),
            "modify_time": rfc3339(t.updated_at),
            "claim_seq": t.claim_seq,
        }),
        d,
    )
}

pub(super) fn task_list(reply: &mut Map<String, Value>, d: Dialect, tasks: &[Task]) {
    put(reply, d, "task_list", "taskList", |d| Value::Array(tasks.iter().map(|t| task_data(t, d)).collect()));
}

pub(super) fn schedule_cfg(t: &TaskTypeSettings, d: Dialect) -> Value {
    // The first back-off of our policy: 1 s when progressive, |max| when uniform.
    let retry_interval = match t.max_retry_interval {
        n if n > 0 => 1,
        n => n.abs(),
    };
    keyed(
        json!({
            "task_type": t.task_type,
            "schedule_limit": t.schedule_limit,
            "schedule_interval": t.schedule_interval.ceil() as i64,
            "max_processing_time": t.max_processing_time,
            "max_retry_num": t.max_retry_num,
            "retry_interval": retry_interval,
            "max_retry_interval": t.max_retry_interval,
            "create_time": rfc3339(t.created_at),
            "modify_time": rfc3339(t.updated_at),
        }),
        d,
    )
}

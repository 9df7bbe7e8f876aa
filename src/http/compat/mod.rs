//! Compatibility endpoints for workers and clients written for the original asyncflow server,
//! "flowsvr": a JSON-over-HTTP protocol of nine operations (create, hold, set, get and list tasks,
//! read the type settings, register a type, count a type's tasks, ping), every reply wrapped in a
//! `{code, msg}` envelope and every task carried as one `TaskData` record. Its clients came in
//! three generations, called G1, G2 and G3 below: G1 and G2 call the routes at the root with
//! camelCase keys (G2 sends set_task as `{"taskId", "TaskData": {...}}`), G3 calls them under
//! `/v1` with snake_case keys. An old Go or Java worker pointed at this server runs unchanged
//! (the C++ port parses replies with protobuf's strict JSON parser, which refuses keys its
//! messages lack, such as `priority`, so it needs `ignore_unknown_fields`). Every operation goes
//! through the same SQL API as the rest of the crate (`create_task`, `claim_tasks`,
//! `report_tasks`, ...): there is no second implementation.
//!
//! ```text
//!   POST create_task   -> asyncflow.create_task        GET get_task            -> asyncflow.get_task
//!   POST hold_tasks    -> asyncflow.claim_tasks        GET get_task_list       -> asyncflow.list_tasks
//!   POST set_task      -> asyncflow.report_tasks       GET get_task_schedule_cfg_list -> task types
//!   POST register_task -> asyncflow.register_task_type GET get_task_counts_by_type, GET ping
//! ```
//!
//! Every route is served at the root (`/create_task`, G1/G2) and under `/v1` (`/v1/create_task`,
//! G3), for GET and POST alike (the C++ port POSTs everything), behind the same bearer token as
//! the rest of the API when tokens are configured.
//!
//! # Dialects
//! Input keys are matched without regard to case or underscores, so snake_case (`task_data`,
//! `task_id`, `task_type`, `crt_retry_num`, ...), camelCase (`taskData`, `taskId`, ...) and the G2
//! set_task shape `{"taskId", "TaskData": {...}}` are all read; when both spellings are sent, the
//! snake_case one wins. Parameters come from the query string and from a JSON object body: with a
//! JSON Content-Type the body must parse and wins; without one (the Go worker's hold_tasks) the
//! query string wins and a body that is not JSON is ignored. set_task and create_task also take the
//! task fields flat at the top level (the C++ port's shape).
//! Replies use the request's dialect: snake_case when any key carried an underscore, camelCase
//! when any carried a capital, and both key sets when the request showed neither (ping, the
//! config list). get_task always answers with both `taskData` and `task_data`, because the G3
//! client asks with `taskId` but reads `task_data`.
//!
//! # The TaskData mapping
//! `status` is 1 pending, 2 running, 3 succeeded, 4 failed, 5 cancelled (5 is never handed out by
//! hold). `task_id` is our opaque id. `context` is a string on the wire: a string holding a JSON
//! object is stored as that object; any other text is stored as `{"flowsvr_context_text": text}`
//! and handed back verbatim. A succeeded task shows its result as its context. `crt_retry_num`
//! is the number of failed tries of the current stage (for a running task `attempt - 1`, which is
//! exactly the count an old worker compares with `max_retry_num`). `order_time` is unix seconds
//! of the real, persisted sort key; `create_time`/`modify_time` are RFC 3339. `schedule_log` is
//! our log rendered in the original shape `{"LastData": {TraceId, ErrMsg, Cost, ...},
//! "HistoryDatas": [up to 3]}` ("" when empty). `claim_seq` (`claimSeq`) is added: the fencing
//! token of the current claim.
//!
//! # The envelope and codes
//! Every reply is HTTP 200 with `{"code", "msg", ...}`: `code 0`, `msg "ok"` on success, and on
//! failure the original 80xx code with its original text followed by `": "` and what was wrong
//! (a real failure never answers code 0). 8020 input invalid (missing type or id, bad status,
//! priority outside 0..=31,104,000, invalid names, oversize context), 8021 unreadable JSON or
//! query, 8035 unknown task, 8037 create failed, 8038 hold or list failed, 8039 unknown task type
//! ("get task cfg failed"), 8041 set_task refused, 8045 config list failed, 8046 count failed,
//! 8047 register failed. Database trouble is logged and answered with the code's text only, never
//! database text. limit 0 means 2000 and larger limits are cut to 2000.
//!
//! # The set_task rule
//! hold_tasks claims with `asyncflow.claim_tasks` (FOR UPDATE SKIP LOCKED, atomic) under the owner
//! [`COMPAT_OWNER`], so the claim starts a lease and gets a fencing token (`claim_seq`), like any
//! other. A set_task report is applied through `asyncflow.report_tasks`, fenced by that owner and
//! a claim_seq:
//! * with a token (`claim_seq` in the task data or at the top level), only to that claim;
//! * without one (old workers), only while the task is **running under a hold_tasks claim**
//!   (status 2, owner [`COMPAT_OWNER`]), and then to the claim it is under at that moment, read
//!   and fenced in one step, so a concurrent rescue or re-claim makes the report fail instead of
//!   landing on the new claim;
//! * never to a pending task (also one the rescuer took back from a silent worker), a task held
//!   by a native worker, or a finished task (succeeded, failed, cancelled: immutable).
//!
//! A refused report answers 8041 and changes nothing. What remains open without a token: a report
//! that arrives after its task was rescued *and* held again by another old worker is taken for
//! the new claim's report; workers that send `claim_seq` are immune.
//!
//! What an accepted report does, by the reported status:
//! * 3: succeeded, the reported context (or the current one) as the result;
//! * 4: failed for good, the error taken from the reported schedule_log's `LastData.ErrMsg`;
//! * 1 with `crt_retry_num` above the handed-out count: a failed try, retried per the type's
//!   policy at `now + backoff` (the worker's own order_time and retry interval are ignored) or
//!   failed when out of tries;
//! * (a failed try, 4 or the line above, keeps the context it was held with: only a stage that
//!   ends well hands a new context on);
//! * 1 with a new `task_stage`: advance, pending at `now - priority` with the new context;
//! * 1 with the same stage and an `order_time` in the future: check again then (`later`);
//! * 1 otherwise: pending again at the same stage at `now - priority`;
//! * 2 or no status: a heartbeat (the lease is extended); changing stage or context needs status 1.
//!
//! Fields our model keeps fixed are accepted and ignored: priority (checked), user_id,
//! max_retry_num, max_retry_interval (the type's policy rules), and the client's schedule_log.
//! On create, a client `task_id` is an idempotency key (the reply carries our id), the client's
//! status and retry settings are ignored, and a task without `task_stage` starts at the type's
//! `initial_stage`.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use chrono::Utc;
use serde_json::{json, Map, Value};

mod wire;

use wire::*;

use super::AppState;
use crate::db::api::{self, TaskFilter};
use crate::error::{echo, shorten, Error};
use crate::function::LATER_MAX_SECS;
use crate::ids::{TaskId, TypeName, WorkerId};
use crate::task::{NewTask, Report, ReportKind, Task, TaskStatus};
use crate::task_type::TaskTypeUpdate;

/// The owner hold_tasks stamps on its claims; set_task without a token applies only to these.
pub const COMPAT_OWNER: &str = "flowsvr-compat";
/// The key under which a context that is not a JSON object is kept.
const TEXT_KEY: &str = "flowsvr_context_text";
/// The original default and cap of a hold or list.
const LIMIT_DEFAULT: i64 = 2000;
const PRIORITY_MAX: i64 = 31_104_000;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Endpoint {
    CreateTask,
    HoldTasks,
    SetTask,
    GetTask,
    GetTaskList,
    GetTaskScheduleCfgList,
    RegisterTask,
    GetTaskCountsByType,
    Ping,
}

/// Each endpoint's path and the code of a failure that is not the client's fault.
const ENDPOINTS: [(Endpoint, &str, i32); 9] = [
    (Endpoint::CreateTask, "create_task", 8037),
    (Endpoint::HoldTasks, "hold_tasks", 8038),
    (Endpoint::SetTask, "set_task", 8041),
    (Endpoint::GetTask, "get_task", 8035),
    (Endpoint::GetTaskList, "get_task_list", 8038),
    (Endpoint::GetTaskScheduleCfgList, "get_task_schedule_cfg_list", 8045),
    (Endpoint::RegisterTask, "register_task", 8047),
    (Endpoint::GetTaskCountsByType, "get_task_counts_by_type", 8046),
    (Endpoint::Ping, "ping", 8035),
];

pub(super) fn routes() -> Router<AppState> {
    let mut router = Router::new();
    for route in ENDPOINTS {
        let handler = move |s, h, u, b| serve(s, h, u, b, route);
        let method = get(handler).post(handler);
        router = router.route(&format!("/{}", route.1), method.clone()).route(&format!("/v1/{}", route.1), method);
    }
    router
}

/// The original text of a code.
fn code_text(code: i32) -> &'static str {
    match code {
        0 => "ok",
        8020 => "input invalid",
        8021 => "should bind failed",
        8035 => "get task info failed",
        8037 => "create task failed",
        8038 => "get task list from db failed",
        8039 => "get task cfg failed",
        8041 => "set task failed",
        8045 => "get task cfg failed",
        8046 => "get task count from db failed",
        8047 => "register task create new table failed",
        _ => "unknown error code",
    }
}

/// Why a request failed: an 80xx code with what was wrong, or an error from below.
#[derive(Debug)]
enum Failure {
    Code(i32, String),
    Db(Error),
}

impl Failure {
    fn input(detail: impl Into<String>) -> Self {
        Failure::Code(8020, detail.into())
    }

    fn bind(detail: impl Into<String>) -> Self {
        Failure::Code(8021, detail.into())
    }

    /// (code, msg) for the reply; server trouble is logged and not described.
    fn code_and_msg(self, (_, path, failure_code): (Endpoint, &str, i32)) -> (i32, String) {
        match self {
            Failure::Code(code, detail) => (code, format!("{}: {}", code_text(code), shorten(&detail))),
            Failure::Db(e) => {
                let code = match &e {
                    Error::UnknownTaskType(_) => 8039,
                    Error::UnknownTask(_) => 8035,
                    Error::StaleFence(_) => 8041,
                    Error::InvalidTypeName(_)
                    | Error::PriorityOutOfRange(_)
                    | Error::ContextTooLarge(_)
                    | Error::InvalidArgument(_) => 8020,
                    _ => failure_code,
                };
                if e.is_client_error() {
                    let text = e.to_string();
                    let text = shorten(&text);
                    (code, format!("{}: {}", code_text(code), text.strip_prefix("tasks[0]: ").unwrap_or(&text)))
                } else {
                    tracing::error!(error = %e, endpoint = path, "compat request failed");
                    (code, format!("{}; see the server log", code_text(code)))
                }
            }
        }
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Failure::Db(e)
    }
}

impl From<deadpool_postgres::PoolError> for Failure {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        Failure::Db(Error::from(e))
    }
}

type Outcome = Result<Map<String, Value>, Failure>;

async fn serve(
    State(state): State<AppState>,
    headers: HeaderMap,
    uri: Uri,
    body: Result<Bytes, BytesRejection>,
    route: (Endpoint, &'static str, i32),
) -> Response {
    let outcome = match Input::read(&headers, &uri, body) {
        Err(f) => Err(f),
        Ok(input) => match route.0 {
            Endpoint::CreateTask => create_task(&state, &input).await,
            Endpoint::HoldTasks => hold_tasks(&state, &input).await,
            Endpoint::SetTask => set_task(&state, &input).await,
            Endpoint::GetTask => get_task(&state, &input).await,
            Endpoint::GetTaskList => get_task_list(&state, &input).await,
            Endpoint::GetTaskScheduleCfgList => get_task_schedule_cfg_list(&state, &input).await,
            Endpoint::RegisterTask => register_task(&state, &input).await,
            Endpoint::GetTaskCountsByType => get_task_counts_by_type(&state, &input).await,
            Endpoint::Ping => Ok(Map::from_iter([("message".to_string(), json!("pong"))])),
        },
    };
    let (code, msg, mut reply) = match outcome {
        Ok(fields) => (0, "ok".to_string(), fields),
        Err(f) => {
            let (code, msg) = f.code_and_msg(route);
            (code, msg, Map::new())
        }
    };
    reply.insert("code".into(), json!(code));
    reply.insert("msg".into(), json!(msg));
    (StatusCode::OK, Json(Value::Object(reply))).into_response()
}

// ---------------------------------------------------------------------------------------------
// Endpoints

async fn create_task(state: &AppState, input: &Input) -> Outcome {
    let data = input.task_data()?;
    let task_type = required(text(find(&data, "task_type"), "task_type")?, "task_type")?;
    let task = NewTask {
        context: Some(context_in(find(&data, "context")).unwrap_or_else(|| json!({}))),
        priority: priority(find(&data, "priority"))?,
        run_at: None,
        stage: text(find(&data, "task_stage"), "task_stage")?,
        idempotency_key: text(find(&data, "task_id"), "task_id")?,
        user_id: text(find(&data, "user_id"), "user_id")?,
        // the original protocol has no queues, no uniqueness windows
        queue_key: None,
        unique_key: None,
        unique_for: None,
        traceparent: None,
        debounce_key: None,
        debounce_for: None,
    };
    let id = api::create_task(&state.pool.get().await?, &task_type, &task).await?;
    let mut reply = Map::new();
    put(&mut reply, input.dialect, "task_id", "taskId", |_| json!(id));
    Ok(reply)
}

async fn hold_tasks(state: &AppState, input: &Input) -> Outcome {
    let task_type = required(text(input.get("task_type"), "task_type")?, "task_type")?;
    let limit = limit(input)? as i32;
    let owner = WorkerId::new(COMPAT_OWNER)?;
    let mut c = state.pool.get().await?;
    // Claim and read in one transaction: what is handed out is exactly what was claimed.
    let tx = c.transaction().await.map_err(Error::from_db)?;
    let claimed = api::claim_tasks(&tx, &task_type, &owner, limit, None).await?;
    let ids: Vec<TaskId> = claimed.into_iter().map(|t| t.task_id).collect();
    let tasks = api::get_tasks(&tx, &ids).await?;
    tx.commit().await.map_err(Error::from_db)?;
    let mut reply = Map::new();
    task_list(&mut reply, input.dialect, &tasks);
    Ok(reply)
}

/// What an old worker reported in set_task.
struct SetReport {
    status: i64,
    stage: Option<String>,
    context: Option<Value>,
    crt_retry_num: Option<i64>,
    order_time: Option<i64>,
    schedule_log: Option<String>,
}

/// The report_tasks outcome for an old worker's report (see the module doc).
fn decide(task: &Task, r: SetReport, now: i64) -> Result<ReportKind, Failure> {
    let error =
        || reported_error(r.schedule_log.as_deref()).unwrap_or_else(|| "failed (reported by a flowsvr worker)".into());
    let new_stage = r.stage.clone().filter(|s| *s != task.stage);
    Ok(match r.status {
        3 => ReportKind::Succeed { result: r.context.unwrap_or_else(|| task.context.clone()) },
        4 => ReportKind::Fail { error: error(), retry: false },
        1 if r.crt_retry_num.is_some_and(|n| n > i64::from(crt_retry_num(task))) => {
            ReportKind::Fail { error: error(), retry: true }
        }
        1 => match (new_stage, r.order_time) {
            (Some(stage), _) => ReportKind::Advance { stage, context: r.context },
            (None, Some(at)) if at > now => {
                if at - now > LATER_MAX_SECS {
                    return Err(Failure::input(format!("order_time is more than {LATER_MAX_SECS} seconds ahead")));
                }
                ReportKind::Later { delay: (at - now) as f64, context: r.context }
            }
            (None, _) => ReportKind::Advance { stage: task.stage.clone(), context: r.context },
        },
        _ => {
            if new_stage.is_some() || r.context.as_ref().is_some_and(|c| *c != task.context) {
                return Err(Failure::input(
                    "status 2 (processing) keeps the task as it is; report status 1 to change its stage or context",
                ));
            }
            ReportKind::Heartbeat
        }
    })
}

async fn set_task(state: &AppState, input: &Input) -> Outcome {
    let data = input.task_data()?;
    let id = text(find(&data, "task_id"), "task_id")?.or(text(input.get("task_id"), "task_id")?);
    let id = required(id, "task_id")?;
    priority(find(&data, "priority"))?;
    let status = int(find(&data, "status"), "status")?.unwrap_or(0);
    if !(0..=4).contains(&status) {
        return Err(Failure::input(format!(
            "status must be 1 (pending), 2 (processing), 3 (success) or 4 (failed), got {status}"
        )));
    }
    let report = SetReport {
        status,
        stage: text(find(&data, "task_stage"), "task_stage")?,
        context: context_in(find(&data, "context")),
        crt_retry_num: int(find(&data, "crt_retry_num"), "crt_retry_num")?,
        order_time: int(find(&data, "order_time"), "order_time")?,
        schedule_log: text(find(&data, "schedule_log"), "schedule_log")?,
    };
    let token = int(find(&data, "claim_seq").or(input.get("claim_seq")), "claim_seq")?;

    let c = state.pool.get().await?;
    let task =
        api::get_task(&c, &id).await?.ok_or_else(|| Failure::Code(8035, format!("unknown task {}", echo(&id))))?;
    let now_status = |t: &Task| format!("{:?}", t.status).to_lowercase();
    if task.status.is_final() {
        return Err(Failure::Code(8041, format!("task {id} is {}: a finished task never changes", now_status(&task))));
    }
    let claim_seq = match token {
        Some(seq) => seq,
        None if task.status == TaskStatus::Running && task.owner.as_deref() == Some(COMPAT_OWNER) => task.claim_seq,
        None => {
            return Err(Failure::Code(
                8041,
                format!(
                    "task {id} is {} and not held through hold_tasks: only a held task takes reports",
                    now_status(&task)
                ),
            ))
        }
    };
    let kind = decide(&task, report, Utc::now().timestamp())?;
    let owner = WorkerId::new(COMPAT_OWNER)?;
    let report = Report::new(task.id.clone(), claim_seq, kind);
    match api::report_tasks(&c, &owner, &[report], None).await?.into_iter().next() {
        Some(r) if r.accepted => Ok(Map::new()),
        Some(r) => Err(Failure::Code(
            8041,
            format!(
                "task {id} is no longer held under claim_seq {claim_seq} (now {}); nothing changed",
                r.status.map(|s| format!("{s:?}").to_lowercase()).unwrap_or_else(|| "gone".into())
            ),
        )),
        None => Err(Failure::Code(8035, format!("unknown task {}", echo(&id)))),
    }
}

async fn get_task(state: &AppState, input: &Input) -> Outcome {
    let id = required(text(input.get("task_id"), "task_id")?, "task_id")?;
    let task = api::get_task(&state.pool.get().await?, &id)
        .await?
        .ok_or_else(|| Failure::Code(8035, format!("unknown task {}", echo(&id))))?;
    let mut reply = Map::new();
    // Both keys always: G3 clients ask with taskId and read task_data.
    put(&mut reply, Dialect::Both, "task_data", "taskData", |d| task_data(&task, d));
    Ok(reply)
}

/// A type named by the request that must exist: invalid names are 8020, unknown ones 8039.
async fn known_type<C: crate::db::GenericClient>(c: &C, input: &Input) -> Result<TypeName, Failure> {
    let name = TypeName::new(&required(text(input.get("task_type"), "task_type")?, "task_type")?)?;
    if api::positions_of(c, name.as_str()).await?.is_none() {
        return Err(Failure::Code(8039, format!("unknown task type {:?}", name.as_str())));
    }
    Ok(name)
}

async fn get_task_list(state: &AppState, input: &Input) -> Outcome {
    let c = state.pool.get().await?;
    let code = int(input.get("status"), "status")?.unwrap_or(0);
    let status = status_of(code).ok_or_else(|| {
        Failure::input(format!(
            "status must be 1 (pending), 2 (processing), 3 (success), 4 (failed) or 5 (cancelled), got {code}"
        ))
    })?;
    let limit = limit(input)?;
    let name = known_type(&c, input).await?;
    // list_tasks pages hold at most 1000; follow the pages up to the limit.
    let mut tasks: Vec<Task> = Vec::new();
    while (tasks.len() as i64) < limit {
        let page_size = (limit - tasks.len() as i64).min(1000) as i32;
        let filter = TaskFilter {
            task_type: Some(name.to_string()),
            status: Some(status),
            limit: Some(page_size),
            after: tasks.last().map(|t| t.id.to_string()),
            // the original server's order
            order: Some(api::TaskOrder::Oldest),
            ..Default::default()
        };
        let page = api::list_tasks(&c, &filter).await?;
        let full = page.len() as i32 == page_size;
        tasks.extend(page);
        if !full {
            break;
        }
    }
    let mut reply = Map::new();
    task_list(&mut reply, input.dialect, &tasks);
    Ok(reply)
}

async fn get_task_schedule_cfg_list(state: &AppState, input: &Input) -> Outcome {
    let types = api::list_task_types(&state.pool.get().await?).await?;
    let mut reply = Map::new();
    put(&mut reply, input.dialect, "task_schedule_cfg_list", "scheduleCfgList", |d| {
        Value::Array(types.iter().map(|t| schedule_cfg(t, d)).collect())
    });
    Ok(reply)
}

async fn register_task(state: &AppState, input: &Input) -> Outcome {
    if let Some(why) = &input.unread_body {
        return Err(Failure::bind(why.clone()));
    }
    let name = TypeName::new(&required(text(input.get("task_type"), "task_type")?, "task_type")?)?;
    let settings = TaskTypeUpdate {
        schedule_limit: int32(input.get("schedule_limit"), "schedule_limit")?,
        schedule_interval: number(input.get("schedule_interval"), "schedule_interval")?,
        max_processing_time: int32(input.get("max_processing_time"), "max_processing_time")?,
        max_retry_num: int32(input.get("max_retry_num"), "max_retry_num")?,
        max_retry_interval: int32(input.get("max_retry_interval"), "max_retry_interval")?,
        ..Default::default()
    };
    api::register_task_type(&state.pool.get().await?, &name, &settings).await?;
    Ok(Map::new())
}

async fn get_task_counts_by_type(state: &AppState, input: &Input) -> Outcome {
    let c = state.pool.get().await?;
    let name = known_type(&c, input).await?;
    let total: i64 = api::count_by_status(&c, name.as_str()).await?.iter().map(|(_, n)| n).sum();
    // G3's client reads `counts`, its documentation says `task_count`: both.
    Ok(Map::from_iter([("counts".to_string(), json!(total)), ("task_count".to_string(), json!(total))]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contexts_round_trip_as_wire_strings() {
        assert_eq!(context_in(Some(&json!("{\"a\":1}"))), Some(json!({"a": 1})));
        assert_eq!(context_in(Some(&json!(""))), None);
        let text = context_in(Some(&json!("plain words"))).unwrap_or_default();
        assert_eq!(context_out(&text), "plain words");
        assert_eq!(context_out(&json!({"a": 1})), "{\"a\":1}");
        let list = context_in(Some(&json!("[1,2]"))).unwrap_or_default();
        assert_eq!(context_out(&list), "[1,2]");
    }

    #[test]
    fn keys_match_across_dialects_and_snake_wins() {
        let m: Map<String, Value> = serde_json::from_value(json!({"taskId": "c", "task_id": "s"})).unwrap_or_default();
        assert_eq!(find(&m, "task_id"), Some(&json!("s")));
        let m: Map<String, Value> = serde_json::from_value(json!({"TaskData": {}})).unwrap_or_default();
        assert!(find(&m, "task_data").is_some());
        assert_eq!(camel("crt_retry_num"), "crtRetryNum");
        assert_eq!(reported_error(Some(r#"{"LastData":{"ErrMsg":"boom"}}"#)), Some("boom".into()));
        assert_eq!(reported_error(Some(r#"{"lastData":{"errMsg":"x"}}"#)), Some("x".into()));
        assert_eq!(reported_error(Some("garbage")), None);
    }
}

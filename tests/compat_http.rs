//! The flowsvr compatibility endpoints (src/http/compat/) against a real database: both key
//! dialects, root and /v1 paths, the code/msg envelope with 80xx codes, atomic hold with a
//! persisted order_time, the set_task rule (held tasks only, finished tasks immutable), and auth.
use crate::common;

use std::collections::HashSet;

use asyncflow::http::router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use chrono::Utc;
use common::{http_config, request, TestDb};
use serde_json::{json, Value};
use tower::ServiceExt;

const TOKEN: &str = "compat-token-0123456789";

struct Api {
    app: axum::Router,
    token: Option<&'static str>,
}

impl Api {
    fn new(db: &TestDb, tokens: &[&'static str]) -> Api {
        Api { app: router(db.pool.clone(), &http_config(tokens, 64 * 1024)), token: tokens.first().copied() }
    }

    /// A business call: must answer HTTP 200 with the envelope; returns the body.
    async fn call(&self, method: &str, uri: &str, body: Option<Value>) -> Value {
        let (status, v) =
            self.raw(method, uri, body.map(|b| b.to_string()), Some("application/json"), self.token).await;
        assert_eq!(status, StatusCode::OK, "{method} {uri}: {v}");
        assert!(v["code"].is_i64() && v["msg"].is_string(), "{method} {uri}: no envelope in {v}");
        v
    }

    /// A call that must succeed (code 0).
    async fn ok(&self, method: &str, uri: &str, body: Option<Value>) -> Value {
        let v = self.call(method, uri, body).await;
        assert_eq!((v["code"].clone(), v["msg"].clone()), (json!(0), json!("ok")), "{method} {uri}: {v}");
        v
    }

    async fn raw(
        &self,
        method: &str,
        uri: &str,
        body: Option<String>,
        content_type: Option<&str>,
        token: Option<&str>,
    ) -> (StatusCode, Value) {
        let (status, _, bytes) = request(&self.app, method, uri, body, content_type, token).await;
        let value = serde_json::from_slice(&bytes).unwrap_or_else(|_| json!({"raw": String::from_utf8_lossy(&bytes)}));
        (status, value)
    }

    async fn register(&self, body: Value) {
        self.ok("POST", "/v1/register_task", Some(body)).await;
    }

    async fn create(&self, task_type: &str, stage: &str, priority: i64) -> String {
        let v = self
            .ok(
                "POST",
                "/v1/create_task",
                Some(json!({"task_data": {"task_type": task_type, "task_stage": stage, "priority": priority,
                                          "context": "{\"n\":1}"}})),
            )
            .await;
        v["task_id"].as_str().unwrap().to_string()
    }

    async fn task(&self, id: &str) -> Value {
        self.ok("GET", &format!("/v1/get_task?task_id={id}"), None).await["task_data"].clone()
    }

    async fn hold(&self, task_type: &str, limit: i64) -> Vec<Value> {
        let v = self.ok("POST", "/v1/hold_tasks", Some(json!({"task_type": task_type, "limit": limit}))).await;
        v["task_list"].as_array().unwrap().clone()
    }

    async fn set(&self, task_data: Value) -> Value {
        self.call("POST", "/v1/set_task", Some(json!({ "task_data": task_data }))).await
    }
}

fn now() -> i64 {
    Utc::now().timestamp()
}

#[tokio::test]
async fn create_task_in_both_dialects_then_get_task_returns_the_documented_fields() {
    let db = TestDb::new().await;
    let api = Api::new(&db, &[]);
    api.register(json!({"task_type": "lark", "max_retry_num": 3, "max_retry_interval": 10})).await;

    let before = now();
    // G1/G2: root path, camelCase, client retry settings and status ignored.
    let camel = api
        .ok(
            "POST",
            "/create_task",
            Some(json!({"taskData": {"taskType": "lark", "userId": "u1", "taskStage": "sendmsg",
                                     "context": "{\"Msg\":\"hi\"}", "priority": 30, "maxRetryNum": 99, "status": 3}})),
        )
        .await;
    let camel_id = camel["taskId"].as_str().expect("camel reply carries taskId").to_string();
    assert!(camel.get("task_id").is_none(), "a camelCase request gets a camelCase reply: {camel}");
    // G3: /v1, snake_case, a context that is not JSON.
    let snake = api
        .ok("POST", "/v1/create_task", Some(json!({"task_data": {"task_type": "lark", "context": "plain words"}})))
        .await;
    let snake_id = snake["task_id"].as_str().expect("snake reply carries task_id").to_string();
    assert!(snake.get("taskId").is_none(), "{snake}");

    // G3 clients ask with taskId and read task_data: get_task answers both keys.
    let got = api.ok("GET", &format!("/get_task?taskId={camel_id}"), None).await;
    let (c, s) = (&got["taskData"], &got["task_data"]);
    assert_eq!(c["taskId"], camel_id.as_str());
    assert_eq!(s["task_id"], camel_id.as_str());
    assert_eq!(s["task_type"], "lark");
    assert_eq!(s["task_stage"], "sendmsg");
    assert_eq!(s["user_id"], "u1");
    assert_eq!(s["status"], 1, "pending, whatever status the client sent");
    assert_eq!(s["priority"], 30);
    assert_eq!(s["crt_retry_num"], 0);
    assert_eq!(s["max_retry_num"], 3, "from the type, not the client");
    assert_eq!(s["max_retry_interval"], 10);
    assert_eq!(s["context"], "{\"Msg\":\"hi\"}");
    assert_eq!(s["schedule_log"], "");
    let order_time = s["order_time"].as_i64().unwrap();
    assert!((before - 31..=now() - 29).contains(&order_time), "order_time = now - priority, got {order_time}");
    assert_eq!(c["orderTime"], order_time, "the camel object carries the same values");
    for key in ["create_time", "modify_time"] {
        let t = s[key].as_str().unwrap();
        assert!(chrono::DateTime::parse_from_rfc3339(t).is_ok(), "{key} is RFC 3339: {t}");
    }

    let plain = api.task(&snake_id).await;
    assert_eq!(plain["context"], "plain words", "non-JSON text comes back verbatim");
    assert_eq!(plain["task_stage"], "start", "no stage: the type's initial_stage");

    // A client-supplied task_id is an idempotency key.
    let first = api
        .ok("POST", "/v1/create_task", Some(json!({"task_data": {"task_type": "lark", "task_id": "client-7"}})))
        .await;
    let again =
        api.ok("POST", "/create_task", Some(json!({"taskData": {"taskType": "lark", "taskId": "client-7"}}))).await;
    assert_eq!(first["task_id"], again["taskId"]);
    let counts = api.ok("GET", "/v1/get_task_counts_by_type?task_type=lark", None).await;
    assert_eq!(counts["counts"], 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hold_tasks_claims_atomically_and_in_persisted_order_time_order() {
    let db = TestDb::new().await;
    let api = Api::new(&db, &[]);
    api.register(json!({"task_type": "crawl", "schedule_limit": 1000})).await;

    // order_time = now - priority is persisted: the highest priority comes first.
    let low = api.create("crawl", "fetch", 0).await;
    let high = api.create("crawl", "fetch", 100).await;
    let mid = api.create("crawl", "fetch", 50).await;
    let held = api.hold("crawl", 1).await;
    assert_eq!(held.len(), 1);
    assert_eq!(held[0]["task_id"], high.as_str());
    assert_eq!(held[0]["status"], 2, "held tasks are processing");
    assert_eq!(held[0]["task_stage"], "fetch");
    assert_eq!(held[0]["context"], "{\"n\":1}");
    let ot = held[0]["order_time"].as_i64().unwrap();
    assert!((now() - 102..=now() - 98).contains(&ot), "order_time {ot}");
    // The Go worker: POST, parameters in the query string, no Content-Type, a body it ignores.
    let (status, go) = api.raw("POST", "/hold_tasks?task_type=crawl&limit=1", Some("junk".into()), None, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(go["code"], 0, "{go}");
    assert_eq!(go["task_list"][0]["task_id"], mid.as_str(), "snake query keys, snake reply: {go}");
    // limit 0 means the default: everything left.
    let rest = api.ok("POST", "/hold_tasks", Some(json!({"taskType": "crawl", "limit": 0}))).await;
    assert_eq!(rest["taskList"][0]["taskId"], low.as_str(), "camel request, camel reply");
    assert!(api.hold("crawl", 10).await.is_empty());

    // Four concurrent holds over 60 tasks never hand out the same task twice.
    for _ in 0..60 {
        api.create("crawl", "fetch", 0).await;
    }
    let holds = (0..4).map(|_| api.hold("crawl", 20));
    let results = futures::future::join_all(holds).await;
    let mut seen = HashSet::new();
    let mut total = 0;
    for list in &results {
        assert!(list.len() <= 20);
        for t in list {
            total += 1;
            assert!(seen.insert(t["task_id"].as_str().unwrap().to_string()), "{} held twice", t["task_id"]);
        }
    }
    assert_eq!(total, 60, "every ready task was held exactly once");
}

#[tokio::test]
async fn set_task_advances_succeeds_and_fails_with_backoff_and_finished_tasks_never_change() {
    let db = TestDb::new().await;
    let api = Api::new(&db, &[]);
    // Uniform 30 s back-off, 2 retries per stage.
    api.register(json!({"task_type": "lark", "max_retry_num": 2, "max_retry_interval": -30})).await;
    let id = api.create("lark", "sendmsg", 0).await;

    // A pending task that nobody held takes no report.
    let refused = api.set(json!({"task_id": id, "task_stage": "record", "status": 1})).await;
    assert_eq!(refused["code"], 8041, "{refused}");
    assert_eq!(api.task(&id).await["task_stage"], "sendmsg");

    // Advance: status 1 with a new stage and context; back in the queue at now - priority.
    let held = api.hold("lark", 10).await;
    assert_eq!(held[0]["crt_retry_num"], 0);
    let v = api
        .set(json!({"task_id": id, "task_type": "lark", "task_stage": "record", "status": 1,
                    "context": "{\"sent\":true}", "crt_retry_num": 0, "order_time": now(), "schedule_log": ""}))
        .await;
    assert_eq!(v["code"], 0, "{v}");
    let t = api.task(&id).await;
    assert_eq!((t["status"].clone(), t["task_stage"].clone()), (json!(1), json!("record")));
    assert_eq!(t["context"], "{\"sent\":true}");
    assert!(t["order_time"].as_i64().unwrap() <= now());

    // Failure with retry: the worker raises crt_retry_num; our back-off moves order_time.
    let held = api.hold("lark", 10).await;
    assert_eq!(held[0]["task_stage"], "record");
    let before = now();
    let log = json!({"LastData": {"TraceId": "t1", "ErrMsg": "boom", "Cost": "3ms"}, "HistoryDatas": []});
    let v = api
        .set(json!({"task_id": id, "task_stage": "record", "status": 1, "crt_retry_num": 1,
                    "order_time": now() + 10, "schedule_log": log.to_string()}))
        .await;
    assert_eq!(v["code"], 0, "{v}");
    let t = api.task(&id).await;
    assert_eq!((t["status"].clone(), t["crt_retry_num"].clone()), (json!(1), json!(1)));
    let ot = t["order_time"].as_i64().unwrap();
    assert!(
        (before + 26..=now() + 31).contains(&ot),
        "order_time = now + 30 s back-off (less up to a tenth), got {ot} (now {before})"
    );
    let log: Value = serde_json::from_str(t["schedule_log"].as_str().unwrap()).unwrap();
    assert_eq!(log["LastData"]["ErrMsg"], "boom", "{log}");
    assert_eq!(log["HistoryDatas"].as_array().unwrap().len(), 1);
    assert!(api.hold("lark", 10).await.is_empty(), "not claimable before its order_time");

    // Success, in the G2 shape {"taskId", "TaskData": {...}} at the root path.
    let other = api.create("lark", "sendmsg", 0).await;
    let held = api.hold("lark", 10).await;
    assert_eq!(held[0]["task_id"], other.as_str());
    let v = api
        .ok(
            "POST",
            "/set_task",
            Some(json!({"taskId": other, "TaskData": {"taskStage": "record", "status": 3, "context": "{\"done\":1}"}})),
        )
        .await;
    assert_eq!(v["code"], 0);
    let done = api.task(&other).await;
    assert_eq!((done["status"].clone(), done["context"].clone()), (json!(3), json!("{\"done\":1}")));

    // A finished task is immutable: refused with 8041, nothing changed.
    for report in [
        json!({"task_id": other, "task_stage": "again", "status": 1, "context": "{}"}),
        json!({"task_id": other, "status": 4}),
        json!({"task_id": other, "status": 3, "claim_seq": done["claim_seq"]}),
    ] {
        let v = api.set(report).await;
        assert_eq!(v["code"], 8041, "{v}");
        assert!(v["msg"].as_str().unwrap().contains("succeeded"), "{v}");
    }
    assert_eq!(api.task(&other).await, done, "nothing changed");

    // status 4 fails for good, with the reported error.
    let third = api.create("lark", "sendmsg", 0).await;
    api.hold("lark", 10).await;
    let log = json!({"LastData": {"ErrMsg": "gave up"}}).to_string();
    assert_eq!(api.set(json!({"task_id": third, "status": 4, "schedule_log": log})).await["code"], 0);
    let native = api.app.clone();
    let req = Request::builder().uri(format!("/v1/tasks/{third}")).body(Body::empty()).unwrap();
    let resp = native.oneshot(req).await.unwrap();
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX).await.unwrap();
    let native: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!((native["status"].clone(), native["error"].clone()), (json!("failed"), json!("gave up")));
    assert_eq!(api.set(json!({"task_id": third, "status": 1, "task_stage": "x"})).await["code"], 8041);
}

#[tokio::test]
async fn set_task_is_fenced_by_the_claim_a_token_or_the_hold_stamped() {
    let db = TestDb::new().await;
    let api = Api::new(&db, &[]);
    api.register(json!({"task_type": "lark", "max_processing_time": 30})).await;
    let id = api.create("lark", "sendmsg", 0).await;

    // Rescued meanwhile (the worker went silent past its lease): the late report is refused.
    api.hold("lark", 1).await;
    let c = db.conn().await;
    let rescued =
        asyncflow::db::api::rescue_expired(&c, Some(Utc::now() + chrono::Duration::hours(1)), 100, &[]).await.unwrap();
    assert_eq!(rescued.len(), 1);
    let late = api.set(json!({"task_id": id, "task_stage": "record", "status": 1})).await;
    assert_eq!(late["code"], 8041, "{late}");
    let t = api.task(&id).await;
    assert_eq!((t["status"].clone(), t["task_stage"].clone()), (json!(1), json!("sendmsg")));

    // With a token: the current claim's token is accepted, an older one refused. (The rescued
    // task is due only after its back-off from the moved clock: use a fresh one, claimed twice.)
    let id = api.create("lark", "sendmsg", 0).await;
    let first = api.hold("lark", 1).await[0]["claim_seq"].as_i64().unwrap();
    let v = api.set(json!({"task_id": id, "status": 1, "task_stage": "record"})).await;
    assert_eq!(v["code"], 0, "{v}");
    let held = api.hold("lark", 1).await;
    let seq = held[0]["claim_seq"].as_i64().unwrap();
    assert!(seq > first, "the second claim of the task: a newer token");
    let stale = api.set(json!({"task_id": id, "status": 3, "claim_seq": first})).await;
    assert_eq!(stale["code"], 8041, "{stale}");
    assert!(stale["msg"].as_str().unwrap().contains("claim_seq"), "{stale}");
    let v = api.set(json!({"task_id": id, "status": 2})).await;
    assert_eq!(v["code"], 0, "status 2 is a heartbeat: {v}");
    let v = api.set(json!({"task_id": id, "status": 3, "claim_seq": seq})).await;
    assert_eq!(v["code"], 0, "{v}");
    assert_eq!(api.task(&id).await["status"], 3);

    // A task held by a native worker takes no token-less compat report.
    let native = api.create("lark", "sendmsg", 0).await;
    let worker = asyncflow::ids::WorkerId::new("native-1").unwrap();
    let claimed = asyncflow::db::api::claim_tasks(&c, "lark", &worker, 1, None).await.unwrap();
    assert_eq!(claimed[0].task_id.as_str(), native);
    let v = api.set(json!({"task_id": native, "status": 3})).await;
    assert_eq!(v["code"], 8041, "{v}");
}

#[tokio::test]
async fn get_task_list_filters_by_type_and_status() {
    let db = TestDb::new().await;
    let api = Api::new(&db, &[]);
    api.register(json!({"task_type": "lark"})).await;
    api.register(json!({"task_type": "mail"})).await;
    for _ in 0..3 {
        api.create("lark", "a", 0).await;
    }
    api.create("mail", "a", 0).await;
    let held = api.hold("lark", 1).await;

    let pending = api.ok("GET", "/v1/get_task_list?task_type=lark&status=1&limit=0", None).await;
    let list = pending["task_list"].as_array().unwrap();
    assert_eq!(list.len(), 2);
    assert!(list.iter().all(|t| t["task_type"] == "lark" && t["status"] == 1));
    let running = api.ok("GET", "/get_task_list?taskType=lark&status=2&limit=10", None).await;
    assert_eq!(running["taskList"].as_array().unwrap().len(), 1, "{running}");
    assert_eq!(running["taskList"][0]["taskId"], held[0]["task_id"]);
    let one = api.ok("GET", "/v1/get_task_list?task_type=lark&status=1&limit=1", None).await;
    assert_eq!(one["task_list"].as_array().unwrap().len(), 1);
    let none = api.ok("GET", "/v1/get_task_list?task_type=mail&status=3", None).await;
    assert_eq!(none["task_list"], json!([]));
}

#[tokio::test]
async fn register_task_and_the_schedule_config_list() {
    let db = TestDb::new().await;
    let api = Api::new(&db, &[]);
    api.register(json!({"task_type": "mail", "schedule_limit": 7, "max_retry_num": 4, "max_retry_interval": -20}))
        .await;
    api.ok("POST", "/register_task", Some(json!({"taskType": "lark", "scheduleInterval": 0.5}))).await;
    // Registering again without settings leaves them as they are.
    api.ok("POST", "/v1/register_task?task_type=mail", None).await;

    // No dialect in the request: both key sets.
    let v = api.ok("GET", "/v1/get_task_schedule_cfg_list", None).await;
    let snake = v["task_schedule_cfg_list"].as_array().unwrap();
    let camel = v["scheduleCfgList"].as_array().unwrap();
    assert_eq!((snake.len(), camel.len()), (2, 2));
    let mail = snake.iter().find(|c| c["task_type"] == "mail").unwrap();
    assert_eq!(mail["schedule_limit"], 7);
    assert_eq!(mail["max_retry_num"], 4);
    assert_eq!(mail["retry_interval"], 20);
    assert_eq!(mail["max_retry_interval"], -20);
    assert!(mail["schedule_interval"].is_i64() && mail["max_processing_time"].is_i64(), "{mail}");
    let lark = camel.iter().find(|c| c["taskType"] == "lark").unwrap();
    assert_eq!(lark["scheduleInterval"], 1, "whole seconds, rounded up");
    assert!(lark["createTime"].is_string() && lark["maxRetryInterval"].is_i64(), "{lark}");
    // The C++ port POSTs it.
    let posted = api.ok("POST", "/get_task_schedule_cfg_list", Some(json!({}))).await;
    assert_eq!(posted["scheduleCfgList"].as_array().unwrap().len(), 2);

    let bad = api.call("POST", "/v1/register_task", Some(json!({"task_type": "Bad-Name"}))).await;
    assert_eq!(bad["code"], 8020, "{bad}");
}

#[tokio::test]
async fn counts_and_ping_answer_at_the_root_and_under_v1() {
    let db = TestDb::new().await;
    let api = Api::new(&db, &[]);
    api.register(json!({"task_type": "lark"})).await;
    for _ in 0..3 {
        api.create("lark", "a", 0).await;
    }
    for prefix in ["", "/v1"] {
        let counts = api.ok("GET", &format!("{prefix}/get_task_counts_by_type?task_type=lark"), None).await;
        assert_eq!((counts["counts"].clone(), counts["task_count"].clone()), (json!(3), json!(3)));
        let pong = api.ok("GET", &format!("{prefix}/ping"), None).await;
        assert_eq!(pong["message"], "pong");
    }
    let unknown = api.call("GET", "/v1/get_task_counts_by_type?task_type=nope", None).await;
    assert_eq!(unknown["code"], 8039);
    // Every endpoint exists at both paths and answers the envelope (errors included).
    for path in [
        "create_task",
        "hold_tasks",
        "set_task",
        "get_task",
        "get_task_list",
        "get_task_schedule_cfg_list",
        "register_task",
        "get_task_counts_by_type",
        "ping",
    ] {
        for prefix in ["", "/v1"] {
            api.call("POST", &format!("{prefix}/{path}"), Some(json!({}))).await;
            api.call("GET", &format!("{prefix}/{path}"), None).await;
        }
    }
}

/// (method, uri, body, content type, expected code, words the msg must contain)
type ErrorCase = (&'static str, String, Option<String>, Option<&'static str>, i64, &'static str);

#[tokio::test]
async fn errors_are_http_200_with_80xx_codes_and_never_database_text() {
    let db = TestDb::new().await;
    let api = Api::new(&db, &[]);
    api.register(json!({"task_type": "lark"})).await;
    let id = api.create("lark", "a", 0).await;
    let json_ct = Some("application/json");
    let cases: Vec<ErrorCase> = vec![
        (
            "POST",
            "/create_task".into(),
            // a type nothing registered is registered by the enqueue; a bad name is refused
            Some(json!({"taskData": {"taskType": "No-Pe"}}).to_string()),
            json_ct,
            8020,
            "invalid task type name",
        ),
        ("POST", "/v1/create_task".into(), Some("{not json".into()), json_ct, 8021, "invalid JSON"),
        ("POST", "/v1/create_task".into(), Some("{not json".into()), None, 8021, "invalid JSON"),
        (
            "POST",
            "/v1/create_task".into(),
            Some(json!({"task_data": {"context": "{}"}}).to_string()),
            json_ct,
            8020,
            "task_type is required",
        ),
        (
            "POST",
            "/v1/create_task".into(),
            Some(json!({"task_data": {"task_type": "lark", "priority": -1}}).to_string()),
            json_ct,
            8020,
            "priority",
        ),
        (
            "POST",
            "/v1/create_task".into(),
            Some(json!({"task_data": {"task_type": "lark", "priority": 31_104_001}}).to_string()),
            json_ct,
            8020,
            "priority",
        ),
        (
            "POST",
            "/v1/create_task".into(),
            Some(json!({"task_data": {"task_type": "lark", "task_stage": "a b"}}).to_string()),
            json_ct,
            8020,
            "stage",
        ),
        (
            "POST",
            "/v1/create_task".into(),
            Some(json!({"task_data": {"task_type": "Bad-Type"}}).to_string()),
            json_ct,
            8020,
            "invalid task type name",
        ),
        (
            "POST",
            "/v1/create_task".into(),
            Some(json!({"task_data": {"task_type": "lark", "priority": "soon"}}).to_string()),
            json_ct,
            8021,
            "priority must be an integer",
        ),
        ("POST", "/v1/create_task".into(), Some(json!({"task_data": "x"}).to_string()), json_ct, 8021, "task_data"),
        ("GET", "/v1/get_task".into(), None, None, 8020, "task_id is required"),
        ("GET", "/v1/get_task?task_id=lark-1-999".into(), None, None, 8035, "unknown task"),
        ("GET", "/get_task?taskId=7a58_lark_1".into(), None, None, 8035, "unknown task"),
        ("POST", "/v1/hold_tasks".into(), Some("{}".into()), json_ct, 8020, "task_type is required"),
        ("POST", "/v1/hold_tasks?task_type=nope".into(), None, None, 8039, "unknown task type"),
        ("POST", "/v1/hold_tasks?task_type=lark&limit=-1".into(), None, None, 8020, "limit"),
        ("POST", "/v1/hold_tasks?task_type=lark&limit=abc".into(), None, None, 8021, "limit must be an integer"),
        (
            "POST",
            "/v1/set_task".into(),
            Some(json!({"task_data": {"status": 3}}).to_string()),
            json_ct,
            8020,
            "task_id is required",
        ),
        (
            "POST",
            "/v1/set_task".into(),
            Some(json!({"task_data": {"task_id": id, "status": 7}}).to_string()),
            json_ct,
            8020,
            "status",
        ),
        (
            "POST",
            "/v1/set_task".into(),
            Some(json!({"task_data": {"task_id": id, "status": 1, "priority": -3}}).to_string()),
            json_ct,
            8020,
            "priority",
        ),
        (
            "POST",
            "/v1/set_task".into(),
            Some(json!({"task_data": {"task_id": "lark-1-999", "status": 3}}).to_string()),
            json_ct,
            8035,
            "unknown task",
        ),
        ("GET", "/v1/get_task_list?task_type=lark&status=9".into(), None, None, 8020, "status"),
        ("GET", "/v1/get_task_list?status=1".into(), None, None, 8020, "task_type is required"),
        ("GET", "/v1/get_task_list?task_type=nope&status=1".into(), None, None, 8039, "unknown task type"),
        (
            "POST",
            "/v1/register_task".into(),
            Some(json!({"task_type": "lark", "schedule_limit": 0}).to_string()),
            json_ct,
            8020,
            "schedule_limit",
        ),
        ("POST", "/v1/register_task".into(), Some("{}".into()), json_ct, 8020, "task_type is required"),
        (
            "POST",
            "/v1/create_task".into(),
            Some(json!({"task_data": {"task_type": "lark", "context": "x".repeat(70_000)}}).to_string()),
            json_ct,
            8021,
            "larger",
        ),
    ];
    for (method, uri, body, ct, code, words) in cases {
        let (status, v) = api.raw(method, &uri, body.clone(), ct, None).await;
        assert_eq!(status, StatusCode::OK, "{method} {uri}: {v}");
        assert_eq!(v["code"], code, "{method} {uri} {body:?}: {v}");
        let msg = v["msg"].as_str().unwrap_or_default();
        assert!(msg.contains(words), "{method} {uri}: {msg:?} lacks {words:?}");
        for leak in ["SQLSTATE", "PL/pgSQL", "database error", "ERROR:"] {
            assert!(!msg.contains(leak), "{method} {uri}: {msg:?}");
        }
    }
    // Refused requests changed nothing.
    let list = api.ok("GET", "/v1/get_task_list?task_type=lark&status=1", None).await;
    assert_eq!(list["task_list"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn bearer_tokens_guard_the_compat_routes() {
    let db = TestDb::new().await;
    let api = Api::new(&db, &[TOKEN]);
    let body = Some(json!({"task_type": "lark"}).to_string());
    let json_ct = Some("application/json");
    let (s, _) = api.raw("POST", "/register_task", body.clone(), json_ct, None).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    let (s, _) = api.raw("GET", "/v1/ping", None, None, Some("wrong-token-0123456789")).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    let (s, v) = api.raw("POST", "/register_task", body, json_ct, Some(TOKEN)).await;
    assert_eq!((s, v["code"].clone()), (StatusCode::OK, json!(0)));
    let (s, v) = api.raw("GET", "/v1/ping", None, None, Some(TOKEN)).await;
    assert_eq!((s, v["message"].clone()), (StatusCode::OK, json!("pong")));
}

//! The committed `openapi.json` read by a real JSON Schema 2020-12 validator (the `jsonschema`
//! crate), as a generated client would read it: every schema is a valid 2020-12 schema and
//! compiles with its references resolved against the document, no `allOf` part is closed
//! (`additionalProperties: false` inside an `allOf` refuses the other parts' fields, so the
//! `allOf` matches nothing), the request schemas accept bodies the server takes and refuse ones
//! it refuses, and the server's real answers match their response schemas.
//!
//! tests/openapi.rs checks the document's shape and its agreement with the routes with a small
//! checker of its own; this file checks what that checker cannot: the meaning of `allOf`,
//! `oneOf`, `additionalProperties`, `unevaluatedProperties`, `required` and formats.
use crate::common;

use std::path::PathBuf;

use asyncflow::http::router;
use axum::http::StatusCode;
use common::{http_config, request, TestDb};
use serde_json::{json, Value};

const TOKEN: &str = "test-token-0123456789";
const DRAFT: &str = "https://json-schema.org/draft/2020-12/schema";

fn committed() -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("openapi.json");
    serde_json::from_str(&std::fs::read_to_string(path).expect("openapi.json")).expect("openapi.json is JSON")
}

/// `schema` as a schema document of its own: the 2020-12 dialect, and the document's components
/// beside it, so that its `#/components/schemas/...` references resolve.
fn standalone(doc: &Value, schema: &Value) -> Value {
    let mut root = schema.clone();
    root["$schema"] = json!(DRAFT);
    root["components"] = doc["components"].clone();
    root
}

/// A 2020-12 validator for `schema`, formats (date-time) checked.
fn validator(doc: &Value, schema: &Value) -> jsonschema::Validator {
    jsonschema::draft202012::options()
        .should_validate_formats(true)
        .build(&standalone(doc, schema))
        .unwrap_or_else(|e| panic!("{schema} does not compile: {e}"))
}

fn component(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

/// Every error of `value` against `schema`, as text (empty: valid).
fn errors(doc: &Value, schema: &Value, value: &Value) -> Vec<String> {
    validator(doc, schema).iter_errors(value).map(|e| format!("{}: {e}", e.instance_path())).collect()
}

/// Every (where, schema) of the document: the components, and each operation's request and
/// response schemas.
fn every_schema(doc: &Value) -> Vec<(String, Value)> {
    let mut out = vec![];
    for (name, schema) in doc["components"]["schemas"].as_object().unwrap() {
        out.push((format!("components.schemas.{name}"), schema.clone()));
    }
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            for (media, content) in op["requestBody"]["content"].as_object().into_iter().flatten() {
                out.push((format!("{method} {path} request {media}"), content["schema"].clone()));
            }
            for param in op["parameters"].as_array().into_iter().flatten() {
                out.push((format!("{method} {path} parameter {}", param["name"]), param["schema"].clone()));
            }
            for (status, response) in op["responses"].as_object().unwrap() {
                for (media, content) in response["content"].as_object().into_iter().flatten() {
                    out.push((format!("{method} {path} {status} {media}"), content["schema"].clone()));
                }
            }
        }
    }
    out
}

#[test]
fn every_schema_is_a_valid_2020_12_schema_and_compiles() {
    let doc = committed();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.1"), "OpenAPI 3.1 uses JSON Schema 2020-12");
    let all = every_schema(&doc);
    assert!(all.len() > 80, "found {} schemas", all.len());
    for (at, schema) in &all {
        assert!(schema.is_object(), "{at}: {schema}");
        let root = standalone(&doc, schema);
        if let Err(e) = jsonschema::meta::validate(&root) {
            panic!("{at} is not a valid 2020-12 schema: {e} at {}", e.instance_path());
        }
        validator(&doc, schema);
    }
}

/// Every `allOf` of the document, with its parts resolved.
fn all_ofs<'a>(doc: &'a Value, value: &'a Value, at: &str, out: &mut Vec<(String, Vec<&'a Value>)>) {
    match value {
        Value::Object(map) => {
            if let Some(parts) = map.get("allOf").and_then(Value::as_array) {
                let resolved = parts
                    .iter()
                    .map(|p| match p["$ref"].as_str() {
                        Some(r) => doc.pointer(r.trim_start_matches('#')).unwrap_or_else(|| panic!("{at}: {r}")),
                        None => p,
                    })
                    .collect();
                out.push((at.to_string(), resolved));
            }
            for (k, v) in map {
                all_ofs(doc, v, &format!("{at}/{k}"), out);
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                all_ofs(doc, v, &format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

#[test]
fn no_part_of_an_all_of_is_closed() {
    let doc = committed();
    let mut found = vec![];
    all_ofs(&doc, &doc, "", &mut found);
    for (at, parts) in &found {
        for part in parts {
            assert!(
                part.get("additionalProperties") != Some(&json!(false)),
                "{at}: a part closed with additionalProperties: false refuses the other parts' fields, so the \
                 allOf matches nothing; write one flat object, or close the whole with unevaluatedProperties"
            );
        }
    }
    // what is left of allOf is Report, closed as a whole
    assert_eq!(found.len(), 1, "{:?}", found.iter().map(|f| &f.0).collect::<Vec<_>>());
    assert_eq!(doc["components"]["schemas"]["Report"]["unevaluatedProperties"], json!(false));
}

/// (schema, bodies it must accept, bodies it must refuse).
fn request_examples() -> Vec<(&'static str, Vec<Value>, Vec<Value>)> {
    let task = |extra: Value| {
        let mut r = json!({"task_id": "video-1-7", "claim_seq": 2});
        r.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        r
    };
    vec![
        (
            "CreateTaskRequest",
            vec![
                json!({"type": "video"}),
                json!({"type": "video", "context": {"a": 1}, "priority": 30, "queue_key": "k"}),
                json!({"type": "video", "context": {"x": [1, "two"]}, "priority": null, "run_at": "2030-01-02T03:04:05Z",
                    "stage": "probe", "idempotency_key": "order-1", "user_id": "u1", "queue_key": null}),
            ],
            vec![
                json!({}),
                json!({"type": 5}),
                json!({"priority": 1}),
                json!({"type": "video", "priorty": 1}),
                json!({"type": "video", "priority": "high"}),
                json!({"type": "video", "run_at": "tomorrow"}),
                json!({"type": "video", "context": [1]}),
                json!([{"type": "video"}]),
            ],
        ),
        (
            "CreateTasksRequest",
            vec![
                json!({"type": "video", "tasks": []}),
                json!({"type": "video", "tasks": [{}, {"priority": 5, "context": {"n": 2}, "queue_key": "a"}]}),
            ],
            vec![
                json!({"type": "video"}),
                json!({"tasks": [{}]}),
                json!({"type": "video", "tasks": [{"type": "video"}]}),
                json!({"type": "video", "tasks": [{}], "priority": 1}),
            ],
        ),
        (
            "TaskTypeUpdate",
            vec![
                json!({}),
                json!({"max_retry_num": 3, "max_retry_interval": -10, "max_processing_time": 60,
                    "schedule_interval": 0.5, "schedule_limit": 100, "concurrency": null, "queue_concurrency": 2,
                    "fair_queues": true, "paused": false, "initial_stage": "probe", "retention": 86400,
                    "shard_max_rows": 100000}),
            ],
            vec![json!({"max_retries": 3}), json!({"paused": "yes"}), json!({"schedule_interval": "1s"})],
        ),
        (
            "QueueLimit",
            vec![json!({"queue_key": "a.example", "concurrency": 2}), json!({"queue_key": "", "concurrency": null})],
            vec![
                json!({"queue_key": "a.example"}),
                json!({"concurrency": 1}),
                json!({"queue_key": "a", "concurrency": 1, "x": 1}),
            ],
        ),
        (
            "HoldRequest",
            vec![
                json!({"type": "video", "worker_id": "w1"}),
                json!({"type": "video", "worker_id": "w1", "limit": 1000}),
            ],
            vec![
                json!({"type": "video"}),
                json!({"type": "video", "worker_id": "w1", "limit": 0}),
                json!({"type": "video", "worker_id": "w1", "limit": 1001}),
                json!({"type": "video", "worker_id": "w1", "lease": 30}),
            ],
        ),
        (
            "HeldRequest",
            vec![json!({"type": "video", "worker_id": "w1"})],
            vec![json!({"type": "video"}), json!({"type": "video", "worker_id": "w1", "limit": 3})],
        ),
        (
            "ReportRequest",
            vec![
                json!({"worker_id": "w1", "task_id": "video-1-7", "claim_seq": 2}),
                json!({"worker_id": "w1", "task_id": "video-1-7", "claim_seq": 2, "stage": "two", "context": {"a": 1}}),
                json!({"worker_id": "w1", "task_id": "video-1-7", "claim_seq": 2, "error": "boom", "retry": false}),
                json!({"worker_id": "w1", "task_id": "video-1-7", "claim_seq": 2, "delay": 1.5, "result": null}),
            ],
            vec![
                json!({"worker_id": "w1", "task_id": "video-1-7"}),
                json!({"worker_id": "w1", "task_id": "video-1-7", "claim_seq": "2"}),
                json!({"worker_id": "w1", "task_id": "video-1-7", "claim_seq": 2, "contxt": {}}),
            ],
        ),
        (
            "ReportBatchRequest",
            vec![
                json!({"worker_id": "w1", "reports": []}),
                json!({"worker_id": "w1", "reports": [
                    task(json!({"outcome": "advance", "stage": "two"})),
                    task(json!({"outcome": "advance", "stage": "two", "context": {"a": 1}})),
                    task(json!({"outcome": "succeed", "result": {"ok": true}})),
                    task(json!({"outcome": "succeed", "result": null})),
                    task(json!({"outcome": "fail", "error": "boom", "retry": true})),
                    task(json!({"outcome": "later", "delay": 30, "context": {"b": 1}})),
                    task(json!({"outcome": "release"})),
                    task(json!({"outcome": "heartbeat"})),
                ]}),
            ],
            vec![
                json!({"worker_id": "w1"}),
                json!({"worker_id": "w1", "reports": [task(json!({"outcome": "advance"}))]}),
                json!({"worker_id": "w1", "reports": [task(json!({"outcome": "advance", "stage": "s", "contxt": {}}))]}),
                json!({"worker_id": "w1", "reports": [task(json!({"outcome": "heartbeat", "result": 1}))]}),
                json!({"worker_id": "w1", "reports": [task(json!({"outcome": "explode"}))]}),
                json!({"worker_id": "w1", "reports": [task(json!({"outcome": "later", "delay": 1, "context": [1]}))]}),
                json!({"worker_id": "w1", "reports": [{"task_id": "video-1-7", "outcome": "release"}]}),
            ],
        ),
        (
            "StartRun",
            vec![
                json!({"pipeline": "p"}),
                json!({"pipeline": "p", "input": {"a": 1}, "notify_url": "https://example.com/done", "notify_key": "k",
                    "run_at": "2030-01-02T03:04:05.5+02:00", "version": 2}),
            ],
            vec![json!({}), json!({"pipeline": "p", "input": [1]}), json!({"pipeline": "p", "bogus": 1})],
        ),
        (
            "CompleteNodeRequest",
            vec![
                json!({}),
                json!({"result": 1}),
                json!({"result": null}),
                json!({"result": {"a": [1]}}),
                json!({"error": "no"}),
            ],
            vec![json!({"error": 1}), json!({"reslut": 1})],
        ),
    ]
}

#[test]
fn the_request_schemas_accept_good_bodies_and_refuse_bad_ones() {
    let doc = committed();
    for (name, good, bad) in request_examples() {
        let v = validator(&doc, &component(name));
        for body in &good {
            let e = errors(&doc, &component(name), body);
            assert!(e.is_empty(), "{name} refuses {body}: {e:?}");
        }
        for body in &bad {
            assert!(!v.is_valid(body), "{name} accepts {body}");
        }
    }
    // each of them is the request body of an operation
    let mut used = vec![];
    for item in doc["paths"].as_object().unwrap().values() {
        for op in item.as_object().unwrap().values() {
            if let Some(r) = op["requestBody"]["content"]["application/json"]["schema"]["$ref"].as_str() {
                used.push(r.trim_start_matches("#/components/schemas/").to_string());
            }
        }
    }
    for (name, _, _) in request_examples() {
        assert!(used.contains(&name.to_string()), "{name} is no operation's request body: {used:?}");
    }
}

/// The good example bodies are taken by the server too (none is answered 400), so the
/// document and the server agree in that direction as well.
#[tokio::test]
async fn the_server_takes_the_bodies_the_request_schemas_accept() {
    let db = TestDb::new().await;
    let app = router(db.pool.clone(), &http_config(&[TOKEN], 64 * 1024));
    let send = |method: &'static str, uri: String, body: Value| {
        let app = app.clone();
        async move {
            let (s, _, b) =
                request(&app, method, &uri, Some(body.to_string()), Some("application/json"), Some(TOKEN)).await;
            (s, serde_json::from_slice::<Value>(&b).unwrap_or(Value::Null))
        }
    };
    for (name, good, _) in request_examples() {
        for body in good {
            let (method, uri) = match name {
                "CreateTaskRequest" | "CreateTasksRequest" => {
                    send("PUT", "/v1/task-types/video".into(), json!({"fair_queues": true})).await;
                    ("POST", if name == "CreateTaskRequest" { "/v1/tasks" } else { "/v1/tasks/bulk" }.to_string())
                }
                "TaskTypeUpdate" => ("PUT", "/v1/task-types/video".to_string()),
                "QueueLimit" => ("PUT", "/v1/task-types/video/queue-limit".to_string()),
                "HoldRequest" => ("POST", "/v1/worker/hold".to_string()),
                "HeldRequest" => ("POST", "/v1/worker/held".to_string()),
                // a report on a task that is not held: refused as stale or unknown, not as malformed
                "ReportRequest" => ("POST", "/v1/worker/later".to_string()),
                "ReportBatchRequest" => ("POST", "/v1/worker/report".to_string()),
                // no such pipeline, run or node: 404, not 400
                "StartRun" => ("POST", "/v1/runs".to_string()),
                "CompleteNodeRequest" => {
                    ("POST", "/v1/runs/r20300101-00000000000000000000000000000000/nodes/a/complete".to_string())
                }
                other => panic!("{other}"),
            };
            let body = match (name, body) {
                // the later route needs a delay, which its schema cannot say
                ("ReportRequest", mut b) => {
                    b["delay"] = json!(1.0);
                    b
                }
                // a run_at within the year the SQL API allows
                ("StartRun", mut b) if b.get("run_at").is_some() => {
                    b["run_at"] = json!((chrono::Utc::now() + chrono::Duration::hours(1)).to_rfc3339());
                    b
                }
                (_, b) => b,
            };
            let (s, answer) = send(method, uri.clone(), body.clone()).await;
            assert!(s != StatusCode::BAD_REQUEST && !s.is_server_error(), "{method} {uri} {body}: {s} {answer}");
        }
    }
}

/// Checks a real answer against the documented schema of (method, path, status).
fn check_answer(doc: &Value, method: &str, path: &str, status: StatusCode, body: &Value) {
    let schema = &doc["paths"][path][method]["responses"][status.as_str()]["content"]["application/json"]["schema"];
    assert!(schema.is_object(), "{method} {path} {status} is not documented (body {body})");
    let e = errors(doc, schema, body);
    assert!(e.is_empty(), "{method} {path} {status}: {e:?}\n{body:#}");
}

#[tokio::test]
async fn the_servers_answers_match_their_response_schemas() {
    let doc = committed();
    let db = TestDb::new().await;
    let app = router(db.pool.clone(), &http_config(&[TOKEN], 64 * 1024));
    let mut checked = 0;
    let mut call = |method: &'static str, uri: String, path: &'static str, body: Option<Value>| {
        let app = app.clone();
        let doc = doc.clone();
        checked += 1;
        async move {
            let (s, _, bytes) =
                request(&app, method, &uri, body.map(|b| b.to_string()), Some("application/json"), Some(TOKEN)).await;
            let answer: Value = serde_json::from_slice(&bytes).expect("a JSON answer");
            check_answer(&doc, &method.to_lowercase(), path, s, &answer);
            (s, answer)
        }
    };

    let (s, _) =
        call("PUT", "/v1/task-types/video".into(), "/v1/task-types/{name}", Some(json!({"max_retry_num": 1}))).await;
    assert_eq!(s, StatusCode::OK);
    call("PUT", "/v1/task-types/site".into(), "/v1/task-types/{name}", Some(json!({"fair_queues": true}))).await;
    call("GET", "/v1/task-types".into(), "/v1/task-types", None).await;
    call("GET", "/v1/task-types/video".into(), "/v1/task-types/{name}", None).await;
    let (s, created) =
        call("POST", "/v1/tasks".into(), "/v1/tasks", Some(json!({"type": "video", "context": {"n": 1}}))).await;
    assert_eq!(s, StatusCode::CREATED);
    call("POST", "/v1/tasks/bulk".into(), "/v1/tasks/bulk", Some(json!({"type": "video", "tasks": [{}, {}]}))).await;
    call("POST", "/v1/tasks".into(), "/v1/tasks", Some(json!({"type": "site", "queue_key": "a"}))).await;
    call("GET", "/v1/task-types/site/queues".into(), "/v1/task-types/{name}/queues", None).await;
    call(
        "PUT",
        "/v1/task-types/site/queue-limit".into(),
        "/v1/task-types/{name}/queue-limit",
        Some(json!({"queue_key": "a", "concurrency": null})),
    )
    .await;
    call("GET", "/v1/queue-depth".into(), "/v1/queue-depth", None).await;
    call("GET", "/v1/dashboard".into(), "/v1/dashboard", None).await;
    let (_, held) = call(
        "POST",
        "/v1/worker/hold".into(),
        "/v1/worker/hold",
        Some(json!({"type": "video", "worker_id": "w1", "limit": 3})),
    )
    .await;
    let tasks = held["tasks"].as_array().unwrap().clone();
    assert_eq!(tasks.len(), 3);
    let fence = |t: &Value| json!({"worker_id": "w1", "task_id": t["task_id"], "claim_seq": t["claim_seq"]});
    call("POST", "/v1/worker/held".into(), "/v1/worker/held", Some(json!({"type": "video", "worker_id": "w1"}))).await;
    call("GET", "/v1/worker/next-due?type=video".into(), "/v1/worker/next-due", None).await;
    call("POST", "/v1/worker/heartbeat".into(), "/v1/worker/heartbeat", Some(fence(&tasks[0]))).await;
    let mut advance = fence(&tasks[0]);
    advance["stage"] = json!("two");
    call("POST", "/v1/worker/advance".into(), "/v1/worker/advance", Some(advance)).await;
    let (s, _) = call("POST", "/v1/worker/release".into(), "/v1/worker/release", Some(fence(&tasks[0]))).await;
    assert_eq!(s, StatusCode::CONFLICT, "stale");
    let batch = json!({"worker_id": "w1", "reports": [
        {"task_id": tasks[1]["task_id"], "claim_seq": tasks[1]["claim_seq"], "outcome": "fail", "error": "x", "retry": false},
        {"task_id": tasks[2]["task_id"], "claim_seq": tasks[2]["claim_seq"], "outcome": "succeed", "result": [1]}]});
    call("POST", "/v1/worker/report".into(), "/v1/worker/report", Some(batch)).await;
    let id = tasks[2]["task_id"].as_str().unwrap();
    call("GET", format!("/v1/tasks/{id}"), "/v1/tasks/{id}", None).await;
    call("GET", "/v1/tasks?type=video&limit=2".into(), "/v1/tasks", None).await;
    call("POST", format!("/v1/tasks/{}/retry", tasks[1]["task_id"].as_str().unwrap()), "/v1/tasks/{id}/retry", None)
        .await;
    call("POST", format!("/v1/tasks/{}/cancel", created["id"].as_str().unwrap()), "/v1/tasks/{id}/cancel", None).await;

    let definition = json!({"nodes": [{"name": "start", "type": "start"}, {"name": "a", "type": "task", "function": "video"},
        {"name": "end", "type": "end"}], "edges": [["start", "a"], ["a", "end"]]});
    let (s, _) = call("PUT", "/v1/pipelines/p".into(), "/v1/pipelines/{name}", Some(definition)).await;
    assert_eq!(s, StatusCode::OK);
    call("GET", "/v1/pipelines".into(), "/v1/pipelines", None).await;
    call("GET", "/v1/pipelines/p".into(), "/v1/pipelines/{name}", None).await;
    let (s, run) = call("POST", "/v1/runs".into(), "/v1/runs", Some(json!({"pipeline": "p", "input": {"a": 1}}))).await;
    assert_eq!(s, StatusCode::CREATED);
    let run = run["run_id"].as_str().unwrap().to_string();
    call("GET", format!("/v1/runs/{run}"), "/v1/runs/{id}", None).await;
    call("GET", "/v1/runs?limit=1".into(), "/v1/runs", None).await;
    call("POST", format!("/v1/runs/{run}/cancel"), "/v1/runs/{id}/cancel", None).await;
    let (s, _) = call("POST", format!("/v1/runs/{run}/retry"), "/v1/runs/{id}/retry", None).await;
    assert_eq!(s, StatusCode::CREATED);

    // error answers
    let (s, _) = call("GET", "/v1/tasks/video-1-999999".into(), "/v1/tasks/{id}", None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let (s, _) = call("POST", "/v1/tasks".into(), "/v1/tasks", Some(json!({"type": "video", "priorty": 1}))).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    let (s, _) = call("GET", "/v1/runs?before=nope".into(), "/v1/runs", None).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    let (s, _) =
        call("POST", "/v1/worker/held".into(), "/v1/worker/held", Some(json!({"type": "nope", "worker_id": "w"})))
            .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert_eq!(checked, 34);
}

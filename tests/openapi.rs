//! The OpenAPI document: the committed `openapi.json` is what the code generates
//! (`UPDATE_OPENAPI=1 cargo test --test suite openapi::` rewrites it), it is OpenAPI 3 in shape, it
//! names every route of the router but the compat ones, every error answer has the `Error`
//! schema, and the bodies the server really answers have the documented properties.
use crate::common;

use std::collections::BTreeSet;
use std::path::PathBuf;

use asyncflow::http::{openapi, router};
use axum::http::StatusCode;
use common::{http_config, request, TestDb};
use serde_json::{json, Value};

const TOKEN: &str = "test-token-0123456789";
const METHODS: [&str; 5] = ["get", "post", "put", "delete", "patch"];

fn generated() -> Value {
    serde_json::to_value(openapi::document()).expect("the document serializes")
}

async fn call(
    app: &axum::Router,
    method: &str,
    uri: &str,
    body: Option<Value>,
    token: Option<&str>,
) -> (StatusCode, Value) {
    let (status, _, bytes) =
        request(app, method, uri, body.map(|b| b.to_string()), Some("application/json"), token).await;
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

#[test]
fn the_committed_openapi_json_is_the_generated_document() {
    let current = format!("{}\n", serde_json::to_string_pretty(&generated()).unwrap());
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("openapi.json");
    if std::env::var("UPDATE_OPENAPI").as_deref() == Ok("1") {
        std::fs::write(&path, &current).expect("write openapi.json");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == current,
        "openapi.json is not what the code generates; run `UPDATE_OPENAPI=1 cargo test --test suite openapi::` and commit it"
    );
}

/// (method, path in OpenAPI form) of every `.route("...", ...)` in src/http, but src/http/compat/
/// (whose routes are built in a loop and left out of the document on purpose).
fn routes_in_source() -> BTreeSet<(String, String)> {
    let mut files = vec![];
    let mut dirs = vec![PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src/http")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                if entry.file_name() != "compat" {
                    dirs.push(path);
                }
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    let mut routes = BTreeSet::new();
    for file in files {
        let text = std::fs::read_to_string(file).unwrap();
        for (at, _) in text.match_indices(".route(\"") {
            let rest = &text[at + ".route(\"".len()..];
            let path = &rest[..rest.find('"').unwrap()];
            // the arguments up to the matching parenthesis
            let (mut depth, mut end) = (1, 0);
            for (i, c) in rest.char_indices() {
                match c {
                    '(' => depth += 1,
                    ')' => depth -= 1,
                    _ => {}
                }
                if depth == 0 {
                    end = i;
                    break;
                }
            }
            let args = &rest[..end];
            let path: String = path
                .split('/')
                .map(|s| s.strip_prefix(':').map(|p| format!("{{{p}}}")).unwrap_or_else(|| s.to_string()))
                .collect::<Vec<_>>()
                .join("/");
            for m in METHODS {
                let found = args
                    .match_indices(&format!("{m}("))
                    .any(|(i, _)| i == 0 || !args[..i].chars().last().is_some_and(|c| c.is_alphanumeric() || c == '_'));
                if found {
                    routes.insert((m.to_string(), path.clone()));
                }
            }
        }
    }
    routes
}

fn documented(doc: &Value) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for m in METHODS {
            if item.get(m).is_some() {
                out.insert((m.to_string(), path.clone()));
            }
        }
    }
    out
}

#[tokio::test]
async fn the_document_is_openapi_3_and_names_every_route_of_the_router() {
    let doc = generated();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."), "{}", doc["openapi"]);
    assert_eq!(doc["info"]["title"], "asyncflow");
    assert!(doc["info"]["version"].is_string());
    assert!(doc["info"]["description"].as_str().unwrap().contains("/hold_tasks"), "compat endpoints are named");

    let mut operation_ids = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let id = op["operationId"].as_str().unwrap_or_else(|| panic!("{method} {path} has no operationId"));
            assert!(operation_ids.insert(id.to_string()), "operationId {id} is used twice");
            assert!(!op["responses"].as_object().unwrap().is_empty(), "{method} {path} has no responses");
        }
    }

    let in_source = routes_in_source();
    assert!(in_source.len() >= 20, "the route scan found too little: {in_source:?}");
    assert!(in_source.contains(&("get".to_string(), "/v1/tasks/{id}".to_string())));
    let in_doc = documented(&doc);
    let missing: Vec<_> = in_source.iter().filter(|r| r.1.starts_with("/v1/") && !in_doc.contains(r)).collect();
    assert!(missing.is_empty(), "/v1 routes of the router missing from the document: {missing:?}");
    let extra: Vec<_> = in_doc.difference(&in_source).collect();
    assert!(extra.is_empty(), "documented routes the source does not declare: {extra:?}");

    // The router serves each documented operation (no fallback 404, no 405), and asks for the
    // token exactly where the document says so.
    let db = TestDb::new().await;
    let app = router(db.pool.clone(), &http_config(&[TOKEN], 64 * 1024));
    for (method, path) in &in_doc {
        let uri = path.replace("{id}", "video-1-1").replace("{name}", "video");
        let open = doc["paths"][path][method]["security"] == json!([{}]);
        let (status, _) = call(&app, &method.to_uppercase(), &uri, None, None).await;
        assert_eq!(status == StatusCode::UNAUTHORIZED, !open, "{method} {uri} without a token: {status}");
        let (status, body) = call(&app, &method.to_uppercase(), &uri, None, Some(TOKEN)).await;
        assert_ne!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {uri}");
        assert!(body["message"] != "no such route", "{method} {uri} fell through to the fallback");
    }
}

#[test]
fn every_error_answer_has_the_error_schema_and_the_bearer_scheme_is_declared() {
    let doc = generated();
    let error = &doc["components"]["schemas"]["Error"];
    assert_eq!(error["type"], "object");
    let required: BTreeSet<&str> = error["required"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert_eq!(required, BTreeSet::from(["code", "message"]));
    assert_eq!(error["properties"].as_object().unwrap().len(), 2, "{error}");

    let scheme = &doc["components"]["securitySchemes"]["bearer"];
    assert_eq!((scheme["type"].as_str(), scheme["scheme"].as_str()), (Some("http"), Some("bearer")));
    assert_eq!(doc["security"], json!([{"bearer": []}]));

    let mut statuses = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let responses = op["responses"].as_object().unwrap();
            // the router's rule: /v1 and /metrics behind the token, the rest open
            let open = !path.starts_with("/v1/") && path != "/metrics";
            if open {
                assert_eq!(op["security"], json!([{}]), "{method} {path} needs no token");
            } else {
                assert!(op.get("security").is_none(), "{method} {path} overrides the bearer requirement");
                assert!(responses.contains_key("401"), "{method} {path} does not document 401");
            }
            for (status, response) in responses {
                if status.starts_with('4') || (status.starts_with('5') && path != "/readyz") {
                    if status.starts_with('4') {
                        statuses.insert(status.clone());
                    }
                    assert_eq!(
                        response["content"]["application/json"]["schema"]["$ref"], "#/components/schemas/Error",
                        "{method} {path} {status}"
                    );
                }
            }
        }
    }
    assert_eq!(statuses, BTreeSet::from(["400", "401", "404", "409", "413"].map(String::from)));
}

#[tokio::test]
async fn the_server_serves_the_document_at_openapi_json_without_a_token() {
    let db = TestDb::new().await;
    let app = router(db.pool.clone(), &http_config(&[TOKEN], 64 * 1024));
    let (status, body) = call(&app, "GET", "/openapi.json", None, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, generated());
    let (status, _) = call(&app, "GET", "/v1/task-types", None, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "while the API itself needs the token");
}

/// Checks `value` against `schema` (a subset of JSON Schema: $ref, allOf, oneOf, type, properties,
/// required, items): an object must have every required property and no undocumented one.
fn conforms(doc: &Value, schema: &Value, value: &Value, at: &str) -> Result<(), String> {
    if let Some(r) = schema["$ref"].as_str() {
        let name = r.trim_start_matches("#/components/schemas/");
        return conforms(doc, &doc["components"]["schemas"][name], value, at);
    }
    if let Some(alternatives) = schema["oneOf"].as_array().or(schema["anyOf"].as_array()) {
        let errors: Vec<String> = alternatives.iter().filter_map(|s| conforms(doc, s, value, at).err()).collect();
        return if errors.len() < alternatives.len() { Ok(()) } else { Err(errors.join(" / ")) };
    }
    if let Some(parts) = schema["allOf"].as_array() {
        // merged into one object schema, so that no part's properties count as undocumented
        let mut merged = json!({"type": "object", "properties": {}, "required": []});
        for part in parts {
            let mut part = part.clone();
            while let Some(r) = part["$ref"].as_str() {
                part = doc["components"]["schemas"][r.trim_start_matches("#/components/schemas/")].clone();
            }
            for (k, v) in part["properties"].as_object().cloned().unwrap_or_default() {
                merged["properties"][k] = v;
            }
            for r in part["required"].as_array().cloned().unwrap_or_default() {
                merged["required"].as_array_mut().unwrap().push(r);
            }
        }
        return conforms(doc, &merged, value, at);
    }
    let types: Vec<&str> = match &schema["type"] {
        Value::String(t) => vec![t.as_str()],
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
        _ => return Ok(()), // any value
    };
    let kind = match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    };
    let type_ok = types.contains(&kind) || (kind == "integer" && types.contains(&"number"));
    if !type_ok {
        return Err(format!("{at}: a {kind} where the schema says {types:?}"));
    }
    match value {
        Value::Object(map) => {
            let props = schema["properties"].as_object().cloned().unwrap_or_default();
            for r in schema["required"].as_array().cloned().unwrap_or_default() {
                let r = r.as_str().unwrap();
                if !map.contains_key(r) {
                    return Err(format!("{at}: required property {r} is missing"));
                }
            }
            if schema.get("properties").is_some() {
                for (k, v) in map {
                    let s = props.get(k).ok_or_else(|| format!("{at}: property {k} is not documented"))?;
                    conforms(doc, s, v, &format!("{at}.{k}"))?;
                }
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                conforms(doc, &schema["items"], item, &format!("{at}[{i}]"))?;
            }
        }
        _ => {}
    }
    Ok(())
}

#[tokio::test]
async fn the_bodies_the_server_answers_have_the_documented_properties() {
    let doc = generated();
    let db = TestDb::new().await;
    let app = router(db.pool.clone(), &http_config(&[TOKEN], 64 * 1024));
    let t = Some(TOKEN);
    let mut checked = 0;
    let mut check = |method: &str, path: &str, status: StatusCode, body: &Value| {
        let schema = &doc["paths"][path][method.to_lowercase()]["responses"][status.as_str()]["content"]
            ["application/json"]["schema"];
        assert!(!schema.is_null(), "{method} {path} {status} is not documented");
        if let Err(e) = conforms(&doc, schema, body, "body") {
            panic!("{method} {path} {status}: {e}\n{body:#}");
        }
        checked += 1;
    };

    let (s, b) = call(&app, "PUT", "/v1/task-types/video", Some(json!({"max_retry_num": 1})), t).await;
    check("PUT", "/v1/task-types/{name}", s, &b);
    let (s, b) = call(&app, "POST", "/v1/tasks", Some(json!({"type": "video", "context": {"n": 1}})), t).await;
    check("POST", "/v1/tasks", s, &b);
    let id = b["id"].as_str().unwrap().to_string();
    let (s, b) =
        call(&app, "POST", "/v1/tasks/bulk", Some(json!({"type": "video", "tasks": [{}, {"priority": 5}]})), t).await;
    check("POST", "/v1/tasks/bulk", s, &b);
    let (s, b) =
        call(&app, "POST", "/v1/worker/hold", Some(json!({"type": "video", "worker_id": "w1", "limit": 2})), t).await;
    check("POST", "/v1/worker/hold", s, &b);
    let held = b["tasks"].as_array().unwrap().clone();
    assert_eq!(held.len(), 2);
    let report = |task: &Value| json!({"worker_id": "w1", "task_id": task["task_id"], "claim_seq": task["claim_seq"]});
    let (s, b) = call(&app, "POST", "/v1/worker/heartbeat", Some(report(&held[0])), t).await;
    check("POST", "/v1/worker/heartbeat", s, &b);
    let mut fail = report(&held[0]);
    fail["error"] = json!("boom");
    let (s, b) = call(&app, "POST", "/v1/worker/fail", Some(fail), t).await;
    check("POST", "/v1/worker/fail", s, &b);
    let (s, b) = call(&app, "POST", "/v1/worker/succeed", Some(report(&held[0])), t).await;
    assert_eq!(s, StatusCode::CONFLICT, "a stale report");
    check("POST", "/v1/worker/succeed", s, &b);
    let batch = json!({"worker_id": "w1", "reports": [
        {"task_id": held[1]["task_id"], "claim_seq": held[1]["claim_seq"], "outcome": "succeed", "result": {"ok": true}},
        {"task_id": held[0]["task_id"], "claim_seq": held[0]["claim_seq"], "outcome": "heartbeat"}]});
    let (s, b) = call(&app, "POST", "/v1/worker/report", Some(batch), t).await;
    check("POST", "/v1/worker/report", s, &b);
    let (s, b) = call(&app, "GET", &format!("/v1/tasks/{}", held[1]["task_id"].as_str().unwrap()), None, t).await;
    check("GET", "/v1/tasks/{id}", s, &b);
    let (s, b) = call(&app, "GET", "/v1/tasks?type=video&limit=2", None, t).await;
    check("GET", "/v1/tasks", s, &b);
    assert!(b["next"].is_string());
    let (s, b) = call(&app, "POST", &format!("/v1/tasks/{id}/cancel"), None, t).await;
    check("POST", "/v1/tasks/{id}/cancel", s, &b);
    let (s, b) = call(&app, "POST", &format!("/v1/tasks/{id}/retry"), None, t).await;
    check("POST", "/v1/tasks/{id}/retry", s, &b);
    let (s, b) = call(&app, "GET", "/v1/queue-depth", None, t).await;
    check("GET", "/v1/queue-depth", s, &b);
    let (s, b) = call(&app, "PUT", "/v1/task-types/site", Some(json!({"fair_queues": true})), t).await;
    check("PUT", "/v1/task-types/{name}", s, &b);
    let (s, b) = call(
        &app,
        "POST",
        "/v1/tasks",
        Some(json!({"type": "site", "queue_key": "a.example", "context": {"url": "https://a.example/"}})),
        t,
    )
    .await;
    check("POST", "/v1/tasks", s, &b);
    let (s, b) = call(
        &app,
        "PUT",
        "/v1/task-types/site/queue-limit",
        Some(json!({"queue_key": "a.example", "concurrency": 2})),
        t,
    )
    .await;
    check("PUT", "/v1/task-types/{name}/queue-limit", s, &b);
    assert_eq!(b, json!({"queue_key": "a.example", "concurrency": 2}));
    let (s, b) = call(&app, "GET", "/v1/task-types/site/queues?limit=10", None, t).await;
    check("GET", "/v1/task-types/{name}/queues", s, &b);
    assert_eq!(b[0]["queue_key"], "a.example");
    assert_eq!(b[0]["ready"], 1);
    let (s, b) = call(&app, "GET", "/v1/task-types/video/queues", None, t).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "video has no fair_queues: {b}");
    check("GET", "/v1/task-types/{name}/queues", s, &b);
    let (s, b) = call(&app, "POST", "/v1/task-types/video/pause", None, t).await;
    check("POST", "/v1/task-types/{name}/pause", s, &b);
    let (s, b) = call(&app, "GET", "/v1/task-types", None, t).await;
    check("GET", "/v1/task-types", s, &b);
    let (s, b) = call(&app, "GET", "/v1/task-types/nope", None, t).await;
    check("GET", "/v1/task-types/{name}", s, &b);
    let (s, b) = call(&app, "POST", "/v1/tasks", Some(json!({"type": "nope"})), t).await;
    check("POST", "/v1/tasks", s, &b);
    let (s, b) = call(&app, "POST", "/v1/tasks", Some(json!({"type": "video", "bogus": 1})), t).await;
    check("POST", "/v1/tasks", s, &b);
    let (s, b) = call(&app, "GET", "/v1/queue-depth", None, None).await;
    check("GET", "/v1/queue-depth", s, &b);
    let (s, b) = call(&app, "GET", "/healthz", None, None).await;
    check("GET", "/healthz", s, &b);
    let (s, b) = call(&app, "GET", "/readyz", None, None).await;
    check("GET", "/readyz", s, &b);
    assert_eq!(checked, 26);
}

/// Three answers the document once left out, each now documented for its route: a `before`
/// cursor that names no run (400 invalid_argument, as a bad status or limit; it was a 404), a
/// retry of a task that works for a workflow node (409 wrong_state: retry the node), and
/// `/v1/worker/held` for an unknown type (404 unknown_task_type, as `/v1/worker/hold`).
#[tokio::test]
async fn the_statuses_of_an_unknown_cursor_a_node_task_retry_and_an_unknown_held_type_are_documented() {
    let doc = generated();
    let db = TestDb::new().await;
    let app = router(db.pool.clone(), &http_config(&[TOKEN], 64 * 1024));
    let t = Some(TOKEN);
    let documented = |method: &str, path: &str, status: StatusCode| {
        doc["paths"][path][method]["responses"][status.as_str()]["content"]["application/json"]["schema"]["$ref"]
            == "#/components/schemas/Error"
    };

    let (s, b) = call(&app, "GET", "/v1/runs?before=r20300101-00000000000000000000000000000000", None, t).await;
    assert_eq!((s, b["code"].as_str()), (StatusCode::BAD_REQUEST, Some("invalid_argument")), "{b}");
    assert!(b["message"].as_str().unwrap().starts_with("before: unknown run"), "{b}");
    assert!(documented("get", "/v1/runs", s));

    let (s, _) = call(&app, "PUT", "/v1/task-types/wf", Some(json!({})), t).await;
    assert_eq!(s, StatusCode::OK);
    let definition = json!({"nodes": [{"name": "start", "type": "start"}, {"name": "a", "type": "task", "function": "wf"},
        {"name": "end", "type": "end"}], "edges": [["start", "a"], ["a", "end"]]});
    let (s, b) = call(&app, "PUT", "/v1/pipelines/p", Some(definition), t).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let (s, b) = call(&app, "POST", "/v1/runs", Some(json!({"pipeline": "p"})), t).await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    let (_, b) = call(&app, "GET", "/v1/tasks?type=wf", None, t).await;
    let task = b["tasks"][0]["id"].as_str().expect("the run's task").to_string();
    let (s, b) = call(&app, "POST", &format!("/v1/tasks/{task}/retry"), None, t).await;
    assert_eq!((s, b["code"].as_str()), (StatusCode::CONFLICT, Some("wrong_state")), "{b}");
    assert!(documented("post", "/v1/tasks/{id}/retry", s));

    let (s, b) = call(&app, "POST", "/v1/worker/held", Some(json!({"type": "nope", "worker_id": "w1"})), t).await;
    assert_eq!((s, b["code"].as_str()), (StatusCode::NOT_FOUND, Some("unknown_task_type")), "{b}");
    assert!(documented("post", "/v1/worker/held", s));
}

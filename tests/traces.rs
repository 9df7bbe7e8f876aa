//! Traces: a task carries the traceparent of its enqueue; the worker binary, exporting to a local
//! OTLP receiver, continues that trace (claim, stage call, report) and hands the stage span's
//! context to the function; with export off nothing is sent and the function gets the stored
//! traceparent as it is. A malformed traceparent is refused, in SQL and over HTTP.
use crate::common;

use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use asyncflow::db::api;
use asyncflow::http::router;
use asyncflow::task::{NewTask, TaskStatus};
use axum::http::StatusCode;
use common::process::wait_child;
use common::{http_config, request, sqlstate, Folder, TestDb};
use serde_json::{json, Value};

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const ENQUEUE_SPAN: &str = "00f067aa0ba902b7";

fn enqueue_traceparent() -> String {
    format!("00-{TRACE_ID}-{ENQUEUE_SPAN}-01")
}

/// POSTs `body` to `uri` through the router, with a `traceparent` header if given; the status
/// and the answer as JSON (null when it is not).
async fn post_json(
    app: &axum::Router,
    uri: &str,
    body: Value,
    traceparent: Option<impl AsRef<str>>,
) -> (StatusCode, Value) {
    use tower::ServiceExt;
    let mut req = axum::http::Request::builder().method("POST").uri(uri).header("content-type", "application/json");
    if let Some(t) = traceparent {
        req = req.header("traceparent", t.as_ref());
    }
    let resp = app.clone().oneshot(req.body(axum::body::Body::from(body.to_string())).unwrap()).await.unwrap();
    let status = resp.status();
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX).await.unwrap();
    (status, serde_json::from_slice::<Value>(&bytes).unwrap_or(Value::Null))
}

/// One span as the receiver decoded it from OTLP/JSON.
#[derive(Debug, Clone)]
struct Received {
    trace_id: String,
    span_id: String,
    parent_span_id: String,
    name: String,
    attributes: HashMap<String, String>,
    service: String,
}

/// A local OTLP/HTTP receiver: accepts `POST /v1/traces` with a JSON body and keeps the spans.
struct Receiver {
    url: String,
    spans: Arc<Mutex<Vec<Received>>>,
    requests: Arc<Mutex<usize>>,
}

fn value_text(v: &Value) -> String {
    match v.as_object().and_then(|o| o.values().next()) {
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => String::new(),
    }
}

fn attributes(list: &Value) -> HashMap<String, String> {
    list.as_array()
        .into_iter()
        .flatten()
        .map(|a| (a["key"].as_str().unwrap_or_default().to_string(), value_text(&a["value"])))
        .collect()
}

fn decode(body: &Value) -> Vec<Received> {
    let mut spans = Vec::new();
    for resource in body["resourceSpans"].as_array().into_iter().flatten() {
        let service = attributes(&resource["resource"]["attributes"]).remove("service.name").unwrap_or_default();
        for scope in resource["scopeSpans"].as_array().into_iter().flatten() {
            for s in scope["spans"].as_array().into_iter().flatten() {
                spans.push(Received {
                    trace_id: s["traceId"].as_str().unwrap_or_default().to_string(),
                    span_id: s["spanId"].as_str().unwrap_or_default().to_string(),
                    parent_span_id: s["parentSpanId"].as_str().unwrap_or_default().to_string(),
                    name: s["name"].as_str().unwrap_or_default().to_string(),
                    attributes: attributes(&s["attributes"]),
                    service: service.clone(),
                });
            }
        }
    }
    spans
}

impl Receiver {
    async fn start() -> Receiver {
        let spans = Arc::new(Mutex::new(Vec::new()));
        let requests = Arc::new(Mutex::new(0));
        let (kept, counted) = (spans.clone(), requests.clone());
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(move |body: axum::body::Bytes| {
                let (kept, counted) = (kept.clone(), counted.clone());
                async move {
                    *counted.lock().unwrap() += 1;
                    let Ok(value) = serde_json::from_slice::<Value>(&body) else {
                        return StatusCode::BAD_REQUEST;
                    };
                    kept.lock().unwrap().extend(decode(&value));
                    StatusCode::OK
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Receiver { url, spans, requests }
    }

    fn spans(&self) -> Vec<Received> {
        self.spans.lock().unwrap().clone()
    }
}

/// Three stages; each call writes its stage and the TRACEPARENT it received to `seen`, in the
/// function's folder (its working directory).
const THREE_STAGES: &str = r#"cat > /dev/null
echo "$ASYNCFLOW_STAGE ${TRACEPARENT:-none}" >> seen
case "$ASYNCFLOW_STAGE" in
  one) echo '{"next_stage": "two"}' ;;
  two) echo '{"next_stage": "three"}' ;;
  three) echo '{"result": {"done": true}}' ;;
esac"#;

fn worker(db: &TestDb, dir: &Path, otlp: Option<&str>) -> Child {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_asyncflow"));
    cmd.args(["worker", "--no-maintenance", "--exit-when-idle", "--functions"])
        .arg(dir)
        .env("DATABASE_URL", &db.url)
        .env("OTEL_SERVICE_NAME", "asyncflow-test")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("TRACEPARENT")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if let Some(url) = otlp {
        cmd.env("OTEL_EXPORTER_OTLP_ENDPOINT", url);
    }
    cmd.spawn().expect("start the worker binary")
}

/// Runs one task enqueued with the known traceparent through the three stages; the lines the
/// function wrote, as (stage, traceparent).
async fn run_three_stages(db: &TestDb, otlp: Option<&str>) -> Vec<(String, String)> {
    let dir = Folder::new(&[(
        "traced",
        "command = [\"./run\"]\n[settings]\ninitial_stage = \"one\"\nschedule_interval = 0.2\n",
        THREE_STAGES,
    )]);
    let c = db.conn().await;
    common::sql::register(&**c, "traced", json!({"initial_stage": "one"})).await;
    let task = NewTask { traceparent: Some(enqueue_traceparent()), ..Default::default() };
    let id = api::create_task(&c, "traced", &task).await.unwrap();
    let stored = api::get_task(&c, id.as_str()).await.unwrap().unwrap();
    assert_eq!(stored.traceparent.as_deref(), Some(enqueue_traceparent().as_str()), "get_task shows it");

    let (status, _) = wait_child(worker(db, &dir.0, otlp), Duration::from_secs(60)).await;
    assert!(status.success(), "worker exit status {status:?}");
    let done = api::get_task(&c, id.as_str()).await.unwrap().unwrap();
    assert_eq!(done.status, TaskStatus::Succeeded, "{done:?}");
    let seen = std::fs::read_to_string(dir.0.join("traced").join("seen")).expect("the function wrote what it saw");
    seen.lines()
        .map(|l| {
            let (stage, parent) = l.split_once(' ').expect("stage and traceparent");
            (stage.to_string(), parent.to_string())
        })
        .collect()
}

#[tokio::test]
async fn the_worker_continues_the_enqueues_trace_through_claim_stage_call_and_report() {
    let db = TestDb::new().await;
    let receiver = Receiver::start().await;
    let seen = run_three_stages(&db, Some(&receiver.url)).await;
    // the worker flushed its spans before it exited
    let spans = receiver.spans();
    assert!(!spans.is_empty(), "spans arrived");
    assert!(spans.iter().all(|s| s.trace_id == TRACE_ID), "every span is in the enqueue's trace: {spans:#?}");
    assert!(spans.iter().all(|s| s.service == "asyncflow-test"), "OTEL_SERVICE_NAME names the service");
    let by_id: HashMap<&str, &Received> = spans.iter().map(|s| (s.span_id.as_str(), s)).collect();
    let chain = |s: &Received| {
        let mut names = Vec::new();
        let mut parent = s.parent_span_id.as_str();
        while let Some(p) = by_id.get(parent) {
            names.push(p.name.clone());
            parent = p.parent_span_id.as_str();
        }
        (names, parent.to_string())
    };

    let stage_spans: Vec<&Received> = spans.iter().filter(|s| s.name.starts_with("asyncflow.stage ")).collect();
    let stages: Vec<&str> = stage_spans.iter().map(|s| s.attributes["asyncflow.stage"].as_str()).collect();
    assert_eq!(stages.len(), 3, "one span per stage call: {stages:?}");
    for want in ["one", "two", "three"] {
        assert!(stages.contains(&want), "a span for stage {want}: {stages:?}");
    }
    for s in &stage_spans {
        assert_eq!(
            chain(s),
            (vec!["asyncflow.claim".to_string()], ENQUEUE_SPAN.to_string()),
            "a stage call's span is the child of its claim, the child of the enqueue's span"
        );
        assert_eq!(s.attributes["asyncflow.task_type"], "traced");
        assert_eq!(s.attributes["asyncflow.attempt"], "1");
        assert!(s.attributes["asyncflow.task_id"].starts_with("traced-"), "{:?}", s.attributes);
        let outcome = if s.attributes["asyncflow.stage"] == "three" { "succeed" } else { "advance" };
        assert_eq!(s.attributes["asyncflow.outcome"], outcome);
        let reports: Vec<&Received> =
            spans.iter().filter(|r| r.name == "asyncflow.report" && r.parent_span_id == s.span_id).collect();
        assert_eq!(reports.len(), 1, "one report span under the stage call of {}", s.attributes["asyncflow.stage"]);
    }
    let claims = spans.iter().filter(|s| s.name == "asyncflow.claim").count();
    assert_eq!(claims, 3, "one claim span per stage");

    // the function saw the stage span's context: same trace, the stage call as parent
    assert_eq!(seen.len(), 3, "{seen:?}");
    for (stage, parent) in &seen {
        let span = stage_spans.iter().find(|s| s.attributes["asyncflow.stage"] == *stage).expect("its span");
        assert_eq!(parent, &format!("00-{TRACE_ID}-{}-01", span.span_id), "stage {stage}");
    }
}

#[tokio::test]
async fn with_export_off_nothing_is_sent_and_the_stored_traceparent_is_passed_as_is() {
    let db = TestDb::new().await;
    let receiver = Receiver::start().await;
    let seen = run_three_stages(&db, None).await;
    assert_eq!(*receiver.requests.lock().unwrap(), 0, "nothing was sent");
    let expected: Vec<(String, String)> =
        ["one", "two", "three"].iter().map(|s| (s.to_string(), enqueue_traceparent())).collect();
    assert_eq!(seen, expected);
}

#[tokio::test]
async fn a_malformed_traceparent_is_refused_by_create_task_and_create_tasks_and_nothing_is_created() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    common::sql::register(&c, "traced", json!({})).await;
    let bad = [
        "junk",
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
        "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-00",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
    ];
    for value in bad {
        let e =
            c.query_one("select asyncflow.create_task('traced', traceparent => $1)", &[&value]).await.expect_err(value);
        assert_eq!(sqlstate(&e), "AF006", "{value}: {e:?}");
        // through the general path (an idempotency key) too
        let e = c
            .query_one("select asyncflow.create_task('traced', idempotency_key => 'k', traceparent => $1)", &[&value])
            .await
            .expect_err(value);
        assert_eq!(sqlstate(&e), "AF006", "{value}: {e:?}");
        let tasks = json!([{}, {"traceparent": value}]);
        let e = c.query("select asyncflow.create_tasks('traced', $1)", &[&tasks]).await.expect_err(value);
        assert_eq!(sqlstate(&e), "AF006", "{value}: {e:?}");
        let message = e.as_db_error().map(|d| d.message().to_string()).unwrap_or_default();
        assert!(message.starts_with("tasks[1]: traceparent must be"), "{message}");
    }
    let e = c.query("select asyncflow.create_tasks('traced', $1)", &[&json!([{"traceparent": 7}])]).await.unwrap_err();
    assert_eq!(sqlstate(&e), "AF006");
    assert_eq!(common::sql::task_count(&c).await, 0, "nothing was created");

    // a good one reads back, positional calls of the earlier signature still work
    let good = enqueue_traceparent();
    let id: String =
        c.query_one("select asyncflow.create_task('traced', traceparent => $1)", &[&good]).await.unwrap().get(0);
    assert_eq!(common::sql::task(&c, &id).await["traceparent"], json!(good));
    let plain: String =
        c.query_one("select asyncflow.create_task('traced', '{}', 0, null, null, 'key-1')", &[]).await.unwrap().get(0);
    assert_eq!(common::sql::task(&c, &plain).await["traceparent"], Value::Null);
}

#[tokio::test]
async fn over_http_the_traceparent_header_is_stored_and_a_malformed_one_is_a_400() {
    let db = TestDb::new().await;
    let app = router(db.pool.clone(), &http_config(&[], 64 * 1024));
    common::sql::register(&**db.conn().await, "traced", json!({})).await;
    let post =
        |uri: &'static str, body: Value, traceparent: Option<&'static str>| post_json(&app, uri, body, traceparent);
    let good: &'static str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let (s, created) = post("/v1/tasks", json!({"type": "traced"}), Some(good)).await;
    assert_eq!(s, StatusCode::CREATED, "{created}");
    let id = created["id"].as_str().unwrap().to_string();
    let (s, _, task) = request(&app, "GET", &format!("/v1/tasks/{id}"), None, None, None).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(serde_json::from_slice::<Value>(&task).unwrap()["traceparent"], good);

    // a body field is taken over the header
    let other = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let (s, created) = post("/v1/tasks", json!({"type": "traced", "traceparent": other}), Some(good)).await;
    assert_eq!(s, StatusCode::CREATED);
    let task = api::get_task(&db.conn().await, created["id"].as_str().unwrap()).await.unwrap().unwrap();
    assert_eq!(task.traceparent.as_deref(), Some(other));

    // bulk: the header for the tasks that give none
    let (s, bulk) =
        post("/v1/tasks/bulk", json!({"type": "traced", "tasks": [{}, {"traceparent": other}]}), Some(good)).await;
    assert_eq!(s, StatusCode::CREATED, "{bulk}");
    let ids: Vec<String> = serde_json::from_value(bulk["ids"].clone()).unwrap();
    let c = db.conn().await;
    let parents: Vec<Option<String>> = {
        let mut v = Vec::new();
        for id in &ids {
            v.push(api::get_task(&c, id).await.unwrap().unwrap().traceparent);
        }
        v
    };
    assert_eq!(parents, vec![Some(good.to_string()), Some(other.to_string())]);

    let before = common::sql::task_count(&**c).await;
    let (s, e) = post("/v1/tasks", json!({"type": "traced"}), Some("00-xyz-01")).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{e}");
    assert!(e.to_string().contains("traceparent"), "{e}");
    let (s, _) = post("/v1/tasks", json!({"type": "traced", "traceparent": "nope"}), None).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    let (s, _) = post("/v1/tasks/bulk", json!({"type": "traced", "tasks": [{}]}), Some("bad")).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert_eq!(common::sql::task_count(&**c).await, before, "nothing was created");
}

#[tokio::test]
async fn serve_continues_an_incoming_traceparent_and_the_task_carries_its_request_span() {
    let db = TestDb::new().await;
    let receiver = Receiver::start().await;
    common::sql::register(&**db.conn().await, "traced", json!({})).await;
    let token = "trace-token-0123456789";
    let served = common::cli::Served::start(&db.url, token, &["--otlp-endpoint", &receiver.url]).await;
    let created: Value = reqwest::Client::new()
        .post(format!("{}/v1/tasks", served.base))
        .bearer_auth(token)
        .header("traceparent", enqueue_traceparent())
        .json(&json!({"type": "traced"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let task = api::get_task(&db.conn().await, created["id"].as_str().unwrap()).await.unwrap().unwrap();
    let stored = task.traceparent.expect("the task carries a traceparent");
    assert!(stored.starts_with(&format!("00-{TRACE_ID}-")), "same trace: {stored}");
    assert_ne!(stored, enqueue_traceparent(), "the request's span, not the caller's");
    // the batch exporter sends within its delay (5 s)
    let request_span = stored[36..52].to_string();
    common::wait_until(Duration::from_secs(20), "the request's span to arrive", || {
        let found = receiver.spans().iter().any(|s| s.span_id == request_span);
        async move { found }
    })
    .await;
    let span = receiver.spans().into_iter().find(|s| s.span_id == request_span).unwrap();
    assert_eq!((span.trace_id.as_str(), span.parent_span_id.as_str()), (TRACE_ID, ENQUEUE_SPAN));
    assert_eq!(span.name, "asyncflow.request");
}

/// A run started with a traceparent keeps it and hands it to the tasks of its nodes, to its
/// sub-pipeline runs (and their tasks) and to its retries; over HTTP the header gives it; a
/// malformed one is refused and starts nothing.
#[tokio::test]
async fn a_run_hands_its_traceparent_to_its_node_tasks_sub_runs_and_retries() {
    use common::workflow::{claim, ok, pipeline, report, run};
    let db = TestDb::new().await;
    let c = db.raw().await;
    common::sql::register(&c, "wf", json!({})).await;
    pipeline(
        &c,
        "child",
        json!({"nodes": [{"name": "start", "type": "start"}, {"name": "inner", "type": "task", "function": "wf"},
            {"name": "end", "type": "end"}], "edges": [["start", "inner"], ["inner", "end"]]}),
    )
    .await;
    pipeline(
        &c,
        "parent",
        json!({"nodes": [{"name": "start", "type": "start"}, {"name": "sub", "type": "pipeline", "pipeline": "child"},
            {"name": "after", "type": "task", "function": "wf"}, {"name": "end", "type": "end"}],
            "edges": [["start", "sub"], ["sub", "after"], ["after", "end"]]}),
    )
    .await;
    let tp = enqueue_traceparent();
    let id: String =
        c.query_one("select asyncflow.start_run('parent', traceparent => $1)", &[&tp]).await.unwrap().get(0);
    assert_eq!(run(&c, &id).await["traceparent"], json!(tp));
    let traceparent_of = |task_id: String| {
        let db = &db;
        async move { api::get_task(&db.conn().await, &task_id).await.unwrap().unwrap().traceparent }
    };
    // the child run's task, then the parent's next node
    let inner = claim(&c, "wf", None).await;
    assert_eq!(inner.len(), 1);
    let child_id = inner[0].context["run_id"].as_str().unwrap().to_string();
    assert_eq!(run(&c, &child_id).await["traceparent"], json!(tp), "the sub-pipeline run");
    assert_eq!(traceparent_of(inner[0].task_id.clone()).await.as_deref(), Some(tp.as_str()));
    report(&c, vec![(&inner[0], ok(json!(1)))], None).await;
    let after = claim(&c, "wf", None).await;
    assert_eq!(after.len(), 1);
    assert_eq!(traceparent_of(after[0].task_id.clone()).await.as_deref(), Some(tp.as_str()));
    // a retry of the run keeps it
    c.query_one("select asyncflow.cancel_run($1)", &[&id]).await.unwrap();
    let retried: String = c.query_one("select asyncflow.retry_run($1)", &[&id]).await.unwrap().get(0);
    assert_eq!(run(&c, &retried).await["traceparent"], json!(tp));
    // a run without one has none, nor have its tasks
    let plain: String = c.query_one("select asyncflow.start_run('child')", &[]).await.unwrap().get(0);
    assert_eq!(run(&c, &plain).await["traceparent"], Value::Null);

    // a malformed one: AF006, no run started
    let runs = || async { c.query_one("select count(*) from asyncflow.runs", &[]).await.unwrap().get::<_, i64>(0) };
    let before = runs().await;
    for bad in [
        "nope",
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
    ] {
        let e = c.query_one("select asyncflow.start_run('parent', traceparent => $1)", &[&bad]).await.unwrap_err();
        assert_eq!(sqlstate(&e), "AF006", "{bad}");
    }
    assert_eq!(runs().await, before);

    // over HTTP: the header, or the body's field
    let app = router(db.pool.clone(), &http_config(&[], 64 * 1024));
    let post = |body: Value, traceparent: Option<String>| post_json(&app, "/v1/runs", body, traceparent);
    let (s, started) = post(json!({"pipeline": "child"}), Some(tp.clone())).await;
    assert_eq!(s, StatusCode::CREATED, "{started}");
    assert_eq!(run(&c, started["run_id"].as_str().unwrap()).await["traceparent"], json!(tp));
    let (s, e) = post(json!({"pipeline": "child", "traceparent": "bad"}), None).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{e}");
    assert_eq!(runs().await, before + 1);
}

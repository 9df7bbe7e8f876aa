//! The web dashboard in a real browser: `asyncflow serve` with a bearer token against a private
//! database, Debian's headless Chromium driven by `playwright-core` (tests/dashboard/browser.mjs),
//! and the SQL API to set the scene and to check what the page's buttons did.
//!
//! Set-up, server and script runner: tests/common/browser.rs. tests/dashboard_actions.rs drives
//! the operator's actions (filters, bulk retry, types and queues, workflow runs).
//! Screenshots of each step land in `target/tmp/dashboard/`.
use crate::common;

use asyncflow::db::api;
use asyncflow::ids::{TypeName, WorkerId};
use asyncflow::task::{NewTask, Report, ReportKind, TaskStatus};
use asyncflow::task_type::TaskTypeUpdate;
use common::browser::{browse, setup, Server, TOKEN};
use common::TestDb;
use serde_json::{json, Value};

const TYPE: &str = "dash";
/// Markup in task data must show as text and never run.
const ERROR: &str = r#"disk full <img src=x onerror="window.__pwned=true"> & <b>bold</b>"#;
const CONTEXT_HTML: &str = "<script>window.__pwned = true</script>";

/// A type with a succeeded, a failed (with markup in its error and context), a ready, a running
/// and a delayed task; the failed task's id.
async fn scene(db: &TestDb) -> String {
    let c = db.conn().await;
    api::register_task_type(&c, &TypeName::new(TYPE).unwrap(), &TaskTypeUpdate::default()).await.unwrap();
    let ok = api::create_task(&c, TYPE, &NewTask::with_context(json!({"n": 1}))).await.unwrap();
    let bad = api::create_task(&c, TYPE, &NewTask::with_context(json!({"html": CONTEXT_HTML}))).await.unwrap();
    let worker = WorkerId::new("dashboard-test-worker").unwrap();
    let claimed = api::claim_tasks(&c, TYPE, &worker, 2, None).await.unwrap();
    assert_eq!(claimed.len(), 2);
    let reports: Vec<Report> = claimed
        .iter()
        .map(|t| Report {
            task_id: t.task_id.clone(),
            claim_seq: t.claim_seq,
            kind: if t.task_id == ok {
                ReportKind::Succeed { result: json!({"done": true}) }
            } else {
                ReportKind::Fail { error: ERROR.into(), retry: false }
            },
            progress: None,
        })
        .collect();
    let results = api::report_tasks(&c, &worker, &reports, None).await.unwrap();
    assert!(results.iter().all(|r| r.accepted), "{results:?}");
    let failed = api::get_task(&c, bad.as_str()).await.unwrap().unwrap();
    assert_eq!((failed.status, failed.error.as_deref()), (TaskStatus::Failed, Some(ERROR)));

    // One ready, one running (the older of the two is claimed), one delayed.
    api::create_task(&c, TYPE, &NewTask::default()).await.unwrap();
    api::create_task(&c, TYPE, &NewTask::default()).await.unwrap();
    assert_eq!(api::claim_tasks(&c, TYPE, &worker, 1, None).await.unwrap().len(), 1);
    let later = NewTask { run_at: Some(chrono::Utc::now() + chrono::Duration::hours(1)), ..Default::default() };
    api::create_task(&c, TYPE, &later).await.unwrap();
    bad.to_string()
}

/// A workflow run waiting at its first task node (of its own type, so the type row above keeps
/// its counts); its id.
async fn run_scene(db: &TestDb) -> String {
    let c = db.conn().await;
    api::register_task_type(&c, &TypeName::new("dash_step").unwrap(), &TaskTypeUpdate::default()).await.unwrap();
    let definition = json!({"nodes": [{"name": "start", "type": "start"},
        {"name": "step", "type": "task", "function": "dash_step"}, {"name": "end", "type": "end"}],
        "edges": [["start", "step"], ["step", "end"]]});
    api::put_pipeline(&c, "dash", &definition, "active").await.unwrap();
    let start =
        asyncflow::run::StartRun { pipeline: "dash".into(), notify_key: Some("k-1".into()), ..Default::default() };
    api::start_run(&c, &start, None).await.unwrap()
}

/// What the page and its assets answer without a token, and the JSON route with and without.
async fn check_http(base: &str) {
    let client = reqwest::Client::new();
    let page = client.get(format!("{base}/")).send().await.unwrap();
    assert_eq!(page.status(), 200, "the page needs no token");
    let header = |r: &reqwest::Response, h: &str| {
        r.headers().get(h).and_then(|v| v.to_str().ok()).unwrap_or_default().to_string()
    };
    assert!(header(&page, "content-type").starts_with("text/html"));
    assert!(header(&page, "content-security-policy").contains("script-src 'self'"));
    assert!(page.text().await.unwrap().contains(r#"<script src="/dashboard/app.js" defer></script>"#));
    let missing = client.get(format!("{base}/dashboard/secret.txt")).send().await.unwrap();
    assert_eq!(missing.status(), 404, "only the page's own files are served");
    for (path, kind, file) in [
        ("/dashboard/core.js", "text/javascript", include_str!("../src/http/dashboard/core.js")),
        ("/dashboard/app.js", "text/javascript", include_str!("../src/http/dashboard/app.js")),
        ("/dashboard/style.css", "text/css", include_str!("../src/http/dashboard/style.css")),
    ] {
        let r = client.get(format!("{base}{path}")).send().await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
        assert!(header(&r, "content-type").starts_with(kind), "{path}: {}", header(&r, "content-type"));
        assert_eq!(r.text().await.unwrap(), file, "{path} is the embedded file");
    }
    let r = client.get(format!("{base}/v1/dashboard")).send().await.unwrap();
    assert_eq!(r.status(), 401, "the data needs the token");
    let r = client.get(format!("{base}/v1/dashboard")).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    let t = &body["types"][0];
    assert_eq!(t["type"], TYPE, "{body}");
    let counts: Vec<i64> = ["ready", "delayed", "running", "succeeded", "failed", "cancelled"]
        .iter()
        .map(|k| t[*k].as_i64().unwrap_or(-1))
        .collect();
    assert_eq!(counts, [1, 1, 1, 1, 1, 0], "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_a_type_finds_a_failed_task_and_retries_it_in_a_browser() {
    let (chromium, dir) = setup().await;
    let db = TestDb::new().await;
    let failed_id = scene(&db).await;
    let run_id = run_scene(&db).await;
    let positions = api::positions_of(&db.conn().await, TYPE).await.unwrap().expect("positions row");
    let server = Server::start(&db).await;
    check_http(&server.base).await;

    let env =
        [("DASHBOARD_TYPE", TYPE), ("DASHBOARD_TASK_ID", failed_id.as_str()), ("DASHBOARD_RUN_ID", run_id.as_str())];
    let seen = browse("browser.mjs", &server.base, &env, &chromium, &dir).await;
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();

    // The page loads without a token, then asks for one; with it the data shows.
    assert_eq!(seen["page_status"], 200);
    assert!(s(&seen["message_without_token"]).contains("needs a bearer token"), "{seen}");
    assert_eq!(seen["message_hidden_with_token"], true, "{seen}");
    assert_eq!(seen["token_in_storage"], TOKEN);

    // The type's row.
    let row = &seen["row"];
    let cols = ["type", "ready", "delayed", "running", "waiting", "succeeded", "failed", "cancelled"];
    let got: Vec<String> = cols.iter().map(|c| s(&row[*c])).collect();
    assert_eq!(got, [TYPE, "1", "1", "1", "0", "1", "1", "0"], "{row}");
    let lag = s(&row["lag"]);
    assert!(lag.ends_with('s') && lag.chars().any(|c| c.is_ascii_digit()), "lag: {lag:?}");
    assert_eq!(
        s(&row["shards"]),
        format!("{}..{} ({})", positions.begin_pos, positions.end_pos, positions.shards),
        "{row}"
    );
    assert_eq!(seen["throughput_shown"], true, "a throughput figure after two polls: {seen}");
    assert_eq!(s(&seen["throughput"]), "0.0/min", "nothing finished between the polls");

    // A count leads to the tasks behind it.
    assert_eq!(seen["list_shown"], true, "{seen}");
    assert_eq!(s(&seen["list_title"]), format!("Tasks: {TYPE}, failed"));
    assert_eq!(s(&seen["list_hash"]), format!("#/tasks?type={TYPE}&status=failed"), "the list is a bookmark");
    let list = seen["list"].as_array().expect("list rows");
    assert_eq!(list.len(), 1, "{list:?}");
    assert_eq!(
        (s(&list[0]["id"]), s(&list[0]["status"]), s(&list[0]["error"])),
        (failed_id.clone(), "failed".into(), ERROR.into())
    );

    // The failed task, found by its id.
    assert_eq!(seen["detail_shown"], true, "{seen}");
    assert_eq!(s(&seen["hash"]), format!("#task={failed_id}"));
    let detail = &seen["detail"];
    assert_eq!(s(&detail["status"]), "failed", "{detail}");
    // why it is where it is, from GET /v1/tasks/{id}/explain
    assert!(s(&detail["explain"]).starts_with("ended (status failed, finished_at "), "{detail}");
    assert_eq!(s(&detail["stage"]), "start");
    assert_eq!(s(&detail["type"]), TYPE);
    assert_eq!(s(&detail["attempt"]), "1");
    assert_eq!(s(&detail["error"]), ERROR, "the error shows as text, markup and all");
    assert!(s(&detail["context"]).contains(CONTEXT_HTML), "{detail}");
    assert_eq!(s(&detail["result"]), "—");
    let log = seen["log"].as_array().expect("schedule log rows");
    assert_eq!(log.len(), 1, "{log:?}");
    assert_eq!(
        (s(&log[0]["worker"]), s(&log[0]["stage"]), s(&log[0]["attempt"]), s(&log[0]["outcome"]), s(&log[0]["error"])),
        ("dashboard-test-worker".into(), "start".into(), "1".into(), "fail".into(), ERROR.into())
    );
    assert_eq!((seen["retry_enabled"].clone(), seen["cancel_enabled"].clone()), (json!(true), json!(false)));
    // Markup in task data made no element and ran nothing.
    assert_eq!(
        (seen["images"].clone(), seen["scripts"].clone(), seen["pwned"].clone()),
        (json!(0), json!(0), json!(false))
    );

    // Retry: the database has the task pending again, and so does the page.
    let task = api::get_task(&db.conn().await, &failed_id).await.unwrap().unwrap();
    assert_eq!(task.status, TaskStatus::Pending, "retried in the database");
    assert_eq!(task.schedule_log.last().and_then(|e| e.event.as_deref()), Some("retried by hand"));
    assert_eq!(seen["pending_shown"], true, "the page shows the task pending: {}", seen["after_retry"]);
    assert_eq!(s(&seen["after_retry"]["status"]), "pending");
    assert!(s(&seen["after_retry_message"]).contains("queued again"), "{seen}");
    assert_eq!(
        seen["after_retry_log"].as_array().and_then(|l| l.last()).map(|e| s(&e["outcome"])),
        Some("retried by hand".to_string())
    );
    assert_eq!(
        (seen["after_retry_retry_enabled"].clone(), seen["after_retry_cancel_enabled"].clone()),
        (json!(false), json!(true))
    );
    let after: Vec<String> = ["ready", "failed"].iter().map(|c| s(&seen["row_after_retry"][*c])).collect();
    assert_eq!(after, ["2", "0"], "{}", seen["row_after_retry"]);

    // The workflow run: listed, then opened with its nodes; Cancel run ends it.
    assert_eq!(seen["run_listed"], true, "{seen}");
    assert_eq!((s(&seen["run_row"]["pipeline"]), s(&seen["run_row"]["status"])), ("dash v1".into(), "running".into()));
    assert_eq!(s(&seen["run_title"]), format!("Run {run_id}"));
    let nodes: Vec<(String, String)> =
        seen["run_events"].as_array().expect("node rows").iter().map(|e| (s(&e["node"]), s(&e["status"]))).collect();
    assert_eq!(
        nodes,
        [("start".into(), "succeeded".into()), ("step".into(), "pending".into()), ("end".into(), "waiting".into())],
        "{seen}"
    );
    assert_eq!(seen["run_cancelled_shown"], true, "{seen}");
    let run = api::get_run(&db.conn().await, &run_id).await.unwrap().unwrap();
    assert_eq!(run["status"], "cancelled", "cancelled in the database");

    // Nothing went wrong in the page; the only console errors are the refused calls before the
    // token was saved, and the history route's 404 on a server without it (the charts then say
    // "not available").
    assert_eq!(seen["page_errors"], json!([]), "{seen}");
    let console: Vec<String> = seen["console_errors"].as_array().unwrap().iter().map(s).collect();
    assert!(console.iter().all(|e| e.contains("401") || e.contains("404")), "{console:?}");
    drop(server);
}

//! The operator's actions on the dashboard in a real browser, one browser run per action
//! (tests/dashboard/actions.mjs), the database read after each: filter and search (nothing
//! changes), bulk retry (the count first, then confirmed), pause and resume a type, set, hold
//! and remove a queue key's limit, a run's graph with a failed node, and Retry node. Also writes
//! the screenshots of the overview, a task, a queue view and a run graph to
//! `target/tmp/dashboard/` (overview.png, task.png, queues.png, run-graph.png):
//! `cargo test --test suite dashboard_actions::`.
use crate::common;

use std::path::PathBuf;

use asyncflow::db::api;
use asyncflow::ids::{TypeName, WorkerId};
use asyncflow::task::{NewTask, Report, ReportKind, TaskStatus};
use asyncflow::task_type::TaskTypeUpdate;
use common::browser::{browse, setup, Server};
use common::TestDb;
use serde_json::{json, Value};

/// The browser, its scripts' folder and the server.
struct Page {
    chromium: PathBuf,
    dir: PathBuf,
    server: Server,
}

impl Page {
    async fn open(db: &TestDb) -> Page {
        let (chromium, dir) = setup().await;
        Page { chromium, dir, server: Server::start(db).await }
    }

    /// Runs one step of actions.mjs; what the page showed. The page never threw.
    async fn step(&self, step: &str, env: &[(&str, &str)]) -> Value {
        let mut all = vec![("DASHBOARD_STEP", step)];
        all.extend_from_slice(env);
        let seen = browse("actions.mjs", &self.server.base, &all, &self.chromium, &self.dir).await;
        assert_eq!(seen["page_errors"], json!([]), "{step}: {seen}");
        seen
    }
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array().map(|a| a.iter().map(|s| s.as_str().unwrap_or_default().to_string()).collect()).unwrap_or_default()
}

/// `mail`: four tasks failed with "smtp timeout <n>", one with "dns error", one succeeded with a
/// progress report on the way; the failed ids in order, and the succeeded one.
async fn mail_scene(db: &TestDb) -> (Vec<String>, String) {
    let c = db.conn().await;
    api::register_task_type(&c, &TypeName::new("mail").unwrap(), &TaskTypeUpdate::default()).await.unwrap();
    // a history point before the scene, so the overview's charts have an interval to draw
    api::sample_stats(&c, Some(chrono::Utc::now() - chrono::Duration::minutes(2))).await.unwrap();
    let mut ids = vec![];
    for n in 0..6 {
        ids.push(api::create_task(&c, "mail", &NewTask::with_context(json!({"n": n}))).await.unwrap());
    }
    let worker = WorkerId::new("dash-worker").unwrap();
    let claimed = api::claim_tasks(&c, "mail", &worker, 6, None).await.unwrap();
    let heartbeat: Vec<Report> = claimed
        .iter()
        .map(|t| Report {
            task_id: t.task_id.clone(),
            claim_seq: t.claim_seq,
            kind: ReportKind::Heartbeat,
            progress: Some(json!({"percent": 60, "step": "sending"})),
        })
        .collect();
    assert!(api::report_tasks(&c, &worker, &heartbeat, None).await.unwrap().iter().all(|r| r.accepted));
    let reports: Vec<Report> = claimed
        .iter()
        .map(|t| {
            let n = ids.iter().position(|id| *id == t.task_id).unwrap();
            let kind = match n {
                0..=3 => ReportKind::Fail { error: format!("smtp timeout {n}"), retry: false },
                4 => ReportKind::Fail { error: "dns error".into(), retry: false },
                _ => ReportKind::Succeed { result: json!({"sent": true}) },
            };
            Report { task_id: t.task_id.clone(), claim_seq: t.claim_seq, kind, progress: None }
        })
        .collect();
    assert!(api::report_tasks(&c, &worker, &reports, None).await.unwrap().iter().all(|r| r.accepted));
    let ids: Vec<String> = ids.iter().map(|id| id.to_string()).collect();
    (ids[..5].to_vec(), ids[5].clone())
}

async fn statuses(db: &TestDb, ids: &[String]) -> Vec<TaskStatus> {
    let c = db.conn().await;
    let mut out = vec![];
    for id in ids {
        out.push(api::get_task(&c, id).await.unwrap().unwrap().status);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filters_search_and_a_confirmed_bulk_retry_work_in_a_browser() {
    let db = TestDb::new().await;
    let (failed, succeeded) = mail_scene(&db).await;
    let page = Page::open(&db).await;

    let seen = page.step("search", &[("DASHBOARD_TYPE", "mail")]).await;
    assert_eq!(seen["filtered"], true, "{seen}");
    assert_eq!(seen["filter_hash"], "#/tasks?type=mail&status=failed", "the filter is in the URL");
    let newest: Vec<String> = failed.iter().rev().cloned().collect();
    assert_eq!(strings(&seen["filter_ids"]), newest, "newest first");
    assert_eq!(seen["search_hash"], "#/tasks?type=mail&status=failed&q=smtp");
    assert_eq!(strings(&seen["search_ids"]), newest[1..], "error text found");
    assert_eq!(strings(&seen["reloaded_ids"]), newest[1..], "the bookmark gives the same list");
    assert_eq!(seen["reloaded_q"], "smtp");
    assert_eq!(seen["oldest_hash"], "#/tasks?type=mail&status=failed&q=smtp&order=oldest");
    assert_eq!(strings(&seen["oldest_ids"]), failed[..4], "oldest first when asked");
    assert_eq!(statuses(&db, &failed).await, [TaskStatus::Failed; 5], "looking changes nothing");

    let seen = page.step("bulk-retry", &[("DASHBOARD_TYPE", "mail"), ("DASHBOARD_Q", "smtp timeout")]).await;
    assert_eq!(seen["count"], "4", "the count comes first: {seen}");
    assert!(seen["count_text"].as_str().unwrap_or_default().starts_with("4 task(s)"), "{seen}");
    assert_eq!(seen["done"], true, "{seen}");
    assert_eq!(seen["message"], "4 task(s) queued again.");
    assert_eq!(strings(&seen["statuses"]), ["pending"; 4]);
    let after = statuses(&db, &failed).await;
    assert_eq!(after[..4], [TaskStatus::Pending; 4], "retried in the database");
    assert_eq!(after[4], TaskStatus::Failed, "the dns error did not match the filter");

    // screenshots: the overview and a task with its progress and timeline
    // the point the history sampler would take now: the scene's changes fall in its interval
    api::sample_stats(&db.conn().await, None).await.unwrap();
    let seen = page.step("overview", &[]).await;
    assert_eq!(seen["totals"]["failed"], "1", "{seen}");
    assert_eq!(seen["totals"]["ready"], "4", "{seen}");
    assert_eq!(seen["charts_unavailable"], false, "{seen}");
    assert_eq!(seen["charts"].as_array().map(Vec::len), Some(3), "{seen}");
    let legend = seen["legend"].as_str().unwrap_or_default();
    assert!(legend.contains("succeeded (1)") && legend.contains("failed (5)"), "the scene's calls are charted: {seen}");
    let now = chrono::Utc::now();
    let worker = api::WorkerRow {
        id: "w-<b>1</b>".into(),
        host: "box-1".into(),
        pid: 4242,
        types: vec!["mail".into()],
        in_flight: 3,
        started_at: now,
        last_seen: now,
    };
    api::heartbeat_worker(&db.conn().await, &worker, None).await.unwrap();
    let seen = page.step("workers", &[]).await;
    let rows = seen["workers"].as_array().expect("worker rows");
    assert_eq!(rows.len(), 1, "{seen}");
    let got: Vec<&str> =
        ["id", "host", "pid", "types", "in_flight"].iter().map(|k| rows[0][*k].as_str().unwrap_or_default()).collect();
    assert_eq!(got, ["w-<b>1</b>", "box-1", "4242", "mail", "3"], "markup in a worker id shows as text");
    assert!(seen["leader"].as_str().is_some_and(|l| !l.is_empty()), "{seen}");

    let seen = page.step("task", &[("DASHBOARD_TASK_ID", succeeded.as_str())]).await;
    assert_eq!(seen["progress_shown"], true, "{seen}");
    assert!(seen["progress"].as_str().unwrap_or_default().contains("sending"), "{seen}");
    assert_eq!(strings(&seen["timeline"]), ["succeed"], "{seen}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_type_is_paused_and_resumed_and_a_queue_keys_limit_is_set_held_and_removed_in_a_browser() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    let fair = TaskTypeUpdate { fair_queues: Some(true), ..Default::default() };
    api::register_task_type(&c, &TypeName::new("crawl").unwrap(), &fair).await.unwrap();
    for key in ["site-a", "site-a", "site-b"] {
        api::create_task(&c, "crawl", &NewTask { queue_key: Some(key.into()), ..Default::default() }).await.unwrap();
    }
    let page = Page::open(&db).await;
    let paused_now = || async {
        let c = db.conn().await;
        api::list_task_types(&c).await.unwrap().into_iter().find(|t| t.task_type == "crawl").unwrap().paused
    };

    let seen = page.step("pause", &[("DASHBOARD_TYPE", "crawl")]).await;
    assert_eq!(seen["shown"], true, "{seen}");
    assert_eq!(seen["title"], "Type crawl (paused)");
    assert!(paused_now().await, "paused in the database");
    let seen = page.step("resume", &[("DASHBOARD_TYPE", "crawl")]).await;
    assert_eq!((seen["shown"].clone(), seen["title"].clone()), (json!(true), json!("Type crawl")), "{seen}");
    assert!(!paused_now().await, "resumed in the database");

    let limit_now = || async {
        let c = db.conn().await;
        let keys = api::queue_keys(&c, "crawl", None, 100).await.unwrap();
        keys.into_iter().find(|k| k.queue_key == "site-a").unwrap().concurrency
    };
    let key = [("DASHBOARD_TYPE", "crawl"), ("DASHBOARD_KEY", "site-a"), ("DASHBOARD_LIMIT", "2")];
    let seen = page.step("limit", &key).await;
    assert_eq!((seen["before"].clone(), seen["after"].clone()), (json!("—"), json!("2")), "{seen}");
    assert_eq!(limit_now().await, Some(2), "the key's limit in the database");
    let seen = page.step("hold", &key).await;
    assert_eq!(seen["after"], "held", "{seen}");
    let keys = seen["keys"].as_array().expect("queue rows");
    assert_eq!(keys.len(), 2, "{seen}");
    assert_eq!((keys[0]["queue_key"].clone(), keys[0]["ready"].clone()), (json!("site-a"), json!("2")));
    assert_eq!(limit_now().await, Some(0), "held in the database");
    let seen = page.step("release", &key).await;
    assert_eq!(seen["after"], "—", "{seen}");
    assert_eq!(limit_now().await, None, "no limit in the database");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runs_graph_shows_its_failed_node_and_retry_node_resumes_it_in_a_browser() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    api::register_task_type(&c, &TypeName::new("wf_step").unwrap(), &TaskTypeUpdate::default()).await.unwrap();
    let definition = json!({"nodes": [{"name": "start", "type": "start"},
        {"name": "fetch", "type": "task", "function": "wf_step"}, {"name": "end", "type": "end"}],
        "edges": [["start", "fetch"], ["fetch", "end"]]});
    common::workflow::pipeline(&**c, "dag", definition).await;
    let run_id = common::workflow::start(&**c, "dag", json!({}), None, None).await;
    let claimed = common::workflow::claim(&**c, "wf_step", None).await;
    assert_eq!(claimed.len(), 1);
    let failure = json!({"outcome": "fail", "error": "upstream <b>down</b>", "retry": false});
    assert_eq!(common::workflow::report(&**c, vec![(&claimed[0], failure)], None).await, [true]);
    let run = common::workflow::run(&**c, &run_id).await;
    assert_eq!(common::workflow::event(&run, "fetch")["status"], "failed", "{run}");
    let page = Page::open(&db).await;

    let seen = page.step("dag", &[("DASHBOARD_RUN_ID", run_id.as_str())]).await;
    let nodes = seen["nodes"].as_array().expect("graph nodes");
    let of = |name: &str| nodes.iter().find(|n| n["node"] == name).cloned().unwrap_or(Value::Null);
    assert_eq!(nodes.len(), 3, "{seen}");
    assert_eq!(strings(&seen["edges"]), ["start>fetch", "fetch>end"]);
    assert_eq!(of("start")["status"], "succeeded");
    assert_eq!(of("fetch")["status"], "failed", "{seen}");
    assert!(of("fetch")["class"].as_str().unwrap_or_default().contains("status-failed"));
    assert_eq!(of("fetch")["stroke"], seen["failed_colour"], "the failed node is drawn in the failed colour");
    assert_ne!(of("start")["stroke"], seen["failed_colour"]);
    assert_eq!(of("fetch")["label"], "task · failed");

    let seen = page.step("retry-node", &[("DASHBOARD_RUN_ID", run_id.as_str()), ("DASHBOARD_NODE", "fetch")]).await;
    assert_eq!(seen["retried_shown"], true, "{seen}");
    let run = common::workflow::run(&**c, &run_id).await;
    assert_eq!(run["status"], "running", "the run goes on in the database: {run}");
    let fetch = common::workflow::event(&run, "fetch");
    assert!(fetch["status"] == "pending" || fetch["status"] == "running", "{fetch}");
    let after = seen["nodes_after"].as_array().expect("graph after");
    let shown = after.iter().find(|n| n["node"] == "fetch").map(|n| n["status"].clone());
    assert_eq!(shown, Some(fetch["status"].clone()), "the page shows what the database has");
}

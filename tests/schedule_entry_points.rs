//! Periodic schedules through their entry points: the HTTP API, `[[schedules]]` in a
//! `function.toml` applied when a worker starts, and the metrics.
use crate::common;

use std::time::Duration;

use asyncflow::db::api;
use asyncflow::function::registry;
use asyncflow::http::router;
use asyncflow::task_type::TaskTypeUpdate;
use asyncflow::worker::{Worker, WorkerConfig};
use asyncflow::{TypeName, WorkerId};
use common::{http_config, request, Folder, TestDb};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

#[tokio::test]
async fn schedules_are_set_listed_paused_resumed_and_removed_over_http() {
    let db = TestDb::new().await;
    api::register_task_type(&db.conn().await, &TypeName::new("report").unwrap(), &TaskTypeUpdate::default())
        .await
        .unwrap();
    let app = router(db.pool.clone(), &http_config(&[], 64 * 1024));
    let call = |method: &'static str, uri: &'static str, body: Option<Value>| {
        let app = app.clone();
        async move {
            let (status, _, bytes) =
                request(&app, method, uri, body.map(|b| b.to_string()), Some("application/json"), None).await;
            (status.as_u16(), serde_json::from_slice::<Value>(&bytes).unwrap_or(Value::Null))
        }
    };
    // a cron the library refuses never reaches the database
    let (status, body) =
        call("PUT", "/v1/schedules/nightly", Some(json!({"cron": "0 25 * * *", "spec": {"type": "report"}}))).await;
    assert_eq!(status, 400, "{body}");
    assert!(body["message"].as_str().unwrap_or_default().contains("cron"), "{body}");
    let (status, body) =
        call("PUT", "/v1/schedules/nightly", Some(json!({"cron": "0 3 * * *", "spec": {"type": "nope"}}))).await;
    assert_eq!((status, body["code"].as_str()), (404, Some("unknown_task_type")));
    let (status, body) = call(
        "PUT",
        "/v1/schedules/nightly",
        Some(json!({"cron": "0 3 * * *", "spec": {"type": "report", "time_zone": "Asia/Tokyo", "missed": "last"}})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!((body["name"].clone(), body["missed"].clone()), (json!("nightly"), json!("last")));

    let (status, body) = call("POST", "/v1/schedules/nightly/pause", None).await;
    assert_eq!((status, body["paused"].clone()), (200, json!(true)));
    let (status, body) = call("POST", "/v1/schedules/nightly/resume", None).await;
    assert_eq!((status, body["paused"].clone()), (200, json!(false)));
    assert_eq!(call("POST", "/v1/schedules/other/pause", None).await.0, 404);
    let (status, body) = call("GET", "/v1/schedules", None).await;
    assert_eq!((status, body.as_array().map(Vec::len)), (200, Some(1)));

    // the schedule shows in the metrics
    let (status, _, text) = request(&app, "GET", "/metrics", None, None, None).await;
    let text = String::from_utf8(text).unwrap();
    assert_eq!(status.as_u16(), 200);
    assert!(text.contains("asyncflow_schedule_paused{schedule=\"nightly\"} 0"), "{text}");

    assert_eq!(call("DELETE", "/v1/schedules/nightly", None).await.0, 204);
    assert_eq!(call("DELETE", "/v1/schedules/nightly", None).await.0, 404);
}

#[tokio::test]
async fn a_function_toml_declares_schedules_that_a_starting_worker_sets_and_maintenance_releases() {
    let db = TestDb::new().await;
    let folder = Folder::new(&[(
        "digest",
        "command = [\"./run\"]\n\n[[schedules]]\nname = \"digest.every-second\"\ncron = \"* * * * * *\"\n\
         context = { kind = \"digest\" }\nmissed = \"all\"\n",
        "cat >/dev/null; echo '{\"result\": {\"ok\": true}}'",
    )]);
    let specs = registry::load_dir(&folder.0).unwrap();
    let config = WorkerConfig {
        worker_id: WorkerId::new("sched-worker").unwrap(),
        concurrency: 2,
        shutdown_grace: Duration::from_millis(300),
        ..WorkerConfig::default()
    };
    let worker = Worker::new(db.pool.clone(), db.url.clone(), config).register_specs(specs.values()).unwrap();
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(worker.run(shutdown.clone()));
    let c = db.conn().await;
    common::wait_until(Duration::from_secs(10), "the schedule is set", || async {
        api::list_schedules(&db.conn().await).await.map(|s| s.len() == 1).unwrap_or(false)
    })
    .await;
    let scheduler = asyncflow::maintenance::Scheduler::new(db.pool.clone(), Duration::from_secs(1));
    asyncflow::maintenance::Service::run_once(&scheduler, None).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    asyncflow::maintenance::Service::run_once(&scheduler, None).await.unwrap();
    let s = &api::list_schedules(&c).await.unwrap()[0];
    let task_id = s.last_task_id.clone().expect("a task released");
    common::wait_until(Duration::from_secs(10), "the released task succeeds", || async {
        let t = api::get_task(&db.conn().await, &task_id).await.unwrap().unwrap();
        t.status == asyncflow::task::TaskStatus::Succeeded
    })
    .await;
    let task = api::get_task(&c, &task_id).await.unwrap().unwrap();
    assert_eq!(task.schedule.as_deref(), Some("digest.every-second"));
    assert_eq!(task.tick, s.last_tick);
    assert_eq!(task.context, json!({"kind": "digest"}));
    shutdown.cancel();
    running.await.unwrap().unwrap();
}

#[test]
fn a_bad_schedule_in_function_toml_names_the_file_and_the_schedule() {
    let folder = Folder::new(&[(
        "digest",
        "command = [\"./run\"]\n[[schedules]]\nname = \"d\"\ncron = \"* * 32 * *\"\n",
        "true",
    )]);
    let e = registry::load_dir(&folder.0).unwrap_err().to_string();
    assert!(e.contains("function.toml") && e.contains("schedules \"d\""), "{e}");
    let folder = Folder::new(&[(
        "digest",
        "command = [\"./run\"]\n[[schedules]]\nname = \"d\"\ncron = \"@daily\"\ncolour = 1\n",
        "true",
    )]);
    assert!(registry::load_dir(&folder.0).unwrap_err().to_string().contains("colour"));
}

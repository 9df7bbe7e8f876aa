//! The library as docs/rust.md shows it: the examples of examples/ run against a fresh database,
//! and the test helpers of `asyncflow::testing` do what they say.
use crate::common;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use asyncflow::db::api;
use asyncflow::function::{StageCall, StageReply};
use asyncflow::task::{NewTask, TaskStatus};
use asyncflow::testing::{enqueued_here, require_enqueued, work_until_idle, TestDatabase};
use asyncflow::worker::{Worker, WorkerConfig};
use asyncflow::TypeName;
use common::TestDb;
use serde_json::json;

/// Runs `examples/<name>.rs`, built by `cargo test` (or `cargo build --examples`), on `url`.
fn run_example(name: &str, url: &str) -> String {
    let exe = std::env::current_exe().expect("the test binary");
    let path: PathBuf =
        exe.parent().and_then(|deps| deps.parent()).expect("target/<profile>").join("examples").join(name);
    assert!(path.exists(), "{} is not built: run cargo build --examples (cargo test builds it)", path.display());
    let out = Command::new(&path).env("DATABASE_URL", url).output().expect("run the example");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{name}: {:?}\n{stdout}\n{stderr}", out.status);
    stdout.to_string()
}

#[tokio::test]
async fn the_enqueue_example_commits_a_task_with_its_row_and_rolls_one_back() {
    let db = TestDb::new().await;
    let out = tokio::task::spawn_blocking({
        let url = db.url.clone();
        move || run_example("enqueue", &url)
    })
    .await
    .unwrap();
    let id = out.lines().find_map(|l| l.strip_prefix("enqueued ")).expect("the enqueued id").to_string();
    assert!(out.contains(&format!("{id}: status Pending, stage start")), "{out}");
    assert!(out.contains("after rollback: absent"), "{out}");
    let task = api::get_task(&db.conn().await, &id).await.unwrap().expect("committed");
    assert_eq!(task.context, json!({"order": 42}));
    let orders: i64 =
        db.raw().await.query_one("select count(*) from public.orders where id = 42", &[]).await.unwrap().get(0);
    assert_eq!(orders, 1);
}

#[tokio::test]
async fn the_worker_example_runs_its_tasks_to_the_end_and_stops_cleanly() {
    let db = TestDb::new().await;
    let out = tokio::task::spawn_blocking({
        let url = db.url.clone();
        move || run_example("worker", &url)
    })
    .await
    .unwrap();
    for name in ["Ada", "Grace", "Edsger"] {
        let line = out.lines().find(|l| l.contains(&format!("hello, {name}!"))).unwrap_or_else(|| panic!("{out}"));
        assert!(line.contains("Succeeded"), "{line}");
    }
    assert!(out.contains("worker stopped:") && out.contains("3 succeeded"), "{out}");
}

#[tokio::test]
async fn the_test_helpers_see_this_transactions_tasks_and_work_a_queue_off() {
    let db = TestDatabase::create(&common::admin_url().await).await.unwrap();
    let mail = TypeName::new("mail").unwrap();
    api::register_task_type(&db.pool.get().await.unwrap(), &mail, &Default::default()).await.unwrap();
    // A task committed before is not this transaction's.
    api::create_task(&db.pool.get().await.unwrap(), "mail", &NewTask::with_context(json!({"to": "old"})))
        .await
        .unwrap();

    let mut conn = db.pool.get().await.unwrap();
    let tx = conn.transaction().await.unwrap();
    assert!(enqueued_here(&tx, "mail").await.unwrap().is_empty());
    for to in ["ada", "grace"] {
        let context = json!({"to": to, "template": "welcome", "tags": ["new", to]});
        api::create_task(&tx, "mail", &NewTask::with_context(context)).await.unwrap();
    }
    let here = enqueued_here(&tx, "mail").await.unwrap();
    assert_eq!(here.iter().map(|t| t.context["to"].clone()).collect::<Vec<_>>(), [json!("ada"), json!("grace")]);
    let grace = require_enqueued(&tx, "mail", &json!({"to": "grace", "tags": ["new"]})).await.unwrap();
    assert_eq!(grace.context["to"], "grace");
    let err = require_enqueued(&tx, "mail", &json!({"to": "old"})).await.unwrap_err().to_string();
    assert!(err.contains("enqueued no mail task whose context contains") && err.contains("2 mail task(s)"), "{err}");
    tx.commit().await.unwrap();
    drop(conn);

    // The worker works the three tasks off and stops by itself.
    let handler =
        |call: StageCall| async move { StageReply::Succeeded { result: json!({"sent": call.context["to"]}) } };
    let worker = Worker::new(db.pool.clone(), db.url.clone(), WorkerConfig::default()).register(
        mail,
        handler,
        None,
        Default::default(),
    );
    let summary = tokio::time::timeout(Duration::from_secs(60), work_until_idle(worker)).await.expect("idle").unwrap();
    assert_eq!(summary.succeeded, 3, "{summary:?}");
    let depth = api::queue_depth(&db.pool.get().await.unwrap()).await.unwrap();
    assert!(depth.iter().all(|d| d.ready == 0 && d.running == 0), "{depth:?}");
    let tasks = api::list_tasks(&db.pool.get().await.unwrap(), &Default::default()).await.unwrap();
    assert!(tasks.iter().all(|t| t.status == TaskStatus::Succeeded), "{tasks:?}");

    let name = db.name.clone();
    db.drop_database().await.unwrap();
    let left: i64 = common::superuser()
        .await
        .query_one("select count(*) from pg_database where datname = $1", &[&name])
        .await
        .unwrap()
        .get(0);
    assert_eq!(left, 0);
}

//! Deploying in either order: an application enqueues a type nothing has registered yet (it is
//! registered with the default settings, as River and Oban take any kind) and a worker started
//! later runs it with its function.toml settings; or the worker comes first. The application runs
//! as a role granted only `asyncflow_client`, through SQL, HTTP and the command line.
use crate::common;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use asyncflow::http::router;
use common::cli::{asyncflow, ok};
use common::{http_config, request, sqlstate, Folder, TestDb};
use serde_json::{json, Value};

/// A login role granted only `asyncflow_client`, dropped at the end of the test.
struct ClientRole(String);

impl ClientRole {
    async fn new() -> ClientRole {
        let name = format!("app_{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
        let su = common::superuser().await;
        su.batch_execute(&format!("create role {name} login; grant asyncflow_client to {name}")).await.unwrap();
        ClientRole(name)
    }
}

impl Drop for ClientRole {
    fn drop(&mut self) {
        let name = self.0.clone();
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
            rt.block_on(async {
                let su = common::superuser().await;
                let _ = su.batch_execute(&format!("drop role if exists {name}")).await;
            });
        })
        .join();
    }
}

/// A worker process, killed when dropped.
struct Worker(Child);

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One function whose function.toml sets an initial stage and a lease; it answers its stage.
fn folder(task_type: &str) -> Folder {
    let toml = "command = [\"./run\"]\n[settings]\ninitial_stage = \"begin\"\nmax_processing_time = 77\n";
    Folder::new(&[(
        task_type,
        toml,
        r#"stage=$(sed 's/.*"stage":"\([^"]*\)".*/\1/'); echo "{\"result\": {\"ran\": \"$stage\"}}""#,
    )])
}

async fn settings(db: &TestDb, task_type: &str) -> Option<(String, i32)> {
    let c = db.conn().await;
    let row = c
        .query_opt(
            "select initial_stage, max_processing_time from asyncflow.task_types where task_type = $1",
            &[&task_type],
        )
        .await
        .unwrap();
    row.map(|r| (r.get(0), r.get(1)))
}

async fn task(db: &TestDb, id: &str) -> Value {
    common::sql::task(&db.raw().await, id).await
}

#[tokio::test]
async fn an_application_deployed_first_enqueues_and_a_later_worker_runs_it_with_its_settings() {
    let db = TestDb::new().await;
    let role = ClientRole::new().await;
    let url = common::server_url(&db.name, &role.0).await;
    let (app, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(conn);

    // A name that breaks the rule is refused, and nothing is registered.
    let e = app.query_one("select asyncflow.create_task('Late-Type', '{}')", &[]).await.unwrap_err();
    assert_eq!(sqlstate(&e), "AF003", "{e}");
    let e = app.query("select asyncflow.create_tasks('1late', '[{}]')", &[]).await.unwrap_err();
    assert_eq!(sqlstate(&e), "AF003", "{e}");
    let types: i64 = db.conn().await.query_one("select count(*) from asyncflow.task_types", &[]).await.unwrap().get(0);
    assert_eq!(types, 0);

    // Nothing has registered `late`: the client role enqueues it all the same, in SQL (one, many,
    // with a unique key), over HTTP and with the command line.
    let one: String = app.query_one("select asyncflow.create_task('late', '{\"n\": 1}')", &[]).await.unwrap().get(0);
    assert_eq!(one, "late-1-1");
    assert_eq!(settings(&db, "late").await, Some(("start".into(), 300)), "registered with the defaults");
    let many = app.query("select asyncflow.create_tasks('late_bulk', '[{}, {}]') as id", &[]).await.unwrap();
    assert_eq!(many.len(), 2);
    let unique: String =
        app.query_one("select asyncflow.create_task('late_unique', unique_key => 'u')", &[]).await.unwrap().get(0);
    assert_eq!(unique, "late_unique-1-1");
    let pool = asyncflow::db::pool(&url, 2).unwrap();
    let http = router(pool, &http_config(&[], 64 * 1024));
    let body = json!({"type": "late_http", "context": {"n": 2}}).to_string();
    let (status, _, answer) = request(&http, "POST", "/v1/tasks", Some(body), Some("application/json"), None).await;
    assert_eq!(status.as_u16(), 201, "{}", String::from_utf8_lossy(&answer));
    let body = json!({"type": "late_http_bulk", "tasks": [{}]}).to_string();
    let (status, _, answer) =
        request(&http, "POST", "/v1/tasks/bulk", Some(body), Some("application/json"), None).await;
    assert_eq!(status.as_u16(), 201, "{}", String::from_utf8_lossy(&answer));
    let u = url.clone();
    let by_cli =
        tokio::task::spawn_blocking(move || ok(&asyncflow(Some(&u), &["task", "create", "late_cli"]))).await.unwrap();
    let by_cli: Value = serde_json::from_str(&by_cli).unwrap();
    assert_eq!((by_cli["id"].as_str(), &by_cli["created"]), (Some("late_cli-1-1"), &json!(true)), "{by_cli}");
    for ty in ["late_bulk", "late_unique", "late_http", "late_http_bulk", "late_cli"] {
        assert!(settings(&db, ty).await.is_some(), "{ty} registered");
    }

    // The worker, deployed later, registers its settings and runs the task queued before it.
    let functions = folder("late");
    let (u, f) = (db.url.clone(), functions.0.to_str().unwrap().to_string());
    tokio::task::spawn_blocking(move || {
        ok(&asyncflow(
            Some(&u),
            &["worker", "--functions", &f, "--types", "late", "--exit-when-idle", "--no-maintenance"],
        ))
    })
    .await
    .unwrap();
    assert_eq!(settings(&db, "late").await, Some(("begin".into(), 77)), "function.toml's settings");
    let done = task(&db, &one).await;
    // the stage was copied onto the task when it was created, before the worker set another
    assert_eq!((done["status"].as_str(), done["stage"].as_str()), (Some("succeeded"), Some("start")), "{done}");
    assert_eq!(done["result"], json!({"ran": "start"}), "{done}");
    // and tasks enqueued from now on take the type's new settings
    let next: String = app.query_one("select asyncflow.create_task('late')", &[]).await.unwrap().get(0);
    assert_eq!(task(&db, &next).await["stage"], "begin");
    drop(app);
}

#[tokio::test]
async fn a_worker_deployed_first_registers_the_type_and_runs_what_the_application_then_enqueues() {
    let db = TestDb::new().await;
    let role = ClientRole::new().await;
    let url = common::server_url(&db.name, &role.0).await;
    let functions = folder("early");
    let log = functions.0.join("worker.log");
    let _worker = Worker(
        Command::new(env!("CARGO_BIN_EXE_asyncflow"))
            .args(["worker", "--functions", functions.0.to_str().unwrap(), "--types", "early", "--no-maintenance"])
            .env("DATABASE_URL", &db.url)
            .env_remove("ASYNCFLOW_SERVER")
            .env_remove("ASYNCFLOW_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    common::wait_until(Duration::from_secs(60), "the worker to register early", || async {
        settings(&db, "early").await.is_some()
    })
    .await;
    assert_eq!(settings(&db, "early").await, Some(("begin".into(), 77)));

    let (app, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(conn);
    let id: String = app.query_one("select asyncflow.create_task('early', '{}')", &[]).await.unwrap().get(0);
    common::wait_until(Duration::from_secs(60), "the task to succeed", || async {
        task(&db, &id).await["status"] == "succeeded"
    })
    .await;
    let done = task(&db, &id).await;
    assert_eq!((done["stage"].as_str(), &done["result"]), (Some("begin"), &json!({"ran": "begin"})), "{done}");
    assert_eq!(settings(&db, "early").await, Some(("begin".into(), 77)), "the enqueue changed no setting");
    drop(app);
}

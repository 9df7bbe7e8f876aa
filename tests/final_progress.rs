//! The last progress a call reports is written with its reply, fenced like the reply: a value
//! reported just before the reply never reached the task, since progress rode only on heartbeats
//! (and a warm instance's progress line read after its reply was dropped). Each kind of function
//! reports 100 % just before it replies, through a database worker and through `worker --server`.
use crate::common;

use std::path::PathBuf;

use asyncflow::db::api;
use asyncflow::task::TaskStatus;
use common::cli::{asyncflow, ok, Served};
use common::{Folder, TestDb};
use serde_json::{json, Value};

const TOKEN: &str = "final-progress-token-0123456789";

fn sdk(file: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("functions/sdk").join(file);
    path.to_str().expect("a UTF-8 path").to_string()
}

/// An endpoint that answers every stage call with a success and its last progress.
async fn http_function() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let reply = || async { axum::Json(json!({"result": {"done": true}, "progress": {"percent": 100}})) };
    let app = axum::Router::new().route("/", axum::routing::post(reply));
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/")
}

/// Each reports `{"percent": 100}` just before its reply, and nothing before: an executable (a
/// progress line on stderr, then the reply at once), warm Python and Node functions on the helper
/// libraries (their only `progress()` call), an HTTP endpoint (in its reply).
fn functions(http: &str) -> Folder {
    let folder = Folder::new(&[
        (
            "fin_exec",
            "command = [\"./run\"]\n",
            "cat >/dev/null\necho 'asyncflow:progress {\"percent\": 100}' >&2\necho '{\"result\": {\"done\": true}}'",
        ),
        ("fin_python", "command = [\"./run\"]\nmode = \"warm\"\n", "exec python3 fn.py"),
        ("fin_node", "command = [\"./run\"]\nmode = \"warm\"\n", "exec node fn.js"),
        ("fin_http", &format!("url = \"{http}\"\n"), "exit 1"),
    ]);
    let python = format!(
        "import sys\nsys.path.insert(0, {:?})\nimport asyncflow_function\n\n\
         def handle(call):\n    asyncflow_function.progress({{\"percent\": 100}})\n    return {{\"result\": {{\"done\": True}}}}\n\n\
         asyncflow_function.run(handle)\n",
        sdk("python")
    );
    std::fs::write(folder.0.join("fin_python/fn.py"), python).unwrap();
    let node = format!(
        "const {{ run, progress }} = require({:?});\n\
         run(async () => {{\n  progress({{ percent: 100 }});\n  return {{ result: {{ done: true }} }};\n}});\n",
        sdk("node/asyncflow-function.js")
    );
    std::fs::write(folder.0.join("fin_node/fn.js"), node).unwrap();
    folder
}

const TYPES: [&str; 4] = ["fin_exec", "fin_python", "fin_node", "fin_http"];

/// Enqueues two tasks of each type (a warm instance's first and second call), runs `args` (a
/// worker with `--exit-when-idle`) and checks that each task succeeded showing 100 %.
async fn every_task_ends_at_100_percent(db: &TestDb, url: Option<String>, args: Vec<String>) {
    let c = db.conn().await;
    let mut ids = vec![];
    for ty in TYPES {
        for _ in 0..2 {
            ids.push(api::create_task(&c, ty, &Default::default()).await.unwrap());
        }
    }
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        ok(&asyncflow(url.as_deref(), &args))
    })
    .await
    .unwrap();
    for id in &ids {
        let t = api::get_task(&c, id.as_str()).await.unwrap().unwrap();
        let seen: (TaskStatus, Option<Value>) = (t.status, t.progress.clone());
        assert_eq!(seen, (TaskStatus::Succeeded, Some(json!({"percent": 100}))), "{id}: {:?}", t.schedule_log);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_worker_writes_the_progress_reported_just_before_the_reply_of_every_kind_of_function() {
    let db = TestDb::new().await;
    let folder = functions(&http_function().await);
    let args = ["worker", "--functions", folder.0.to_str().unwrap(), "--exit-when-idle", "--no-maintenance"];
    every_task_ends_at_100_percent(&db, Some(db.url.clone()), args.map(String::from).to_vec()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_on_a_server_writes_the_progress_reported_just_before_the_reply_of_every_kind_of_function() {
    let db = TestDb::new().await;
    let server = Served::start(&db.url, TOKEN, &[]).await;
    let folder = functions(&http_function().await);
    let functions = folder.0.to_str().unwrap();
    let args = ["worker", "--server", &server.base, "--token", TOKEN, "--functions", functions, "--exit-when-idle"];
    every_task_ends_at_100_percent(&db, None, args.map(String::from).to_vec()).await;
    drop(server);
}

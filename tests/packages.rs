//! The Python and Node packages (packages/): each one's own tests against a real database and a
//! real `asyncflow serve`, run by the language's own test runner; and `GET /v1/tasks/{id}?wait=`,
//! the long-poll their HTTP clients wait with. A language or a library the packages need that is
//! missing fails the test with how to install it (as .ci/run does), never skips it.
use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::cli::Served;
use common::{http_config, request, TestDb};
use serde_json::Value;

/// The bearer token of the servers these tests start.
const TOKEN: &str = "packages-test-token-0123456789";

pub fn packages() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("packages")
}

/// Panics with how to install it unless `python3` can import psycopg.
pub fn need_psycopg() {
    let ok = Command::new("python3").args(["-c", "import psycopg"]).output().map(|o| o.status.success());
    assert!(
        matches!(ok, Ok(true)),
        "python3 with psycopg 3 is needed by the Python package's tests: \
         `python3 -m pip install 'psycopg[binary]'` (or `psycopg` with the system's libpq), as .ci/run does"
    );
}

/// Runs a command to its end and panics with its output unless it succeeded.
pub fn run_ok(cmd: &mut Command, what: &str) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{what} failed ({:?}):\n{text}", out.status);
    text
}

/// python3 with the package of this repository importable (not installed).
pub fn python(dir: &Path) -> Command {
    let mut cmd = Command::new("python3");
    cmd.current_dir(dir).env("PYTHONPATH", packages().join("python")).env("PYTHONDONTWRITEBYTECODE", "1");
    cmd
}

#[tokio::test(flavor = "multi_thread")]
async fn the_python_package_passes_its_own_tests_on_a_real_database_and_server() {
    need_psycopg();
    let db = TestDb::new().await;
    let served = Served::start(&db.url, TOKEN, &[]).await;
    let out = run_ok(
        python(&packages().join("python"))
            .args(["-m", "unittest", "discover", "-v", "-s", "tests"])
            .env("ASYNCFLOW_TEST_URL", &db.url)
            .env("ASYNCFLOW_TEST_SERVER", &served.base)
            .env("ASYNCFLOW_TEST_TOKEN", TOKEN),
        "python -m unittest (packages/python)",
    );
    // every test ran, none skipped (the HTTP client's need the server given above)
    assert!(!out.contains("skipped"), "a Python test was skipped:\n{out}");
    assert!(out.contains("the_http_client_makes_the_same_calls"), "{out}");
}

#[tokio::test]
async fn get_task_with_wait_answers_once_the_task_ends_or_as_it_is_when_the_wait_runs_out() {
    let db = TestDb::new().await;
    let app = asyncflow::http::router(db.pool.clone(), &http_config(&[], 1 << 20));
    let c = db.conn().await;
    common::sql::register(&**c, "waited", serde_json::json!({})).await;
    let id: String = c.query_one("select asyncflow.create_task('waited')", &[]).await.unwrap().get(0);
    let get = |uri: String| {
        let app = app.clone();
        async move {
            let (status, _, body) = request(&app, "GET", &uri, None, None, None).await;
            (status.as_u16(), serde_json::from_slice::<Value>(&body).unwrap_or(Value::Null))
        }
    };
    // the wait runs out: 200 with the task as it is
    let started = Instant::now();
    let (status, task) = get(format!("/v1/tasks/{id}?wait=0.3")).await;
    assert_eq!((status, task["status"].as_str()), (200, Some("pending")));
    assert!(started.elapsed() >= Duration::from_millis(300), "answered before the wait ran out");
    // the task ends during the wait: answered then, not at the end of the wait
    let cancel = {
        let pool = db.pool.clone();
        let id = id.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let c = pool.get().await.unwrap();
            c.execute("select asyncflow.cancel_task($1)", &[&id]).await.unwrap();
        })
    };
    let started = Instant::now();
    let (status, task) = get(format!("/v1/tasks/{id}?wait=60")).await;
    cancel.await.unwrap();
    assert_eq!((status, task["status"].as_str()), (200, Some("cancelled")));
    assert!(started.elapsed() < Duration::from_secs(30), "the long-poll did not answer when the task ended");
    // an ended task is answered at once; no wait is today's read
    assert_eq!(get(format!("/v1/tasks/{id}?wait=60")).await.1["status"], "cancelled");
    assert_eq!(get(format!("/v1/tasks/{id}")).await.0, 200);
    // a wait outside 0..60, or not a number, or another parameter: 400; no task: 404
    for bad in ["wait=61", "wait=-1", "wait=soon", "wait=NaN", "other=1"] {
        assert_eq!(get(format!("/v1/tasks/{id}?{bad}")).await.0, 400, "{bad}");
    }
    assert_eq!(get("/v1/tasks/waited-1-999999?wait=1".into()).await.0, 404);
}

/// A function folder with one warm function, `run` being `body` (a sh script), with `toml`.
fn one_function(name: &str, toml: &str, body: &str, files: &[(&str, &str)]) -> common::Folder {
    let folder = common::Folder::new(&[(name, toml, body)]);
    for (file, text) in files {
        std::fs::write(folder.0.join(name).join(file), text).expect("function file");
    }
    folder
}

/// The real worker binary on `folder`, killed when the test ends.
pub struct Worker(std::process::Child);

impl Worker {
    pub fn start(db: &TestDb, folder: &Path, concurrency: &str) -> Worker {
        let child = Command::new(env!("CARGO_BIN_EXE_asyncflow"))
            .args(["worker", "--no-maintenance", "--concurrency", concurrency, "--functions"])
            .arg(folder)
            .env("DATABASE_URL", &db.url)
            .env("PYTHONPATH", packages().join("python"))
            .env("NODE_PATH", packages().join("node").join("node_modules"))
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start the worker binary");
        Worker(child)
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A Python function on the package: `async def`, sleeps `context.s` seconds, answers its pid and
/// how many of its calls were in flight at most while it ran.
const PY_FUNCTION: &str = r#"
import asyncio, os
from asyncflow.function import run, progress

now = 0
most = 0

async def handle(call):
    global now, most
    now += 1
    most = max(most, now)
    try:
        progress({"started": True})
        await asyncio.sleep(call["context"].get("s", 0))
        return {"result": {"pid": os.getpid(), "most": most, "echo": call["context"].get("echo")}}
    finally:
        now -= 1

run(handle)
"#;

/// The application: enqueues in its transaction (and rolls another back), then waits.
const PY_APP: &str = r#"
import json, os, sys
import psycopg
import asyncflow

url = os.environ["DATABASE_URL"]
with psycopg.connect(url) as conn:                       # committed at the end of the block
    ids = [asyncflow.enqueue(conn, "pyconc", {"s": 0.5, "echo": n}) for n in range(20)]
    stuck = asyncflow.enqueue(conn, "pyconc", {"s": 600})
rolled = psycopg.connect(url)
gone = asyncflow.enqueue(rolled, "pyconc", {"s": 0})
rolled.rollback()
rolled.close()
with psycopg.connect(url, autocommit=True) as conn:
    tasks = [asyncflow.wait(conn, i, timeout=120) for i in ids]
    failed = asyncflow.wait(conn, stuck, timeout=120)
    after = asyncflow.enqueue(conn, "pyconc", {"s": 0, "echo": "after"})
    last = asyncflow.wait(conn, after, timeout=120)
    print(json.dumps({
        "results": [t.result for t in tasks],
        "statuses": sorted({t.status for t in tasks}),
        "stuck": [failed.status, failed.error],
        "gone": asyncflow.get_task(conn, gone) is None,
        "after": last.result,
    }))
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_python_application_enqueues_in_its_transaction_and_waits_for_a_concurrent_warm_python_function() {
    need_psycopg();
    let db = TestDb::new().await;
    let folder = one_function(
        "pyconc",
        "command = [\"./run\"]\nmode = \"warm\"\ninstances = 1\nconcurrency = 50\ntimeout = 3\n\
         [settings]\nmax_retry_num = 0\nschedule_interval = 0.2\n",
        "exec python3 ./function.py",
        &[("function.py", PY_FUNCTION), ("app.py", PY_APP)],
    );
    let _worker = Worker::start(&db, &folder.0, "100");
    // the worker registers the type when it starts
    let c = db.conn().await;
    common::wait_until(Duration::from_secs(30), "the worker to register pyconc", || async {
        c.query_opt("select 1 from asyncflow.task_types where task_type = 'pyconc'", &[]).await.ok().flatten().is_some()
    })
    .await;
    let out =
        run_ok(python(&folder.0.join("pyconc")).arg("app.py").env("DATABASE_URL", &db.url), "the Python application");
    let got: Value = serde_json::from_str(out.trim().lines().last().unwrap_or_default()).expect("the app's JSON");
    assert_eq!(got["statuses"], serde_json::json!(["succeeded"]), "{got}");
    let results = got["results"].as_array().expect("results");
    let echoes: Vec<i64> = results.iter().filter_map(|r| r["echo"].as_i64()).collect();
    assert_eq!(echoes, (0..20).collect::<Vec<_>>(), "each task its own reply");
    let pids: std::collections::BTreeSet<i64> = results.iter().filter_map(|r| r["pid"].as_i64()).collect();
    assert_eq!(pids.len(), 1, "one instance served them all: {got}");
    let most = results.iter().filter_map(|r| r["most"].as_i64()).max().unwrap_or(0);
    assert!(most > 1, "calls were in flight on the instance at once (at most {most})");
    // the call that timed out ended alone: failed, and the same instance served the next call
    assert_eq!(got["stuck"][0], "failed", "{got}");
    assert!(got["stuck"][1].as_str().unwrap_or_default().contains("timed out"), "{got}");
    assert_eq!(got["after"]["pid"], results[0]["pid"], "the instance outlived the timed-out call: {got}");
    assert_eq!(got["gone"], true, "the rolled-back task never existed");
}

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

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

#[tokio::test(flavor = "multi_thread")]
async fn a_waiting_read_on_a_listening_server_is_woken_by_the_end_of_its_task_not_by_polling() {
    let db = TestDb::new().await;
    let served = Served::start(&db.url, TOKEN, &[]).await;
    let c = db.conn().await;
    common::sql::register(&**c, "woken", serde_json::json!({})).await;
    let http = reqwest::Client::new();
    let get = |id: String| {
        let (http, base) = (http.clone(), served.base.clone());
        tokio::spawn(async move {
            let started = Instant::now();
            let answer = http.get(format!("{base}/v1/tasks/{id}?wait=60")).bearer_auth(TOKEN).send().await;
            let body: Value = answer.expect("an answer").json().await.expect("JSON");
            (started.elapsed(), body)
        })
    };
    // a success reported by a worker, and a cancel: each answered at once, well before the
    // server's 5 s re-read (task_wait::RECHECK_LISTENING) could have found it
    let id: String = c.query_one("select asyncflow.create_task('woken')", &[]).await.unwrap().get(0);
    let waiting = get(id.clone());
    tokio::time::sleep(Duration::from_millis(700)).await;
    let seq: i64 =
        c.query_one("select claim_seq from asyncflow.claim_tasks('woken', 'w', 1)", &[]).await.unwrap().get(0);
    let report = serde_json::json!([{"task_id": id, "claim_seq": seq, "outcome": "succeed", "result": {"n": 1}}]);
    c.execute("select * from asyncflow.report_tasks('w', $1)", &[&report]).await.unwrap();
    let (took, task) = waiting.await.unwrap();
    assert_eq!((task["status"].as_str(), &task["result"]), (Some("succeeded"), &serde_json::json!({"n": 1})));
    assert!(took < Duration::from_secs(4), "answered after {took:?}: not woken by the notification");
    let id: String = c.query_one("select asyncflow.create_task('woken')", &[]).await.unwrap().get(0);
    let waiting = get(id.clone());
    tokio::time::sleep(Duration::from_millis(700)).await;
    c.execute("select asyncflow.cancel_task($1)", &[&id]).await.unwrap();
    let (took, task) = waiting.await.unwrap();
    assert_eq!(task["status"], "cancelled");
    assert!(took < Duration::from_secs(4), "answered after {took:?}: not woken by the notification");
    // the waiters' rows went with the notifications
    let left: i64 = c.query_one("select count(*) from asyncflow.task_waiters", &[]).await.unwrap().get(0);
    assert_eq!(left, 0);
}

#[tokio::test]
async fn a_hold_finish_a_rescue_and_a_report_notify_the_waiters_of_the_tasks_they_end_and_no_one_else() {
    let db = TestDb::new().await;
    let (listener, mut conn) = tokio_postgres::connect(&db.url, tokio_postgres::NoTls).await.unwrap();
    let (tx, mut notes) = tokio::sync::mpsc::unbounded_channel::<String>();
    tokio::spawn(async move {
        use futures_util::StreamExt;
        let mut stream = futures_util::stream::poll_fn(move |cx| conn.poll_message(cx));
        while let Some(Ok(m)) = stream.next().await {
            if let tokio_postgres::AsyncMessage::Notification(n) = m {
                let _ = tx.send(n.payload().to_string());
            }
        }
    });
    listener.batch_execute("listen asyncflow_ended").await.unwrap();
    let heard = |notes: &mut tokio::sync::mpsc::UnboundedReceiver<String>| {
        let mut got = Vec::new();
        while let Ok(n) = notes.try_recv() {
            got.push(n);
        }
        got.sort();
        got
    };
    let settle = || async {
        listener.batch_execute("select 1").await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let c = db.raw().await;
    common::sql::register(&c, "ends", serde_json::json!({"max_retry_num": 0})).await;
    let ids: Vec<String> = c
        .query(
            "select * from asyncflow.create_tasks('ends', '[{\"priority\": 4}, {\"priority\": 3}, {\"priority\": 2}, \
             {\"priority\": 1}]')",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let watch = |id: String| {
        let c = &c;
        async move {
            let t: Value = c.query_one("select asyncflow.watch_task($1, 60)", &[&id]).await.unwrap().get(0);
            assert_eq!(t["status"], "pending");
        }
    };
    // a hold succeeds the first two tasks, only the first one watched
    watch(ids[0].clone()).await;
    c.batch_execute("begin").await.unwrap();
    let held: Vec<(String, i64)> = c
        .query("select task_id, claim_seq from asyncflow.type_hold__ends('w', 2)", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let key = |i: usize| asyncflow::TaskId::parse(&held[i].0).unwrap();
    let (shards, numbers): (Vec<i32>, Vec<i64>) = (0..2).map(|i| (key(i).shard(), key(i).number())).unzip();
    let seqs: Vec<i64> = held.iter().map(|h| h.1).collect();
    c.query(
        "select * from asyncflow.type_finish__ends('w', $1, $2, $3, array['succeed', 'succeed'],          array['{}'::jsonb, '{}'::jsonb], array[null, null]::text[], array[null, null]::jsonb[], array[0.001, 0.001]::float8[])",
        &[&shards, &numbers, &seqs],
    )
    .await
    .unwrap();
    c.batch_execute("commit").await.unwrap();
    assert_eq!(held.iter().map(|h| h.0.clone()).collect::<Vec<_>>(), ids[..2].to_vec());
    settle().await;
    assert_eq!(heard(&mut notes), vec![ids[0].clone()], "the watched task of the hold, alone");
    // a claim whose lease runs out with no try left: failed by the rescuer
    watch(ids[2].clone()).await;
    let claimed: Vec<(String, i64)> = c
        .query("select task_id, claim_seq from asyncflow.claim_tasks('ends', 'w', 2)", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(claimed.len(), 2);
    c.execute("select * from asyncflow.rescue_expired(now() + interval '1 day')", &[]).await.unwrap();
    settle().await;
    assert_eq!(heard(&mut notes), vec![ids[2].clone()], "the rescued task that was watched");
    // a report that ends a task nobody waits on: nothing
    let t: Value = c.query_one("select asyncflow.get_task($1)", &[&ids[3]]).await.unwrap().get(0);
    assert_eq!(t["status"], "failed");
    let left: i64 = c.query_one("select count(*) from asyncflow.task_waiters", &[]).await.unwrap().get(0);
    assert_eq!(left, 0, "each notified waiter's row went with its notification");
    let id: String = c.query_one("select asyncflow.create_task('ends')", &[]).await.unwrap().get(0);
    let (task_id, seq): (String, i64) = {
        let r = c.query_one("select task_id, claim_seq from asyncflow.claim_tasks('ends', 'w', 1)", &[]).await.unwrap();
        (r.get(0), r.get(1))
    };
    assert_eq!(task_id, id);
    let report = serde_json::json!([{"task_id": id, "claim_seq": seq, "outcome": "succeed"}]);
    c.execute("select * from asyncflow.report_tasks('w', $1)", &[&report]).await.unwrap();
    settle().await;
    assert_eq!(heard(&mut notes), Vec::<String>::new(), "nobody waited");
    // a bad wait is refused
    let e = c.query_one("select asyncflow.watch_task($1, -1)", &[&id]).await.unwrap_err();
    assert_eq!(common::sqlstate(&e), "AF006");
    let none: Option<Value> = c.query_one("select asyncflow.watch_task('ends-1-999999', 5)", &[]).await.unwrap().get(0);
    assert_eq!(none, None);
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
            .env("AF_NODE_PKG", packages().join("node"))
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
    // timeout 15 s: the 0.5 s calls end well inside it even while the instance starts on a loaded
    // machine (with 3 s, all 20 timed out once in a full suite run at load 10)
    let folder = one_function(
        "pyconc",
        "command = [\"./run\"]\nmode = \"warm\"\ninstances = 1\nconcurrency = 50\ntimeout = 15\n\
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

/// Panics with how to install them unless node and the Node package's dependencies are there.
pub fn need_node() {
    let ok = Command::new("node").arg("--version").output().map(|o| o.status.success());
    assert!(
        matches!(ok, Ok(true)),
        "node (18 or later) is needed by the Node package's tests: install Node.js, as .ci/run does"
    );
    assert!(
        packages().join("node/node_modules/pg").is_dir(),
        "the Node package's dependencies are missing: run `npm ci` in packages/node (as .ci/run does)"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_node_package_passes_its_own_tests_on_a_real_database_and_server() {
    need_node();
    let db = TestDb::new().await;
    let served = Served::start(&db.url, TOKEN, &[]).await;
    let out = run_ok(
        Command::new("node")
            .args(["--test", "test/"])
            .current_dir(packages().join("node"))
            .env("ASYNCFLOW_TEST_URL", &db.url)
            .env("ASYNCFLOW_TEST_SERVER", &served.base)
            .env("ASYNCFLOW_TEST_TOKEN", TOKEN),
        "node --test (packages/node)",
    );
    // every test ran, none skipped (the HTTP client's needs the server given above)
    assert!(out.contains("# fail 0") && !out.contains("# pass 0") && out.contains("# skipped 0"), "{out}");
    assert!(out.contains("the HTTP client makes the same calls"), "{out}");
}

/// A Node function on the package: async, waits `context.ms`, answers its pid and how many of
/// its calls were in flight at most.
const JS_FUNCTION: &str = r#"
const { run, progress } = require(process.env.AF_NODE_PKG + '/function');
let now = 0, most = 0;
run(async (call) => {
  now += 1; most = Math.max(most, now);
  try {
    progress({ started: true });
    await new Promise((r) => setTimeout(r, call.context.ms || 0));
    return { result: { pid: process.pid, most, echo: call.context.echo } };
  } finally { now -= 1; }
});
"#;

/// The application: enqueues in its transaction (and rolls another back), then waits.
const JS_APP: &str = r#"
const asyncflow = require(process.env.AF_NODE_PKG);
const { Client } = require(process.env.AF_NODE_PKG + '/node_modules/pg');
(async () => {
  const url = process.env.DATABASE_URL;
  const app = new Client({ connectionString: url });
  await app.connect();
  await app.query('begin');
  const ids = [];
  for (let n = 0; n < 20; n++) ids.push(await asyncflow.enqueue(app, 'jsconc', { ms: 500, echo: n }));
  await app.query('commit');
  await app.query('begin');
  const gone = await asyncflow.enqueue(app, 'jsconc', { ms: 0 });
  await app.query('rollback');
  const tasks = await Promise.all(ids.map((id) => asyncflow.wait(url, id, 120)));
  console.log(JSON.stringify({
    results: tasks.map((t) => t.result),
    statuses: [...new Set(tasks.map((t) => t.status))],
    gone: (await asyncflow.getTask(app, gone)) === null,
  }));
  await app.end();
})().catch((e) => { console.error(e); process.exit(1); });
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_node_application_enqueues_in_its_transaction_and_waits_for_a_concurrent_warm_node_function() {
    need_node();
    let db = TestDb::new().await;
    let folder = one_function(
        "jsconc",
        "command = [\"./run\"]\nmode = \"warm\"\ninstances = 1\nconcurrency = 50\ntimeout = 30\n\
         [settings]\nschedule_interval = 0.2\n",
        "exec node ./function.js",
        &[("function.js", JS_FUNCTION), ("app.js", JS_APP)],
    );
    let _worker = Worker::start(&db, &folder.0, "100");
    let c = db.conn().await;
    common::wait_until(Duration::from_secs(30), "the worker to register jsconc", || async {
        c.query_opt("select 1 from asyncflow.task_types where task_type = 'jsconc'", &[]).await.ok().flatten().is_some()
    })
    .await;
    let out = run_ok(
        Command::new("node")
            .arg("app.js")
            .current_dir(folder.0.join("jsconc"))
            .env("DATABASE_URL", &db.url)
            .env("AF_NODE_PKG", packages().join("node")),
        "the Node application",
    );
    let got: Value = serde_json::from_str(out.trim().lines().last().unwrap_or_default()).expect("the app's JSON");
    assert_eq!(got["statuses"], serde_json::json!(["succeeded"]), "{got}");
    let results = got["results"].as_array().expect("results");
    let echoes: Vec<i64> = results.iter().filter_map(|r| r["echo"].as_i64()).collect();
    assert_eq!(echoes, (0..20).collect::<Vec<_>>(), "each task its own reply");
    let pids: std::collections::BTreeSet<i64> = results.iter().filter_map(|r| r["pid"].as_i64()).collect();
    assert_eq!(pids.len(), 1, "one instance served them all: {got}");
    let most = results.iter().filter_map(|r| r["most"].as_i64()).max().unwrap_or(0);
    assert!(most > 1, "calls were in flight on the instance at once (at most {most})");
    assert_eq!(got["gone"], true, "the rolled-back task never existed");
}

/// The files a docs page shows: each fenced block after a `<!-- file: PATH -->` line.
fn page_files(page: &str) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(page)).expect("the page");
    let mut files = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let Some(path) = line.strip_prefix("<!-- file: ").and_then(|l| l.strip_suffix(" -->")) else { continue };
        assert!(lines.next().is_some_and(|l| l.starts_with("```")), "{page}: a fence after the file line of {path}");
        let body: Vec<&str> = lines.by_ref().take_while(|l| !l.starts_with("```")).collect();
        files.push((path.to_string(), body.join("\n") + "\n"));
    }
    files
}

/// Runs a docs page: writes its files under a functions folder, starts the worker on it and runs
/// the page's application with `program`; its output.
async fn run_page(page: &str, program: &str, app: &str, prepare: impl Fn(&Path)) -> String {
    let db = TestDb::new().await;
    let root = common::Folder::new(&[]);
    std::fs::create_dir_all(&root.0).expect("folder");
    for (path, body) in page_files(page) {
        let file = root.0.join(&path);
        std::fs::create_dir_all(file.parent().expect("a folder")).expect("folder");
        std::fs::write(file, body).expect("a page file");
    }
    prepare(&root.0);
    let _worker = Worker::start(&db, &root.0, "200");
    let c = db.conn().await;
    common::wait_until(Duration::from_secs(30), "the worker to register hello", || async {
        c.query_opt("select 1 from asyncflow.task_types where task_type = 'hello'", &[]).await.ok().flatten().is_some()
    })
    .await;
    run_ok(
        Command::new(program)
            .arg(app)
            .current_dir(root.0.join("hello"))
            .env("DATABASE_URL", &db.url)
            .env("PYTHONPATH", packages().join("python")),
        page,
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn docs_python_page_runs_as_written() {
    need_psycopg();
    let out = run_page("docs/python.md", "python3", "app.py", |_| {}).await;
    assert!(out.contains("succeeded hello Ada"), "{out}");
}

#[tokio::test(flavor = "multi_thread")]
async fn docs_node_page_runs_as_written() {
    need_node();
    let out = run_page("docs/node.md", "node", "app.js", |root| {
        // as `npm install ./packages/node` leaves them: the package and pg in node_modules
        let modules = root.join("node_modules");
        std::fs::create_dir_all(&modules).expect("node_modules");
        std::os::unix::fs::symlink(packages().join("node"), modules.join("asyncflow")).expect("link the package");
        std::os::unix::fs::symlink(packages().join("node/node_modules/pg"), modules.join("pg")).expect("link pg");
    })
    .await;
    assert!(out.contains("succeeded hello Ada"), "{out}");
}

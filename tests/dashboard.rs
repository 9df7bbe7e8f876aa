//! The web dashboard in a real browser: `asyncflow serve` with a bearer token against a private
//! database, Debian's headless Chromium driven by `playwright-core` (tests/dashboard/browser.mjs),
//! and the SQL API to set the scene and to check what the page's buttons did.
//!
//! Set-up the test does itself, so that a fresh machine works: Chromium is installed with
//! `apt-get install chromium` when `/usr/bin/chromium` (or `$CHROMIUM`) is missing, which needs
//! root; `playwright-core` (pinned in tests/dashboard/package-lock.json; it downloads no browser)
//! is installed with `npm ci` into tests/dashboard/node_modules when missing, which needs Node.js
//! 20 or newer. Either failing stops the test with a message saying what to install.
//! Screenshots of each step land in `target/tmp/dashboard/`.
mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use asyncflow::db::api;
use asyncflow::ids::{TypeName, WorkerId};
use asyncflow::task::{NewTask, Report, ReportKind, TaskStatus};
use asyncflow::task_type::TaskTypeUpdate;
use common::TestDb;
use serde_json::{json, Value};

const TOKEN: &str = "dashboard-test-token-0123456789";
const TYPE: &str = "dash";
/// Markup in task data must show as text and never run.
const ERROR: &str = r#"disk full <img src=x onerror="window.__pwned=true"> & <b>bold</b>"#;
const CONTEXT_HTML: &str = "<script>window.__pwned = true</script>";
/// The browser script's own limit; it needs a few seconds.
const BROWSER_TIMEOUT: Duration = Duration::from_secs(60);

fn dashboard_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/dashboard")
}

fn is_root() -> bool {
    nix::unistd::Uid::effective().is_root()
}

/// Runs a set-up command; its combined output on failure.
fn run_setup(cmd: &mut Command) -> Result<(), String> {
    let out = cmd.stdin(Stdio::null()).output().map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    let mut text = String::from_utf8_lossy(&out.stdout).to_string();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    let tail: String = text.lines().rev().take(15).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n");
    Err(format!("{cmd:?} failed ({}):\n{tail}", out.status))
}

/// The Chromium binary, installed from Debian's packages when missing.
fn chromium() -> PathBuf {
    let path = PathBuf::from(std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into()));
    if path.exists() {
        return path;
    }
    assert!(
        is_root(),
        "the dashboard test needs Chromium at {}: install it with `apt-get install chromium` \
         (as root), or point CHROMIUM at a Chromium binary",
        path.display()
    );
    eprintln!("dashboard test: installing Chromium from Debian's packages (apt-get), once");
    let installed =
        run_setup(Command::new("apt-get").arg("update").env("DEBIAN_FRONTEND", "noninteractive")).and_then(|()| {
            run_setup(
                Command::new("apt-get").args(["install", "-y", "chromium"]).env("DEBIAN_FRONTEND", "noninteractive"),
            )
        });
    if let Err(e) = installed {
        panic!("the dashboard test could not install Chromium: {e}");
    }
    assert!(path.exists(), "`apt-get install chromium` ran but {} is still missing", path.display());
    path
}

/// tests/dashboard with playwright-core installed (`npm ci` from the committed lock when missing).
fn playwright() -> PathBuf {
    let dir = dashboard_dir();
    let node_ok = Command::new("node")
        .args(["-e", "process.exit(Number(process.versions.node.split('.')[0]) >= 20 ? 0 : 1)"])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(node_ok, "the dashboard test needs Node.js 20 or newer (`node` on PATH) to drive Chromium");
    if !dir.join("node_modules/playwright-core/package.json").exists() {
        eprintln!("dashboard test: installing playwright-core with npm ci, once");
        if let Err(e) =
            run_setup(Command::new("npm").args(["ci", "--no-audit", "--no-fund", "--loglevel=error"]).current_dir(&dir))
        {
            panic!("the dashboard test could not install playwright-core into {}: {e}", dir.display());
        }
    }
    dir
}

/// `asyncflow serve` on a free port; killed when dropped, also when an assertion fails.
struct Server {
    child: std::process::Child,
    base: String,
}

impl Server {
    async fn start(db: &TestDb) -> Server {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = Command::new(env!("CARGO_BIN_EXE_asyncflow"))
            .args(["serve", "--listen", &format!("127.0.0.1:{port}"), "--token", TOKEN])
            .env("DATABASE_URL", &db.url)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start asyncflow serve");
        let server = Server { child, base: format!("http://127.0.0.1:{port}") };
        let client = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let ready = client.get(format!("{}/readyz", server.base)).send().await;
            if ready.map(|r| r.status().is_success()).unwrap_or(false) {
                return server;
            }
            assert!(Instant::now() < deadline, "asyncflow serve did not become ready");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

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
    for (path, kind, file) in [
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

/// Runs tests/dashboard/browser.mjs; what it saw.
async fn browse(base: &str, task_id: &str, run_id: &str, chromium: &Path, dir: &Path) -> Value {
    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dashboard");
    let child = tokio::process::Command::new("node")
        .arg(dir.join("browser.mjs"))
        .current_dir(dir)
        .env("DASHBOARD_URL", base)
        .env("DASHBOARD_TOKEN", TOKEN)
        .env("DASHBOARD_TYPE", TYPE)
        .env("DASHBOARD_TASK_ID", task_id)
        .env("DASHBOARD_RUN_ID", run_id)
        .env("CHROMIUM", chromium)
        .env("DASHBOARD_SCREENSHOTS", &shots)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("run node");
    let out = tokio::time::timeout(BROWSER_TIMEOUT, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("the browser script did not finish in {BROWSER_TIMEOUT:?}"))
        .expect("browser script output");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the browser script failed ({}):\n{stderr}", out.status);
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("the browser script's answer is not JSON ({e}): {stdout}\n{stderr}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_a_type_finds_a_failed_task_and_retries_it_in_a_browser() {
    let (chromium, dir) = tokio::task::spawn_blocking(|| (chromium(), playwright())).await.unwrap();
    let db = TestDb::new().await;
    let failed_id = scene(&db).await;
    let run_id = run_scene(&db).await;
    let positions = api::positions_of(&db.conn().await, TYPE).await.unwrap().expect("positions row");
    let server = Server::start(&db).await;
    check_http(&server.base).await;

    let seen = browse(&server.base, &failed_id, &run_id, &chromium, &dir).await;
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();

    // The page loads without a token, then asks for one; with it the data shows.
    assert_eq!(seen["page_status"], 200);
    assert!(s(&seen["message_without_token"]).contains("needs a bearer token"), "{seen}");
    assert_eq!(seen["message_hidden_with_token"], true, "{seen}");
    assert_eq!(seen["token_in_storage"], TOKEN);

    // The type's row.
    let row = &seen["row"];
    let cols = ["type", "ready", "delayed", "running", "succeeded", "failed", "cancelled"];
    let got: Vec<String> = cols.iter().map(|c| s(&row[*c])).collect();
    assert_eq!(got, [TYPE, "1", "1", "1", "1", "1", "0"], "{row}");
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
        (json!(0), json!(1), json!(false))
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
    // token was saved.
    assert_eq!(seen["page_errors"], json!([]), "{seen}");
    let console: Vec<String> = seen["console_errors"].as_array().unwrap().iter().map(s).collect();
    assert!(console.iter().all(|e| e.contains("401")), "{console:?}");
    drop(server);
}

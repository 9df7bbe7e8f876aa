//! The `asyncflow worker` binary as operators run it: a functions folder of real programs,
//! signals, ephemeral mode, and a crash.
use crate::common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use asyncflow::db::api;
use asyncflow::task::{NewTask, Report, ReportKind, TaskStatus};
use asyncflow::{TaskId, WorkerId};
use common::process::{signal, wait_child};
use common::{wait_until, Folder, TestDb};
use serde_json::json;

fn folder(functions: &[(&str, &str, &str)]) -> Folder {
    Folder::new(functions)
}

fn worker(db: &TestDb, dir: &Path, id: &str, extra: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_asyncflow"))
        .args(["worker", "--no-maintenance", "--functions"])
        .arg(dir)
        .args(["--worker-id", id])
        .args(extra)
        .env("DATABASE_URL", &db.url)
        .env("ASYNCFLOW_LOG", "asyncflow=debug")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the worker binary")
}

/// Processes whose command line mentions `needle`.
fn processes_mentioning(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cmd) = std::fs::read(entry.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(needle) && !cmd.contains("cargo") {
                found.push(format!("{}: {cmd}", entry.file_name().to_string_lossy()));
            }
        }
    }
    found
}

async fn all_final(db: &TestDb, ids: &[TaskId]) -> bool {
    let counts = api::count_by_status_of(&db.conn().await, ids).await.unwrap();
    counts.iter().filter(|(s, _)| s.is_final()).map(|(_, n)| n).sum::<i64>() == ids.len() as i64
}

const PIPELINE: &str = r#"input=$(cat)
case "$ASYNCFLOW_STAGE" in
  probe) echo '{"next_stage": "transform", "context": {"probed": true}}' ;;
  transform) echo "{\"next_stage\": \"publish\", \"context\": {\"seen\": $input}}" ;;
  publish) echo "{\"result\": $input}" ;;
esac"#;

async fn register(db: &TestDb, name: &str, settings: asyncflow::task_type::TaskTypeUpdate) {
    api::register_task_type(&db.conn().await, &asyncflow::TypeName::new(name).unwrap(), &settings).await.unwrap();
}

#[tokio::test]
async fn exit_when_idle_runs_three_stages_then_exits_leaving_nothing_running() {
    let db = TestDb::new().await;
    let dir = folder(&[(
        "pipe",
        "command = [\"./run\"]\n[settings]\ninitial_stage = \"probe\"\nschedule_interval = 0.2\n",
        PIPELINE,
    )]);
    // Tasks enqueued before the worker starts need the type's initial stage already.
    register(
        &db,
        "pipe",
        asyncflow::task_type::TaskTypeUpdate { initial_stage: Some("probe".into()), ..Default::default() },
    )
    .await;
    let c = db.conn().await;
    let tasks: Vec<NewTask> = (0..6).map(|i| NewTask::with_context(json!({"n": i}))).collect();
    let ids = api::create_tasks(&c, "pipe", &tasks).await.unwrap();
    let later = NewTask { run_at: Some(chrono::Utc::now() + chrono::Duration::hours(1)), ..Default::default() };
    let delayed = api::create_task(&c, "pipe", &later).await.unwrap();

    let child = worker(&db, &dir.0, "idle-worker", &["--exit-when-idle", "--concurrency", "3"]);
    let (status, out) = wait_child(child, Duration::from_secs(60)).await;
    assert!(status.success(), "exit status {status:?}");
    assert!(out.contains("\"stopped_by\":\"Idle\""), "{out}");
    assert!(all_final(&db, &ids).await, "every ready task ended before the worker exited");
    let t = api::get_task(&c, ids[4].as_str()).await.unwrap().unwrap();
    assert_eq!(t.status, TaskStatus::Succeeded);
    let result = t.result.unwrap();
    assert_eq!(result["stage"], "publish");
    assert_eq!(result["context"]["seen"]["stage"], "transform");
    assert_eq!(
        result["context"]["seen"]["context"],
        json!({"probed": true}),
        "context carried from probe to transform to publish"
    );
    let d = api::get_task(&c, delayed.as_str()).await.unwrap().unwrap();
    assert_eq!(d.status, TaskStatus::Pending, "the delayed task did not keep the worker alive");
    assert!(processes_mentioning(&dir.0.display().to_string()).is_empty(), "function processes left running");
}

const SLEEPER: &str = r#"cat > /dev/null
if [ "$ASYNCFLOW_ATTEMPT" = "1" ]; then sleep 120; fi
echo '{"result": {"attempt": '"$ASYNCFLOW_ATTEMPT"'}}'"#;

#[tokio::test]
async fn sigterm_hands_unfinished_tasks_back_without_burning_a_try_and_exits_0() {
    let db = TestDb::new().await;
    let dir = folder(&[("sleeper", "command = [\"./run\"]\n[settings]\nschedule_interval = 0.2\n", SLEEPER)]);
    register(&db, "sleeper", Default::default()).await;
    let ids = api::create_tasks(&db.conn().await, "sleeper", &vec![NewTask::default(); 4]).await.unwrap();
    let child = worker(&db, &dir.0, "term-worker", &["--concurrency", "2", "--shutdown-grace", "1s"]);
    wait_until(Duration::from_secs(30), "two tasks running", || async {
        api::queue_depth(&db.conn().await).await.unwrap().iter().any(|d| d.running == 2)
    })
    .await;
    signal(&child, nix::sys::signal::Signal::SIGTERM);
    let (status, out) = wait_child(child, Duration::from_secs(20)).await;
    assert!(status.success(), "exit status {status:?}: {out}");
    assert!(out.contains("\"released\":2"), "{out}");
    for id in &ids {
        let t = api::get_task(&db.conn().await, id.as_str()).await.unwrap().unwrap();
        assert_eq!((t.status, t.attempt, t.retry_count, t.owner), (TaskStatus::Pending, 0, 0, None), "{id}");
    }
    assert!(processes_mentioning(&dir.0.display().to_string()).is_empty(), "function processes left running");
}

#[tokio::test]
async fn a_worker_killed_mid_task_loses_nothing_and_its_late_report_is_refused() {
    let db = TestDb::new().await;
    let toml = "command = [\"./run\"]\n[settings]\nschedule_interval = 0.2\nmax_processing_time = 2\nmax_retry_interval = -1\n";
    let dir = folder(&[("crashy", toml, SLEEPER)]);
    register(&db, "crashy", Default::default()).await;
    let id = api::create_task(&db.conn().await, "crashy", &NewTask::default()).await.unwrap();
    let first = worker(&db, &dir.0, "doomed", &[]);
    wait_until(Duration::from_secs(30), "claimed by the first worker", || async {
        let t = api::get_task(&db.conn().await, id.as_str()).await.unwrap().unwrap();
        t.owner.as_deref() == Some("doomed")
    })
    .await;
    let claim_seq = api::get_task(&db.conn().await, id.as_str()).await.unwrap().unwrap().claim_seq;
    // Heartbeats keep the 2 s lease while the worker lives.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let held = api::get_task(&db.conn().await, id.as_str()).await.unwrap().unwrap();
    assert_eq!((held.status, held.claim_seq), (TaskStatus::Running, claim_seq), "not rescued while heartbeating");
    signal(&first, nix::sys::signal::Signal::SIGKILL);
    let _ = wait_child(first, Duration::from_secs(10)).await;

    // The second worker takes part in maintenance: it rescues the task once the lease is over.
    let mut second = Command::new(env!("CARGO_BIN_EXE_asyncflow"))
        .args(["worker", "--functions"])
        .arg(&dir.0)
        .args(["--worker-id", "survivor"])
        .env("DATABASE_URL", &db.url)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_until(Duration::from_secs(30), "finished by the second worker", || async {
        api::get_task(&db.conn().await, id.as_str()).await.unwrap().unwrap().status == TaskStatus::Succeeded
    })
    .await;
    let _ = second.kill();
    let _ = second.wait();
    let t = api::get_task(&db.conn().await, id.as_str()).await.unwrap().unwrap();
    assert_eq!(t.result, Some(json!({"attempt": 2})));
    let outcomes: Vec<_> = t
        .schedule_log
        .iter()
        .map(|e| (e.worker.clone().unwrap_or_default(), e.outcome.clone().unwrap_or_default()))
        .collect();
    assert_eq!(outcomes, vec![("doomed".into(), "rescued".into()), ("survivor".into(), "succeed".into())]);
    // The killed attempt's report, arriving late, is refused.
    let late =
        Report { task_id: id.clone(), claim_seq, kind: ReportKind::Succeed { result: json!("late") }, progress: None };
    let r = api::report_tasks(&db.conn().await, &WorkerId::new("doomed").unwrap(), &[late], None).await.unwrap();
    assert!(!r[0].accepted);
    assert_eq!(
        api::get_task(&db.conn().await, id.as_str()).await.unwrap().unwrap().result,
        Some(json!({"attempt": 2}))
    );
    assert!(
        processes_mentioning(&dir.0.display().to_string()).is_empty(),
        "the killed worker's function did not outlive it"
    );
}

#[tokio::test]
async fn a_bad_function_toml_stops_the_worker_before_it_starts() {
    let db = TestDb::new().await;
    let dir = folder(&[
        ("good", "command = [\"./run\"]\n", "echo '{\"result\": 1}'"),
        ("bad", "command = [\"./run\"]\n[settings]\nmax_retry_num = -4\n", "true"),
    ]);
    let out = Command::new(env!("CARGO_BIN_EXE_asyncflow"))
        .args(["worker", "--no-maintenance", "--functions"])
        .arg(&dir.0)
        .env("DATABASE_URL", &db.url)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad/function.toml") && err.contains("max_retry_num"), "{err}");
    let types = api::list_task_types(&db.conn().await).await.unwrap();
    assert!(types.iter().all(|t| t.task_type != "bad"), "nothing registered for the bad file");
}

#[tokio::test]
async fn max_tasks_and_max_runtime_bound_a_run() {
    let db = TestDb::new().await;
    let quick = "cat > /dev/null; echo '{\"result\": 1}'";
    let dir = folder(&[
        ("quick", "command = [\"./run\"]\n[settings]\nschedule_interval = 0.2\n", quick),
        ("sleeper", "command = [\"./run\"]\n[settings]\nschedule_interval = 0.2\n", SLEEPER),
    ]);
    register(&db, "quick", Default::default()).await;
    register(&db, "sleeper", Default::default()).await;
    let c = db.conn().await;
    api::create_tasks(&c, "quick", &vec![NewTask::default(); 10]).await.unwrap();

    let child = worker(&db, &dir.0, "bounded", &["--types", "quick", "--max-tasks", "3", "--concurrency", "1"]);
    let (status, out) = wait_child(child, Duration::from_secs(30)).await;
    assert!(status.success(), "{status:?}");
    assert!(
        out.contains("\"stopped_by\":\"MaxTasks\"") && out.contains("\"claimed\":3") && out.contains("\"succeeded\":3"),
        "{out}"
    );
    let counts = api::count_by_status(&c, "quick").await.unwrap();
    assert!(counts.contains(&(TaskStatus::Succeeded, 3)) && counts.contains(&(TaskStatus::Pending, 7)), "{counts:?}");

    api::create_task(&c, "sleeper", &NewTask::default()).await.unwrap();
    let started = std::time::Instant::now();
    let child =
        worker(&db, &dir.0, "timed", &["--types", "sleeper", "--max-runtime", "1s", "--shutdown-grace", "500ms"]);
    let (status, out) = wait_child(child, Duration::from_secs(30)).await;
    assert!(status.success(), "{status:?}");
    assert!(out.contains("\"stopped_by\":\"MaxRuntime\"") && out.contains("\"released\":1"), "{out}");
    assert!(started.elapsed() < Duration::from_secs(10), "stopped near its runtime bound");
    let counts = api::count_by_status(&c, "sleeper").await.unwrap();
    assert_eq!(counts, vec![(TaskStatus::Pending, 1)], "the unfinished task was handed back");
    assert!(processes_mentioning(&dir.0.display().to_string()).is_empty(), "function processes left running");
}

#[tokio::test]
async fn a_second_signal_exits_at_once_and_takes_the_functions_children_down() {
    // The parent-death signal reaches a function's own process only: what it started (here a
    // `sleep` under the shell) would outlive an immediate exit (found by a bug hunt).
    let db = TestDb::new().await;
    let marker = format!("{}", 900_000 + std::process::id() % 99_999);
    let body = format!("cat > /dev/null\nsleep {marker}\necho '{{\"result\": 1}}'");
    let dir = folder(&[("napper", "command = [\"./run\"]\n[settings]\nschedule_interval = 0.2\n", &body)]);
    register(&db, "napper", Default::default()).await;
    api::create_tasks(&db.conn().await, "napper", &vec![NewTask::default(); 2]).await.unwrap();
    let child = worker(&db, &dir.0, "impatient", &["--concurrency", "2", "--shutdown-grace", "60s"]);
    let sleeping = format!("sleep {marker}");
    wait_until(Duration::from_secs(30), "two sleeps running", || async { processes_mentioning(&sleeping).len() == 2 })
        .await;
    signal(&child, nix::sys::signal::Signal::SIGTERM);
    tokio::time::sleep(Duration::from_millis(300)).await;
    signal(&child, nix::sys::signal::Signal::SIGTERM);
    let (status, _) = wait_child(child, Duration::from_secs(10)).await;
    assert_eq!(status.code(), Some(130));
    wait_until(Duration::from_secs(5), "the functions' children gone", || async {
        processes_mentioning(&sleeping).is_empty()
    })
    .await;
}

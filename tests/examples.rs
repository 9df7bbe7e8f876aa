//! The repository's own functions/ run by the worker binary: each example does what its README
//! says, and `slow` (2 s lease, 4 s call) survives on heartbeats while a rescuer is running.
use crate::common;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use asyncflow::db::api;
use asyncflow::task::{NewTask, TaskStatus};
use common::TestDb;
use serde_json::json;

#[tokio::test]
async fn the_example_functions_run_to_the_end_through_the_worker_binary() {
    let db = TestDb::new().await;
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let functions = root.join("functions");
    let work = std::env::temp_dir().join(format!("af-ex-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&work).unwrap();
    let wav = work.join("in.wav");
    asyncflow::demo::write_wav(&wav, 1.0, 330.0, 0.3).unwrap();

    // Apply each function's settings first (initial_stage of media), as the worker would.
    let specs = asyncflow::function::registry::load_dir(&functions).unwrap();
    // Build steps first (wordcount-rs may compile for a while on a fresh machine); the worker's
    // own build step then finds everything up to date.
    for spec in specs.values() {
        spec.build().await.unwrap();
    }
    let c = db.conn().await;
    for spec in specs.values() {
        api::register_task_type(&c, &spec.task_type, &spec.settings).await.unwrap();
    }
    let media =
        api::create_task(&c, "media", &NewTask::with_context(json!({"input": wav, "out_dir": work}))).await.unwrap();
    let missing =
        api::create_task(&c, "media", &NewTask::with_context(json!({"input": "/nonexistent.wav", "out_dir": work})))
            .await
            .unwrap();
    let flaky = api::create_task(&c, "flaky", &NewTask::with_context(json!({"fail_times": 1}))).await.unwrap();
    let echo = api::create_task(&c, "echo", &NewTask::with_context(json!({"hello": "there"}))).await.unwrap();
    let slow = api::create_task(&c, "slow", &NewTask::with_context(json!({"seconds": 4}))).await.unwrap();
    let words =
        api::create_task(&c, "wordcount", &NewTask::with_context(json!({"text": "a rose is a rose"}))).await.unwrap();

    let mut child = Command::new(env!("CARGO_BIN_EXE_asyncflow"))
        .args(["worker", "--concurrency", "6", "--functions"])
        .arg(&functions)
        .env("DATABASE_URL", &db.url)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let ids = [media.clone(), missing.clone(), flaky.clone(), echo.clone(), slow.clone(), words.clone()];
    common::wait_until(Duration::from_secs(120), "every example task ended", || async {
        let counts = api::count_by_status_of(&db.conn().await, &ids).await.unwrap();
        counts.iter().filter(|(s, _)| s.is_final()).map(|(_, n)| n).sum::<i64>() == ids.len() as i64
    })
    .await;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap()).await.unwrap();
    assert!(status.success(), "{status:?}");

    let get = |id: asyncflow::TaskId| {
        let c = &c;
        async move { api::get_task(c, id.as_str()).await.unwrap().unwrap() }
    };
    let m = get(media).await;
    assert_eq!(m.status, TaskStatus::Succeeded, "{:?}", m.error);
    let result = m.result.unwrap();
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(result["manifest"].as_str().unwrap()).unwrap()).unwrap();
    assert_eq!(manifest["probe"]["channels"], 2);
    assert_eq!(manifest["probe"]["duration_s"], 1.0);
    assert!(std::path::Path::new(result["archive"].as_str().unwrap()).is_file());
    let stages: Vec<_> = m.schedule_log.iter().filter_map(|e| e.stage.clone()).collect();
    assert_eq!(stages, vec!["probe", "transform", "publish"]);

    let bad = get(missing).await;
    assert_eq!((bad.status, bad.retry_count), (TaskStatus::Failed, 1), "a missing input is not retried");
    let f = get(flaky).await;
    assert_eq!(
        (f.status, f.result.clone()),
        (TaskStatus::Succeeded, Some(json!({"attempts": 2}))),
        "{:?} {:?}",
        f.schedule_log,
        f.order_time
    );
    assert_eq!(get(echo).await.result, Some(json!({"hello": "there"})));
    let w = get(words).await;
    assert_eq!(w.result.unwrap()["words"], 5);
    let s = get(slow).await;
    assert_eq!(
        (s.status, s.retry_count, s.schedule_log.len()),
        (TaskStatus::Succeeded, 0, 1),
        "held by heartbeats, never rescued"
    );
    assert!(s.schedule_log[0].cost_ms.unwrap() >= 4000.0);
    let _ = std::fs::remove_dir_all(&work);
}

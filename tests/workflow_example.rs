//! The example pipeline end to end through the binary: `asyncflow pipeline apply
//! pipelines/transcode.json`, `asyncflow run start ... --notify-url`, `asyncflow worker` running
//! functions/transcode (real audio work), the signed callback, `asyncflow run get`.
use crate::common;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::TestDb;
use serde_json::{json, Value};

fn cli(db: &TestDb, args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_asyncflow"))
        .args(args)
        .env("DATABASE_URL", &db.url)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(out.status.success(), "asyncflow {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{args:?} printed no JSON ({e}): {out:?}"))
}

#[tokio::test]
async fn the_transcode_pipeline_runs_end_to_end_through_the_cli_and_the_worker_and_calls_back_signed() {
    let db = TestDb::new().await;
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let work = std::env::temp_dir().join(format!("af-wf-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&work).unwrap();
    let source = work.join("film.wav");
    asyncflow::demo::write_wav(&source, 3.5, 440.0, 0.3).unwrap();

    // the function's type must exist before a pipeline may name it
    cli(&db, &["type", "set", "transcode", r#"{"initial_stage": "probe", "max_retry_num": 3}"#]);
    let applied = cli(&db, &["pipeline", "apply", "pipelines/transcode.json"]);
    assert_eq!(
        applied,
        json!([{"name": "transcode", "version": 1, "status": "active", "created": true, "nodes": 8}]),
        "a summary per file, not the definition and plan"
    );
    let again = cli(&db, &["pipeline", "apply", "pipelines/transcode.json"]);
    assert_eq!(again[0]["created"], false, "applying an unchanged file twice stores nothing new");

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook?order=77", listener.local_addr().unwrap());
    let receiver = common::workflow::receiver(listener, 200).await;
    let received = receiver.seen.clone();

    let input = json!({"source": source, "out_dir": work, "segment_seconds": 1.0}).to_string();
    let started =
        cli(&db, &["run", "start", "transcode", "--input", &input, "--notify-url", &url, "--notify-key", "order-77"]);
    let run_id = started["run_id"].as_str().unwrap().to_string();

    let mut worker = Command::new(env!("CARGO_BIN_EXE_asyncflow"))
        .args(["worker", "--concurrency", "4", "--types", "transcode", "--functions"])
        .arg(root.join("functions"))
        .env("DATABASE_URL", &db.url)
        .env("ASYNCFLOW_CALLBACK_SECRET", "example-secret")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    common::wait_until(Duration::from_secs(120), "the run's callback", || async {
        !received.lock().unwrap().is_empty()
    })
    .await;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(worker.id() as i32), nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = tokio::task::spawn_blocking(move || worker.wait().unwrap()).await.unwrap();
    assert!(status.success(), "{status:?}");

    let run = cli(&db, &["run", "get", &run_id]);
    assert_eq!(run["status"], "succeeded", "{run}");
    let nodes: Vec<&str> = run["events"].as_array().unwrap().iter().map(|e| e["node"].as_str().unwrap()).collect();
    assert_eq!(nodes, ["start", "probe", "audio", "split", "segments", "join", "publish", "end"]);
    let segments = run["events"][4]["segments"].as_array().unwrap();
    assert_eq!(segments.len(), 4, "3.5 s in 1 s segments, decided at run time");
    assert!(segments.iter().all(|s| s["status"] == "succeeded"));
    assert_eq!(run["events"][1]["result"]["duration_s"], 3.5);
    let join = &run["events"][5]["result"];
    assert_eq!(join["frames"], json!(77175), "every segment joined back: 3.5 s at 22,050 Hz");
    let archive = run["result"]["publish"]["archive"].as_str().unwrap();
    assert!(std::path::Path::new(archive).is_file());
    assert_eq!(run["traces"].as_array().unwrap().len(), 9, "one function call per task node and segment");

    let (headers, body) = received.lock().unwrap()[0].clone();
    let signature = headers.get("x-asyncflow-signature").and_then(|v| v.to_str().ok()).unwrap_or("");
    assert!(asyncflow::function::http::verify(b"example-secret", &body, signature), "signed with the worker's secret");
    let payload: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!((payload["run_id"].clone(), payload["status"].clone()), (json!(run_id), json!("succeeded")));
    assert_eq!(payload["notify_key"], "order-77");
    assert_eq!(payload["result"]["publish"]["archive"], json!(archive));
    let listed = cli(&db, &["run", "list", "--pipeline", "transcode"]);
    assert_eq!(listed["runs"][0]["run_id"], json!(run_id));
    let _ = receiver.stop.send(());
    let _ = std::fs::remove_dir_all(&work);
}

/// `pipeline apply` and `run start --wait` print summaries (`--full` the whole documents); a
/// failed run's summary names the failed node and its error, and the exit status is 1.
#[tokio::test]
async fn apply_and_start_wait_print_summaries_and_full_prints_the_documents() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    c.batch_execute("select asyncflow.register_task_type('wf')").await.unwrap();
    let dir = std::env::temp_dir().join(format!("af-wf-cli-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let instant = dir.join("instant.json");
    std::fs::write(
        &instant,
        r#"{"nodes": [{"name": "start", "type": "start"}, {"name": "end", "type": "end"}],
        "edges": [["start", "end"]]}"#,
    )
    .unwrap();
    let one = dir.join("one.json");
    std::fs::write(
        &one,
        r#"{"nodes": [{"name": "start", "type": "start"}, {"name": "a", "type": "task", "function": "wf"},
        {"name": "end", "type": "end"}], "edges": [["start", "a"], ["a", "end"]]}"#,
    )
    .unwrap();
    let (instant, one) = (instant.to_str().unwrap(), one.to_str().unwrap());

    let applied = cli(&db, &["pipeline", "apply", instant, one]);
    assert_eq!(
        applied,
        json!([{"name": "instant", "version": 1, "status": "active", "created": true, "nodes": 2},
            {"name": "one", "version": 1, "status": "active", "created": true, "nodes": 3}])
    );
    let full = cli(&db, &["pipeline", "apply", "--full", one]);
    assert!(full[0]["plan"].is_object() && full[0]["definition"]["nodes"].is_array(), "{full}");
    assert_eq!(full[0]["created"], false);

    let summary = cli(&db, &["run", "start", "instant", "--wait"]);
    assert!(summary["run_id"].as_str().is_some_and(|id| id.starts_with('r')), "{summary}");
    assert_eq!(
        (&summary["status"], &summary["nodes"], &summary["failed_nodes"], &summary["version"]),
        (&json!("succeeded"), &json!({"succeeded": 2}), &json!([]), &json!(1))
    );
    assert!(summary["duration_s"].as_f64().is_some_and(|d| d >= 0.0) && summary.get("events").is_none(), "{summary}");
    let whole = cli(&db, &["run", "start", "instant", "--wait", "--full"]);
    assert_eq!(whole["events"].as_array().map(Vec::len), Some(2), "{whole}");

    // a run whose node fails: the summary still prints, naming the node, and the exit is 1
    let waiting = Command::new(env!("CARGO_BIN_EXE_asyncflow"))
        .args(["run", "start", "one", "--wait"])
        .env("DATABASE_URL", &db.url)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    common::wait_until(Duration::from_secs(30), "the node's task", || async {
        let n: i64 =
            c.query_one("select count(*) from asyncflow.tasks where task_type = 'wf'", &[]).await.unwrap().get(0);
        n == 1
    })
    .await;
    let task = common::workflow::claim(&c, "wf", None).await;
    let fail = json!({"outcome": "fail", "error": "the codec crashed", "retry": false});
    common::workflow::report(&c, vec![(&task[0], fail)], None).await;
    let out = tokio::task::spawn_blocking(move || waiting.wait_with_output().unwrap()).await.unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["status"], "failed", "{summary}");
    assert_eq!(summary["failed_nodes"][0]["node"], "a", "{summary}");
    assert!(summary["failed_nodes"][0]["error"].as_str().is_some_and(|e| e.contains("the codec crashed")), "{summary}");
    let _ = std::fs::remove_dir_all(&dir);
}

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
    assert_eq!((applied[0]["name"].clone(), applied[0]["version"].clone()), (json!("transcode"), json!(1)));
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

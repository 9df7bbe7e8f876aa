//! `asyncflow task ...` / `asyncflow type ...`, against the database and against a server.
mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::TestDb;
use serde_json::Value;

const TOKEN: &str = "cli-test-token-0123456789";

fn run(db: &TestDb, server: Option<&str>, args: &[&str]) -> Result<Value, String> {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_asyncflow"));
    cmd.env("DATABASE_URL", &db.url).env_remove("ASYNCFLOW_SERVER").env_remove("ASYNCFLOW_TOKEN");
    cmd.args(&args[..1]);
    if let Some(s) = server {
        cmd.args(["--server", s, "--token", TOKEN]);
    }
    let out = cmd.args(&args[1..]).output().expect("run asyncflow");
    if out.status.success() {
        serde_json::from_slice(&out.stdout)
            .map_err(|e| format!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
    } else {
        Err(String::from_utf8_lossy(&out.stderr).to_string())
    }
}

fn scenario(db: &TestDb, server: Option<&str>) {
    let t = run(db, server, &["type", "set", "clip", r#"{"initial_stage": "cut", "max_retry_num": 1}"#]).unwrap();
    assert_eq!(t["initial_stage"], "cut");
    let created =
        run(db, server, &["task", "create", "clip", "--context", r#"{"file": "a.mov"}"#, "--priority", "10"]).unwrap();
    let id = created["id"].as_str().unwrap().to_string();
    let task = run(db, server, &["task", "get", &id]).unwrap();
    assert_eq!((task["stage"].as_str(), task["context"]["file"].as_str()), (Some("cut"), Some("a.mov")));
    let page = run(db, server, &["task", "list", "--type", "clip", "--status", "pending"]).unwrap();
    assert_eq!(page["tasks"].as_array().unwrap().len(), 1);
    assert_eq!(run(db, server, &["task", "cancel", &id]).unwrap()["cancelled"], true);
    assert_eq!(run(db, server, &["task", "retry", &id]).unwrap()["retried"], true);
    assert_eq!(run(db, server, &["type", "pause", "clip"]).unwrap()["paused"], true);
    assert_eq!(run(db, server, &["type", "resume", "clip"]).unwrap()["paused"], false);
    let types = run(db, server, &["type", "list"]).unwrap();
    assert_eq!(types.as_array().unwrap().len(), 1);
    // Many queues: a key with a space and a slash, held, listed, then let go.
    run(db, server, &["type", "set", "site", r#"{"fair_queues": true, "queue_concurrency": 1}"#]).unwrap();
    run(db, server, &["task", "create", "site", "--queue-key", "a b/c"]).unwrap();
    let held = run(db, server, &["type", "queue-limit", "site", "a b/c", "--concurrency", "0"]).unwrap();
    assert_eq!(held, serde_json::json!({"queue_key": "a b/c", "concurrency": 0}));
    let queues = run(db, server, &["type", "queues", "site"]).unwrap();
    assert_eq!((queues[0]["queue_key"].as_str(), queues[0]["ready"].as_i64()), (Some("a b/c"), Some(1)));
    assert_eq!(queues[0]["concurrency"], 0);
    assert_eq!(run(db, server, &["type", "queues", "site", "--after", "a b/c"]).unwrap(), serde_json::json!([]));
    let freed = run(db, server, &["type", "queue-limit", "site", "a b/c", "--remove"]).unwrap();
    assert_eq!(freed["concurrency"], 1, "the type's queue_concurrency applies again");
    let err = run(db, server, &["type", "queues", "clip"]).unwrap_err();
    assert!(err.contains("fair_queues"), "{err}");
    // Errors: a clear message and a non-zero exit, nothing changed.
    let err = run(db, server, &["task", "get", "clip-1-999"]).unwrap_err();
    assert!(err.contains("unknown task"), "{err}");
    let err = run(db, server, &["task", "create", "clip", "--context", "[1]"]).unwrap_err();
    assert!(err.contains("context"), "{err}");
    let err = run(db, server, &["type", "pause", "nope"]).unwrap_err();
    assert!(err.contains("unknown task type"), "{err}");
    let err = run(db, server, &["task", "list", "--status", "asleep"]).unwrap_err();
    assert!(err.contains("--status"), "{err}");
}

#[tokio::test]
async fn admin_commands_work_against_the_database() {
    let db = TestDb::new().await;
    tokio::task::spawn_blocking(move || scenario(&db, None)).await.unwrap();
}

#[tokio::test]
async fn admin_commands_work_against_a_server() {
    let db = TestDb::new().await;
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut server = Command::new(env!("CARGO_BIN_EXE_asyncflow"))
        .args(["serve", "--listen", &format!("127.0.0.1:{port}"), "--token", TOKEN])
        .env("DATABASE_URL", &db.url)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    let mut up = false;
    for _ in 0..200 {
        if client.get(format!("{base}/readyz")).send().await.map(|r| r.status().is_success()).unwrap_or(false) {
            up = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(up, "server ready");
    let outcome = tokio::task::spawn_blocking(move || {
        scenario(&db, Some(&base));
        db
    })
    .await;
    let _ = server.kill();
    let _ = server.wait();
    outcome.unwrap();
}

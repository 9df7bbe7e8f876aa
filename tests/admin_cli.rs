//! `asyncflow task ...` / `asyncflow type ...`, against the database and against a server.
use crate::common;

use std::process::Command;

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
    assert_eq!((types[0]["type"].as_str(), types[0].get("task_type")), (Some("clip"), None), "one name: type");
    // An idempotent create says whether it created the task or found the key's.
    let first = run(db, server, &["task", "create", "clip", "--idempotency-key", "k-1"]).unwrap();
    assert_eq!(first["created"], true, "{first}");
    let again = run(db, server, &["task", "create", "clip", "--idempotency-key", "k-1"]).unwrap();
    assert_eq!((&again["id"], &again["created"]), (&first["id"], &serde_json::json!(false)), "{again}");
    // And so does one with a unique key, while the key's task blocks.
    let first = run(db, server, &["task", "create", "clip", "--unique-key", "u-1"]).unwrap();
    assert_eq!(first["created"], true, "{first}");
    let again = run(db, server, &["task", "create", "clip", "--unique-key", "u-1"]).unwrap();
    assert_eq!((&again["id"], &again["created"]), (&first["id"], &serde_json::json!(false)), "{again}");
    // Lists are newest first, oldest first when asked, and page in either order.
    let ids = |page: &Value| -> Vec<String> {
        page["tasks"].as_array().unwrap().iter().map(|t| t["id"].as_str().unwrap().to_string()).collect()
    };
    let newest = ids(&run(db, server, &["task", "list", "--type", "clip"]).unwrap());
    let mut oldest = ids(&run(db, server, &["task", "list", "--type", "clip", "--order", "oldest"]).unwrap());
    assert!(newest.len() >= 3, "{newest:?}");
    let first = run(db, server, &["task", "list", "--type", "clip", "--order", "oldest", "--limit", "2"]).unwrap();
    let next = first["next"].as_str().unwrap().to_string();
    let rest = run(db, server, &["task", "list", "--type", "clip", "--order", "oldest", "--after", &next]).unwrap();
    assert_eq!([ids(&first), ids(&rest)].concat(), oldest, "paged oldest first");
    let first = run(db, server, &["task", "list", "--type", "clip", "--limit", "2"]).unwrap();
    let next = first["next"].as_str().unwrap().to_string();
    let rest = run(db, server, &["task", "list", "--type", "clip", "--after", &next]).unwrap();
    assert_eq!([ids(&first), ids(&rest)].concat(), newest, "paged newest first");
    oldest.reverse();
    assert_eq!(newest, oldest);
    // --run-at takes a delay as well as a time.
    let later = run(db, server, &["task", "create", "clip", "--run-at", "10m"]).unwrap();
    let later = run(db, server, &["task", "get", later["id"].as_str().unwrap()]).unwrap();
    let due: chrono::DateTime<chrono::Utc> = later["order_time"].as_str().unwrap().parse().unwrap();
    let ahead = due - chrono::Utc::now();
    assert!(ahead > chrono::Duration::minutes(9) && ahead <= chrono::Duration::minutes(10), "{later}");
    let at = run(db, server, &["task", "create", "clip", "--run-at", "2030-01-01T00:00:00Z"]).unwrap();
    let at = run(db, server, &["task", "get", at["id"].as_str().unwrap()]).unwrap();
    assert!(at["order_time"].as_str().unwrap().starts_with("2030-01-01T00:00:00"), "{at}");
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
    // Rate limits per queue key: every key, one key of its own, shown by the type's settings.
    let every = run(db, server, &["type", "rate-limit", "site", "--every-key", "--max-starts", "2"]).unwrap();
    assert_eq!(every, serde_json::json!({"queue_key": null, "max_starts": 2, "period": 1.0}));
    let own = ["type", "rate-limit", "site", "--queue-key", "a b/c", "--max-starts", "5", "--period", "60"];
    assert_eq!(run(db, server, &own).unwrap()["max_starts"], 5);
    let site = run(db, server, &["type", "list"]).unwrap()[1].clone();
    assert_eq!(site["queue_rate_limit"], serde_json::json!({"max_starts": 2, "period": 1.0}), "{site}");
    assert_eq!(site["queue_rate_limits"]["a b/c"], serde_json::json!({"max_starts": 5, "period": 60.0}), "{site}");
    let back = run(db, server, &["type", "rate-limit", "site", "--queue-key", "a b/c", "--remove"]).unwrap();
    assert_eq!(back["max_starts"], 2, "the limit for every key applies again: {back}");
    let err = run(db, server, &["type", "rate-limit", "clip", "--every-key", "--max-starts", "2"]).unwrap_err();
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
    let server = common::cli::Served::start(&db.url, TOKEN, &[]).await;
    let base = server.base.clone();
    let outcome = tokio::task::spawn_blocking(move || {
        scenario(&db, Some(&base));
        db
    })
    .await;
    drop(server);
    outcome.unwrap();
}

/// `asyncflow schedule ...`: the same answers from the database and from a server (the
/// server's remove answers 204 without a body; the command says what it removed either way).
fn schedule_scenario(db: &TestDb, server: Option<&str>, name: &str) {
    run(db, server, &["type", "set", "report"]).unwrap();
    let set = run(db, server, &["schedule", "set", name, "0 3 * * *", r#"{"type": "report"}"#]).unwrap();
    assert_eq!((set["name"].as_str(), set["cron"].as_str()), (Some(name), Some("0 3 * * *")), "{set}");
    assert_eq!(run(db, server, &["schedule", "pause", name]).unwrap()["paused"], true);
    assert_eq!(run(db, server, &["schedule", "resume", name]).unwrap()["paused"], false);
    let listed = run(db, server, &["schedule", "list"]).unwrap();
    assert!(listed.as_array().unwrap().iter().any(|s| s["name"] == name), "{listed}");
    assert_eq!(run(db, server, &["schedule", "remove", name]).unwrap(), serde_json::json!({"removed": name}));
    let err = run(db, server, &["schedule", "remove", name]).unwrap_err();
    assert!(err.contains("unknown schedule"), "{err}");
    let err = run(db, server, &["schedule", "set", name, "61 * * * *", r#"{"type": "report"}"#]).unwrap_err();
    assert!(err.contains("61"), "{err}");
}

#[tokio::test]
async fn schedule_commands_answer_alike_on_the_database_and_on_a_server() {
    let db = TestDb::new().await;
    let server = common::cli::Served::start(&db.url, TOKEN, &[]).await;
    let base = server.base.clone();
    let outcome = tokio::task::spawn_blocking(move || {
        schedule_scenario(&db, None, "nightly.db");
        schedule_scenario(&db, Some(&base), "nightly.server");
        db
    })
    .await;
    drop(server);
    outcome.unwrap();
}

/// `asyncflow pipeline ...` and `asyncflow run ...`: the same answers from the database and from a
/// server. `suffix` keeps the two passes' pipelines apart.
fn workflow_scenario(db: &TestDb, server: Option<&str>, dir: &std::path::Path, suffix: &str) {
    let name = format!("instant_{suffix}");
    let file = dir.join(format!("{name}.json"));
    let definition = r#"{"nodes": [{"name": "start", "type": "start"}, {"name": "end", "type": "end"}],
        "edges": [["start", "end"]]}"#;
    std::fs::write(&file, definition).unwrap();
    let file = file.to_str().unwrap();
    let applied = run(db, server, &["pipeline", "apply", "--draft", file]).unwrap();
    assert_eq!(
        applied,
        serde_json::json!([{"name": name, "version": 1, "status": "draft", "created": true, "nodes": 2}])
    );
    let active = run(db, server, &["pipeline", "activate", &name, "1"]).unwrap();
    assert_eq!(active["status"], "active", "{active}");
    let got = run(db, server, &["pipeline", "get", &name, "--version", "1"]).unwrap();
    assert!(got["plan"].is_object() && got["definition"]["nodes"].is_array(), "{got}");
    let listed = run(db, server, &["pipeline", "list"]).unwrap();
    assert!(listed.as_array().unwrap().iter().any(|p| p["name"] == name.as_str()), "{listed}");

    let summary = run(db, server, &["run", "start", &name, "--wait"]).unwrap();
    assert_eq!(
        (&summary["status"], &summary["nodes"]),
        (&serde_json::json!("succeeded"), &serde_json::json!({"succeeded": 2}))
    );
    let ended = summary["run_id"].as_str().unwrap().to_string();
    let later = run(db, server, &["run", "start", &name, "--run-at", "10m"]).unwrap();
    let later = later["run_id"].as_str().unwrap().to_string();
    let page = run(db, server, &["run", "list", "--pipeline", &name, "--limit", "1"]).unwrap();
    assert_eq!(
        (page["runs"][0]["run_id"].as_str(), page["next"].as_str()),
        (Some(later.as_str()), Some(later.as_str()))
    );
    let rest = run(db, server, &["run", "list", "--pipeline", &name, "--before", &later]).unwrap();
    assert_eq!((rest["runs"][0]["run_id"].as_str(), &rest["next"]), (Some(ended.as_str()), &Value::Null));
    assert_eq!(run(db, server, &["run", "get", &ended]).unwrap()["status"], "succeeded");
    let cancelled = run(db, server, &["run", "cancel", &later]).unwrap();
    assert_eq!(cancelled, serde_json::json!({"run_id": later, "cancelled": true}));
    let retried = run(db, server, &["run", "retry", &later]).unwrap();
    assert_eq!(retried["retry_of"].as_str(), Some(later.as_str()), "{retried}");

    let err = run(db, server, &["run", "get", "r-nope"]).unwrap_err();
    assert!(err.contains("unknown run"), "{err}");
    let err = run(db, server, &["run", "list", "--before", "r-nope"]).unwrap_err();
    assert!(err.contains("before"), "{err}");
    let err = run(db, server, &["pipeline", "get", "nope"]).unwrap_err();
    assert!(err.contains("unknown pipeline"), "{err}");
    let err = run(db, server, &["run", "retry-node", &ended, "nope"]).unwrap_err();
    assert!(!err.is_empty());
    assert!(run(db, server, &["pipeline", "retire", &name, "1"]).unwrap()["status"] == "retired");
}

#[tokio::test]
async fn workflow_commands_answer_alike_on_the_database_and_on_a_server() {
    let db = TestDb::new().await;
    let server = common::cli::Served::start(&db.url, TOKEN, &[]).await;
    let base = server.base.clone();
    let dir = std::env::temp_dir().join(format!("af-admin-wf-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let outcome = tokio::task::spawn_blocking(move || {
        workflow_scenario(&db, None, &dir, "db");
        workflow_scenario(&db, Some(&base), &dir, "server");
        db
    })
    .await;
    drop(server);
    outcome.unwrap();
}

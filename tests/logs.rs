//! The log as operators read it: `--log-format json` writes one JSON object per line, and each
//! failed call, retry, rescue, task given up and undelivered callback is a line with fields
//! (`task`, `task_type`, `stage`, `attempt`, `error`, `outcome`; `callback` for callbacks).
use crate::common;

use std::path::PathBuf;
use std::process::{Command, Output};

use asyncflow::db::api;
use asyncflow::WorkerId;
use common::TestDb;
use serde_json::{json, Value};

fn asyncflow(db: &TestDb, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_asyncflow"))
        .args(args)
        .env("DATABASE_URL", &db.url)
        .env("ASYNCFLOW_LOG", "asyncflow=info")
        .env_remove("ASYNCFLOW_LOG_FORMAT")
        .output()
        .expect("run the asyncflow binary")
}

/// Every line of stderr, each parsed as a JSON object (a line that is not one fails the test).
fn json_lines(output: &Output) -> Vec<Value> {
    let log = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{:?}: {log}", output.status);
    assert!(!log.contains('\u{1b}'), "no colour codes in a redirected log: {log}");
    log.lines()
        .map(|line| {
            let value: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
            assert!(value.is_object() && value["level"].is_string() && value["message"].is_string(), "{line}");
            value
        })
        .collect()
}

fn line_with<'a>(lines: &'a [Value], field: &str, value: &str, outcome: &str) -> &'a Value {
    lines
        .iter()
        .find(|l| l[field] == value && l["outcome"] == outcome)
        .unwrap_or_else(|| panic!("no line with {field} = {value}, outcome {outcome}: {lines:#?}"))
}

/// A worker on functions/flaky: one task is out of tries after its first failure (given up), the
/// other fails once and is retried. Both lines carry the task's fields. No pipeline exists, so
/// there is no warning about a callback secret.
#[tokio::test]
async fn json_logs_name_each_retried_and_given_up_task_with_its_fields() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    // a task's tries are fixed when it is created: the first has none left after one failure
    c.batch_execute(
        "select asyncflow.register_task_type('flaky', '{\"max_retry_num\": 0}'); \
         select asyncflow.create_task('flaky', '{\"fail_times\": 99}'); \
         select asyncflow.register_task_type('flaky', '{\"max_retry_num\": 5, \"max_retry_interval\": -1}'); \
         select asyncflow.create_task('flaky', '{\"fail_times\": 1}');",
    )
    .await
    .unwrap();
    let functions = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("functions");
    let functions = functions.to_string_lossy();
    let output = asyncflow(
        &db,
        &["--log-format", "json", "worker", "--functions", &functions, "--types", "flaky", "--exit-when-idle"],
    );
    let lines = json_lines(&output);
    let given_up = line_with(&lines, "task", "flaky-1-1", "given_up");
    assert_eq!(given_up["level"], "INFO");
    assert_eq!(
        (&given_up["task_type"], &given_up["stage"], &given_up["attempt"]),
        (&json!("flaky"), &json!("start"), &json!(1))
    );
    assert!(given_up["error"].as_str().is_some_and(|e| e.contains("flaky failure 1 of 99")), "{given_up}");
    let retried = line_with(&lines, "task", "flaky-1-2", "retried");
    assert_eq!(
        (&retried["task_type"], &retried["stage"], &retried["attempt"]),
        (&json!("flaky"), &json!("start"), &json!(1))
    );
    assert!(retried["error"].as_str().is_some_and(|e| e.contains("flaky failure 1 of 1")), "{retried}");
    assert!(
        !lines.iter().any(|l| l["message"].as_str().is_some_and(|m| m.contains("callback secret"))),
        "no pipeline, no callback: no warning about its secret: {lines:#?}"
    );
    // the stop line's counts are fields, named as in the stdout summary (no Rust debug text)
    let stopped = lines.iter().find(|l| l["message"] == "worker stopped").expect("a stop line");
    assert_eq!(
        (&stopped["retried"], &stopped["failed"], &stopped["stopped_by"]),
        (&json!(1), &json!(1), &json!("Idle")),
        "{stopped}"
    );
    for count in ["claimed", "advanced", "succeeded", "later", "released", "refused"] {
        assert!(stopped[count].is_u64(), "{count}: {stopped}");
    }
    assert!(stopped.get("summary").is_none(), "{stopped}");
}

/// `maintain --once` as JSON: two tasks whose leases ran out, one rescued (tries left), one given
/// up (none left), and a run's callback to an address where nothing listens (retried). The
/// unsigned callback is warned about, once.
#[tokio::test]
async fn json_logs_name_each_rescued_task_and_each_undelivered_callback() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    c.batch_execute(
        "select asyncflow.register_task_type('lost', '{\"max_retry_num\": 0, \"max_processing_time\": 60}'); \
         select asyncflow.create_task('lost', '{}', stage => 'fetch', p_now => now() - interval '1 hour'); \
         select asyncflow.register_task_type('lost', '{\"max_retry_num\": 3}'); \
         select asyncflow.create_task('lost', '{}', stage => 'fetch', p_now => now() - interval '1 hour');",
    )
    .await
    .unwrap();
    // created and claimed an hour ago by a worker that vanished: both leases ran out long since
    let an_hour_ago = chrono::Utc::now() - chrono::Duration::minutes(59);
    let claimed =
        api::claim_tasks(&db.conn().await, "lost", &WorkerId::new("vanished").unwrap(), 10, Some(an_hour_ago))
            .await
            .unwrap();
    assert_eq!(claimed.len(), 2);
    // a closed port: the callback cannot be delivered
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let definition = json!({"nodes": [{"name": "start", "type": "start"}, {"name": "end", "type": "end"}],
        "edges": [["start", "end"]]});
    common::workflow::pipeline(&c, "instant", definition).await;
    let run_id = common::workflow::start(&c, "instant", json!({}), Some(&format!("http://{closed}/hook")), None).await;

    let output = asyncflow(&db, &["maintain", "--once", "--log-format", "json"]);
    let lines = json_lines(&output);
    let given_up = line_with(&lines, "task", "lost-1-1", "given_up");
    assert_eq!(
        (&given_up["task_type"], &given_up["stage"], &given_up["attempt"]),
        (&json!("lost"), &json!("fetch"), &json!(1))
    );
    assert!(given_up["error"].as_str().is_some_and(|e| e.starts_with("lease expired")), "{given_up}");
    let rescued = line_with(&lines, "task", "lost-1-2", "rescued");
    assert_eq!(
        (&rescued["task_type"], &rescued["stage"], &rescued["attempt"]),
        (&json!("lost"), &json!("fetch"), &json!(1))
    );
    assert!(rescued["error"].as_str().is_some_and(|e| e.starts_with("lease expired")), "{rescued}");
    let callback = line_with(&lines, "run", &run_id, "retried");
    assert_eq!((&callback["kind"], &callback["attempt"]), (&json!("run"), &json!(1)), "{callback}");
    assert!(callback["callback"].as_str().is_some_and(|id| id.starts_with(&run_id)), "{callback}");
    assert!(callback["error"].as_str().is_some_and(|e| !e.is_empty()), "{callback}");
    let warnings =
        lines.iter().filter(|l| l["message"].as_str().is_some_and(|m| m.contains("no callback secret"))).count();
    assert_eq!(warnings, 1, "{lines:#?}");
}

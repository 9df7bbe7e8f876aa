//! The scheduling features beside periodic schedules: idempotent start_run, uniqueness windows,
//! progress and rate limits.
mod common;
#[allow(dead_code)]
#[path = "common/workflow.rs"]
mod workflow;

use asyncflow::db::api;
use asyncflow::run::StartRun;
use common::{sqlstate, wait_for_lock_wait, TestDb};
use serde_json::json;

async fn register(c: &impl tokio_postgres::GenericClient, name: &str, settings: serde_json::Value) {
    c.query_one("select asyncflow.register_task_type($1, $2)", &[&name, &settings]).await.unwrap();
}

fn one_node() -> serde_json::Value {
    json!({"nodes": [{"name": "start", "type": "start"}, {"name": "a", "type": "task", "function": "wf"},
        {"name": "end", "type": "end"}], "edges": [["start", "a"], ["a", "end"]]})
}

#[tokio::test]
async fn duplicate_start_run_calls_with_one_idempotency_key_start_one_run() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    register(&**c, "wf", json!({})).await;
    workflow::pipeline(&**c, "p", one_node()).await;
    let start = |key: Option<&str>, input: serde_json::Value| StartRun {
        pipeline: "p".into(),
        input: Some(input),
        idempotency_key: key.map(String::from),
        ..Default::default()
    };
    let first = api::start_run(&c, &start(Some("order-7"), json!({"n": 1})), None).await.unwrap();
    // the same key again, even with another input: the first run
    let again = api::start_run(&c, &start(Some("order-7"), json!({"n": 2})), None).await.unwrap();
    assert_eq!(first, again);
    let other = api::start_run(&c, &start(Some("order-8"), json!({})), None).await.unwrap();
    assert_ne!(first, other);
    // without a key, two calls are two runs
    let a = api::start_run(&c, &start(None, json!({})), None).await.unwrap();
    let b = api::start_run(&c, &start(None, json!({})), None).await.unwrap();
    assert_ne!(a, b);
    let runs: i64 = c.query_one("select count(*) from asyncflow.runs", &[]).await.unwrap().get(0);
    assert_eq!(runs, 4);
    let run = workflow::run(&**c, &first).await;
    assert_eq!((run["idempotency_key"].clone(), run["input"].clone()), (json!("order-7"), json!({"n": 1})));
    // a bad key changes nothing
    let e = c.query_one("select asyncflow.start_run('p', idempotency_key => '')", &[]).await.unwrap_err();
    assert_eq!(sqlstate(&e), "AF006");
    let runs: i64 = c.query_one("select count(*) from asyncflow.runs", &[]).await.unwrap().get(0);
    assert_eq!(runs, 4);
}

#[tokio::test]
async fn a_concurrent_start_run_with_the_same_key_waits_and_answers_the_first_run() {
    let db = TestDb::new().await;
    let setup = db.raw().await;
    register(&setup, "wf", json!({})).await;
    workflow::pipeline(&setup, "p", one_node()).await;
    let first = db.raw().await;
    first.batch_execute("begin").await.unwrap();
    let id: String =
        first.query_one("select asyncflow.start_run('p', idempotency_key => 'k')", &[]).await.unwrap().get(0);
    let second = db.raw().await;
    let waiting = tokio::spawn(async move {
        second
            .query_one("select asyncflow.start_run('p', idempotency_key => 'k')", &[])
            .await
            .map(|r| r.get::<_, String>(0))
    });
    wait_for_lock_wait(&setup, "idempotency_key => 'k'").await;
    first.batch_execute("commit").await.unwrap();
    assert_eq!(waiting.await.unwrap().unwrap(), id);
    // and a first call that rolls back leaves the key free
    first.batch_execute("begin").await.unwrap();
    let gone: String =
        first.query_one("select asyncflow.start_run('p', idempotency_key => 'k2')", &[]).await.unwrap().get(0);
    first.batch_execute("rollback").await.unwrap();
    let fresh: String =
        setup.query_one("select asyncflow.start_run('p', idempotency_key => 'k2')", &[]).await.unwrap().get(0);
    assert_ne!(gone, fresh);
    let runs: i64 = setup.query_one("select count(*) from asyncflow.runs", &[]).await.unwrap().get(0);
    assert_eq!(runs, 2);
}

//! Rows written past the API (a fault injection: the superuser UPDATEs a task's context, result
//! or schedule log, a run's input, with JSON the entry rule refuses) never fail a claim, a held
//! claim or a read: the claim fails such a task with the reason and hands out the rest of its
//! batch; a read shows the row with `decode_error` and the field's text in `raw`.
use crate::common;

use std::time::Duration;

use asyncflow::db::api;
use asyncflow::function::{StageCall, StageReply};
use asyncflow::http::router;
use asyncflow::task::{NewTask, TaskStatus};
use asyncflow::task_type::TaskTypeUpdate;
use asyncflow::worker::{Worker, WorkerConfig};
use asyncflow::{TaskId, TypeName, WorkerId};
use axum::http::StatusCode;
use common::sql::*;
use common::workflow::{pipeline, start};
use common::{http_config, request, wait_until, TestDb};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

/// What the fault injection writes: values no reader can parse, with the start of the reason.
fn unreadable() -> Vec<(String, &'static str)> {
    vec![
        (r#"{"x": 1e400}"#.to_string(), "it holds the number"),
        (format!(r#"{{"x": 17976931348623157{}}}"#, "0".repeat(292)), "it holds the number"),
        (format!("{}1{}", "[".repeat(200), "]".repeat(200)), "it nests deeper than 64 levels"),
    ]
}

/// Writes `value` into `column` of the task, past the API.
async fn inject(c: &tokio_postgres::Client, id: &TaskId, column: &str, value: &str) {
    let sql = format!(
        "update asyncflow.tasks set {column} = $1::text::jsonb \
         where task_type = $2 and shard = $3 and id = $4"
    );
    let n = c.execute(&sql, &[&value, &id.task_type(), &id.shard(), &id.number()]).await.unwrap();
    assert_eq!(n, 1, "{id}");
}

/// Five good tasks and three bad ones (one per unreadable value) of `unreadable()`, in alternation; the bad ids.
async fn seed(c: &tokio_postgres::Client, pool: &asyncflow::db::DbPool, ty: &str) -> (Vec<TaskId>, Vec<TaskId>) {
    let tasks: Vec<NewTask> = (0..8)
        .map(|n| NewTask {
            context: Some(json!({"n": n})),
            queue_key: Some(format!("k{}", n % 3)),
            ..Default::default()
        })
        .collect();
    let ids = api::create_tasks(&pool.get().await.unwrap(), ty, &tasks).await.unwrap();
    let (mut good, mut bad) = (Vec::new(), Vec::new());
    let values = unreadable();
    for (n, id) in ids.into_iter().enumerate() {
        match values.get(n / 2) {
            Some((value, _)) if n % 2 == 1 => {
                inject(c, &id, "context", value).await;
                bad.push(id);
            }
            _ => good.push(id),
        }
    }
    (good, bad)
}

/// Each bad task failed at its claim, its error naming the context and the reason.
async fn assert_failed_for_reason(pool: &asyncflow::db::DbPool, bad: &[TaskId]) {
    let reasons = unreadable();
    for (id, (_, why)) in bad.iter().zip(reasons) {
        let task = api::get_task(&pool.get().await.unwrap(), id.as_str()).await.unwrap().unwrap();
        assert_eq!(task.status, TaskStatus::Failed, "{id}");
        let error = task.error.unwrap_or_default();
        assert!(error.starts_with(&format!("context cannot be read: {why}")), "{id}: {error}");
        assert!(task.decode_error.unwrap_or_default().starts_with("context cannot be read"), "{id}");
    }
}

async fn running(c: &tokio_postgres::Client, ty: &str) -> i64 {
    c.query_one("select count(*) from asyncflow.tasks where task_type = $1 and status = 'running'", &[&ty])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test]
async fn claims_and_held_claims_fail_an_unreadable_task_and_hand_out_the_rest() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    let w = worker("w");
    let fair = json!({"fair_queues": true});
    for (ty, settings) in [("plain", json!({})), ("fair", fair.clone()), ("held", json!({})), ("held_fair", fair)] {
        register(&c, ty, settings).await;
        let (good, bad) = seed(&c, &db.pool, ty).await;
        let claimed: Vec<TaskId> = if ty.starts_with("held") {
            let mut conn = db.pool.get().await.unwrap();
            let tx = conn.transaction().await.unwrap();
            let held = api::hold_tasks(&tx, &TypeName::new(ty).unwrap(), &w, 100).await.unwrap();
            assert!(held.iter().all(|(_, held)| *held), "{ty}: held, not claimed");
            let ids: Vec<TaskId> = held.into_iter().map(|(t, _)| t.task_id).collect();
            tx.commit().await.unwrap();
            ids
        } else {
            api::claim_tasks(&db.pool.get().await.unwrap(), ty, &w, 100, None)
                .await
                .unwrap_or_else(|e| panic!("{ty}: {e}"))
                .into_iter()
                .map(|t| t.task_id)
                .collect()
        };
        let mut claimed_sorted = claimed.clone();
        claimed_sorted.sort_by_key(|id| id.number());
        assert_eq!(claimed_sorted, good, "{ty}: the good tasks, and only they");
        assert_failed_for_reason(&db.pool, &bad).await;
        let expect_running = if ty.starts_with("held") { 0 } else { good.len() as i64 };
        assert_eq!(running(&c, ty).await, expect_running, "{ty}: nothing running but what was handed out");
        let failed: i64 = c
            .query_one("select sum(failed)::bigint from asyncflow.type_counters where task_type = $1", &[&ty])
            .await
            .unwrap()
            .get(0);
        assert_eq!(failed, bad.len() as i64, "{ty}: counted as failed");
    }
}

#[tokio::test]
async fn the_http_hold_answers_200_with_the_good_tasks_beside_unreadable_ones() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    register(&c, "num", json!({})).await;
    let (good, bad) = seed(&c, &db.pool, "num").await;
    let app = router(db.pool.clone(), &http_config(&[], 1 << 20));
    let body = json!({"type": "num", "worker_id": "w", "limit": 10}).to_string();
    let (status, _, bytes) = request(&app, "POST", "/v1/worker/hold", Some(body), Some("application/json"), None).await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&bytes));
    let held: Value = serde_json::from_slice(&bytes).unwrap();
    let ids: Vec<&str> = held["tasks"].as_array().unwrap().iter().map(|t| t["task_id"].as_str().unwrap()).collect();
    assert_eq!(ids, good.iter().map(|id| id.as_str()).collect::<Vec<_>>());
    assert_failed_for_reason(&db.pool, &bad).await;
    assert_eq!(running(&c, "num").await, good.len() as i64);
}

/// The database worker (held claims, then claims) burns down the good tasks beside the bad.
#[tokio::test]
async fn a_database_worker_burns_down_the_good_tasks_beside_unreadable_ones() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    let settings = TaskTypeUpdate { schedule_interval: Some(0.2), ..TaskTypeUpdate::default() };
    api::register_task_type(&db.conn().await, &TypeName::new("num").unwrap(), &settings).await.unwrap();
    let (good, bad) = seed(&c, &db.pool, "num").await;
    let config = WorkerConfig {
        worker_id: WorkerId::new("w").unwrap(),
        concurrency: 4,
        shutdown_grace: Duration::from_millis(300),
        ..WorkerConfig::default()
    };
    let stop = CancellationToken::new();
    let worker = Worker::new(db.pool.clone(), db.url.clone(), config).register(
        TypeName::new("num").unwrap(),
        |call: StageCall| async move { StageReply::Succeeded { result: call.context } },
        None,
        settings,
    );
    let running = tokio::spawn(worker.run(stop.clone()));
    let pool = db.pool.clone();
    let ids = good.clone();
    wait_until(Duration::from_secs(20), "the good tasks succeed", || {
        let (pool, ids) = (pool.clone(), ids.clone());
        async move {
            let done = api::count_by_status_of(&pool.get().await.unwrap(), &ids).await.unwrap();
            done.iter().any(|(s, n)| *s == TaskStatus::Succeeded && *n == ids.len() as i64)
        }
    })
    .await;
    stop.cancel();
    running.await.unwrap().unwrap();
    assert_failed_for_reason(&db.pool, &bad).await;
}

/// One request through the router: status and JSON body.
async fn get(app: &axum::Router, uri: &str) -> (StatusCode, Value) {
    let (status, _, bytes) = request(app, "GET", uri, None, None, None).await;
    (status, serde_json::from_slice(&bytes).unwrap_or_else(|_| json!({"raw": String::from_utf8_lossy(&bytes)})))
}

/// Pipeline "p": start, one task of type "wf", end.
async fn one_task_pipeline(c: &tokio_postgres::Client) {
    register(c, "wf", json!({})).await;
    let nodes = json!([{"name": "start", "type": "start"}, {"name": "work", "type": "task", "function": "wf"},
        {"name": "end", "type": "end"}]);
    pipeline(c, "p", json!({"nodes": nodes, "edges": [["start", "work"], ["work", "end"]]})).await;
}

#[tokio::test]
async fn reads_show_an_unreadable_row_with_its_decode_error() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    register(&c, "num", json!({})).await;
    let ids = api::create_tasks(&db.conn().await, "num", &vec![NewTask::default(); 4]).await.unwrap();
    let (value, why) = unreadable().remove(0);
    inject(&c, &ids[0], "context", &value).await;
    inject(&c, &ids[1], "result", &value).await;
    inject(&c, &ids[2], "schedule_log", &format!("[{value}]")).await;

    let conn = db.conn().await;
    for (id, field) in ids.iter().zip(["context", "result", "schedule_log"]) {
        let task = api::get_task(&conn, id.as_str()).await.unwrap().unwrap();
        let error = task.decode_error.unwrap_or_default();
        assert!(error.starts_with(&format!("{field} cannot be read: {why}")), "{id}: {error}");
        let raw = task.raw.unwrap_or_default();
        assert!(raw[field].as_str().unwrap_or_default().contains(r#""x": 1000000000"#), "{id}: {raw:?}");
    }
    let list =
        api::list_tasks(&conn, &api::TaskFilter { task_type: Some("num".into()), ..Default::default() }).await.unwrap();
    assert_eq!(list.len(), 4);
    assert_eq!(list.iter().filter(|t| t.decode_error.is_some()).count(), 3);
    // newest first: the clean task, the last created, leads
    assert!(list[0].decode_error.is_none() && list[0].raw.is_none());

    // runs: an input written past the API
    one_task_pipeline(&c).await;
    let run_id = start(&c, "p", json!({}), None, None).await;
    c.execute("update asyncflow.runs set input = $1::text::jsonb where run_id = $2", &[&value, &run_id]).await.unwrap();

    let app = router(db.pool.clone(), &http_config(&[], 1 << 20));
    let (status, page) = get(&app, "/v1/tasks?type=num").await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let tasks = page["tasks"].as_array().unwrap();
    // newest first: the first created, whose context cannot be read, comes last
    assert!(tasks[3]["decode_error"].as_str().unwrap().starts_with("context cannot be read"), "{page}");
    assert_eq!(tasks[3]["context"], Value::Null);
    let (status, one) = get(&app, &format!("/v1/tasks/{}", ids[1])).await;
    assert_eq!(status, StatusCode::OK, "{one}");
    assert!(one["raw"]["result"].as_str().unwrap().contains(r#""x": 1000000000"#), "{one}");
    for uri in ["/v1/runs".to_string(), format!("/v1/runs/{run_id}")] {
        let (status, body) = get(&app, &uri).await;
        assert_eq!(status, StatusCode::OK, "{uri}: {body}");
        let run = body.get("runs").map(|r| r[0].clone()).unwrap_or(body.clone());
        assert!(run["decode_error"].as_str().unwrap_or_default().starts_with("input cannot be read"), "{uri}: {run}");
        assert!(run["raw"]["input"].as_str().unwrap_or_default().contains(r#""x": 1000000000"#), "{uri}: {run}");
    }
}

/// A callback whose payload carries a run's result written past the API is still claimed (the
/// whole batch with it), and delivered with its decode_error.
#[tokio::test]
async fn callbacks_with_an_unreadable_payload_are_claimed_with_their_decode_error() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    one_task_pipeline(&c).await;
    let runs = [
        start(&c, "p", json!({}), Some("http://127.0.0.1:9/hook"), None).await,
        start(&c, "p", json!({}), Some("http://127.0.0.1:9/hook"), None).await,
    ];
    for run in &runs {
        assert!(api::cancel_run(&db.conn().await, run).await.unwrap(), "{run}");
    }
    let (value, why) = unreadable().remove(0);
    let n = c
        .execute(
            "update asyncflow.callbacks set payload = payload || jsonb_build_object('result', $1::text::jsonb) \
             where run_id = $2",
            &[&value, &runs[0]],
        )
        .await
        .unwrap();
    assert_eq!(n, 1);
    let claimed = api::claim_callbacks(&db.conn().await, "m", 10, 60, None).await.unwrap();
    assert_eq!(claimed.len(), 2, "both, the bad one beside the good");
    let bad = claimed.iter().find(|d| d.run_id == runs[0]).unwrap();
    let error = bad.payload["decode_error"].as_str().unwrap_or_default();
    assert!(error.starts_with(&format!("result cannot be read: {why}")), "{}", bad.payload);
    assert_eq!(bad.payload["result"], Value::Null);
    let good = claimed.iter().find(|d| d.run_id == runs[1]).unwrap();
    assert!(good.payload.get("decode_error").is_none(), "{}", good.payload);
}

//! `explain_task`: why a task is not running, one reason per case (sql/api/62_explain.sql),
//! through SQL, HTTP and the command line.
use crate::common;

use asyncflow::db::api;
use asyncflow::explain::ExplainReason;
use asyncflow::task::{NewTask, ReportKind};
use chrono::{DateTime, Utc};
use common::TestDb;
use serde_json::{json, Value};

use common::sql::*;

async fn explain(c: &deadpool_postgres::Object, id: &str, now: DateTime<Utc>) -> Value {
    let e = api::explain_task(c, id, Some(now)).await.unwrap().expect("a task");
    serde_json::to_value(e).unwrap()
}

async fn create(c: &deadpool_postgres::Object, ty: &str, task: NewTask, now: DateTime<Utc>) -> String {
    c.query_one(
        "select asyncflow.create_task($1, $2, coalesce($3, 0), $4, p_now => $5, queue_key => $6)",
        &[&ty, &task.context.unwrap_or(json!({})), &task.priority, &task.run_at, &now, &task.queue_key],
    )
    .await
    .unwrap()
    .get(0)
}

#[tokio::test]
async fn explain_task_gives_each_reason_with_its_detail() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    let w = worker("w");
    let now = t0();
    register(&**c, "plain", json!({"max_retry_interval": 60})).await;

    // ready, with the ready tasks ahead of it
    let first = create(&c, "plain", NewTask::default(), now).await;
    let second = create(&c, "plain", NewTask::default(), now + secs(1.0)).await;
    assert_eq!(explain(&c, &first, now + secs(2.0)).await, json!({"reason": "ready", "ahead": 0, "capped": false}));
    assert_eq!(explain(&c, &second, now + secs(2.0)).await, json!({"reason": "ready", "ahead": 1, "capped": false}));

    // delayed: run_at
    let later = create(&c, "plain", NewTask { run_at: Some(now + secs(600.0)), ..Default::default() }, now).await;
    assert_eq!(explain(&c, &later, now + secs(2.0)).await, json!({"reason": "delayed", "until": now + secs(600.0)}));

    // running, then backing_off after a failed try, then ended
    let claimed = api::claim_tasks(&c, "plain", &w, 1, Some(now + secs(3.0))).await.unwrap();
    assert_eq!(claimed[0].task_id.as_str(), first);
    let e = explain(&c, &first, now + secs(4.0)).await;
    assert_eq!(
        (e["reason"].clone(), e["worker"].clone(), e["stage"].clone()),
        (json!("running"), json!("w"), json!("start"))
    );
    let r = api::report_tasks(
        &c,
        &w,
        &[rep(&first, claimed[0].claim_seq, ReportKind::Fail { error: "no disk".into(), retry: true })],
        Some(now + secs(5.0)),
    )
    .await
    .unwrap();
    assert!(r[0].accepted);
    let e = explain(&c, &first, now + secs(5.5)).await;
    assert_eq!(
        (e["reason"].clone(), e["attempt"].clone(), e["error"].clone()),
        (json!("backing_off"), json!(1), json!("no disk"))
    );
    assert!(e["until"].is_string(), "{e}");
    api::cancel_task(&c, &second).await.unwrap();
    let e = explain(&c, &second, now + secs(6.0)).await;
    assert_eq!((e["reason"].clone(), e["status"].clone()), (json!("ended"), json!("cancelled")));

    // waiting_event
    let claimed = api::claim_tasks(&c, "plain", &w, 1, Some(now + secs(100.0))).await.unwrap();
    let waiting = claimed[0].task_id.as_str().to_string();
    let wait = ReportKind::Wait { stage: "next".into(), event: "doc:9".into(), timeout: 60.0, context: None };
    api::report_tasks(&c, &w, &[rep(&waiting, claimed[0].claim_seq, wait)], Some(now + secs(101.0))).await.unwrap();
    assert_eq!(
        explain(&c, &waiting, now + secs(102.0)).await,
        json!({"reason": "waiting_event", "key": "doc:9", "since": claimed[0].claimed_at,
               "until": now + secs(161.0), "next_stage": "next"})
    );

    // paused
    let p = create(&c, "plain", NewTask::default(), now).await;
    c.execute("select asyncflow.register_task_type('plain', '{\"paused\": true}')", &[]).await.unwrap();
    assert_eq!(explain(&c, &p, now + secs(200.0)).await, json!({"reason": "paused"}));
    c.execute("select asyncflow.register_task_type('plain', '{\"paused\": false}')", &[]).await.unwrap();

    // concurrency of the type
    register(&**c, "one", json!({"concurrency": 1})).await;
    create(&c, "one", NewTask::default(), now).await;
    let blocked = create(&c, "one", NewTask::default(), now + secs(1.0)).await;
    api::claim_tasks(&c, "one", &w, 1, Some(now + secs(2.0))).await.unwrap();
    assert_eq!(
        explain(&c, &blocked, now + secs(3.0)).await,
        json!({"reason": "concurrency", "scope": "type", "running": 1, "limit": 1})
    );

    // a fair type: a held key, a key at its limit
    register(&**c, "site", json!({"fair_queues": true, "queue_concurrency": 1})).await;
    c.execute("select asyncflow.set_queue_limit('site', 'held.example', 0)", &[]).await.unwrap();
    let held = create(&c, "site", NewTask { queue_key: Some("held.example".into()), ..Default::default() }, now).await;
    assert_eq!(explain(&c, &held, now + secs(1.0)).await, json!({"reason": "key_held", "queue_key": "held.example"}));
    create(&c, "site", NewTask { queue_key: Some("a.example".into()), ..Default::default() }, now).await;
    let second_a = create(&c, "site", NewTask { queue_key: Some("a.example".into()), ..Default::default() }, now).await;
    let got = api::claim_tasks(&c, "site", &w, 10, Some(now + secs(1.0))).await.unwrap();
    assert_eq!(got.len(), 1, "one of a.example (the held key gives none)");
    assert_eq!(
        explain(&c, &second_a, now + secs(2.0)).await,
        json!({"reason": "concurrency", "scope": "key", "queue_key": "a.example", "running": 1, "limit": 1})
    );

    // rate_limited: one start per minute, spent
    register(&**c, "api_call", json!({})).await;
    c.execute("select asyncflow.set_rate_limit('api_call', 1, 60, $1)", &[&now]).await.unwrap();
    create(&c, "api_call", NewTask::default(), now).await;
    let next = create(&c, "api_call", NewTask::default(), now + secs(1.0)).await;
    assert_eq!(api::claim_tasks(&c, "api_call", &w, 10, Some(now + secs(2.0))).await.unwrap().len(), 1);
    let e = explain(&c, &next, now + secs(2.0)).await;
    assert_eq!((e["reason"].clone(), e["scope"].clone()), (json!("rate_limited"), json!("type")));
    let at: DateTime<Utc> = serde_json::from_value(e["next_start_at"].clone()).unwrap();
    assert!((at - (now + secs(62.0))).num_milliseconds().abs() < 10, "{e}");
    assert_eq!(explain(&c, &next, now + secs(63.0)).await["reason"], json!("ready"));

    // unknown tasks: none
    assert!(api::explain_task(&c, "plain-1-999999", None).await.unwrap().is_none());
    assert!(api::explain_task(&c, "not an id", None).await.unwrap().is_none());
}

#[tokio::test]
async fn the_count_of_ready_tasks_ahead_is_capped() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    register(&**c, "bulk", json!({})).await;
    let tasks = json!((0..10_000).map(|_| json!({})).collect::<Vec<_>>());
    for _ in 0..2 {
        c.query("select asyncflow.create_tasks('bulk', $1, $2)", &[&tasks, &t0()]).await.unwrap();
    }
    let last = create(&c, "bulk", NewTask::default(), t0() + secs(1.0)).await;
    let e = explain(&c, &last, t0() + secs(2.0)).await;
    assert_eq!(e, json!({"reason": "ready", "ahead": 10_000, "capped": true}));
}

#[tokio::test]
async fn get_v1_tasks_explain_and_task_explain_answer_the_reason() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    register(&**c, "plain", json!({})).await;
    let id = api::create_task(&c, "plain", &Default::default()).await.unwrap();
    let app = asyncflow::http::router(db.pool.clone(), &common::http_config(&["tok"], 1 << 20));
    let (status, _, body) =
        common::request(&app, "GET", &format!("/v1/tasks/{}/explain", id.as_str()), None, None, Some("tok")).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let e: asyncflow::explain::Explanation = serde_json::from_slice(&body).unwrap();
    assert_eq!(e.reason, ExplainReason::Ready);
    let (status, _, _) = common::request(&app, "GET", "/v1/tasks/plain-1-999/explain", None, None, Some("tok")).await;
    assert_eq!(status, 404);

    let out = common::cli::asyncflow(Some(&db.url), &["task", "explain", id.as_str()]);
    let said: Value = serde_json::from_str(&common::cli::ok(&out)).unwrap();
    assert_eq!(said["reason"], json!("ready"));
    let err = common::cli::refused(&common::cli::asyncflow(Some(&db.url), &["task", "explain", "plain-1-999"]));
    assert!(err.contains("unknown task"), "{err}");
}

//! The SQL API as a contract, through SQL: what callers in any language get.
mod common;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use asyncflow::db::api;
use asyncflow::task::{Report, ReportKind, TaskStatus};
use asyncflow::{TaskId, WorkerId};
use chrono::{DateTime, TimeZone, Utc};
use common::{sqlstate, TestDb};
use futures_util::StreamExt;
use serde_json::{json, Value};

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2030, 1, 1, 12, 0, 0).unwrap()
}

fn secs(s: f64) -> chrono::Duration {
    chrono::Duration::milliseconds((s * 1000.0) as i64)
}

async fn register(c: &impl tokio_postgres::GenericClient, ty: &str, settings: Value) {
    c.query_one("select asyncflow.register_task_type($1, $2)", &[&ty, &settings]).await.unwrap();
}

async fn task_count(c: &impl tokio_postgres::GenericClient) -> i64 {
    c.query_one("select count(*) from asyncflow.tasks", &[]).await.unwrap().get(0)
}

async fn task(c: &impl tokio_postgres::GenericClient, id: &str) -> Value {
    c.query_one("select asyncflow.get_task($1)", &[&id]).await.unwrap().get(0)
}

fn at(v: &Value, key: &str) -> DateTime<Utc> {
    serde_json::from_value(v[key].clone()).unwrap()
}

fn worker(name: &str) -> WorkerId {
    WorkerId::new(name).unwrap()
}

fn rep(id: &str, claim_seq: i32, kind: ReportKind) -> Report {
    Report { task_id: TaskId::parse(id).unwrap(), claim_seq, kind }
}

#[tokio::test]
async fn create_task_returns_an_id_and_get_task_shows_every_field() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    register(&c, "video", json!({"initial_stage": "probe"})).await;
    let id: String = c
        .query_one(
            "select asyncflow.create_task('video', '{\"url\": \"x\"}'::jsonb, priority => 30, user_id => 'u1')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(TaskId::parse(&id).is_ok(), "{id}");
    let t = task(&c, &id).await;
    for key in [
        "id",
        "type",
        "stage",
        "status",
        "priority",
        "attempt",
        "context",
        "result",
        "schedule_log",
        "order_time",
        "created_at",
        "updated_at",
    ] {
        assert!(t.get(key).is_some(), "get_task lacks {key}: {t}");
    }
    assert_eq!(t["stage"], "probe");
    assert_eq!(t["status"], "pending");
    assert_eq!(t["priority"], 30);
    assert_eq!(t["context"], json!({"url": "x"}));
    assert_eq!(t["user_id"], "u1");
    let missing: Option<Value> = c.query_one("select asyncflow.get_task('video-1-999999')", &[]).await.unwrap().get(0);
    assert_eq!(missing, None);
    let garbage: Option<Value> =
        c.query_one("select asyncflow.get_task('not an id; drop table x')", &[]).await.unwrap().get(0);
    assert_eq!(garbage, None);
}

#[tokio::test]
async fn creating_in_a_rolled_back_transaction_leaves_nothing_and_wakes_nobody() {
    let db = TestDb::new().await;
    let mut c = db.raw().await;
    register(&c, "video", json!({})).await;

    let (listener, mut conn) = tokio_postgres::connect(&db.url, tokio_postgres::NoTls).await.unwrap();
    let (tx, mut notes) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut stream = futures_util::stream::poll_fn(move |cx| conn.poll_message(cx));
        while let Some(Ok(m)) = stream.next().await {
            if let tokio_postgres::AsyncMessage::Notification(n) = m {
                let _ = tx.send(n.payload().to_string());
            }
        }
    });
    listener.batch_execute("listen asyncflow").await.unwrap();

    let t = c.transaction().await.unwrap();
    t.query("select asyncflow.create_tasks('video', (select jsonb_agg(jsonb_build_object('context', jsonb_build_object('n', g))) from generate_series(1, 100) g))", &[])
        .await
        .unwrap();
    t.rollback().await.unwrap();
    assert_eq!(task_count(&c).await, 0);

    let t = c.transaction().await.unwrap();
    let ids = t
        .query("select asyncflow.create_tasks('video', (select jsonb_agg(jsonb_build_object('context', jsonb_build_object('n', g))) from generate_series(1, 100) g))", &[])
        .await
        .unwrap();
    assert_eq!(ids.len(), 100);
    t.commit().await.unwrap();
    assert_eq!(task_count(&c).await, 100);

    // A round trip on the listener guarantees the notification (if any) has arrived.
    listener.batch_execute("select 1").await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut got = Vec::new();
    while let Ok(n) = notes.try_recv() {
        got.push(n);
    }
    assert_eq!(got, vec!["video".to_string()], "one NOTIFY for the committed statement, none for the rolled-back one");
}

#[tokio::test]
async fn the_same_idempotency_key_returns_the_existing_task_and_creates_nothing() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    register(&c, "video", json!({})).await;
    register(&c, "audio", json!({})).await;
    let create = "select asyncflow.create_task($1, '{}'::jsonb, idempotency_key => 'order-42')";
    let a: String = c.query_one(create, &[&"video"]).await.unwrap().get(0);
    let b: String = c.query_one(create, &[&"video"]).await.unwrap().get(0);
    assert_eq!(a, b);
    let other: String = c.query_one(create, &[&"audio"]).await.unwrap().get(0);
    assert_ne!(a, other, "keys are per type");
    let ids: Vec<String> = c
        .query("select asyncflow.create_tasks('video', '[{\"idempotency_key\": \"order-42\"}, {\"idempotency_key\": \"k2\"}, {\"idempotency_key\": \"k2\"}, {}]')", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(ids[0], a);
    assert_eq!(ids[1], ids[2], "a key repeated inside one call names one task");
    assert_ne!(ids[1], ids[3]);
    let n: i64 =
        c.query_one("select count(*) from asyncflow.tasks where task_type = 'video'", &[]).await.unwrap().get(0);
    assert_eq!(n, 3);
}

#[tokio::test]
async fn concurrent_creates_with_one_idempotency_key_make_one_task() {
    let db = TestDb::new().await;
    register(&db.raw().await, "video", json!({})).await;
    let mut handles = Vec::new();
    for _ in 0..8 {
        let url = db.url.clone();
        handles.push(tokio::spawn(async move {
            let (c, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.unwrap();
            tokio::spawn(conn);
            c.query_one("select asyncflow.create_task('video', '{}', idempotency_key => 'same')", &[])
                .await
                .map(|r| r.get::<_, String>(0))
        }));
    }
    let mut ids = HashSet::new();
    for h in handles {
        match h.await.unwrap() {
            Ok(id) => {
                ids.insert(id);
            }
            Err(e) => assert_eq!(sqlstate(&e), "40001", "only a retryable conflict may come back: {e}"),
        }
    }
    assert_eq!(ids.len(), 1);
    assert_eq!(task_count(&db.raw().await).await, 1);
}

#[tokio::test]
async fn bad_input_gets_its_own_sqlstate_and_writes_nothing() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    register(&c, "video", json!({})).await;
    c.batch_execute("update asyncflow.config set max_context_bytes = 2048").await.unwrap();
    let big = json!({"blob": "x".repeat(4000)});
    let cases: Vec<(&str, Vec<Box<dyn tokio_postgres::types::ToSql + Sync + Send>>, &str, &str)> = vec![
        ("select asyncflow.create_task('nope', '{}')", vec![], "AF001", "unknown task type"),
        ("select asyncflow.create_task('Bad-Name', '{}')", vec![], "AF003", "invalid task type name"),
        (
            "select asyncflow.register_task_type('x; drop table asyncflow.tasks', '{}')",
            vec![],
            "AF003",
            "invalid task type name",
        ),
        ("select asyncflow.register_task_type(repeat('a', 41), '{}')", vec![], "AF003", "invalid task type name"),
        ("select asyncflow.create_task('video', '{}', priority => -1)", vec![], "AF004", "priority"),
        ("select asyncflow.create_task('video', '{}', priority => 31104001)", vec![], "AF004", "priority"),
        ("select asyncflow.create_tasks('video', '[{\"priority\": 1.5}]')", vec![], "AF004", "priority"),
        ("select asyncflow.create_tasks('video', '[{\"priority\": \"high\"}]')", vec![], "AF004", "priority"),
        ("select asyncflow.create_task('video', $1)", vec![Box::new(big.clone())], "AF005", "context is too large"),
        (
            "select asyncflow.create_tasks('video', $1)",
            vec![Box::new(json!([{}, {"context": big}]))],
            "AF005",
            "tasks[1]: context is too large",
        ),
        ("select asyncflow.create_tasks('video', '{\"not\": \"an array\"}')", vec![], "AF006", "JSON array"),
        ("select asyncflow.create_tasks('video', '[1]')", vec![], "AF006", "tasks[0]: must be a JSON object"),
        (
            "select asyncflow.create_tasks('video', '[{\"context\": [1, 2]}]')",
            vec![],
            "AF006",
            "context must be a JSON object",
        ),
        ("select asyncflow.create_tasks('video', '[{\"prio\": 1}]')", vec![], "AF006", "unknown field 'prio'"),
        ("select asyncflow.create_tasks('video', '[{\"run_at\": \"tomorrow-ish\"}]')", vec![], "AF006", "run_at"),
        ("select asyncflow.create_tasks('video', '[{\"stage\": \"bad stage!\"}]')", vec![], "AF006", "stage"),
        ("select asyncflow.create_tasks('video', '[{\"idempotency_key\": \"\"}]')", vec![], "AF006", "idempotency_key"),
        ("select asyncflow.create_tasks('video', '[{}, {}, {\"user_id\": 5}]')", vec![], "AF006", "tasks[2]: user_id"),
        ("select asyncflow.register_task_type('video', '{\"schedule_limit\": 0}')", vec![], "AF006", "schedule_limit"),
        ("select asyncflow.register_task_type('video', '{\"max_retries\": 3}')", vec![], "AF006", "unknown setting"),
        ("select asyncflow.register_task_type('video', '[]')", vec![], "AF006", "JSON object"),
        ("select asyncflow.cancel_task('video-1-424242')", vec![], "AF007", "unknown task"),
        ("select asyncflow.retry_task('garbage')", vec![], "AF007", "unknown task"),
        (
            "select asyncflow.create_task('video', '{bad json'::jsonb)",
            vec![],
            "22P02",
            "invalid input syntax for type json",
        ),
    ];
    for (sql, params, code, words) in cases {
        let refs: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
            params.iter().map(|p| p.as_ref() as &(dyn tokio_postgres::types::ToSql + Sync)).collect();
        let err = c.query(sql, &refs).await.expect_err(sql);
        assert_eq!(sqlstate(&err), code, "{sql}: {err:?}");
        let message = err.as_db_error().map(|d| d.message().to_string()).unwrap_or_default();
        assert!(message.contains(words), "{sql}: message {message:?} should mention {words:?}");
    }
    assert_eq!(task_count(&c).await, 0, "nothing was written");
    let settings: Value = c
        .query_one("select asyncflow.task_type_json(y) from asyncflow.task_types y where task_type = 'video'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(settings["schedule_limit"], 100, "a refused settings update changed nothing");
    let types: i64 = c.query_one("select count(*) from asyncflow.task_types", &[]).await.unwrap().get(0);
    assert_eq!(types, 1);
}

#[tokio::test]
async fn the_rust_client_maps_asyncflow_errors_to_variants() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    let err = api::create_task(&c, "nope", &Default::default()).await.unwrap_err();
    assert!(matches!(err, asyncflow::Error::UnknownTaskType(_)), "{err:?}");
    assert!(err.is_client_error() && !err.is_retryable());
    let err = api::cancel_task(&c, "nope-1-1").await.unwrap_err();
    assert!(matches!(err, asyncflow::Error::UnknownTask(_)), "{err:?}");
}

#[tokio::test]
async fn order_time_is_now_minus_priority_or_run_at_minus_priority() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    register(&c, "video", json!({})).await;
    let now = t0();
    let run_at = now + secs(3600.0);
    let id: String = c
        .query_one("select asyncflow.create_task('video', '{}', priority => 30, p_now => $1)", &[&now])
        .await
        .unwrap()
        .get(0);
    assert_eq!(at(&task(&c, &id).await, "order_time"), now - secs(30.0));
    let id: String = c
        .query_one(
            "select asyncflow.create_task('video', '{}', priority => 10, run_at => $1, p_now => $2)",
            &[&run_at, &now],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(at(&task(&c, &id).await, "order_time"), run_at - secs(10.0));
    // Claims take the smallest order_time <= now: the delayed task is not due yet.
    let claimed = api::claim_tasks(&db.conn().await, "video", &worker("w"), 10, Some(now)).await.unwrap();
    assert_eq!(claimed.len(), 1);
    let claimed =
        api::claim_tasks(&db.conn().await, "video", &worker("w"), 10, Some(run_at - secs(10.0))).await.unwrap();
    assert_eq!(claimed.len(), 1, "due at run_at - priority");
}

#[tokio::test]
async fn retry_backoff_is_progressive_or_uniform() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    let backoff = |attempt: i32, max: i32| {
        let c = &c;
        async move {
            let r: f64 = c
                .query_one("select extract(epoch from asyncflow.retry_backoff($1, $2))::float8", &[&attempt, &max])
                .await
                .unwrap()
                .get(0);
            r
        }
    };
    let mut progressive = Vec::new();
    for a in 1..=7 {
        progressive.push(backoff(a, 10).await);
    }
    assert_eq!(progressive, vec![1.0, 2.0, 4.0, 8.0, 10.0, 10.0, 10.0]);
    for a in 1..=4 {
        assert_eq!(backoff(a, -5).await, 5.0);
    }
    assert_eq!(backoff(1000, 3600).await, 3600.0, "no overflow for large attempts");
}

#[tokio::test]
async fn a_failed_try_waits_its_backoff_ignoring_priority_and_fails_for_good_when_out_of_tries() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    register(&db.raw().await, "video", json!({"max_retry_num": 4, "max_retry_interval": 10})).await;
    let id = api::create_task(&c, "video", &asyncflow::task::NewTask { priority: Some(100), ..Default::default() })
        .await
        .unwrap();
    let w = worker("w");
    let mut now = t0() + secs(1000.0);
    let mut waits = Vec::new();
    for attempt in 1..=5 {
        let claimed = api::claim_tasks(&c, "video", &w, 1, Some(now)).await.unwrap();
        assert_eq!(claimed.len(), 1, "attempt {attempt}");
        assert_eq!(claimed[0].attempt, attempt);
        let r = api::report_tasks(
            &c,
            &w,
            &[rep(
                id.as_str(),
                claimed[0].claim_seq,
                ReportKind::Fail { error: format!("boom {attempt}"), retry: true },
            )],
            Some(now),
        )
        .await
        .unwrap();
        assert!(r[0].accepted);
        let t = api::get_task(&c, id.as_str()).await.unwrap().unwrap();
        if attempt <= 4 {
            assert_eq!(t.status, TaskStatus::Pending);
            waits.push((t.order_time - now).num_milliseconds() as f64 / 1000.0);
            now = t.order_time;
        } else {
            assert_eq!(t.status, TaskStatus::Failed, "out of tries after max_retry_num retries");
            assert_eq!(t.error.as_deref(), Some("boom 5"));
            assert!(t.finished_at.is_some());
            assert_eq!(t.retry_count, 5);
            assert_eq!(t.schedule_log.len(), 5);
        }
    }
    assert_eq!(waits, vec![1.0, 2.0, 4.0, 8.0]);

    // retry: false fails at once; errors are cut to 256 characters.
    let id = api::create_task(&c, "video", &Default::default()).await.unwrap();
    let claimed = api::claim_tasks(&c, "video", &w, 1, None).await.unwrap();
    api::report_tasks(
        &c,
        &w,
        &[rep(id.as_str(), claimed[0].claim_seq, ReportKind::Fail { error: "e".repeat(1000), retry: false })],
        None,
    )
    .await
    .unwrap();
    let t = api::get_task(&c, id.as_str()).await.unwrap().unwrap();
    assert_eq!(t.status, TaskStatus::Failed);
    assert_eq!(t.error.map(|e| e.len()), Some(256));
    assert_eq!(t.schedule_log[0].error.as_ref().map(|e| e.len()), Some(256));
}

#[tokio::test]
async fn uniform_backoff_waits_the_same_every_time() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    register(&db.raw().await, "video", json!({"max_retry_num": 3, "max_retry_interval": -7})).await;
    let id = api::create_task(&c, "video", &Default::default()).await.unwrap();
    let w = worker("w");
    let mut now = t0() + secs(100.0);
    for _ in 0..3 {
        let claimed = api::claim_tasks(&c, "video", &w, 1, Some(now)).await.unwrap();
        api::report_tasks(
            &c,
            &w,
            &[rep(id.as_str(), claimed[0].claim_seq, ReportKind::Fail { error: "x".into(), retry: true })],
            Some(now),
        )
        .await
        .unwrap();
        let t = api::get_task(&c, id.as_str()).await.unwrap().unwrap();
        assert_eq!(t.order_time - now, secs(7.0));
        now = t.order_time;
    }
}

#[tokio::test]
async fn context_travels_across_three_stages_and_the_task_goes_back_in_line_between_them() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    register(&db.raw().await, "media", json!({"initial_stage": "probe"})).await;
    let id = api::create_task(
        &c,
        "media",
        &asyncflow::task::NewTask { context: Some(json!({"file": "a.mp4"})), priority: Some(5), ..Default::default() },
    )
    .await
    .unwrap();
    let w = worker("w");
    let stages = [("probe", "transcode"), ("transcode", "publish")];
    for (i, (stage, next)) in stages.iter().enumerate() {
        let now = t0() + secs(10.0 * (i as f64 + 1.0));
        let claimed = api::claim_tasks(&c, "media", &w, 5, Some(now)).await.unwrap();
        assert_eq!(claimed.len(), 1);
        assert_eq!(claimed[0].stage, *stage);
        assert_eq!(claimed[0].attempt, 1, "attempt counts tries of the current stage");
        let mut ctx = claimed[0].context.clone();
        ctx[*stage] = json!(format!("{stage} done"));
        let r = api::report_tasks(
            &c,
            &w,
            &[rep(
                id.as_str(),
                claimed[0].claim_seq,
                ReportKind::Advance { stage: next.to_string(), context: Some(ctx) },
            )],
            Some(now),
        )
        .await
        .unwrap();
        assert!(r[0].accepted);
        assert_eq!(r[0].status, Some(TaskStatus::Pending));
        let t = api::get_task(&c, id.as_str()).await.unwrap().unwrap();
        assert_eq!(t.order_time, now - secs(5.0), "stage change: order_time = now - priority");
        assert_eq!(t.attempt, 0);
    }
    let claimed = api::claim_tasks(&c, "media", &w, 5, Some(t0() + secs(100.0))).await.unwrap();
    assert_eq!(claimed[0].stage, "publish");
    assert_eq!(claimed[0].context, json!({"file": "a.mp4", "probe": "probe done", "transcode": "transcode done"}));
    api::report_tasks(
        &c,
        &w,
        &[rep(id.as_str(), claimed[0].claim_seq, ReportKind::Succeed { result: json!({"url": "https://cdn/a"}) })],
        None,
    )
    .await
    .unwrap();
    let t = api::get_task(&c, id.as_str()).await.unwrap().unwrap();
    assert_eq!(t.status, TaskStatus::Succeeded);
    assert_eq!(t.result, Some(json!({"url": "https://cdn/a"})));
    let outcomes: Vec<_> =
        t.schedule_log.iter().map(|e| (e.stage.clone().unwrap(), e.outcome.clone().unwrap())).collect();
    assert_eq!(
        outcomes,
        vec![
            ("probe".into(), "advance".into()),
            ("transcode".into(), "advance".into()),
            ("publish".into(), "succeed".into())
        ]
    );
    assert!(t
        .schedule_log
        .iter()
        .all(|e| e.worker.as_deref() == Some("w") && e.start.is_some() && e.cost_ms.is_some()));
}

#[tokio::test]
async fn later_is_not_a_failure_and_the_schedule_log_keeps_the_last_20() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    register(&db.raw().await, "poll", json!({"max_retry_num": 0})).await;
    let id = api::create_task(&c, "poll", &Default::default()).await.unwrap();
    let w = worker("w");
    let mut now = t0();
    for i in 0..25 {
        let claimed = api::claim_tasks(&c, "poll", &w, 1, Some(now)).await.unwrap();
        assert_eq!(claimed.len(), 1, "round {i}");
        assert_eq!(claimed[0].attempt, 1, "a later reply gives the try back");
        api::report_tasks(
            &c,
            &w,
            &[rep(
                id.as_str(),
                claimed[0].claim_seq,
                ReportKind::Later { delay: 30.0, context: Some(json!({"round": i})) },
            )],
            Some(now),
        )
        .await
        .unwrap();
        let t = api::get_task(&c, id.as_str()).await.unwrap().unwrap();
        assert_eq!(t.status, TaskStatus::Pending);
        assert_eq!(t.order_time, now + secs(30.0));
        assert!(api::claim_tasks(&c, "poll", &w, 1, Some(now + secs(29.0))).await.unwrap().is_empty());
        now = now + secs(30.0);
    }
    let t = api::get_task(&c, id.as_str()).await.unwrap().unwrap();
    assert_eq!(t.retry_count, 0);
    assert_eq!(t.context, json!({"round": 24}));
    assert_eq!(t.schedule_log.len(), 20, "bounded log");
    assert_eq!(t.schedule_log.last().and_then(|e| e.outcome.clone()).as_deref(), Some("later"));
}

#[tokio::test]
async fn a_stale_fencing_token_is_refused_after_rescue_and_changes_nothing() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    register(&db.raw().await, "video", json!({"max_processing_time": 10, "max_retry_num": 5, "max_retry_interval": 1}))
        .await;
    let id = api::create_task(&c, "video", &Default::default()).await.unwrap();
    let (a, b) = (worker("a"), worker("b"));
    let now = t0();
    let first = api::claim_tasks(&c, "video", &a, 1, Some(now)).await.unwrap().remove(0);
    // Heartbeat extends the lease while it is held.
    let hb =
        api::report_tasks(&c, &a, &[rep(id.as_str(), first.claim_seq, ReportKind::Heartbeat)], Some(now + secs(5.0)))
            .await
            .unwrap();
    assert!(hb[0].accepted);
    assert_eq!(hb[0].lease_until, Some(now + secs(15.0)));
    let rescued = api::rescue_expired(&c, Some(now + secs(16.0)), 100).await.unwrap();
    assert_eq!(rescued.len(), 1);
    let before = api::get_task(&c, id.as_str()).await.unwrap().unwrap();
    for kind in [
        ReportKind::Succeed { result: json!(1) },
        ReportKind::Heartbeat,
        ReportKind::Advance { stage: "x".into(), context: None },
    ] {
        let r = api::report_tasks(&c, &a, &[rep(id.as_str(), first.claim_seq, kind)], Some(now + secs(17.0)))
            .await
            .unwrap();
        assert!(!r[0].accepted);
        assert_eq!(r[0].status, Some(TaskStatus::Pending));
    }
    assert_eq!(api::get_task(&c, id.as_str()).await.unwrap().unwrap(), before, "refused reports changed nothing");

    let second = api::claim_tasks(&c, "video", &b, 1, Some(now + secs(20.0))).await.unwrap().remove(0);
    assert_eq!(second.claim_seq, first.claim_seq + 1);
    assert_eq!(second.attempt, 2, "the rescue counted as a failed try");
    let late = api::report_tasks(
        &c,
        &a,
        &[rep(id.as_str(), first.claim_seq, ReportKind::Succeed { result: json!("late") })],
        None,
    )
    .await
    .unwrap();
    assert!(!late[0].accepted, "the vanished worker's late report");
    let wrong_owner = api::report_tasks(
        &c,
        &a,
        &[rep(id.as_str(), second.claim_seq, ReportKind::Succeed { result: json!("thief") })],
        None,
    )
    .await
    .unwrap();
    assert!(!wrong_owner[0].accepted, "the right token from the wrong worker");
    let ok = api::report_tasks(
        &c,
        &b,
        &[rep(id.as_str(), second.claim_seq, ReportKind::Succeed { result: json!("b") })],
        None,
    )
    .await
    .unwrap();
    assert!(ok[0].accepted);
    let t = api::get_task(&c, id.as_str()).await.unwrap().unwrap();
    assert_eq!(t.result, Some(json!("b")));
    let outcomes: Vec<_> = t.schedule_log.iter().filter_map(|e| e.outcome.clone()).collect();
    assert_eq!(outcomes, vec!["rescued", "succeed"]);
}

#[tokio::test]
async fn cancel_and_retry_by_hand() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    register(&db.raw().await, "video", json!({})).await;
    let w = worker("w");
    let running = api::create_task(&c, "video", &Default::default()).await.unwrap();
    let claimed = api::claim_tasks(&c, "video", &w, 1, None).await.unwrap().remove(0);
    assert!(api::cancel_task(&c, running.as_str()).await.unwrap());
    let r = api::report_tasks(
        &c,
        &w,
        &[rep(running.as_str(), claimed.claim_seq, ReportKind::Succeed { result: json!(1) })],
        None,
    )
    .await
    .unwrap();
    assert!(!r[0].accepted, "a cancelled task's worker is refused");
    assert_eq!(r[0].status, Some(TaskStatus::Cancelled));
    assert!(!api::cancel_task(&c, running.as_str()).await.unwrap(), "already ended");
    assert!(api::retry_task(&c, running.as_str()).await.unwrap());
    let t = api::get_task(&c, running.as_str()).await.unwrap().unwrap();
    assert_eq!((t.status, t.attempt), (TaskStatus::Pending, 0));
    assert!(!api::retry_task(&c, running.as_str()).await.unwrap(), "a pending task is not retried");
    let again = api::claim_tasks(&c, "video", &w, 1, None).await.unwrap();
    assert_eq!(again[0].task_id, running);
    assert_eq!(again[0].attempt, 1);
}

#[tokio::test]
async fn paused_types_and_concurrency_limits_bound_claims() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    let raw = db.raw().await;
    register(&raw, "video", json!({"concurrency": 2, "schedule_limit": 3})).await;
    api::create_tasks(&c, "video", &vec![Default::default(); 10]).await.unwrap();
    let w = worker("w");
    assert_eq!(api::claim_tasks(&c, "video", &w, 10, None).await.unwrap().len(), 2, "concurrency 2");
    assert_eq!(api::claim_tasks(&c, "video", &w, 10, None).await.unwrap().len(), 0, "still 2 running");
    register(&raw, "video", json!({"concurrency": null})).await;
    assert_eq!(api::claim_tasks(&c, "video", &w, 10, None).await.unwrap().len(), 3, "schedule_limit 3 per claim");
    register(&raw, "video", json!({"paused": true})).await;
    assert_eq!(api::claim_tasks(&c, "video", &w, 10, None).await.unwrap().len(), 0, "paused");
    let depth = api::queue_depth(&c).await.unwrap();
    assert_eq!((depth[0].ready, depth[0].running, depth[0].paused), (5, 5, true));
}

#[tokio::test]
async fn the_claim_reads_only_pending_rows_through_the_partial_index() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    register(&c, "video", json!({})).await;
    // 2,000 finished tasks and 5 pending ones.
    c.query(
        "select asyncflow.create_tasks('video', (select jsonb_agg('{}'::jsonb) from generate_series(1, 2000)))",
        &[],
    )
    .await
    .unwrap();
    c.batch_execute("update asyncflow.tasks set status = 'succeeded', finished_at = now(); analyze asyncflow.tasks")
        .await
        .unwrap();
    c.query("select asyncflow.create_tasks('video', (select jsonb_agg('{}'::jsonb) from generate_series(1, 5)))", &[])
        .await
        .unwrap();
    // The claim's row selection, exactly as asyncflow.claim_tasks runs it.
    let plan: Value = c
        .query_one(
            "explain (analyze, format json) select shard, id from asyncflow.tasks \
             where task_type = 'video' and shard >= 1 and status = 'pending' and order_time <= now() \
             order by order_time limit 100 for update skip locked",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let text = plan.to_string();
    assert!(!text.contains("Seq Scan"), "no sequential scan: {text}");
    let mut scans = Vec::new();
    fn walk(node: &Value, out: &mut Vec<Value>) {
        if node.get("Index Name").is_some() {
            out.push(node.clone());
        }
        if let Some(children) = node.get("Plans").and_then(Value::as_array) {
            for ch in children {
                walk(ch, out);
            }
        }
    }
    walk(&plan[0]["Plan"], &mut scans);
    assert!(!scans.is_empty(), "an index scan: {text}");
    let mut rows_read = 0;
    for scan in &scans {
        let index = scan["Index Name"].as_str().unwrap().to_string();
        let def: String = c
            .query_one("select pg_get_indexdef(to_regclass('asyncflow.' || quote_ident($1)))", &[&index])
            .await
            .unwrap()
            .get(0);
        assert!(def.contains("WHERE (status = 'pending'"), "partial index on pending rows: {def}");
        rows_read += scan["Actual Rows"].as_i64().unwrap_or(0)
            + scan.get("Rows Removed by Filter").and_then(Value::as_i64).unwrap_or(0);
    }
    assert_eq!(rows_read, 5, "only the 5 pending rows were read, none of the 2,000 finished ones");
}

#[tokio::test]
async fn eight_concurrent_claimers_never_hold_the_same_task_and_finish_all_10000() {
    let db = TestDb::new().await;
    register(&db.raw().await, "bulk", json!({"schedule_limit": 50})).await;
    {
        let c = db.raw().await;
        c.query("select asyncflow.create_tasks('bulk', (select jsonb_agg(jsonb_build_object('priority', g % 7)) from generate_series(1, 10000) g))", &[])
            .await
            .unwrap();
    }
    let held: Arc<Mutex<HashSet<String>>> = Arc::new(Mutex::new(HashSet::new()));
    let done = Arc::new(Mutex::new(0usize));
    let mut workers = Vec::new();
    for n in 0..8 {
        let pool = db.pool.clone();
        let held = held.clone();
        let done = done.clone();
        workers.push(tokio::spawn(async move {
            let w = worker(&format!("w{n}"));
            loop {
                let c = pool.get().await.unwrap();
                let claimed = api::claim_tasks(&c, "bulk", &w, 50, None).await.unwrap();
                if claimed.is_empty() {
                    return;
                }
                {
                    let mut h = held.lock().unwrap();
                    for t in &claimed {
                        assert!(h.insert(t.task_id.to_string()), "{} held twice at once", t.task_id);
                    }
                }
                let reports: Vec<Report> = claimed
                    .iter()
                    .map(|t| Report {
                        task_id: t.task_id.clone(),
                        claim_seq: t.claim_seq,
                        kind: ReportKind::Succeed { result: json!(n) },
                    })
                    .collect();
                // Release our hold before reporting: after the report another claimer may see it.
                {
                    let mut h = held.lock().unwrap();
                    for t in &claimed {
                        h.remove(t.task_id.as_str());
                    }
                }
                let results = api::report_tasks(&c, &w, &reports, None).await.unwrap();
                assert!(results.iter().all(|r| r.accepted));
                *done.lock().unwrap() += results.len();
            }
        }));
    }
    for w in workers {
        w.await.unwrap();
    }
    assert_eq!(*done.lock().unwrap(), 10000);
    let c = db.conn().await;
    let counts = api::count_by_status(&c, "bulk").await.unwrap();
    assert_eq!(counts, vec![(TaskStatus::Succeeded, 10000)]);
    let claims: i64 =
        c.query_one("select count(*) from asyncflow.tasks where claim_seq <> 1", &[]).await.unwrap().get(0);
    assert_eq!(claims, 0, "every task was claimed exactly once");
}

#[tokio::test]
async fn wake_ups_are_debounced_to_one_notifying_transaction_per_type_at_a_time() {
    let db = TestDb::new().await;
    let mut a = db.raw().await;
    let mut b = db.raw().await;
    register(&a, "video", json!({})).await;
    register(&a, "audio", json!({})).await;
    let (listener, mut conn) = tokio_postgres::connect(&db.url, tokio_postgres::NoTls).await.unwrap();
    let (tx, mut notes) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut stream = futures_util::stream::poll_fn(move |cx| conn.poll_message(cx));
        while let Some(Ok(m)) = stream.next().await {
            if let tokio_postgres::AsyncMessage::Notification(n) = m {
                let _ = tx.send(n.payload().to_string());
            }
        }
    });
    listener.batch_execute("listen asyncflow").await.unwrap();
    let drain = |notes: &mut tokio::sync::mpsc::UnboundedReceiver<String>| {
        let mut got = Vec::new();
        while let Ok(n) = notes.try_recv() {
            got.push(n);
        }
        got
    };

    // Sequential transactions each notify.
    for _ in 0..3 {
        a.query_one("select asyncflow.create_task('video')", &[]).await.unwrap();
    }
    listener.batch_execute("select 1").await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(drain(&mut notes), vec!["video", "video", "video"]);

    // While A's transaction (which will notify) is open, B's commit for the same type skips its
    // NOTIFY; a commit for another type does not.
    let ta = a.transaction().await.unwrap();
    ta.query_one("select asyncflow.create_task('video')", &[]).await.unwrap();
    let tb = b.transaction().await.unwrap();
    tb.query_one("select asyncflow.create_task('video')", &[]).await.unwrap();
    tb.query_one("select asyncflow.create_task('audio')", &[]).await.unwrap();
    tb.commit().await.unwrap();
    listener.batch_execute("select 1").await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(drain(&mut notes), vec!["audio"]);
    ta.commit().await.unwrap();
    listener.batch_execute("select 1").await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(drain(&mut notes), vec!["video"]);
}

#[tokio::test]
async fn the_sql_api_is_granted_to_roles_while_the_tables_stay_private() {
    let db = TestDb::new().await;
    let admin = db.raw().await;
    register(&admin, "video", json!({})).await;
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    let (app, wrk) = (format!("app_{}", &suffix[..12]), format!("wrk_{}", &suffix[..12]));
    admin
        .batch_execute(&format!(
            "create role {app} login; grant asyncflow_client to {app}; create role {wrk} login; grant asyncflow_worker to {wrk}"
        ))
        .await
        .unwrap();
    let connect = |role: String| {
        let url = db.url.replacen("postgres://postgres@", &format!("postgres://{role}@"), 1);
        async move {
            let (c, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.unwrap();
            tokio::spawn(conn);
            c
        }
    };
    let client = connect(app.clone()).await;
    let id: String = client.query_one("select asyncflow.create_task('video', '{}')", &[]).await.unwrap().get(0);
    let got: Option<Value> = client.query_one("select asyncflow.get_task($1)", &[&id]).await.unwrap().get(0);
    assert!(got.is_some());
    client.query_one("select count(*) from asyncflow.queue_depth", &[]).await.unwrap();
    let denied = client.query("select * from asyncflow.tasks", &[]).await.unwrap_err();
    assert_eq!(sqlstate(&denied), "42501", "tables are private");
    let denied = client.query("select * from asyncflow.claim_tasks('video', 'w', 1)", &[]).await.unwrap_err();
    assert_eq!(sqlstate(&denied), "42501", "clients cannot claim");
    let worker = connect(wrk.clone()).await;
    let claimed = worker.query("select * from asyncflow.claim_tasks('video', 'w', 1)", &[]).await.unwrap();
    assert_eq!(claimed.len(), 1, "workers claim");
    drop((client, worker));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let _ = admin.batch_execute(&format!("drop owned by {app}, {wrk}; drop role {app}; drop role {wrk}")).await;
}

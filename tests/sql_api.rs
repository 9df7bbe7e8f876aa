//! The SQL API as a contract, through SQL: what callers in any language get.
use crate::common;
#[path = "sql_api/search_path.rs"]
mod search_path;

use std::collections::HashSet;
use std::time::Duration;

use asyncflow::db::api;
use asyncflow::TaskId;
use common::{sqlstate, TestDb};
use futures_util::StreamExt;
use serde_json::{json, Value};

use common::sql::*;

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
    // the ids come back in input order, each naming its own element's task
    for (i, row) in ids.iter().enumerate() {
        let id: String = row.get(0);
        assert_eq!(task(&c, &id).await["context"]["n"], i + 1, "{id}");
    }

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
    type Params = Vec<Box<dyn tokio_postgres::types::ToSql + Sync + Send>>;
    let cases: Vec<(&str, Params, &str, &str)> = vec![
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

/// An error repeats at most a few hundred characters of a bad value, however long the value: a
/// 1 MB name, key or stage is cut in the middle of the message, with the count of what was left
/// out (raise_error, pipeline_error, set_pipeline_status).
#[tokio::test]
async fn error_messages_cut_long_bad_values() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    register(&c, "video", json!({})).await;
    let long = "x".repeat(1_000_000);
    let cases = [
        ("select asyncflow.create_task($1, '{}')", "AF003", "invalid task type name 'xxx", "{0,39}$"),
        ("select * from asyncflow.list_runs(p_before => $1)", "AF012", "unknown run 'xxx", "xxx'"),
        ("select asyncflow.register_task_type($1, '{}')", "AF003", "invalid task type name 'xxx", "{0,39}$"),
        (
            "select asyncflow.register_task_type('video', jsonb_build_object($1::text, 1))",
            "AF006",
            "unknown setting 'xxx",
            "fair_queues, queue_concurrency, speculative_chaining)",
        ),
        (
            "select asyncflow.create_tasks('video', jsonb_build_array('{}'::jsonb, jsonb_build_object('stage', $1::text)))",
            "AF006",
            "tasks[1]: stage must match",
            "xxx\"",
        ),
        (
            "select asyncflow.put_pipeline('p', jsonb_build_object('nodes', jsonb_build_array(\
             jsonb_build_object('name', $1::text, 'type', 'start')), 'edges', '[]'::jsonb))",
            "AF010",
            "node 'xxx",
            "must match ^[a-z][a-z0-9_]{0,39}$",
        ),
        ("select asyncflow.set_pipeline_status($1, 1, 'active')", "AF011", "unknown pipeline 'xxx", "xxx' version 1"),
        ("select asyncflow.retry_task($1)", "AF007", "unknown task 'xxx", "xxx'"),
    ];
    for (sql, code, head, tail) in cases {
        let err = c.query(sql, &[&long]).await.expect_err(sql);
        assert_eq!(sqlstate(&err), code, "{sql}: {err:?}");
        let message = err.as_db_error().map(|d| d.message().to_string()).unwrap_or_default();
        assert!(message.chars().count() <= 400 + 30, "{sql}: {} characters", message.len());
        assert!(message.contains(" characters cut]…"), "{sql}: {message}");
        assert!(message.starts_with(head) && message.ends_with(tail), "{sql}: {message}");
    }
    // the Rust client relays the message as it came
    let err = api::retry_task(&db.conn().await, &long).await.unwrap_err();
    assert!(matches!(err, asyncflow::Error::UnknownTask(_)) && err.to_string().len() < 500, "{err}");
}

#[tokio::test]
async fn bad_input_found_by_review_is_refused_with_its_code_and_the_rest_answers() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    register(&c, "t", json!({})).await;
    let tables = || async {
        let n: i64 = c
            .query_one("select count(*) from pg_catalog.pg_class where relnamespace = 'asyncflow'::regnamespace", &[])
            .await
            .unwrap()
            .get(0);
        n
    };
    let before = tables().await;
    // Names that would take another type's shard, sequence or index names (t_1 is type t's shard
    // 1; registering it first once kept type t from ever rolling to shard 1).
    for name in ["t_1", "u_2", "t_id_seq", "t_pkey", "x_ready", "x_running"] {
        let err = c.query("select asyncflow.register_task_type($1)", &[&name]).await.expect_err(name);
        assert_eq!(sqlstate(&err), "AF003", "{name}: {err:?}");
    }
    assert_eq!(tables().await, before, "nothing created");
    register(&c, "t_v2", json!({})).await;
    // Integer settings written as 7.0 are 7 (check_settings takes them; the cast refused them).
    let settings: Value = c
        .query_one(
            "select asyncflow.register_task_type('t', '{\"schedule_limit\": 7.0, \"shard_max_rows\": 1000000000000.0, \"concurrency\": 5.0}')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!((settings["schedule_limit"].as_i64(), settings["concurrency"].as_i64()), (Some(7), Some(5)));
    // An array among the tasks: refused naming it, in both insert paths, nothing written.
    for (tasks, at) in [("[[{}]]", "tasks[0]"), ("[{}, [{}], {\"idempotency_key\": \"k\"}]", "tasks[1]")] {
        let err = c.query("select asyncflow.create_tasks('t', $1::text::jsonb)", &[&tasks]).await.expect_err(tasks);
        assert_eq!(sqlstate(&err), "AF006", "{tasks}: {err:?}");
        let message = err.as_db_error().map(|d| d.message().to_string()).unwrap_or_default();
        assert_eq!(message, format!("{at}: must be a JSON object"));
    }
    // A run_at outside 0002-01-01 .. 9999-01-01: AF006 naming run_at in both insert paths, also
    // when run_at less the priority is no timestamp (not a raw 22008). Otherwise a task from
    // 4713 BC or after 9999 would be written, and then no reader of RFC 3339 could read it back.
    for outside in [
        "4714-11-24 00:00:00+00 BC",
        "4713-11-24 00:00:00+00 BC",
        "0100-01-01 00:00:00+00 BC",
        "0001-12-31 23:59:59+00",
        "9999-01-01 00:00:01+00",
        "10000-01-01 00:00:00+00",
    ] {
        for sql in [
            "select asyncflow.create_task('t', '{}', priority => 5, run_at => $1::text::timestamptz)",
            "select asyncflow.create_task('t', '{}', run_at => $1::text::timestamptz)",
            "select asyncflow.create_tasks('t', jsonb_build_array(jsonb_build_object('run_at', $1::text, 'priority', 5)))",
        ] {
            let err = c.query(sql, &[&outside]).await.expect_err(sql);
            assert_eq!(sqlstate(&err), "AF006", "{sql} {outside}: {err:?}");
            let message = err.as_db_error().map(|d| d.message().to_string()).unwrap_or_default();
            assert!(message.contains("run_at must be a timestamp from 0002-01-01 to 9999-01-01"), "{sql}: {message}");
        }
    }
    assert_eq!(task_count(&c).await, 0, "nothing was written");
    // the ends of the range are taken, and the tasks read back
    for edge in ["0002-01-01 00:00:00+00", "9999-01-01 00:00:00+00"] {
        let one: String = c
            .query_one(
                "select asyncflow.create_task('t', '{}', priority => 31104000, run_at => $1::text::timestamptz)",
                &[&edge],
            )
            .await
            .unwrap()
            .get(0);
        let bulk: String = c
            .query_one(
                "select asyncflow.create_tasks('t', jsonb_build_array(jsonb_build_object('run_at', $1::text)))",
                &[&edge],
            )
            .await
            .unwrap()
            .get(0);
        for id in [one, bulk] {
            let task = api::get_task(&db.conn().await, &id).await.unwrap().unwrap();
            assert!(task.order_time.timestamp() != 0, "{edge}: {task:?}");
        }
    }
    c.batch_execute("delete from asyncflow.tasks").await.unwrap();
    // Reports of no known type: answered (empty, or refused), not a 42703.
    let rows = c.query("select * from asyncflow.report_tasks('w1', '[]')", &[]).await.unwrap();
    assert!(rows.is_empty());
    let rows =
        c.query("select * from asyncflow.report_task_arrays('w1', '{zz-1-1}', '{1}', '{succeed}')", &[]).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!((rows[0].get::<_, String>("task_id"), rows[0].get::<_, bool>("accepted")), ("zz-1-1".into(), false));
    // A run id with an impossible date is no run (22008 from to_date before).
    for id in ["r20241399-00000000000000000000000000000000", "r20230229-00000000000000000000000000000000"] {
        let run: Option<Value> = c.query_one("select asyncflow.get_run($1)", &[&id]).await.unwrap().get(0);
        assert_eq!(run, None, "{id}");
        let err = c.query("select asyncflow.cancel_run($1)", &[&id]).await.expect_err(id);
        assert_eq!(sqlstate(&err), "AF012", "{id}: {err:?}");
    }
    let day: Option<chrono::NaiveDate> = c
        .query_one("select asyncflow.run_day('r20240229-00000000000000000000000000000000')", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(day, chrono::NaiveDate::from_ymd_opt(2024, 2, 29));
}

#[tokio::test]
async fn the_rust_client_maps_asyncflow_errors_to_variants() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    let err = api::claim_tasks(&c, "nope", &common::sql::worker("w"), 1, None).await.unwrap_err();
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
    // held_tasks: the running tasks of one owner, for workers only
    let held = worker.query("select task_id, claim_seq from asyncflow.held_tasks('video', 'w')", &[]).await.unwrap();
    assert_eq!(
        held.iter().map(|r| r.get::<_, String>(0)).collect::<Vec<_>>(),
        vec![claimed[0].get::<_, String>("task_id")]
    );
    assert_eq!(held[0].get::<_, i64>(1), claimed[0].get::<_, i64>("claim_seq"));
    assert!(worker.query("select * from asyncflow.held_tasks('video', 'other')", &[]).await.unwrap().is_empty());
    let unknown = worker.query("select * from asyncflow.held_tasks('nothing', 'w')", &[]).await.unwrap_err();
    assert_eq!(sqlstate(&unknown), "AF001");
    let denied = client.query("select * from asyncflow.held_tasks('video', 'w')", &[]).await.unwrap_err();
    assert_eq!(sqlstate(&denied), "42501", "clients cannot list what workers hold");
    // the type's own claim function (what the worker calls): workers only
    client.query_one("select asyncflow.create_task('video', '{}')", &[]).await.unwrap();
    let denied = client.query("select * from asyncflow.type_claim__video('w', 1)", &[]).await.unwrap_err();
    assert_eq!(sqlstate(&denied), "42501", "clients cannot claim through the type's function either");
    let claimed = worker.query("select * from asyncflow.type_claim__video('w', 1)", &[]).await.unwrap();
    assert_eq!(claimed.len(), 1, "workers claim through the type's function");
    // ... and report through the type's report function (which checks the batch itself)
    let report = "select accepted from asyncflow.type_report__video('w', array[$1], array[$2::bigint], \
                  array[$3], null, null, null, null, null, null, null)";
    let task_id: String = claimed[0].get("task_id");
    let seq: i64 = claimed[0].get("claim_seq");
    let denied = client.query(report, &[&task_id, &seq, &"succeed"]).await.unwrap_err();
    assert_eq!(sqlstate(&denied), "42501", "clients cannot report");
    let bad = worker.query(report, &[&task_id, &seq, &"finish"]).await.unwrap_err();
    assert_eq!(sqlstate(&bad), "AF006", "a direct call is checked like report_task_arrays: {bad}");
    let accepted: bool = worker.query_one(report, &[&task_id, &seq, &"succeed"]).await.unwrap().get(0);
    assert!(accepted, "workers report through the type's function");
    drop((client, worker));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let _ = admin.batch_execute(&format!("drop owned by {app}, {wrk}; drop role {app}; drop role {wrk}")).await;
}

/// create_task reads what it needs of a type from one row (asyncflow.enqueue_info), kept by
/// triggers: a settings change, a roll to a new shard and a new context limit reach the next
/// create_task at once, in the transaction that made them; without the row it takes the general
/// path (create_task_general), with the same result.
#[tokio::test]
async fn create_task_follows_settings_shards_and_the_context_limit_as_they_change() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    let settings =
        json!({"initial_stage": "probe", "max_retry_num": 2, "max_retry_interval": 30, "shard_max_rows": 10});
    register(&c, "clip", settings).await;
    let create = |context: Value| {
        let c = &c;
        async move {
            let id: String = c.query_one("select asyncflow.create_task('clip', $1)", &[&context]).await.unwrap().get(0);
            task(c, &id).await
        }
    };
    let first = create(json!({})).await;
    assert_eq!((first["stage"].clone(), first["max_retry_num"].clone()), (json!("probe"), json!(2)));
    assert_eq!(first["max_retry_interval"], 30);
    assert!(first["id"].as_str().unwrap_or("").starts_with("clip-1-"), "{first}");

    // settings, changed inside a transaction: seen there at once, and not at all if rolled back
    c.batch_execute("begin").await.unwrap();
    register(&c, "clip", json!({"initial_stage": "fetch", "max_retry_num": 7})).await;
    let changed = create(json!({})).await;
    assert_eq!((changed["stage"].clone(), changed["max_retry_num"].clone()), (json!("fetch"), json!(7)));
    c.batch_execute("rollback").await.unwrap();
    let after_rollback = create(json!({})).await;
    assert_eq!((after_rollback["stage"].clone(), after_rollback["max_retry_num"].clone()), (json!("probe"), json!(2)));

    // a roll to a new shard (the first is full at 10 rows): the next task is in it
    c.batch_execute(
        "select asyncflow.create_tasks('clip', (select jsonb_agg('{}'::jsonb) from generate_series(1, 10)))",
    )
    .await
    .unwrap();
    let shard: i32 = c.query_one("select asyncflow.roll_shard('clip')", &[]).await.unwrap().get(0);
    assert_eq!(shard, 2);
    let rolled = create(json!({})).await;
    assert!(rolled["id"].as_str().unwrap_or("").starts_with("clip-2-"), "{rolled}");

    // a smaller context limit refuses what it allowed a moment before, with create_task's error
    let context = json!({"blob": "x".repeat(3000)});
    create(context.clone()).await;
    c.batch_execute("update asyncflow.config set max_context_bytes = 2048").await.unwrap();
    let err = c.query_one("select asyncflow.create_task('clip', $1)", &[&context]).await.expect_err("too large");
    assert_eq!(sqlstate(&err), "AF005", "{err}");
    c.batch_execute("update asyncflow.config set max_context_bytes = 1048576").await.unwrap();

    // the row is what the three tables say
    let same: bool = c
        .query_one(
            "select (e.end_pos, e.id_seq, e.initial_stage, e.max_retry_num, e.max_retry_interval, e.max_context_bytes) \
             = (p.end_pos, y.id_seq, y.initial_stage, y.max_retry_num, y.max_retry_interval, f.max_context_bytes) \
             from asyncflow.enqueue_info e join asyncflow.task_types y using (task_type) \
             join asyncflow.positions p using (task_type) cross join asyncflow.config f where e.task_type = 'clip'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(same);

    // a registration while a config change is under way waits for it and takes its value (read
    // without a lock, the new type's row kept the old limit)
    c.batch_execute("begin; update asyncflow.config set max_context_bytes = 4096").await.unwrap();
    let other = db.raw().await;
    let registering =
        tokio::spawn(
            async move { other.query_one("select asyncflow.register_task_type('late')", &[]).await.map(|_| ()) },
        );
    common::wait_for_lock_wait(&c, "register_task_type('late')").await;
    c.batch_execute("commit").await.unwrap();
    registering.await.unwrap().unwrap();
    let limit: i32 = c
        .query_one("select max_context_bytes from asyncflow.enqueue_info where task_type = 'late'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(limit, 4096);
    // the config emptied and filled again: every row made anew (none while it is empty)
    c.batch_execute("begin; delete from asyncflow.config").await.unwrap();
    let rows: i64 = c.query_one("select count(*) from asyncflow.enqueue_info", &[]).await.unwrap().get(0);
    assert_eq!(rows, 0);
    c.batch_execute("insert into asyncflow.config (max_context_bytes) values (1048576); commit").await.unwrap();
    let rows: i64 = c.query_one("select count(*) from asyncflow.enqueue_info", &[]).await.unwrap().get(0);
    assert_eq!(rows, 2);

    // without its row (never expected: the triggers keep it), create_task still works (the general path)
    c.batch_execute("delete from asyncflow.enqueue_info").await.unwrap();
    let without = create(json!({"k": 1})).await;
    assert_eq!((without["stage"].clone(), without["context"].clone()), (json!("probe"), json!({"k": 1})));
    assert!(without["id"].as_str().unwrap_or("").starts_with("clip-2-"), "{without}");
    // a type nothing registered is registered by the general path, with the default settings
    let id: String = c.query_one("select asyncflow.create_task('nope', '{}')", &[]).await.unwrap().get(0);
    assert_eq!(id, "nope-1-1");
    let err = c.query_one("select asyncflow.create_task('No-Pe', '{}')", &[]).await.expect_err("invalid name");
    assert_eq!(sqlstate(&err), "AF003", "{err}");
}

/// A worker registers its types at every start: a registration that changes nothing must not wait
/// for the type's row (a fleet starting at once queued there), and one that changes a setting
/// still takes it and writes the change.
#[tokio::test]
async fn a_registration_that_changes_nothing_takes_no_lock_and_a_change_still_waits_for_one() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    register(&c, "video", json!({"schedule_limit": 50, "concurrency": 3})).await;
    let mut holder = db.raw().await;
    let tx = holder.transaction().await.unwrap();
    tx.execute("select 1 from asyncflow.task_types where task_type = 'video' for update", &[]).await.unwrap();

    let other = db.raw().await;
    other.batch_execute("set lock_timeout = '2s'").await.unwrap();
    let same: Value = other
        .query_one(
            "select asyncflow.register_task_type('video', '{\"schedule_limit\": 50, \"concurrency\": 3, \"fair_queues\": false}')",
            &[],
        )
        .await
        .expect("a registration that changes nothing waits for no lock")
        .get(0);
    assert_eq!((same["schedule_limit"].clone(), same["concurrency"].clone()), (json!(50), json!(3)));

    // a change waits for the row: refused here once the lock timeout passes, and nothing changed
    let e = other
        .query_one("select asyncflow.register_task_type('video', '{\"schedule_limit\": 60}')", &[])
        .await
        .expect_err("a change waits for the type's row");
    assert_eq!(sqlstate(&e), "55P03", "{e}");
    tx.rollback().await.unwrap();
    let limit: i32 = c
        .query_one("select schedule_limit from asyncflow.task_types where task_type = 'video'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(limit, 50);
    let changed: Value = other
        .query_one("select asyncflow.register_task_type('video', '{\"schedule_limit\": 60}')", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(changed["schedule_limit"], json!(60));
}

//! Debounce: create_task's debounce_key and debounce_for (sql/api/20_enqueue.sql,
//! create_task_debounced), through SQL, the bulk path, HTTP, the command line and `Client`.
use crate::common;

use asyncflow::db::api;
use asyncflow::task::NewTask;
use chrono::{DateTime, Utc};
use common::{sqlstate, TestDb};
use serde_json::{json, Value};

use common::sql::*;

/// create_task with a debounce at `now`: the id.
async fn debounce(
    c: &impl tokio_postgres::GenericClient,
    ty: &str,
    key: &str,
    secs_for: f64,
    context: Value,
    now: DateTime<Utc>,
) -> Result<String, tokio_postgres::Error> {
    c.query_one(
        "select asyncflow.create_task($1, $2, p_now => $3, debounce_key => $4, \
         debounce_for => make_interval(secs => $5))",
        &[&ty, &context, &now, &key, &secs_for],
    )
    .await
    .map(|r| r.get(0))
}

/// Every task of the type: (id, context, order_time), by id.
async fn tasks_of(c: &impl tokio_postgres::GenericClient, ty: &str) -> Vec<(String, Value, DateTime<Utc>)> {
    c.query(
        "select asyncflow.format_task_id(task_type, shard, id), context, order_time from asyncflow.tasks \
         where task_type = $1 order by id",
        &[&ty],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2)))
    .collect()
}

fn debounced(key: &str, secs_for: f64, context: Value) -> NewTask {
    NewTask {
        context: Some(context),
        debounce_key: Some(key.into()),
        debounce_for: Some(secs_for),
        ..Default::default()
    }
}

#[tokio::test]
async fn a_debounced_create_replaces_the_pending_tasks_context_and_moves_its_start() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    register(&**c, "index", json!({})).await;
    register(&**c, "other", json!({})).await;
    let id = debounce(&**c, "index", "doc:7", 10.0, json!({"v": 1}), t0()).await.unwrap();
    assert_eq!(tasks_of(&**c, "index").await, vec![(id.clone(), json!({"v": 1}), t0() + secs(10.0))]);
    // not due before its debounce ends
    assert!(api::claim_tasks(&c, "index", &worker("w"), 1, Some(t0() + secs(9.0))).await.unwrap().is_empty());

    let again = debounce(&**c, "index", "doc:7", 10.0, json!({"v": 2}), t0() + secs(5.0)).await.unwrap();
    assert_eq!(again, id, "the same task");
    assert_eq!(tasks_of(&**c, "index").await, vec![(id.clone(), json!({"v": 2}), t0() + secs(15.0))]);
    // a run_at later than the debounce wins; each create moves the start from its own time
    let later = t0() + secs(100.0);
    let with_run_at: String = c
        .query_one(
            "select asyncflow.create_task('index', '{\"v\": 3}', run_at => $1, p_now => $2, \
             debounce_key => 'doc:7', debounce_for => interval '10 seconds')",
            &[&later, &(t0() + secs(6.0))],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(with_run_at, id);
    assert_eq!(tasks_of(&**c, "index").await, vec![(id.clone(), json!({"v": 3}), later)]);

    // another key, or the same key of another type, is another task
    let other_key = debounce(&**c, "index", "doc:8", 10.0, json!({}), t0()).await.unwrap();
    let other_type = debounce(&**c, "other", "doc:7", 10.0, json!({}), t0()).await.unwrap();
    assert_ne!(other_key, id);
    assert!(other_type.starts_with("other-"), "{other_type}");
    assert_eq!(tasks_of(&**c, "index").await.len(), 2);
    // the task's get_task and explain say when it starts
    let explained: Value = c.query_one("select asyncflow.explain_task($1, $2)", &[&id, &t0()]).await.unwrap().get(0);
    assert_eq!(explained["reason"], json!("delayed"), "{explained}");
    assert_eq!(task(&**c, &id).await["context"], json!({"v": 3}));
}

#[tokio::test]
async fn once_the_task_has_started_a_debounced_create_makes_a_new_task() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    register(&**c, "index", json!({})).await;
    let w = worker("w");
    let first = debounce(&**c, "index", "k", 10.0, json!({"v": 1}), t0()).await.unwrap();
    let claimed = api::claim_tasks(&c, "index", &w, 1, Some(t0() + secs(10.0))).await.unwrap();
    assert_eq!(claimed[0].task_id.as_str(), first);
    let second = debounce(&**c, "index", "k", 10.0, json!({"v": 2}), t0() + secs(11.0)).await.unwrap();
    assert_ne!(second, first, "a running task is not replaced");
    assert_eq!(task(&**c, &first).await["context"], json!({"v": 1}));
    // the key names the new task now: the next create replaces that one
    let third = debounce(&**c, "index", "k", 10.0, json!({"v": 3}), t0() + secs(12.0)).await.unwrap();
    assert_eq!(third, second);
    assert_eq!(task(&**c, &second).await["context"], json!({"v": 3}));

    // a task that ran and went back to pending (a failure with retry) has started too
    let running = api::claim_tasks(&c, "index", &w, 1, Some(t0() + secs(30.0))).await.unwrap();
    assert_eq!(running[0].task_id.as_str(), second);
    let fail = asyncflow::task::ReportKind::Fail { error: "flaky".into(), retry: true };
    let r =
        api::report_tasks(&c, &w, &[rep(&second, running[0].claim_seq, fail)], Some(t0() + secs(31.0))).await.unwrap();
    assert!(r[0].accepted);
    assert_eq!(task(&**c, &second).await["status"], json!("pending"));
    let fourth = debounce(&**c, "index", "k", 10.0, json!({"v": 4}), t0() + secs(32.0)).await.unwrap();
    assert!(fourth != second && fourth != first);
    assert_eq!(tasks_of(&**c, "index").await.len(), 3);

    // retention: a key whose task started, its start a day behind, goes; a live one stays
    let dropped: i32 = c
        .query_one("select asyncflow.drop_expired_unique_keys($1)", &[&(t0() + secs(86_400.0 + 41.0))])
        .await
        .unwrap()
        .get(0);
    assert_eq!(dropped, 0, "the key's task is pending and has not started");
    let claimed = api::claim_tasks(&c, "index", &w, 2, Some(t0() + secs(3600.0))).await.unwrap();
    assert!(claimed.iter().any(|t| t.task_id.as_str() == fourth), "{claimed:?}");
    let dropped: i32 = c
        .query_one("select asyncflow.drop_expired_unique_keys($1)", &[&(t0() + secs(86_400.0 + 43.0))])
        .await
        .unwrap()
        .get(0);
    assert_eq!(dropped, 1);
}

#[tokio::test]
async fn eight_concurrent_creators_with_one_key_leave_one_task() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    register(&**c, "index", json!({})).await;
    let client = asyncflow::client::Client::Database(db.pool.clone());
    for round in 0..3 {
        let key = format!("burst-{round}");
        let creates = (0..8).map(|n| {
            let (client, task) = (client.clone(), debounced(&key, 60.0, json!({"n": n})));
            tokio::spawn(async move { client.create_task("index", &task).await })
        });
        let answers: Vec<_> = futures_util::future::join_all(creates).await;
        let answers: Vec<_> = answers.into_iter().map(|a| a.unwrap().unwrap()).collect();
        let ids: std::collections::HashSet<_> = answers.iter().map(|a| a.id.to_string()).collect();
        assert_eq!(ids.len(), 1, "round {round}: {answers:?}");
        assert_eq!(answers.iter().filter(|a| a.created).count(), 1, "one creator created it: {answers:?}");
    }
    assert_eq!(tasks_of(&**c, "index").await.len(), 3);

    // creators that queue behind an open transaction holding the key: still one task
    let mut holder = db.raw().await;
    let tx = holder.transaction().await.unwrap();
    let held = debounce(&tx, "index", "held", 60.0, json!({"n": "first"}), Utc::now()).await.unwrap();
    let creates: Vec<_> = (0..8)
        .map(|n| {
            let (client, task) = (client.clone(), debounced("held", 60.0, json!({"n": n})));
            tokio::spawn(async move { client.create_task("index", &task).await })
        })
        .collect();
    let watcher = db.raw().await;
    common::wait_until(std::time::Duration::from_secs(20), "8 creators waiting for the key", || async {
        let n: i64 = watcher
            .query_one(
                "select count(*) from pg_stat_activity where datname = current_database() \
                 and wait_event_type = 'Lock' and query like '%create_task%'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        n == 8
    })
    .await;
    tx.commit().await.unwrap();
    for create in creates {
        let answer = create.await.unwrap().unwrap();
        assert_eq!((answer.id.as_str(), answer.created), (held.as_str(), false));
    }
    assert_eq!(tasks_of(&**c, "index").await.len(), 4);
    let context = &task(&**c, &held).await["context"];
    assert!(context["n"].is_number(), "the last creator's context: {context}");
}

#[tokio::test]
async fn http_bulk_and_the_command_line_debounce_and_say_created_false() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    register(&**c, "index", json!({})).await;
    let app = asyncflow::http::router(db.pool.clone(), &common::http_config(&["tok"], 1 << 20));
    let post = |path: &'static str, body: Value| {
        let app = app.clone();
        async move {
            let (status, _, bytes) =
                common::request(&app, "POST", path, Some(body.to_string()), Some("application/json"), Some("tok"))
                    .await;
            (status.as_u16(), serde_json::from_slice::<Value>(&bytes).unwrap_or(Value::Null))
        }
    };
    let body = |v: i32| json!({"type": "index", "context": {"v": v}, "debounce_key": "h", "debounce_for": 30});
    let (status, first) = post("/v1/tasks", body(1)).await;
    assert_eq!((status, first["created"].clone()), (201, json!(true)), "{first}");
    let (status, second) = post("/v1/tasks", body(2)).await;
    assert_eq!((status, second["created"].clone()), (200, json!(false)), "{second}");
    assert_eq!(second["id"], first["id"]);
    let id = first["id"].as_str().unwrap().to_string();
    assert_eq!(task(&**c, &id).await["context"], json!({"v": 2}));

    // bulk: elements with a key go one by one, in order, beside plain ones
    let (status, bulk) = post(
        "/v1/tasks/bulk",
        json!({"type": "index", "tasks": [
            {"context": {"v": 3}, "debounce_key": "h", "debounce_for": 30},
            {"context": {"plain": true}},
            {"context": {"v": 4}, "debounce_key": "b", "debounce_for": 0.5},
            {"context": {"v": 5}, "debounce_key": "b", "debounce_for": 0.5}]}),
    )
    .await;
    assert_eq!(status, 201, "{bulk}");
    let ids = bulk["ids"].as_array().unwrap();
    assert_eq!(ids[0], json!(id));
    assert!(ids[1] != json!(id) && ids[2] != json!(id) && ids[1] != ids[2]);
    assert_eq!(ids[2], ids[3]);
    assert_eq!(task(&**c, &id).await["context"], json!({"v": 3}));
    assert_eq!(task(&**c, ids[3].as_str().unwrap()).await["context"], json!({"v": 5}));

    let create = |v: &str| {
        common::cli::asyncflow(
            Some(&db.url),
            &["task", "create", "index", "--context", v, "--debounce-key", "cli", "--debounce-for", "5s"],
        )
    };
    let one: Value = serde_json::from_str(&common::cli::ok(&create(r#"{"v": "a"}"#))).unwrap();
    let two: Value = serde_json::from_str(&common::cli::ok(&create(r#"{"v": "b"}"#))).unwrap();
    assert_eq!((one["created"].clone(), two["created"].clone()), (json!(true), json!(false)));
    assert_eq!(one["id"], two["id"]);
    assert_eq!(task(&**c, one["id"].as_str().unwrap()).await["context"], json!({"v": "b"}));
    let err = common::cli::refused(&common::cli::asyncflow(
        Some(&db.url),
        &["task", "create", "index", "--debounce-key", "cli", "--debounce-for", "0s"],
    ));
    assert!(err.contains("more than zero"), "{err}");
    assert_eq!(tasks_of(&**c, "index").await.len(), 4, "h, the plain one, b, cli");
}

#[tokio::test]
async fn bad_debounce_input_is_refused_and_changes_nothing() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    register(&**c, "index", json!({})).await;
    let now = Utc::now();
    let refused = |sql: &'static str| {
        let c = &c;
        async move {
            let e = c.query_one(sql, &[&now]).await.expect_err(sql);
            assert_eq!(sqlstate(&e), "AF006", "{sql}: {e}");
            e.as_db_error().unwrap().message().to_string()
        }
    };
    let cases = [
        ("select asyncflow.create_task('index', p_now => $1, debounce_key => 'k', debounce_for => interval '0')", "more than 0"),
        ("select asyncflow.create_task('index', p_now => $1, debounce_key => 'k', debounce_for => interval '-5 seconds')", "more than 0"),
        ("select asyncflow.create_task('index', p_now => $1, debounce_key => 'k', debounce_for => interval '400 days')", "at most 365 days"),
        ("select asyncflow.create_task('index', p_now => $1, debounce_for => interval '5 seconds')", "needs a debounce_key"),
        ("select asyncflow.create_task('index', p_now => $1, debounce_key => 'k')", "needs debounce_for"),
        ("select asyncflow.create_task('index', p_now => $1, debounce_key => '', debounce_for => interval '5 seconds')", "1 to 255"),
        ("select asyncflow.create_task('index', p_now => $1, debounce_key => repeat('k', 256), debounce_for => interval '5 seconds')", "1 to 255"),
        ("select asyncflow.create_task('index', priority => 5, p_now => $1, debounce_key => 'k', debounce_for => interval '5 seconds')", "priority"),
        ("select asyncflow.create_task('index', idempotency_key => 'i', p_now => $1, debounce_key => 'k', debounce_for => interval '5 seconds')", "idempotency_key"),
        ("select asyncflow.create_task('index', '[1]', p_now => $1, debounce_key => 'k', debounce_for => interval '5 seconds')", "JSON object"),
    ];
    for (sql, says) in cases {
        let message = refused(sql).await;
        assert!(message.contains(says), "{sql}: {message}");
    }
    // a bad replace changes nothing either: the task keeps its context and start
    let id = debounce(&**c, "index", "k", 10.0, json!({"v": 1}), now).await.unwrap();
    let before = tasks_of(&**c, "index").await;
    let e = debounce(&**c, "index", "k", 10.0, json!([1]), now).await.unwrap_err();
    assert_eq!(sqlstate(&e), "AF006");
    c.execute("update asyncflow.config set max_context_bytes = 1024", &[]).await.unwrap();
    let e = debounce(&**c, "index", "k", 10.0, json!({"big": "x".repeat(4000)}), now).await.unwrap_err();
    assert_eq!(sqlstate(&e), "AF005", "{e}");
    assert_eq!(tasks_of(&**c, "index").await, before);
    assert_eq!(before[0].0, id);

    // the bulk path names the element
    let pool_c = db.pool.get().await.unwrap();
    for (bad, says) in [
        (json!([{}, {"debounce_key": "k"}]), "tasks[1]: debounce_key needs debounce_for"),
        (json!([{"debounce_for": 5}]), "tasks[0]: debounce_for needs a debounce_key"),
        (json!([{"debounce_key": "k", "debounce_for": 0}]), "tasks[0]: debounce_for must be"),
        (json!([{"debounce_key": "k", "debounce_for": "5s"}]), "tasks[0]: debounce_for must be"),
        (json!([{"debounce_key": 7, "debounce_for": 5}]), "tasks[0]: debounce_key must be"),
        (json!([{"debounce_key": "k", "debounce_for": 5, "priority": 3}]), "tasks[0]: priority cannot"),
    ] {
        let e = pool_c.query("select asyncflow.create_tasks('index', $1)", &[&bad]).await.expect_err("refused");
        assert!(e.as_db_error().unwrap().message().contains(says), "{bad}: {e}");
    }
    // HTTP: 400 with the reason
    let app = asyncflow::http::router(db.pool.clone(), &common::http_config(&["tok"], 1 << 20));
    for bad in [
        json!({"type": "index", "debounce_key": "k", "debounce_for": -1}),
        json!({"type": "index", "debounce_for": 5}),
        json!({"type": "index", "debounce_key": "k", "debounce_for": "soon"}),
    ] {
        let (status, _, body) =
            common::request(&app, "POST", "/v1/tasks", Some(bad.to_string()), Some("application/json"), Some("tok"))
                .await;
        assert_eq!(status, 400, "{bad}: {}", String::from_utf8_lossy(&body));
    }
    assert_eq!(tasks_of(&**c, "index").await, before, "nothing changed");
    let keys: i64 = c.query_one("select count(*) from asyncflow.debounce_keys", &[]).await.unwrap().get(0);
    assert_eq!(keys, 1);
}

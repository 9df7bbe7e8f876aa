//! The scheduling features beside periodic schedules: idempotent start_run, uniqueness windows,
//! progress and rate limits.
use crate::common;
#[allow(dead_code)]
use crate::common::workflow;

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

fn at(minutes: i64) -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::parse_from_rfc3339("2030-01-01T00:00:00Z").unwrap().with_timezone(&chrono::Utc)
        + chrono::Duration::minutes(minutes)
}

/// create_task with a unique key at `now`: the id answered.
async fn unique(c: &impl tokio_postgres::GenericClient, ty: &str, key: &str, window: Option<i32>, now: i64) -> String {
    c.query_one(
        "select asyncflow.create_task($1, unique_key => $2, unique_for => $3, p_now => $4)",
        &[&ty, &key, &window, &at(now)],
    )
    .await
    .unwrap()
    .get(0)
}

#[tokio::test]
async fn a_unique_key_gives_one_task_per_window_and_outlives_the_tasks_shard() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    // retention 0: a closed shard may be dropped at once; 10 rows fill a shard
    register(&**c, "hourly", json!({"retention": 0, "shard_max_rows": 10})).await;
    let first = unique(&**c, "hourly", "tenant-1", Some(3600), 0).await;
    assert_eq!(unique(&**c, "hourly", "tenant-1", Some(3600), 10).await, first);
    assert_ne!(unique(&**c, "hourly", "tenant-2", Some(3600), 10).await, first, "another key, another task");
    // the task ends and its shard is dropped: the window still holds
    c.execute("select asyncflow.create_tasks('hourly', $1)", &[&json!([{}, {}, {}, {}, {}, {}, {}, {}])])
        .await
        .unwrap();
    c.execute(
        "select asyncflow.cancel_task(asyncflow.format_task_id(task_type, shard, id)) from asyncflow.tasks
         where task_type = 'hourly'",
        &[],
    )
    .await
    .unwrap();
    api::roll_shard(&c, "hourly", Some(at(20))).await.unwrap();
    api::advance_begin_pos(&c, "hourly", Some(at(20))).await.unwrap();
    assert_eq!(api::drop_expired_shards(&c, "hourly", Some(at(21))).await.unwrap(), vec![1]);
    assert!(api::get_task(&c, &first).await.unwrap().is_none(), "the task is gone with its shard");
    assert_eq!(unique(&**c, "hourly", "tenant-1", Some(3600), 30).await, first);
    // after the window, the key's row is dead weight that maintenance removes; a new task
    let pruned = asyncflow::maintenance::UniqueKeyRetention::new(db.pool.clone(), std::time::Duration::from_secs(60));
    let report = asyncflow::maintenance::Service::run_once(&pruned, Some(at(61))).await.unwrap();
    assert_eq!(report.changed, 1, "tenant-1's hour is over, tenant-2's (from minute 10) is not");
    let second = unique(&**c, "hourly", "tenant-1", Some(3600), 61).await;
    assert_ne!(second, first);
    assert_eq!(unique(&**c, "hourly", "tenant-1", Some(3600), 62).await, second);
    // bad input changes nothing
    for (key, window) in [("", None), ("k", Some(0))] {
        let e = c
            .query_one("select asyncflow.create_task('hourly', unique_key => $1, unique_for => $2)", &[&key, &window])
            .await
            .unwrap_err();
        assert_eq!(sqlstate(&e), "AF006");
    }
}

#[tokio::test]
async fn a_unique_key_without_a_window_holds_while_its_task_is_pending_or_running() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    register(&**c, "sync", json!({})).await;
    let first = unique(&**c, "sync", "user-9", None, 0).await;
    assert_eq!(unique(&**c, "sync", "user-9", None, 1).await, first);
    let w = asyncflow::WorkerId::new("w").unwrap();
    let claimed = api::claim_tasks(&c, "sync", &w, 10, Some(at(2))).await.unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(unique(&**c, "sync", "user-9", None, 3).await, first, "running: still the same");
    assert!(api::cancel_task(&c, &first).await.unwrap());
    let second = unique(&**c, "sync", "user-9", None, 4).await;
    assert_ne!(second, first, "ended: a new task");
    // over HTTP: the same key answers the same id, found and not created (200, created: false)
    let app = asyncflow::http::router(db.pool.clone(), &common::http_config(&[], 64 * 1024));
    let body = json!({"type": "sync", "unique_key": "user-9"}).to_string();
    let (status, _, bytes) =
        common::request(&app, "POST", "/v1/tasks", Some(body), Some("application/json"), None).await;
    let answer: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!((status.as_u16(), answer["id"].as_str()), (200, Some(second.as_str())), "{answer}");
    assert_eq!(answer["created"], false, "{answer}");
}

fn worker_config() -> asyncflow::worker::WorkerConfig {
    asyncflow::worker::WorkerConfig {
        worker_id: asyncflow::WorkerId::new("progress-worker").unwrap(),
        concurrency: 2,
        shutdown_grace: std::time::Duration::from_millis(300),
        heartbeat_check: std::time::Duration::from_millis(100),
        ..Default::default()
    }
}

/// Waits until the task shows `progress` while it is still running.
async fn progress_seen_while_running(db: &TestDb, id: &str, progress: serde_json::Value) {
    common::wait_until(std::time::Duration::from_secs(15), "progress in get_task while running", || async {
        let t = api::get_task(&db.conn().await, id).await.unwrap().unwrap();
        t.status == asyncflow::task::TaskStatus::Running && t.progress.as_ref() == Some(&progress)
    })
    .await;
}

#[tokio::test]
async fn progress_reported_by_an_executable_and_a_rust_handler_shows_in_get_task_while_the_call_runs() {
    let db = TestDb::new().await;
    let folder = common::Folder::new(&[(
        "convert",
        "command = [\"./run\"]\n",
        "cat >/dev/null\necho 'asyncflow:progress {\"percent\": 40, \"message\": \"converting\"}' >&2\n\
         while [ ! -e \"$0.go\" ]; do sleep 0.05; done\necho '{\"result\": {}}'",
    )]);
    let specs = asyncflow::function::registry::load_dir(&folder.0).unwrap();
    let go = std::sync::Arc::new(tokio::sync::Notify::new());
    let handler_go = go.clone();
    let worker = asyncflow::worker::Worker::new(db.pool.clone(), db.url.clone(), worker_config())
        .register_specs(specs.values())
        .unwrap()
        .register(
            asyncflow::TypeName::new("index").unwrap(),
            move |call: asyncflow::function::StageCall| {
                let go = handler_go.clone();
                async move {
                    call.progress.report(json!({"percent": 75})).unwrap();
                    go.notified().await;
                    asyncflow::function::StageReply::Succeeded { result: json!({}) }
                }
            },
            None,
            Default::default(),
        );
    let stop = tokio_util::sync::CancellationToken::new();
    let running = tokio::spawn(worker.run(stop.clone()));
    let c = db.conn().await;
    common::wait_until(std::time::Duration::from_secs(10), "types registered", || async {
        api::list_task_types(&db.conn().await).await.map(|t| t.len() == 2).unwrap_or(false)
    })
    .await;
    let exec_task = api::create_task(&c, "convert", &Default::default()).await.unwrap();
    let rust_task = api::create_task(&c, "index", &Default::default()).await.unwrap();
    progress_seen_while_running(&db, exec_task.as_str(), json!({"percent": 40, "message": "converting"})).await;
    progress_seen_while_running(&db, rust_task.as_str(), json!({"percent": 75})).await;
    // let both calls end: the tasks succeed and keep their last progress
    std::fs::write(folder.0.join("convert/run.go"), "").unwrap();
    go.notify_one();
    for id in [&exec_task, &rust_task] {
        common::wait_until(std::time::Duration::from_secs(10), "the task succeeds", || async {
            api::get_task(&db.conn().await, id.as_str()).await.unwrap().unwrap().status
                == asyncflow::task::TaskStatus::Succeeded
        })
        .await;
    }
    stop.cancel();
    running.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_heartbeat_over_the_worker_protocol_carries_progress_and_a_large_one_is_refused() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    register(&**c, "remote", json!({})).await;
    let id = api::create_task(&c, "remote", &Default::default()).await.unwrap();
    let app = asyncflow::http::router(db.pool.clone(), &common::http_config(&[], 64 * 1024));
    let post = |uri: &'static str, body: serde_json::Value| {
        let app = app.clone();
        async move {
            let (status, _, bytes) =
                common::request(&app, "POST", uri, Some(body.to_string()), Some("application/json"), None).await;
            (status.as_u16(), serde_json::from_slice::<serde_json::Value>(&bytes).unwrap_or_default())
        }
    };
    let (status, held) = post("/v1/worker/hold", json!({"worker_id": "far", "type": "remote", "limit": 1})).await;
    assert_eq!(status, 200, "{held}");
    let claim_seq = held["tasks"][0]["claim_seq"].clone();
    let (status, body) = post(
        "/v1/worker/heartbeat",
        json!({"worker_id": "far", "task_id": id.as_str(), "claim_seq": claim_seq, "progress": {"step": 2, "of": 5}}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let t = api::get_task(&c, id.as_str()).await.unwrap().unwrap();
    assert_eq!(t.progress, Some(json!({"step": 2, "of": 5})));
    let big = "x".repeat(5000);
    let (status, _) = post(
        "/v1/worker/heartbeat",
        json!({"worker_id": "far", "task_id": id.as_str(), "claim_seq": claim_seq, "progress": {"m": big}}),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(api::get_task(&c, id.as_str()).await.unwrap().unwrap().progress, Some(json!({"step": 2, "of": 5})));
}

/// Two workers claim a type limited to 10 starts a second for 30 s: the starts in any 30 s
/// stay within 10 % of 300 (plus the bucket's first 10).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rate_limit_holds_within_ten_percent_over_30_s_across_two_workers() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    register(&**c, "limited", json!({"schedule_interval": 0.05, "schedule_limit": 50})).await;
    let limit = |max_starts| asyncflow::task_type::RateLimit { max_starts, period: 1.0 };
    let set = api::set_rate_limit(&c, "limited", &limit(Some(10))).await.unwrap();
    assert_eq!(set, limit(Some(10)));
    let tasks: Vec<serde_json::Value> = (0..1000).map(|_| json!({})).collect();
    c.execute("select asyncflow.create_tasks('limited', $1)", &[&json!(tasks)]).await.unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let mut workers = Vec::new();
    for n in 0..2 {
        let config = asyncflow::worker::WorkerConfig {
            worker_id: asyncflow::WorkerId::new(&format!("rate-{n}")).unwrap(),
            concurrency: 20,
            ..worker_config()
        };
        let worker = asyncflow::worker::Worker::new(db.pool.clone(), db.url.clone(), config).register(
            asyncflow::TypeName::new("limited").unwrap(),
            |_call: asyncflow::function::StageCall| async {
                asyncflow::function::StageReply::Succeeded { result: json!({}) }
            },
            None,
            Default::default(),
        );
        workers.push(tokio::spawn(worker.run(stop.clone())));
    }
    tokio::time::sleep(std::time::Duration::from_secs(33)).await;
    stop.cancel();
    let mut by_worker = Vec::new();
    for w in workers {
        by_worker.push(w.await.unwrap().unwrap());
    }
    // starts in the 30 s from the first one, by their claim times
    let row = c
        .query_one(
            "with s as (select min(claimed_at) as first from asyncflow.tasks where task_type = 'limited')
             select count(*) filter (where t.claimed_at < s.first + interval '30 seconds'),
               count(distinct t.owner) filter (where t.claimed_at < s.first + interval '30 seconds')
             from asyncflow.tasks t, s where t.task_type = 'limited' and t.claimed_at is not null",
            &[],
        )
        .await
        .unwrap();
    let (started, owners): (i64, i64) = (row.get(0), row.get(1));
    eprintln!("started in 30 s: {started} (limit 300 + a bucket of 10), by {owners} workers");
    assert_eq!(owners, 2, "both workers started tasks");
    assert!((270..=330).contains(&started), "{started} starts in 30 s at 10 per second");
    // without the limit the same workers start far more: the limit, not the workers, held it
    api::set_rate_limit(&c, "limited", &limit(None)).await.unwrap();
    let w = asyncflow::WorkerId::new("unlimited").unwrap();
    assert_eq!(api::claim_tasks(&c, "limited", &w, 50, None).await.unwrap().len(), 50);
}

#[tokio::test]
async fn a_rate_limit_bounds_plain_and_fair_claims_and_refills_with_the_clock() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    let w = asyncflow::WorkerId::new("w").unwrap();
    register(&**c, "plain", json!({})).await;
    register(&**c, "fair", json!({"fair_queues": true})).await;
    let t0 = at(0);
    for ty in ["plain", "fair"] {
        // 5 starts per hour: a bucket of 5, one more token every 720 s
        let hourly = asyncflow::task_type::RateLimit { max_starts: Some(5), period: 3600.0 };
        api::set_rate_limit(&c, ty, &hourly).await.unwrap();
        let tasks: Vec<serde_json::Value> = (0..20).map(|i| json!({"queue_key": format!("k{i}")})).collect();
        c.execute(
            "select asyncflow.create_tasks($1, $2, $3)",
            &[&ty, &json!(tasks), &(t0 - chrono::Duration::hours(1))],
        )
        .await
        .unwrap();
        c.execute("update asyncflow.rate_limits set refilled_at = $1 where task_type = $2", &[&t0, &ty]).await.unwrap();
        let claim = |secs: i64| {
            let c = &c;
            let w = &w;
            async move { api::claim_tasks(c, ty, w, 20, Some(t0 + chrono::Duration::seconds(secs))).await.unwrap().len() }
        };
        assert_eq!(claim(0).await, 5, "{ty}: the bucket");
        assert_eq!(claim(1).await, 0, "{ty}: empty");
        assert_eq!(claim(1441).await, 2, "{ty}: two tokens after 1440 s");
        // the held claim of a plain type goes through the limited claim too
        let held: i64 = c
            .query_one(&format!("select count(*) from asyncflow.type_hold__{ty}('w', 20)"), &[])
            .await
            .map(|r| r.get(0))
            .unwrap_or(0);
        assert_eq!(held, 0, "{ty}: a hold took {held} with no token left");
        api::set_rate_limit(&c, ty, &asyncflow::task_type::RateLimit { max_starts: None, period: 1.0 }).await.unwrap();
        assert!(claim(1442).await >= 10, "{ty}: no limit, no bound");
    }
    // over HTTP
    let app = asyncflow::http::router(db.pool.clone(), &common::http_config(&[], 64 * 1024));
    let put = |body: serde_json::Value| {
        let app = app.clone();
        async move {
            let uri = "/v1/task-types/plain/rate-limit";
            let (status, _, bytes) =
                common::request(&app, "PUT", uri, Some(body.to_string()), Some("application/json"), None).await;
            (status.as_u16(), serde_json::from_slice::<serde_json::Value>(&bytes).unwrap_or_default())
        }
    };
    assert_eq!(put(json!({"max_starts": 3, "period": 2.5})).await, (200, json!({"max_starts": 3, "period": 2.5})));
    assert_eq!(put(json!({"period": 2})).await.0, 400, "max_starts is required (null removes)");
    assert_eq!(put(json!({"max_starts": null})).await, (200, json!({"max_starts": null, "period": 1.0})));
    let e = c.query_one("select asyncflow.set_rate_limit('plain', 0)", &[]).await.unwrap_err();
    assert_eq!(sqlstate(&e), "AF006");
    let e = c.query_one("select asyncflow.set_rate_limit('nope', 1)", &[]).await.unwrap_err();
    assert_eq!(sqlstate(&e), "AF001");
}

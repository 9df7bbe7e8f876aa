//! The worker end to end with in-process (Rust) functions: stages, retries, later, timeouts,
//! panics, lease loss, graceful shutdown.
use crate::common;
#[path = "worker/holds.rs"]
mod holds;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use asyncflow::db::api;
use asyncflow::function::{StageCall, StageReply};
use asyncflow::task::{NewTask, TaskStatus};
use asyncflow::task_type::TaskTypeUpdate;
use asyncflow::worker::{Worker, WorkerConfig};
use asyncflow::{TaskId, TypeName, WorkerId};
use common::{wait_until, TestDb};
use serde_json::json;
use tokio_util::sync::CancellationToken;

fn config(concurrency: usize) -> WorkerConfig {
    WorkerConfig {
        worker_id: WorkerId::new("test-worker").unwrap(),
        concurrency,
        shutdown_grace: Duration::from_millis(300),
        heartbeat_check: Duration::from_millis(100),
        ..WorkerConfig::default()
    }
}

fn fast(settings: TaskTypeUpdate) -> TaskTypeUpdate {
    TaskTypeUpdate { schedule_interval: Some(0.2), max_retry_interval: Some(-1), ..settings }
}

async fn status_of(db: &TestDb, id: &TaskId) -> TaskStatus {
    api::get_task(&db.conn().await, id.as_str()).await.unwrap().unwrap().status
}

/// Terminates every other connection to the test's database (the worker's among them).
async fn end_other_connections(c: &tokio_postgres::Client) {
    c.execute(
        "select pg_terminate_backend(pid) from pg_stat_activity \
         where datname = current_database() and pid <> pg_backend_pid()",
        &[],
    )
    .await
    .unwrap();
}

/// Row changes made in the task shards of `task_type`, once at least `expected` have been
/// counted (or 10 s have passed). The other connections (the worker's) are ended first, so that
/// their statistics reach the server at once.
async fn row_updates(c: &tokio_postgres::Client, task_type: &str, expected: i64) -> i64 {
    end_other_connections(c).await;
    let pattern = format!("tasks\\_{task_type}\\_%");
    let updates = || async {
        let n: i64 = c
            .query_one(
                "select coalesce(sum(n_tup_upd), 0)::bigint from pg_stat_user_tables where relname like $1",
                &[&pattern],
            )
            .await
            .unwrap()
            .get(0);
        n
    };
    wait_until(Duration::from_secs(10), "the worker's statistics", || async { updates().await >= expected }).await;
    updates().await
}

/// Transactions the server counted in the test's database (its other backends are ended first,
/// so that theirs are in).
async fn commits(c: &tokio_postgres::Client) -> i64 {
    end_other_connections(c).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    c.execute("select pg_stat_clear_snapshot()", &[]).await.unwrap();
    c.query_one("select xact_commit from pg_stat_database where datname = current_database()", &[])
        .await
        .unwrap()
        .get(0)
}

async fn all_final(db: &TestDb, ids: &[TaskId]) -> bool {
    let counts = api::count_by_status_of(&db.conn().await, ids).await.unwrap();
    counts.iter().filter(|(s, _)| s.is_final()).map(|(_, n)| n).sum::<i64>() == ids.len() as i64
}

#[tokio::test]
async fn a_worker_runs_tasks_through_three_stages_carrying_context() {
    let db = TestDb::new().await;
    let ty = TypeName::new("media").unwrap();
    let stop = CancellationToken::new();
    let worker = Worker::new(db.pool.clone(), db.url.clone(), config(4)).register(
        ty,
        |call: StageCall| async move {
            let mut ctx = call.context.clone();
            let trail = ctx["trail"].as_array().cloned().unwrap_or_default();
            let mut trail = trail;
            trail.push(json!(call.stage));
            ctx["trail"] = json!(trail);
            match call.stage.as_str() {
                "probe" => StageReply::Next { next_stage: "transform".into(), context: Some(ctx) },
                "transform" => StageReply::Next { next_stage: "publish".into(), context: Some(ctx) },
                _ => StageReply::Succeeded { result: ctx },
            }
        },
        None,
        fast(TaskTypeUpdate { initial_stage: Some("probe".into()), ..Default::default() }),
    );
    let running = tokio::spawn(worker.run(stop.clone()));
    // The worker registers the type; wait for it, then enqueue (the NOTIFY wakes the worker).
    wait_until(Duration::from_secs(10), "type registered", || async {
        !api::list_task_types(&db.conn().await).await.unwrap().is_empty()
    })
    .await;
    let tasks: Vec<NewTask> = (0..20).map(|i| NewTask::with_context(json!({"n": i}))).collect();
    let ids = api::create_tasks(&db.conn().await, "media", &tasks).await.unwrap();
    wait_until(Duration::from_secs(20), "all tasks final", || all_final(&db, &ids)).await;
    stop.cancel();
    let summary = running.await.unwrap().unwrap();
    assert_eq!(summary.succeeded, 20);
    assert_eq!(summary.advanced, 40);
    let t = api::get_task(&db.conn().await, ids[3].as_str()).await.unwrap().unwrap();
    assert_eq!(t.status, TaskStatus::Succeeded);
    assert_eq!(t.result, Some(json!({"n": 3, "trail": ["probe", "transform", "publish"]})));
}

#[tokio::test]
async fn a_reply_the_server_refuses_fails_only_its_own_task_and_the_rest_of_its_batch_is_written() {
    let db = TestDb::new().await;
    let ty = TypeName::new("mixed").unwrap();
    let stop = CancellationToken::new();
    // A Rust function's reply is not checked by the worker: these two reach the server, which
    // refuses them (a stage name with a space, a delay past a year). Before, that refusal took
    // every report written in the same statement with it, and those tasks stayed claimed.
    let worker = Worker::new(db.pool.clone(), db.url.clone(), config(64)).register(
        ty,
        |call: StageCall| async move {
            match call.context["n"].as_i64() {
                Some(7) => StageReply::Next { next_stage: "two words".into(), context: None },
                Some(13) => StageReply::Later { later: 4e7, context: None },
                _ => StageReply::Succeeded { result: call.context.clone() },
            }
        },
        None,
        fast(TaskTypeUpdate { max_retry_num: Some(1), ..Default::default() }),
    );
    let running = tokio::spawn(worker.run(stop.clone()));
    wait_until(Duration::from_secs(10), "type registered", || async {
        !api::list_task_types(&db.conn().await).await.unwrap().is_empty()
    })
    .await;
    let tasks: Vec<NewTask> = (0..60).map(|i| NewTask::with_context(json!({"n": i}))).collect();
    let ids = api::create_tasks(&db.conn().await, "mixed", &tasks).await.unwrap();
    wait_until(Duration::from_secs(20), "all tasks final", || all_final(&db, &ids)).await;
    stop.cancel();
    let summary = running.await.unwrap().unwrap();
    assert_eq!((summary.succeeded, summary.failed, summary.refused), (58, 2, 0));
    // each bad reply's first try failed instead and was retried (one retry allowed): counted
    // as a retry, not as the advance or the later it was meant to be
    assert_eq!((summary.retried, summary.advanced, summary.later), (2, 0, 0), "{summary:?}");
    for (i, id) in ids.iter().enumerate() {
        let t = api::get_task(&db.conn().await, id.as_str()).await.unwrap().unwrap();
        if i == 7 || i == 13 {
            assert_eq!(t.status, TaskStatus::Failed, "task {i}");
            let error = t.error.unwrap_or_default();
            assert!(error.starts_with("the reply was refused: "), "task {i}: {error}");
            let why = if i == 7 { "stage must match" } else { "delay must be a number of seconds" };
            assert!(error.contains(why), "task {i}: {error}");
        } else {
            assert_eq!(t.status, TaskStatus::Succeeded, "task {i}");
            assert_eq!(t.result, Some(json!({"n": i})));
        }
    }
}

#[tokio::test]
async fn failures_are_retried_panics_and_timeouts_count_as_failures_and_later_does_not() {
    let db = TestDb::new().await;
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    let stop = CancellationToken::new();
    let worker = Worker::new(db.pool.clone(), db.url.clone(), config(4)).register(
        TypeName::new("mixed").unwrap(),
        move |call: StageCall| {
            let seen = seen.clone();
            async move {
                seen.fetch_add(1, Ordering::SeqCst);
                let kind = call.context["kind"].as_str().unwrap_or_default().to_string();
                match (kind.as_str(), call.attempt) {
                    ("flaky", 1 | 2) => StageReply::fail("transient"),
                    ("flaky", _) => StageReply::Succeeded { result: json!(call.attempt) },
                    ("panic", 1) => panic!("handler bug"),
                    ("panic", _) => StageReply::Succeeded { result: json!("recovered") },
                    ("slow", 1) => {
                        tokio::time::sleep(Duration::from_secs(30)).await;
                        StageReply::Succeeded { result: json!("too late") }
                    }
                    ("slow", _) => StageReply::Succeeded { result: json!("fast now") },
                    ("later", _) if call.context.get("again").is_none() => {
                        StageReply::Later { later: 0.1, context: Some(json!({"kind": "later", "again": true})) }
                    }
                    ("later", _) => StageReply::Succeeded { result: json!(call.attempt) },
                    _ => StageReply::Failed { error: "refused".into(), retry: false },
                }
            }
        },
        Some(Duration::from_millis(500)),
        fast(TaskTypeUpdate { max_retry_num: Some(3), ..Default::default() }),
    );
    let running = tokio::spawn(worker.run(stop.clone()));
    wait_until(Duration::from_secs(10), "type registered", || async {
        !api::list_task_types(&db.conn().await).await.unwrap().is_empty()
    })
    .await;
    let kinds = ["flaky", "panic", "slow", "later", "bad"];
    let tasks: Vec<NewTask> = kinds.iter().map(|k| NewTask::with_context(json!({"kind": k}))).collect();
    let ids = api::create_tasks(&db.conn().await, "mixed", &tasks).await.unwrap();
    wait_until(Duration::from_secs(30), "all tasks final", || all_final(&db, &ids)).await;
    stop.cancel();
    running.await.unwrap().unwrap();
    let c = db.conn().await;
    let get = |i: usize| {
        let c = &c;
        let id = ids[i].clone();
        async move { api::get_task(c, id.as_str()).await.unwrap().unwrap() }
    };
    let flaky = get(0).await;
    assert_eq!((flaky.status, flaky.result.clone(), flaky.retry_count), (TaskStatus::Succeeded, Some(json!(3)), 2));
    let panicked = get(1).await;
    assert_eq!(panicked.result, Some(json!("recovered")));
    assert!(panicked.schedule_log[0].error.as_deref().unwrap_or_default().contains("panicked: handler bug"));
    let slow = get(2).await;
    assert_eq!(slow.result, Some(json!("fast now")));
    assert!(slow.schedule_log[0].error.as_deref().unwrap_or_default().contains("timed out"));
    let later = get(3).await;
    assert_eq!((later.status, later.result.clone(), later.retry_count), (TaskStatus::Succeeded, Some(json!(1)), 0));
    let bad = get(4).await;
    assert_eq!((bad.status, bad.error.as_deref(), bad.retry_count), (TaskStatus::Failed, Some("refused"), 1));
}

#[tokio::test]
async fn shutdown_hands_unfinished_tasks_back_without_burning_a_try() {
    let db = TestDb::new().await;
    let started = Arc::new(AtomicUsize::new(0));
    let seen = started.clone();
    let stop = CancellationToken::new();
    let worker = Worker::new(db.pool.clone(), db.url.clone(), config(3)).register(
        TypeName::new("long").unwrap(),
        move |_call: StageCall| {
            let seen = seen.clone();
            async move {
                seen.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_secs(3600)).await;
                StageReply::Succeeded { result: json!(null) }
            }
        },
        None,
        fast(TaskTypeUpdate::default()),
    );
    let running = tokio::spawn(worker.run(stop.clone()));
    wait_until(Duration::from_secs(10), "type registered", || async {
        !api::list_task_types(&db.conn().await).await.unwrap().is_empty()
    })
    .await;
    let ids = api::create_tasks(&db.conn().await, "long", &vec![NewTask::default(); 5]).await.unwrap();
    wait_until(Duration::from_secs(10), "3 calls running", || async { started.load(Ordering::SeqCst) == 3 }).await;
    stop.cancel();
    let summary = tokio::time::timeout(Duration::from_secs(10), running).await.expect("worker stops").unwrap().unwrap();
    assert_eq!(summary.released, 3);
    for id in &ids {
        let t = api::get_task(&db.conn().await, id.as_str()).await.unwrap().unwrap();
        assert_eq!((t.status, t.attempt, t.owner), (TaskStatus::Pending, 0, None), "{id}");
        assert!(t.order_time <= chrono::Utc::now(), "ready again at once");
    }
}

#[tokio::test]
async fn a_call_whose_lease_is_lost_is_abandoned_and_its_report_never_lands() {
    let db = TestDb::new().await;
    let release = Arc::new(tokio::sync::Notify::new());
    let gate = release.clone();
    let stop = CancellationToken::new();
    let worker = Worker::new(db.pool.clone(), db.url.clone(), config(1)).register(
        TypeName::new("held").unwrap(),
        move |_call: StageCall| {
            let gate = gate.clone();
            async move {
                gate.notified().await;
                StageReply::Succeeded { result: json!("from the first worker") }
            }
        },
        None,
        fast(TaskTypeUpdate::default()),
    );
    let running = tokio::spawn(worker.run(stop.clone()));
    wait_until(Duration::from_secs(10), "type registered", || async {
        !api::list_task_types(&db.conn().await).await.unwrap().is_empty()
    })
    .await;
    let id = api::create_task(&db.conn().await, "held", &NewTask::default()).await.unwrap();
    wait_until(Duration::from_secs(10), "claimed", || async { status_of(&db, &id).await == TaskStatus::Running }).await;
    // Cancel it by hand: the next heartbeat is refused and the call abandoned.
    assert!(api::cancel_task(&db.conn().await, id.as_str()).await.unwrap());
    tokio::time::sleep(Duration::from_millis(300)).await;
    release.notify_waiters();
    stop.cancel();
    running.await.unwrap().unwrap();
    let t = api::get_task(&db.conn().await, id.as_str()).await.unwrap().unwrap();
    assert_eq!((t.status, t.result), (TaskStatus::Cancelled, None));
}

#[tokio::test]
async fn heartbeats_keep_a_long_call_past_max_processing_time() {
    let db = TestDb::new().await;
    let stop = CancellationToken::new();
    let worker = Worker::new(db.pool.clone(), db.url.clone(), config(1)).register(
        TypeName::new("slowpoke").unwrap(),
        |_call: StageCall| async move {
            tokio::time::sleep(Duration::from_millis(3500)).await;
            StageReply::Succeeded { result: json!("done") }
        },
        None,
        fast(TaskTypeUpdate { max_processing_time: Some(1), ..Default::default() }),
    );
    let running = tokio::spawn(worker.run(stop.clone()));
    wait_until(Duration::from_secs(10), "type registered", || async {
        !api::list_task_types(&db.conn().await).await.unwrap().is_empty()
    })
    .await;
    let id = api::create_task(&db.conn().await, "slowpoke", &NewTask::default()).await.unwrap();
    // A rescuer running all along must find nothing to rescue.
    let rescuer = asyncflow::maintenance::Rescuer::new(db.pool.clone(), Duration::from_millis(100), 100);
    use asyncflow::maintenance::Service;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while status_of(&db, &id).await != TaskStatus::Succeeded {
        let report = rescuer.run_once(None).await.unwrap();
        assert_eq!(report.changed, 0, "the heartbeated task was rescued: {:?}", report.detail);
        assert!(tokio::time::Instant::now() < deadline, "did not finish");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.cancel();
    running.await.unwrap().unwrap();
    let t = api::get_task(&db.conn().await, id.as_str()).await.unwrap().unwrap();
    assert_eq!((t.retry_count, t.schedule_log.len()), (0, 1));
    assert!(t.schedule_log[0].cost_ms.unwrap_or_default() >= 3000.0);
}

#[tokio::test]
async fn killing_every_database_connection_mid_run_loses_nothing() {
    let db = TestDb::new().await;
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    let stop = CancellationToken::new();
    let worker = Worker::new(db.pool.clone(), db.url.clone(), config(8)).register(
        TypeName::new("steady").unwrap(),
        move |call: StageCall| {
            let seen = seen.clone();
            async move {
                seen.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(5)).await;
                match call.stage.as_str() {
                    "start" => StageReply::Next { next_stage: "end".into(), context: None },
                    _ => StageReply::Succeeded { result: json!(call.attempt) },
                }
            }
        },
        None,
        fast(TaskTypeUpdate { max_retry_num: Some(100), max_processing_time: Some(2), ..Default::default() }),
    );
    let running = tokio::spawn(worker.run(stop.clone()));
    // A claim whose answer was lost with its connection leaves tasks running under this worker's
    // name without the worker knowing: only the rescuer finds those again, as in production.
    let maintainer = asyncflow::maintenance::Maintainer::new(
        db.url.clone(),
        Duration::from_millis(200),
        asyncflow::maintenance::services(&db.pool, &asyncflow::maintenance::MaintenanceConfig::default()),
    );
    let maintenance = tokio::spawn(maintainer.run(stop.clone()));
    wait_until(Duration::from_secs(10), "type registered", || async {
        !api::list_task_types(&db.conn().await).await.unwrap().is_empty()
    })
    .await;
    let ids = api::create_tasks(&db.conn().await, "steady", &vec![NewTask::default(); 300]).await.unwrap();
    // Terminate every other connection to the database, again and again, while the worker runs.
    let killer = db.raw().await;
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(150)).await;
        end_other_connections(&killer).await;
    }
    let fresh = db.raw().await;
    let done = || async {
        let n: i64 = fresh
            .query_one("select count(*) from asyncflow.tasks where status = 'succeeded'", &[])
            .await
            .unwrap()
            .get(0);
        n == ids.len() as i64
    };
    wait_until(Duration::from_secs(60), "all tasks succeeded after the connection losses", done).await;
    stop.cancel();
    running.await.unwrap().unwrap();
    maintenance.await.unwrap();
    let lost: i64 =
        fresh.query_one("select count(*) from asyncflow.tasks where status <> 'succeeded'", &[]).await.unwrap().get(0);
    assert_eq!(lost, 0);
    assert!(calls.load(Ordering::SeqCst) >= 600, "two stages each");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_tasks_over_several_types_ends_when_the_budget_is_spent() {
    // One type's producer may reserve the whole budget for a claim that finds less; the other
    // producers, finding the budget empty meanwhile, must wait for what comes back rather than
    // for a stop that never comes (found by a bug hunt: the worker hung with tasks ready).
    let db = TestDb::new().await;
    let c = db.conn().await;
    for (name, tasks) in [("qa", 1), ("qb", 10)] {
        api::register_task_type(&c, &TypeName::new(name).unwrap(), &fast(TaskTypeUpdate::default())).await.unwrap();
        api::create_tasks(&c, name, &vec![NewTask::default(); tasks]).await.unwrap();
    }
    // 11 tasks: two runs of 5 each find enough to spend their whole budget
    for _ in 0..2 {
        let config = WorkerConfig { max_tasks: Some(5), ..config(10) };
        let mut worker = Worker::new(db.pool.clone(), db.url.clone(), config);
        for name in ["qa", "qb"] {
            worker = worker.register(
                TypeName::new(name).unwrap(),
                |_call: StageCall| async { StageReply::Succeeded { result: json!(null) } },
                None,
                fast(TaskTypeUpdate::default()),
            );
        }
        let run = tokio::time::timeout(Duration::from_secs(20), worker.run(CancellationToken::new()));
        let summary = run.await.expect("the worker stops once its budget is spent").unwrap();
        assert_eq!((summary.claimed, summary.succeeded), (5, 5), "{summary:?}");
    }
}

#[tokio::test]
async fn a_shutdown_ends_even_while_the_database_is_unreachable() {
    // After the grace period the worker hands its calls back; when the database stays away,
    // those reports are given up after a few tries (the leases run out and the rescuer queues the
    // tasks again) instead of keeping the stopping worker alive (found by a bug hunt).
    let db = TestDb::new().await;
    let started = Arc::new(AtomicUsize::new(0));
    let seen = started.clone();
    let stop = CancellationToken::new();
    let worker = Worker::new(db.pool.clone(), db.url.clone(), config(2)).register(
        TypeName::new("stuck").unwrap(),
        move |_call: StageCall| {
            let seen = seen.clone();
            async move {
                seen.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_secs(3600)).await;
                StageReply::Succeeded { result: json!(null) }
            }
        },
        None,
        fast(TaskTypeUpdate::default()),
    );
    let running = tokio::spawn(worker.run(stop.clone()));
    wait_until(Duration::from_secs(10), "type registered", || async {
        !api::list_task_types(&db.conn().await).await.unwrap().is_empty()
    })
    .await;
    let ids = api::create_tasks(&db.conn().await, "stuck", &vec![NewTask::default(); 2]).await.unwrap();
    wait_until(Duration::from_secs(10), "2 calls running", || async { started.load(Ordering::SeqCst) == 2 }).await;
    // A held claim writes its tasks as running when its hold ends (after the window), not when
    // the calls start: cut the database only once that is committed, or the tasks are still
    // pending (their claim rolled back with the cut), which is fine but not what is tested here.
    // (Failed once this way in a helper's full run.)
    wait_until(Duration::from_secs(10), "the claim committed", || async {
        let mut all = true;
        for id in &ids {
            all &= status_of(&db, id).await == TaskStatus::Running;
        }
        all
    })
    .await;
    let c = db.raw().await;
    db.allow_connections(false).await;
    end_other_connections(&c).await;
    stop.cancel();
    let ended = tokio::time::timeout(Duration::from_secs(30), running).await;
    db.allow_connections(true).await;
    let summary = ended.expect("the worker stops without the database").unwrap().unwrap();
    assert_eq!(summary.released, 0, "nothing could be handed back: {summary:?}");
    for id in &ids {
        assert_eq!(status_of(&db, id).await, TaskStatus::Running, "left to its lease and the rescuer: {id}");
    }
}

/// Tasks held back by the type's concurrency limit are due but cannot be claimed: the producer
/// backs off between claims that find nothing instead of claiming back to back (found by a bug
/// hunt: thousands of statements a second without held claims).
#[tokio::test]
async fn a_producer_does_not_spin_on_tasks_held_back_by_the_concurrency_limit() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    let ty = TypeName::new("limited").unwrap();
    let settings = fast(TaskTypeUpdate { concurrency: Some(Some(1)), ..Default::default() });
    api::register_task_type(&db.conn().await, &ty, &settings).await.unwrap();
    api::create_tasks(&db.conn().await, "limited", &vec![NewTask::default(); 3]).await.unwrap();
    let before = commits(&c).await;
    let config = WorkerConfig { hold_window: Duration::ZERO, exit_when_idle: true, ..config(4) };
    let worker = Worker::new(db.pool.clone(), db.url.clone(), config).register(
        ty,
        |_call: StageCall| async move {
            tokio::time::sleep(Duration::from_millis(600)).await;
            StageReply::Succeeded { result: json!(null) }
        },
        None,
        settings,
    );
    let summary = worker.run(CancellationToken::new()).await.unwrap();
    assert_eq!(summary.succeeded, 3);
    let spent = commits(&c).await - before;
    // 1.8 s of calls: claims every 10 to 200 ms (the poll), next_due beside each, idle checks
    assert!(spent < 200, "{spent} transactions");
}

/// A paused type has nothing due: an ephemeral worker exits although its tasks are pending, and
/// resuming the type wakes a waiting worker at once rather than at its next poll.
#[tokio::test]
async fn a_paused_type_lets_an_idle_worker_exit_and_resuming_it_wakes_workers() {
    let db = TestDb::new().await;
    let ty = TypeName::new("napping").unwrap();
    let paused = TaskTypeUpdate { paused: Some(true), schedule_interval: Some(60.0), ..Default::default() };
    api::register_task_type(&db.conn().await, &ty, &paused).await.unwrap();
    let ids = api::create_tasks(&db.conn().await, "napping", &vec![NewTask::default(); 2]).await.unwrap();
    let noop = |_call: StageCall| async move { StageReply::Succeeded { result: json!(null) } };
    let ephemeral = Worker::new(db.pool.clone(), db.url.clone(), WorkerConfig { exit_when_idle: true, ..config(4) })
        .register(ty.clone(), noop, None, TaskTypeUpdate::default());
    let summary = tokio::time::timeout(Duration::from_secs(10), ephemeral.run(CancellationToken::new()))
        .await
        .expect("an idle worker exits while its only type is paused")
        .unwrap();
    assert_eq!(summary.claimed, 0);

    // a worker polling once a minute; the resume wakes it
    let stop = CancellationToken::new();
    let waiting = Worker::new(db.pool.clone(), db.url.clone(), config(4)).register(
        ty.clone(),
        noop,
        None,
        TaskTypeUpdate::default(),
    );
    let running = tokio::spawn(waiting.run(stop.clone()));
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let resume = TaskTypeUpdate { paused: Some(false), ..Default::default() };
    api::register_task_type(&db.conn().await, &ty, &resume).await.unwrap();
    wait_until(Duration::from_secs(10), "the resumed type's tasks run", || all_final(&db, &ids)).await;
    stop.cancel();
    running.await.unwrap().unwrap();
}

/// A worker's types are registered all or none: a bad setting for one type leaves the others
/// as they were (found by a bug hunt: the types before it in the folder were already changed).
#[tokio::test]
async fn a_bad_setting_for_one_type_registers_none_of_the_workers_types() {
    let db = TestDb::new().await;
    let noop = |_call: StageCall| async move { StageReply::Succeeded { result: json!(null) } };
    let worker = Worker::new(db.pool.clone(), db.url.clone(), config(2))
        .register(
            TypeName::new("aa").unwrap(),
            noop,
            None,
            TaskTypeUpdate { max_retry_num: Some(7), ..Default::default() },
        )
        .register(
            TypeName::new("zz").unwrap(),
            noop,
            None,
            TaskTypeUpdate { schedule_limit: Some(0), ..Default::default() },
        );
    let err = worker.run(CancellationToken::new()).await.expect_err("schedule_limit 0 is refused");
    assert!(err.to_string().contains("schedule_limit"), "{err}");
    let types = api::list_task_types(&db.conn().await).await.unwrap();
    assert!(types.is_empty(), "no type was created: {types:?}");
}

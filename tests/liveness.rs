//! Liveness: a live task keeps its lease however short, with the worker's default settings and
//! realistic leases of seconds. Cancellation, outages and workflow nodes have submodules of their
//! own in `tests/liveness/`.
#[path = "liveness/cancellation.rs"]
mod cancellation;
use crate::common;
#[path = "liveness/outages.rs"]
mod outages;
#[path = "liveness/workflow_nodes.rs"]
mod workflow_nodes;

use std::time::Duration;

use asyncflow::db::api;
use asyncflow::function::{StageCall, StageReply};
use asyncflow::maintenance::Service;
use asyncflow::task::{NewTask, TaskStatus};
use asyncflow::task_type::TaskTypeUpdate;
use asyncflow::worker::{Worker, WorkerConfig};
use asyncflow::{TypeName, WorkerId};
use common::{wait_until, TestDb};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// Runs `worker` until `stop` fires, once its types are registered.
async fn run_registered(
    db: &TestDb,
    worker: Worker,
    stop: &CancellationToken,
) -> tokio::task::JoinHandle<asyncflow::Result<asyncflow::worker::WorkerSummary>> {
    let running = tokio::spawn(worker.run(stop.clone()));
    wait_until(Duration::from_secs(10), "type registered", || async {
        !api::list_task_types(&db.conn().await).await.unwrap().is_empty()
    })
    .await;
    running
}

/// Seconds left of a running task's lease (None when it is not running).
async fn lease_left(c: &tokio_postgres::Client, id: &str) -> Option<f64> {
    c.query_one(
        "select extract(epoch from (t->>'lease_until')::timestamptz - clock_timestamp())::float8 \
         from asyncflow.get_task($1) t where t->>'status' = 'running'",
        &[&id],
    )
    .await
    .ok()
    .map(|r| r.get(0))
}

/// A 2 s lease and a call of 7 s, on the default heartbeat settings: the lease's remaining time,
/// sampled every 100 ms, never comes near zero, a rescuer running all along finds nothing, and
/// the task ends on its first try. (With an extension at half the lease, looked for every
/// second, the remaining time fell to a few milliseconds before each extension, and the rescuer
/// took the task from its live worker.)
#[tokio::test]
async fn a_two_second_lease_stays_well_ahead_of_the_clock_on_the_default_heartbeat() {
    let db = TestDb::new().await;
    let stop = CancellationToken::new();
    let config = WorkerConfig { worker_id: WorkerId::new("live-worker").unwrap(), ..WorkerConfig::default() };
    let worker = Worker::new(db.pool.clone(), db.url.clone(), config).register(
        TypeName::new("slow").unwrap(),
        |_call: StageCall| async move {
            tokio::time::sleep(Duration::from_secs(7)).await;
            StageReply::Succeeded { result: json!("done") }
        },
        None,
        TaskTypeUpdate { max_processing_time: Some(2), schedule_interval: Some(0.2), ..Default::default() },
    );
    let running = run_registered(&db, worker, &stop).await;
    let id = api::create_task(&db.conn().await, "slow", &NewTask::default()).await.unwrap();
    let rescuer = asyncflow::maintenance::Rescuer::new(db.pool.clone(), Duration::from_millis(100), 100);
    let c = db.raw().await;
    let mut least = f64::MAX;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while api::get_task(&db.conn().await, id.as_str()).await.unwrap().unwrap().status != TaskStatus::Succeeded {
        least = least.min(lease_left(&c, id.as_str()).await.unwrap_or(f64::MAX));
        let report = rescuer.run_once(None).await.unwrap();
        assert_eq!(report.changed, 0, "the live task was rescued: {:?}", report.detail);
        assert!(tokio::time::Instant::now() < deadline, "did not finish");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.cancel();
    running.await.unwrap().unwrap();
    assert!(least > 0.6, "the lease came within {least:.3} s of running out");
    let t = api::get_task(&db.conn().await, id.as_str()).await.unwrap().unwrap();
    assert_eq!((t.status, t.retry_count, t.attempt), (TaskStatus::Succeeded, 0, 1));
    eprintln!("least lease left while running: {least:.3} s");
}

/// A shutdown during a call longer than its 2 s lease: while the grace period runs (4 s, past the
/// lease), the lease is still extended, so the task is handed back (its try not counted) rather
/// than rescued by maintenance (its try counted) while its worker was alive.
#[tokio::test]
async fn a_shutdown_hands_back_a_short_lease_task_instead_of_letting_it_be_rescued() {
    let db = TestDb::new().await;
    let stop = CancellationToken::new();
    let config = WorkerConfig {
        worker_id: WorkerId::new("stopping-worker").unwrap(),
        shutdown_grace: Duration::from_secs(4),
        ..WorkerConfig::default()
    };
    let worker = Worker::new(db.pool.clone(), db.url.clone(), config).register(
        TypeName::new("slow").unwrap(),
        |_call: StageCall| async move {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            StageReply::Succeeded { result: json!("never") }
        },
        None,
        TaskTypeUpdate { max_processing_time: Some(2), schedule_interval: Some(0.2), ..Default::default() },
    );
    let running = run_registered(&db, worker, &stop).await;
    let id = api::create_task(&db.conn().await, "slow", &NewTask::default()).await.unwrap();
    wait_until(Duration::from_secs(10), "claimed", || async {
        api::get_task(&db.conn().await, id.as_str()).await.unwrap().unwrap().status == TaskStatus::Running
    })
    .await;
    stop.cancel();
    let rescuer = asyncflow::maintenance::Rescuer::new(db.pool.clone(), Duration::from_millis(100), 100);
    let c = db.raw().await;
    let mut least = f64::MAX;
    while !running.is_finished() {
        least = least.min(lease_left(&c, id.as_str()).await.unwrap_or(f64::MAX));
        let report = rescuer.run_once(None).await.unwrap();
        assert_eq!(report.changed, 0, "the task of a live worker was rescued: {:?}", report.detail);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(least > 0.6, "during the grace period the lease came within {least:.3} s of running out");
    let summary = running.await.unwrap().unwrap();
    assert_eq!(summary.released, 1);
    let t = api::get_task(&db.conn().await, id.as_str()).await.unwrap().unwrap();
    assert_eq!((t.status, t.attempt, t.retry_count), (TaskStatus::Pending, 0, 0), "handed back, no try counted");
}

/// An `--exit-when-idle` worker leaves when the only pending task is in a held queue key (a
/// limit of 0): no claim would take it, so nothing is due (next_due) and nothing is ready
/// (queue_depth counts it as held). Before, next_due answered "ready now" and the worker never
/// left.
#[tokio::test]
async fn an_idle_worker_leaves_while_a_held_queue_key_has_a_pending_task() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    let config = WorkerConfig {
        worker_id: WorkerId::new("idle-worker").unwrap(),
        exit_when_idle: true,
        ..WorkerConfig::default()
    };
    let worker = Worker::new(db.pool.clone(), db.url.clone(), config).register(
        TypeName::new("crawl").unwrap(),
        |_call: StageCall| async move { StageReply::Succeeded { result: json!(null) } },
        None,
        TaskTypeUpdate { fair_queues: Some(true), schedule_interval: Some(0.2), ..Default::default() },
    );
    c.batch_execute(
        "select asyncflow.register_task_type('crawl', '{\"fair_queues\": true}'); \
         select asyncflow.set_queue_limit('crawl', 'held.example', 0); \
         select asyncflow.create_task('crawl', '{}', queue_key => 'held.example'); \
         select asyncflow.create_task('crawl', '{}', queue_key => 'open.example');",
    )
    .await
    .unwrap();
    let summary = tokio::time::timeout(Duration::from_secs(15), worker.run(CancellationToken::new()))
        .await
        .expect("the worker left once only the held key's task was left")
        .unwrap();
    assert_eq!(summary.succeeded, 1, "the open key's task ran");
    let row = c
        .query_one("select ready, delayed, held from asyncflow.queue_depth where task_type = 'crawl'", &[])
        .await
        .unwrap();
    let (ready, delayed, held): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
    assert_eq!((ready, delayed, held), (0, 0, 1));
    let due: Option<chrono::DateTime<chrono::Utc>> =
        c.query_one("select asyncflow.next_due('crawl')", &[]).await.unwrap().get(0);
    assert_eq!(due, None);
}

/// 20,000 queue keys with one task each, delayed by an hour, and one key with a ready task: the
/// first claim takes the ready task. (A claim walks at most about 1,000 keys; it found nothing
/// three times before the fourth found the task, and a worker backing off between empty claims
/// ran it 65.9 s after it started.)
#[tokio::test]
async fn a_ready_task_behind_twenty_thousand_delayed_queue_keys_is_claimed_at_once() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    c.batch_execute(
        "select asyncflow.register_task_type('crawl', '{\"fair_queues\": true}'); \
         select asyncflow.create_tasks('crawl', (select jsonb_agg(jsonb_build_object( \
           'queue_key', 'site' || lpad(n::text, 5, '0') || '.example', \
           'run_at', now() + interval '1 hour')) from generate_series(1, 20000) n)); \
         select asyncflow.create_task('crawl', '{}', queue_key => 'zzz.example');",
    )
    .await
    .unwrap();
    let claimed = c.query("select task_id from asyncflow.claim_tasks('crawl', 'w1', 10)", &[]).await.unwrap();
    assert_eq!(claimed.len(), 1, "the first claim takes the ready task");

    // and a worker started now runs a second one at once
    c.batch_execute("select asyncflow.create_task('crawl', '{}', queue_key => 'zzz.example')").await.unwrap();
    let config = WorkerConfig {
        worker_id: WorkerId::new("fair-worker").unwrap(),
        exit_when_idle: true,
        ..WorkerConfig::default()
    };
    let worker = Worker::new(db.pool.clone(), db.url.clone(), config).register(
        TypeName::new("crawl").unwrap(),
        |_call: StageCall| async move { StageReply::Succeeded { result: json!(null) } },
        None,
        TaskTypeUpdate { fair_queues: Some(true), ..Default::default() },
    );
    let started = std::time::Instant::now();
    let summary = tokio::time::timeout(Duration::from_secs(10), worker.run(CancellationToken::new()))
        .await
        .expect("the worker ran the ready task and left")
        .unwrap();
    eprintln!("worker start to exit, one ready task behind 20,000 delayed keys: {:?}", started.elapsed());
    assert_eq!(summary.succeeded, 1);
    assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
}

/// Tasks failing together come back spread out: each wait is the back-off less up to a tenth
/// at random (here 60 s: between 54 and 60 s), so 50 tasks failed at the same moment do not
/// retry in lock-step.
#[tokio::test]
async fn tasks_failing_together_retry_spread_over_a_tenth_of_their_back_off() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    c.batch_execute(
        "select asyncflow.register_task_type('flaky', '{\"max_retry_interval\": -60}'); \
         select asyncflow.create_tasks('flaky', (select jsonb_agg('{}'::jsonb) from generate_series(1, 50)));",
    )
    .await
    .unwrap();
    let rows = c
        .query(
            "with claimed as (select * from asyncflow.claim_tasks('flaky', 'w', 50)) \
             select r.* from asyncflow.report_tasks('w', (select jsonb_agg(jsonb_build_object('task_id', task_id, \
               'claim_seq', claim_seq, 'outcome', 'fail', 'error', 'down')) from claimed), '2030-01-01T00:00:00Z') r",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 50);
    let waits: Vec<f64> = c
        .query(
            "select extract(epoch from order_time - '2030-01-01T00:00:00Z'::timestamptz)::float8 \
             from asyncflow.tasks where task_type = 'flaky' order by 1",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(waits.iter().all(|w| (53.999..=60.0).contains(w)), "{waits:?}");
    let distinct: std::collections::BTreeSet<i64> = waits.iter().map(|w| (w * 1000.0) as i64).collect();
    assert!(distinct.len() > 25, "spread out, not in lock-step: {waits:?}");
}

/// The queue lag counts from when a task became ready: a priority-30 task created a moment ago
/// has waited a moment, not 30 s (its order_time is 30 s back). (It showed 35 s of lag 5 s after
/// creation.)
#[tokio::test]
async fn the_queue_lag_of_a_high_priority_task_counts_from_its_creation() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    c.batch_execute(
        "select asyncflow.register_task_type('urgent', '{\"fair_queues\": true}'); \
         select asyncflow.create_task('urgent', '{}', priority => 30, queue_key => 'k');",
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let lag: f64 = c
        .query_one("select oldest_ready_age from asyncflow.queue_depth where task_type = 'urgent'", &[])
        .await
        .unwrap()
        .get(0);
    assert!((0.4..5.0).contains(&lag), "lag {lag} s");
    let key_lag: f64 =
        c.query_one("select oldest_ready_age from asyncflow.queue_keys('urgent')", &[]).await.unwrap().get(0);
    assert!((0.4..5.0).contains(&key_lag), "queue key lag {key_lag} s");
}

/// The stage call carries the task's queue key (a plain claim, a held claim, and a fair type's
/// claim), so a function can act per queue (a crawler's site); a task without one has none.
#[tokio::test]
async fn the_stage_call_carries_the_tasks_queue_key() {
    let db = TestDb::new().await;
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let config = WorkerConfig {
        worker_id: WorkerId::new("keyed-worker").unwrap(),
        exit_when_idle: true,
        ..WorkerConfig::default()
    };
    let mut worker = Worker::new(db.pool.clone(), db.url.clone(), config);
    for (name, fair) in [("plain", false), ("fair", true)] {
        let seen = seen.clone();
        worker = worker.register(
            TypeName::new(name).unwrap(),
            move |call: StageCall| {
                let seen = seen.clone();
                async move {
                    seen.lock().unwrap().push((call.task_type.clone(), call.queue_key.clone()));
                    StageReply::Succeeded { result: json!(null) }
                }
            },
            None,
            TaskTypeUpdate { fair_queues: Some(fair), ..Default::default() },
        );
    }
    let c = db.raw().await;
    c.batch_execute(
        "select asyncflow.register_task_type('plain', '{}'); \
         select asyncflow.register_task_type('fair', '{\"fair_queues\": true}'); \
         select asyncflow.create_task('plain', '{}', queue_key => 'site-a'); \
         select asyncflow.create_task('plain', '{}'); \
         select asyncflow.create_task('fair', '{}', queue_key => 'site-b');",
    )
    .await
    .unwrap();
    tokio::time::timeout(Duration::from_secs(15), worker.run(CancellationToken::new())).await.unwrap().unwrap();
    let mut seen = seen.lock().unwrap().clone();
    seen.sort();
    assert_eq!(
        seen,
        vec![
            ("fair".to_string(), Some("site-b".to_string())),
            ("plain".to_string(), None),
            ("plain".to_string(), Some("site-a".to_string())),
        ]
    );
    // and an executable function finds it in its JSON
    let call = asyncflow::function::StageCall {
        task_id: "plain-1-1".into(),
        task_type: "plain".into(),
        stage: "start".into(),
        context: json!({}),
        attempt: 1,
        priority: 0,
        user_id: None,
        deadline: chrono::Utc::now(),
        queue_key: Some("site-a".into()),
        traceparent: None,
        claim_seq: 1,
        event: None,
        timed_out: None,
        children: None,
        cancel: Default::default(),
        progress: Default::default(),
        checkpoints: Default::default(),
    };
    assert_eq!(serde_json::to_value(&call).unwrap()["queue_key"], "site-a");
}

/// A command that prints, whose reader has gone (`asyncflow task list | head -1`), ends quietly
/// (SIGPIPE, as `cat` does) instead of panicking in println! (exit 101). Log lines written to a
/// file carry no colour codes.
#[tokio::test]
async fn a_printing_command_whose_reader_is_gone_ends_without_a_panic() {
    let db = TestDb::new().await;
    db.raw()
        .await
        .batch_execute(
            "select asyncflow.register_task_type('piped', '{}'); \
             select asyncflow.create_tasks('piped', (select jsonb_agg('{}'::jsonb) from generate_series(1, 200)));",
        )
        .await
        .unwrap();
    let (reader, writer) = nix::unistd::pipe().unwrap();
    drop(reader); // the reader is gone before anything is written
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_asyncflow"))
        .args(["task", "list", "--type", "piped"])
        .env("DATABASE_URL", &db.url)
        .env("ASYNCFLOW_LOG", "asyncflow=info")
        .stdout(std::process::Stdio::from(writer))
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    // ended by SIGPIPE, at its first write: not a panic (101), not an error of its own (1)
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(output.status.signal(), Some(nix::sys::signal::Signal::SIGPIPE as i32), "{stderr}");
    assert!(!stderr.contains('\u{1b}'), "no colour codes in a redirected log: {stderr}");
}

/// A call that fails, and a task that fails for good, each leave a line in the worker's log at
/// INFO, naming the task and the error. (Nothing was logged at INFO.)
#[tokio::test]
async fn failed_calls_and_failed_tasks_are_logged_at_info() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    // a task's tries are fixed when it is created: the first has none left after one failure,
    // the second has five
    c.batch_execute(
        "select asyncflow.register_task_type('flaky', '{\"max_retry_num\": 0}'); \
         select asyncflow.create_task('flaky', '{\"fail_times\": 99}'); \
         select asyncflow.register_task_type('flaky', '{\"max_retry_num\": 5, \"max_retry_interval\": -1}'); \
         select asyncflow.create_task('flaky', '{\"fail_times\": 1}');",
    )
    .await
    .unwrap();
    let functions = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("functions");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_asyncflow"))
        .args(["worker", "--functions"])
        .arg(&functions)
        .args(["--types", "flaky", "--no-maintenance", "--exit-when-idle"])
        .env("DATABASE_URL", &db.url)
        .env("ASYNCFLOW_LOG", "asyncflow=info")
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{log}");
    let failed = log.lines().find(|l| l.contains("task failed for good")).unwrap_or_else(|| panic!("{log}"));
    assert!(failed.contains("flaky-1-1") && failed.contains("flaky failure 1 of 99"), "{failed}");
    let retried = log.lines().find(|l| l.contains("will be tried again")).unwrap_or_else(|| panic!("{log}"));
    assert!(retried.contains("flaky-1-2") && retried.contains("flaky failure 1 of 1"), "{retried}");
}

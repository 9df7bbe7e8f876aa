//! Liveness: a live task keeps its lease however short, with the worker's default settings and
//! realistic leases of seconds.
mod common;

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

/// Whether process `pid` has ended (gone, or a zombie waiting to be reaped).
fn process_ended(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

/// A worker of one executable function `sleeper` (writes its pid to `pid`, then sleeps 200 s)
/// with the default lease (300 s); returns the pid file's path, the worker and its stop token.
async fn sleeper_worker(
    db: &TestDb,
    dir: &std::path::Path,
) -> (std::path::PathBuf, tokio::task::JoinHandle<asyncflow::Result<asyncflow::worker::WorkerSummary>>, CancellationToken)
{
    use std::os::unix::fs::PermissionsExt;
    let pid_file = dir.join("pid");
    let script = dir.join("run");
    std::fs::write(&script, format!("#!/bin/sh\necho $$ > {}\nexec sleep 200\n", pid_file.display())).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let function = std::sync::Arc::new(asyncflow::function::exec::ExecFunction::new(
        "sleeper",
        vec![script.display().to_string()],
        dir.to_path_buf(),
        1 << 20,
    ));
    let stop = CancellationToken::new();
    let config = WorkerConfig { worker_id: WorkerId::new("cancel-worker").unwrap(), ..WorkerConfig::default() };
    let worker = Worker::new(db.pool.clone(), db.url.clone(), config).register_arc(
        TypeName::new("sleeper").unwrap(),
        function,
        None,
        TaskTypeUpdate { schedule_interval: Some(0.2), ..Default::default() },
        "test",
    );
    let running = run_registered(&db, worker, &stop).await;
    (pid_file, running, stop)
}

/// The running function's pid, once it has written it.
async fn started_pid(pid_file: &std::path::Path) -> i32 {
    let mut pid = 0;
    wait_until(Duration::from_secs(10), "the function started", || {
        let read = std::fs::read_to_string(pid_file).ok().and_then(|s| s.trim().parse::<i32>().ok());
        if let Some(p) = read {
            pid = p;
        }
        async move { read.is_some() }
    })
    .await;
    pid
}

/// Cancelling a running task stops its executable within a second (the default 300 s lease: a
/// heartbeat would have found out after 100 s), and the type's slot is free at once.
#[tokio::test]
async fn cancelling_a_running_task_kills_its_process_within_a_second() {
    let db = TestDb::new().await;
    let dir = std::env::temp_dir().join(format!("af-cancel-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let (pid_file, running, stop) = sleeper_worker(&db, &dir).await;
    let id = api::create_task(&db.conn().await, "sleeper", &NewTask::default()).await.unwrap();
    let pid = started_pid(&pid_file).await;
    assert!(!process_ended(pid));
    let cancelled_at = std::time::Instant::now();
    assert!(api::cancel_task(&db.conn().await, id.as_str()).await.unwrap());
    while !process_ended(pid) {
        assert!(cancelled_at.elapsed() < Duration::from_secs(5), "the call ran on after its task was cancelled");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let took = cancelled_at.elapsed();
    eprintln!("from cancel_task to the process's end: {took:?}");
    assert!(took < Duration::from_secs(1), "{took:?}");
    stop.cancel();
    running.await.unwrap().unwrap();
    let t = api::get_task(&db.conn().await, id.as_str()).await.unwrap().unwrap();
    assert_eq!(t.status, TaskStatus::Cancelled);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A Rust handler's cancel token fires when its task is cancelled, so work it started outside
/// its future stops too.
#[tokio::test]
async fn a_rust_handler_is_told_when_its_task_is_cancelled() {
    let db = TestDb::new().await;
    let told = std::sync::Arc::new(tokio::sync::Notify::new());
    let tell = told.clone();
    let stop = CancellationToken::new();
    let config = WorkerConfig { worker_id: WorkerId::new("token-worker").unwrap(), ..WorkerConfig::default() };
    let worker = Worker::new(db.pool.clone(), db.url.clone(), config).register(
        TypeName::new("watched").unwrap(),
        move |call: StageCall| {
            let tell = tell.clone();
            async move {
                let cancel = call.cancel.clone();
                tokio::spawn(async move {
                    cancel.cancelled().await;
                    tell.notify_one();
                });
                tokio::time::sleep(Duration::from_secs(200)).await;
                StageReply::Succeeded { result: json!(null) }
            }
        },
        None,
        TaskTypeUpdate { schedule_interval: Some(0.2), ..Default::default() },
    );
    let running = run_registered(&db, worker, &stop).await;
    let id = api::create_task(&db.conn().await, "watched", &NewTask::default()).await.unwrap();
    wait_until(Duration::from_secs(10), "running", || async {
        api::get_task(&db.conn().await, id.as_str()).await.unwrap().unwrap().status == TaskStatus::Running
    })
    .await;
    assert!(api::cancel_task(&db.conn().await, id.as_str()).await.unwrap());
    tokio::time::timeout(Duration::from_secs(1), told.notified()).await.expect("the handler's token fired within 1 s");
    stop.cancel();
    running.await.unwrap().unwrap();
}

/// Cancelling a workflow run stops the call of its running node within a second, as cancelling
/// the task does (every way a run takes a task away goes through cancel_task).
#[tokio::test]
async fn cancelling_a_run_kills_its_running_nodes_process_within_a_second() {
    let db = TestDb::new().await;
    let dir = std::env::temp_dir().join(format!("af-cancel-run-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let (pid_file, running, stop) = sleeper_worker(&db, &dir).await;
    let c = db.raw().await;
    let definition = json!({"nodes": [{"name": "start", "type": "start"},
        {"name": "nap", "type": "task", "function": "sleeper"}, {"name": "end", "type": "end"}],
        "edges": [["start", "nap"], ["nap", "end"]]});
    c.execute("select asyncflow.put_pipeline('naps', $1)", &[&definition]).await.unwrap();
    let run_id: String = c.query_one("select asyncflow.start_run('naps', '{}'::jsonb)", &[]).await.unwrap().get(0);
    let pid = started_pid(&pid_file).await;
    let cancelled_at = std::time::Instant::now();
    let cancelled: bool = c.query_one("select asyncflow.cancel_run($1)", &[&run_id]).await.unwrap().get(0);
    assert!(cancelled);
    while !process_ended(pid) {
        assert!(cancelled_at.elapsed() < Duration::from_secs(5), "the node's call ran on after its run was cancelled");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let took = cancelled_at.elapsed();
    eprintln!("from cancel_run to the process's end: {took:?}");
    assert!(took < Duration::from_secs(1), "{took:?}");
    stop.cancel();
    running.await.unwrap().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
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

/// A workflow node's timeout counts its call, not its wait in the queue: a type with
/// concurrency 1, calls of 2 s, a node timeout of 3 s (1 restart), three runs started at once.
/// The third run's task waits 4 s behind the other two; it must not be timed out for it. (With
/// the deadline set when the node was activated, the third run failed "timed out (2 tries)"
/// although its only call took 2.0 s.)
#[tokio::test]
async fn a_node_timeout_counts_the_call_not_the_wait_in_the_queue() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    let stop = CancellationToken::new();
    let config = WorkerConfig { worker_id: WorkerId::new("wf-worker").unwrap(), ..WorkerConfig::default() };
    let worker = Worker::new(db.pool.clone(), db.url.clone(), config).register(
        TypeName::new("step").unwrap(),
        |_call: StageCall| async move {
            tokio::time::sleep(Duration::from_secs(2)).await;
            StageReply::Succeeded { result: json!("done") }
        },
        None,
        TaskTypeUpdate { concurrency: Some(Some(1)), schedule_interval: Some(0.2), ..Default::default() },
    );
    let running = run_registered(&db, worker, &stop).await;
    let definition = json!({"nodes": [{"name": "start", "type": "start"},
        {"name": "work", "type": "task", "function": "step", "timeout": 3, "timeout_retries": 1},
        {"name": "end", "type": "end"}], "edges": [["start", "work"], ["work", "end"]]});
    c.execute("select asyncflow.put_pipeline('queued', $1)", &[&definition]).await.unwrap();
    let mut runs = Vec::new();
    for _ in 0..3 {
        let id: String = c.query_one("select asyncflow.start_run('queued', '{}'::jsonb)", &[]).await.unwrap().get(0);
        runs.push(id);
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        // the run checker, as maintenance runs it, all along
        c.execute("select * from asyncflow.check_runs(null, 100)", &[]).await.unwrap();
        let open: i64 = c
            .query_one("select count(*) from asyncflow.runs where status in ('scheduled', 'running')", &[])
            .await
            .unwrap()
            .get(0);
        if open == 0 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the runs did not end");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    stop.cancel();
    running.await.unwrap().unwrap();
    for id in &runs {
        let run: serde_json::Value = c.query_one("select asyncflow.get_run($1)", &[id]).await.unwrap().get(0);
        assert_eq!(run["status"], "succeeded", "{run}");
        let work = run["events"].as_array().unwrap().iter().find(|e| e["node"] == "work").unwrap().clone();
        assert_eq!((work["activations"].clone(), work["exec_cnt"].clone()), (json!(1), json!(1)), "no restart: {work}");
    }
}

/// A sub-pipeline node pinned to a version keeps running that version as a child after the child
/// pipeline gets a new version (which retires the pinned one); a run started directly on the
/// retired version is still refused.
#[tokio::test]
async fn a_pinned_sub_pipeline_version_keeps_running_after_a_new_version_retires_it() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    let child_v1 = json!({"nodes": [{"name": "start", "type": "start"}, {"name": "end", "type": "end"}],
        "edges": [["start", "end"]]});
    let child_v2 = json!({"description": "v2", "nodes": [{"name": "start", "type": "start"},
        {"name": "end", "type": "end"}], "edges": [["start", "end"]]});
    let parent = json!({"nodes": [{"name": "start", "type": "start"},
        {"name": "sub", "type": "pipeline", "pipeline": "child", "version": 1}, {"name": "end", "type": "end"}],
        "edges": [["start", "sub"], ["sub", "end"]]});
    c.execute("select asyncflow.put_pipeline('child', $1)", &[&child_v1]).await.unwrap();
    c.execute("select asyncflow.put_pipeline('parent', $1)", &[&parent]).await.unwrap();
    c.execute("select asyncflow.put_pipeline('child', $1)", &[&child_v2]).await.unwrap();
    let status: String = c
        .query_one("select status from asyncflow.pipelines where name = 'child' and version = 1", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(status, "retired");
    let run_id: String = c.query_one("select asyncflow.start_run('parent', '{}'::jsonb)", &[]).await.unwrap().get(0);
    let run: serde_json::Value = c.query_one("select asyncflow.get_run($1)", &[&run_id]).await.unwrap().get(0);
    assert_eq!(run["status"], "succeeded", "{run}");
    let err = c
        .query_one("select asyncflow.start_run('child', '{}'::jsonb, version => 1)", &[])
        .await
        .expect_err("a retired version starts no run of its own");
    assert_eq!(err.as_db_error().map(|e| e.code().code()), Some("AF013"), "{err}");
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

/// A callback node runs once even when the run fails before reaching it: its POST is queued
/// with `reached: false` and the run's outcome. (Before, it was never sent.)
#[tokio::test]
async fn a_callback_node_is_sent_when_the_run_fails_before_reaching_it() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    c.batch_execute("select asyncflow.register_task_type('wf', '{\"max_retry_num\": 0}')").await.unwrap();
    let definition = json!({"nodes": [{"name": "start", "type": "start"},
        {"name": "a", "type": "task", "function": "wf"},
        {"name": "tell", "type": "callback", "url": "http://127.0.0.1:9/hook"}, {"name": "end", "type": "end"}],
        "edges": [["start", "a"], ["a", "tell"], ["tell", "end"]]});
    c.execute("select asyncflow.put_pipeline('told', $1)", &[&definition]).await.unwrap();
    let run_id: String = c.query_one("select asyncflow.start_run('told', '{}'::jsonb)", &[]).await.unwrap().get(0);
    c.batch_execute(
        "with claimed as (select * from asyncflow.claim_tasks('wf', 'w', 1)) \
         select * from asyncflow.report_tasks('w', (select jsonb_agg(jsonb_build_object('task_id', task_id, \
           'claim_seq', claim_seq, 'outcome', 'fail', 'error', 'broken', 'retry', false)) from claimed))",
    )
    .await
    .unwrap();
    let run: serde_json::Value = c.query_one("select asyncflow.get_run($1)", &[&run_id]).await.unwrap().get(0);
    assert_eq!(run["status"], "failed", "{run}");
    let rows = c
        .query(
            "select kind, url, payload, status from asyncflow.callbacks where run_id = $1 and kind = 'node'",
            &[&run_id],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 1, "the callback node's POST is queued once");
    let payload: serde_json::Value = rows[0].get("payload");
    assert_eq!((payload["node"].clone(), payload["reached"].clone()), (json!("tell"), json!(false)), "{payload}");
    assert_eq!(payload["status"], "failed", "{payload}");
    assert_eq!(rows[0].get::<_, String>("status"), "pending");
}

/// An `--exit-when-idle` worker that runs maintenance does not leave while a finished run's
/// callback is still to be delivered. (It left 0.26 s after its start, the callback pending with
/// 0 attempts.)
#[tokio::test]
async fn an_idle_worker_that_runs_maintenance_delivers_a_due_callback_before_leaving() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let hook = common::workflow::receiver(listener, 204).await;
    let definition = json!({"nodes": [{"name": "start", "type": "start"}, {"name": "end", "type": "end"}],
        "edges": [["start", "end"]]});
    c.execute("select asyncflow.put_pipeline('instant', $1)", &[&definition]).await.unwrap();
    let run_id: String = c
        .query_one("select asyncflow.start_run('instant', '{}'::jsonb, notify_url => $1)", &[&url])
        .await
        .unwrap()
        .get(0);
    let config = WorkerConfig {
        worker_id: WorkerId::new("scale-to-zero").unwrap(),
        exit_when_idle: true,
        idle_waits_for_maintenance: true,
        ..WorkerConfig::default()
    };
    let worker = Worker::new(db.pool.clone(), db.url.clone(), config).register(
        TypeName::new("noop").unwrap(),
        |_call: StageCall| async move { StageReply::Succeeded { result: json!(null) } },
        None,
        TaskTypeUpdate::default(),
    );
    let maintenance_stop = CancellationToken::new();
    let tasks = asyncflow::maintenance::MaintenanceConfig::default();
    let mut services = asyncflow::maintenance::services(&db.pool, &tasks);
    services.extend(asyncflow::workflow::services(&db.pool, &asyncflow::workflow::ServiceConfig::default()));
    let maintainer = asyncflow::maintenance::Maintainer::new(db.url.clone(), Duration::from_millis(200), services);
    // maintenance begins a while after the worker (another process's leadership ending, say)
    let maintenance = tokio::spawn({
        let stop = maintenance_stop.clone();
        async move {
            tokio::time::sleep(Duration::from_secs(3)).await;
            maintainer.run(stop).await
        }
    });
    let started = std::time::Instant::now();
    tokio::time::timeout(Duration::from_secs(20), worker.run(CancellationToken::new()))
        .await
        .expect("the worker left once the callback was delivered")
        .unwrap();
    eprintln!("the worker left after {:?}", started.elapsed());
    // as the worker leaves (before maintenance is stopped), the callback has been delivered
    let status: String = c
        .query_one("select status from asyncflow.callbacks where run_id = $1 and kind = 'run'", &[&run_id])
        .await
        .unwrap()
        .get(0);
    maintenance_stop.cancel();
    let _ = maintenance.await;
    assert_eq!(status, "delivered");
    assert_eq!(hook.seen.lock().unwrap().len(), 1);
    let _ = hook.stop.send(());
}

/// `serve` answers 503 (try again), not 500 (final), when the database connection drops in the
/// middle of a request: the request waits on a lock, and its backend is terminated meanwhile.
#[tokio::test]
async fn a_request_whose_database_connection_dropped_gets_503() {
    let db = TestDb::new().await;
    let app = asyncflow::http::router(db.pool.clone(), &common::http_config(&[], 64 * 1024));
    let mut blocker = db.raw().await;
    let tx = blocker.transaction().await.unwrap();
    tx.batch_execute("lock table asyncflow.task_types in access exclusive mode").await.unwrap();
    let request = tokio::spawn({
        let app = app.clone();
        async move { common::request(&app, "GET", "/v1/task-types", None, None, None).await }
    });
    let watcher = db.raw().await;
    let mut pid = None;
    for _ in 0..100 {
        let row = watcher
            .query_opt(
                "select pid from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock' \
                 and pid <> pg_backend_pid()",
                &[],
            )
            .await
            .unwrap();
        if let Some(row) = row {
            pid = Some(row.get::<_, i32>(0));
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let pid = pid.expect("the request waits on the lock");
    watcher.execute("select pg_terminate_backend($1)", &[&pid]).await.unwrap();
    let (status, _, body) = request.await.unwrap();
    tx.rollback().await.unwrap();
    let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(status, axum::http::StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["code"], "unavailable");
}

/// `asyncflow worker` started while PostgreSQL is down waits for it (saying so), and starts when
/// it comes up; SIGTERM while it waits ends it at once. (It exited 1 at once.) The database
/// "comes up" as a TCP proxy to the test server that starts listening 2 s later.
#[tokio::test]
async fn a_worker_started_before_the_database_waits_for_it_and_then_starts() {
    let db = TestDb::new().await;
    let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = probe.local_addr().unwrap().port();
    drop(probe);
    let target = {
        let config: tokio_postgres::Config = db.url.parse().unwrap();
        let host = match config.get_hosts().first() {
            Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
            _ => "127.0.0.1".to_string(),
        };
        format!("{host}:{}", config.get_ports().first().copied().unwrap_or(5432))
    };
    let via_proxy = {
        let mut url = url::Url::parse(&db.url).unwrap();
        url.set_port(Some(port)).unwrap();
        url.to_string()
    };
    let functions = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("functions");
    let log = std::env::temp_dir().join(format!("af-wait-{}.log", uuid::Uuid::new_v4().simple()));
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_asyncflow"))
        .args(["worker", "--functions"])
        .arg(&functions)
        .args(["--types", "echo", "--no-maintenance", "--exit-when-idle"])
        .env("DATABASE_URL", &via_proxy)
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut child = child;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(child.try_wait().unwrap().is_none(), "the worker waits instead of exiting");
    let waiting = std::fs::read_to_string(&log).unwrap();
    assert!(waiting.contains("waiting for the database"), "{waiting}");
    // the database comes up
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await.unwrap();
    let proxy = tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            let target = target.clone();
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "the worker did not start and finish");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(status.success(), "{}", std::fs::read_to_string(&log).unwrap_or_default());
    let registered: i64 = db
        .raw()
        .await
        .query_one("select count(*) from asyncflow.task_types where task_type = 'echo'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(registered, 1, "the worker started once the database came up");
    proxy.abort();

    // SIGTERM while waiting: it leaves at once, with 0
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_asyncflow"))
        .args(["worker", "--functions"])
        .arg(&functions)
        .args(["--types", "echo", "--no-maintenance"])
        .env("DATABASE_URL", format!("postgres://postgres@127.0.0.1:{port}/none"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(child.try_wait().unwrap().is_none());
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGTERM).unwrap();
    let stopped = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(stopped.elapsed() < Duration::from_secs(5), "SIGTERM while waiting did not end the worker");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(status.success());
    let _ = std::fs::remove_file(&log);
}

/// `worker --server` whose server is not up at start-up retries it, and SIGTERM meanwhile ends it
/// at once with 0. (It waited out its 30 s of retries, ignoring the signal.)
#[tokio::test]
async fn a_remote_worker_waiting_for_its_server_stops_at_once_on_sigterm() {
    let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = probe.local_addr().unwrap().port();
    drop(probe);
    let functions = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("functions");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_asyncflow"))
        .args(["worker", "--functions"])
        .arg(&functions)
        .args(["--types", "echo", "--server", &format!("http://127.0.0.1:{port}")])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(child.try_wait().unwrap().is_none(), "still retrying its server");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGTERM).unwrap();
    let stopped = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(stopped.elapsed() < Duration::from_secs(3), "SIGTERM did not end the waiting worker");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    eprintln!("SIGTERM to exit: {:?}", stopped.elapsed());
    assert!(status.success());
}

/// A node restarted after its timeout keeps its place in the queue: its new task takes the old
/// one's order_time, ahead of the tasks enqueued since. (It went to the back of the queue.)
#[tokio::test]
async fn a_node_restarted_after_its_timeout_keeps_its_place_in_the_queue() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    c.batch_execute("select asyncflow.register_task_type('step', '{}')").await.unwrap();
    let definition = json!({"nodes": [{"name": "start", "type": "start"},
        {"name": "work", "type": "task", "function": "step", "timeout": 1, "timeout_retries": 1},
        {"name": "end", "type": "end"}], "edges": [["start", "work"], ["work", "end"]]});
    c.execute("select asyncflow.put_pipeline('restarts', $1)", &[&definition]).await.unwrap();
    let run_id: String = c.query_one("select asyncflow.start_run('restarts', '{}'::jsonb)", &[]).await.unwrap().get(0);
    let first: String =
        c.query_one("select task_id from asyncflow.claim_tasks('step', 'w', 1)", &[]).await.unwrap().get(0);
    // work enqueued meanwhile, then the node times out and is restarted
    tokio::time::sleep(Duration::from_millis(300)).await;
    c.batch_execute("select asyncflow.create_task('step', '{}')").await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let later: chrono::DateTime<chrono::Utc> =
        c.query_one("select now() + interval '10 seconds'", &[]).await.unwrap().get(0);
    let restarted = c.query("select action from asyncflow.check_runs($1, 100)", &[&later]).await.unwrap();
    assert!(restarted.iter().any(|r| r.get::<_, String>(0) == "node restarted"), "the node was restarted");
    let next: String =
        c.query_one("select task_id from asyncflow.claim_tasks('step', 'w', 1)", &[]).await.unwrap().get(0);
    let run: serde_json::Value = c.query_one("select asyncflow.get_run($1)", &[&run_id]).await.unwrap().get(0);
    let work = run["events"].as_array().unwrap().iter().find(|e| e["node"] == "work").unwrap().clone();
    assert_ne!(work["task_id"], json!(first));
    assert_eq!(json!(next), work["task_id"], "the restarted node's task is claimed before the later task");
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
        claim_seq: 1,
        cancel: Default::default(),
        progress: Default::default(),
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

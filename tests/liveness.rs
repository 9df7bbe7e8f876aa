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
    let running = tokio::spawn(worker.run(stop.clone()));
    wait_until(Duration::from_secs(10), "type registered", || async {
        !api::list_task_types(&db.conn().await).await.unwrap().is_empty()
    })
    .await;
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
    let running = tokio::spawn(worker.run(stop.clone()));
    wait_until(Duration::from_secs(10), "type registered", || async {
        !api::list_task_types(&db.conn().await).await.unwrap().is_empty()
    })
    .await;
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

//! The dashboard's data: status counters kept exact by every transition, the history rings
//! sampled with a moved clock, worker heartbeat rows, the maintenance leader, and the routes that
//! serve them.
use crate::common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use asyncflow::db::api;
use asyncflow::function::{StageCall, StageReply};
use asyncflow::http::router;
use asyncflow::maintenance::{leader, HistorySampler, Maintainer, Service, WorkerPruner};
use asyncflow::task::{NewTask, Report, ReportKind};
use asyncflow::task_type::TaskTypeUpdate;
use asyncflow::worker::{Worker, WorkerConfig};
use asyncflow::{Error, TaskId, TypeName, WorkerId};
use chrono::{DateTime, TimeZone, Utc};
use common::{request, wait_until, TestDb};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

const TOKEN: &str = "dashboard-data-token-0123456789";

async fn register(db: &TestDb, name: &str, settings: TaskTypeUpdate) {
    api::register_task_type(&db.conn().await, &TypeName::new(name).unwrap(), &settings).await.unwrap();
}

type Counts = BTreeMap<String, [i64; 5]>;

/// Per type: pending, running, succeeded, failed, cancelled, as the counters say.
async fn counted(db: &TestDb) -> Counts {
    let rows = db
        .conn()
        .await
        .query("select task_type, pending, running, succeeded, failed, cancelled from asyncflow.status_counts()", &[])
        .await
        .unwrap();
    rows.iter().map(|r| (r.get(0), [r.get(1), r.get(2), r.get(3), r.get(4), r.get(5)])).collect()
}

/// The same, counted from the rows (every registered type, zeros included).
async fn real(db: &TestDb) -> Counts {
    let rows = db
        .conn()
        .await
        .query(
            "select y.task_type, count(t.*) filter (where t.status = 'pending'), count(t.*) filter (where t.status = 'running'), \
             count(t.*) filter (where t.status = 'succeeded'), count(t.*) filter (where t.status = 'failed'), \
             count(t.*) filter (where t.status = 'cancelled') \
             from asyncflow.task_types y left join asyncflow.tasks t on t.task_type = y.task_type group by y.task_type",
            &[],
        )
        .await
        .unwrap();
    rows.iter().map(|r| (r.get(0), [r.get(1), r.get(2), r.get(3), r.get(4), r.get(5)])).collect()
}

/// The counters equal a real count, before and after the deltas are folded, and the queue depth
/// view's ready and delayed equal a real count too.
async fn assert_exact(db: &TestDb, after: &str) {
    assert_eq!(counted(db).await, real(db).await, "counters after {after}");
    let c = db.conn().await;
    api::fold_status_deltas(&c).await.unwrap();
    assert_eq!(counted(db).await, real(db).await, "counters after {after}, folded");
    let depth: Vec<(String, i64, i64)> = c
        .query("select task_type, ready, delayed from asyncflow.queue_depth order by 1", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    let rows: Vec<(String, i64, i64)> = c
        .query(
            "select y.task_type, count(t.*) filter (where t.order_time <= now()), count(t.*) filter (where t.order_time > now()) \
             from asyncflow.task_types y left join asyncflow.tasks t on t.task_type = y.task_type and t.status = 'pending' \
             group by y.task_type order by 1",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(depth, rows, "queue depth after {after}");
}

fn report(task_id: &TaskId, claim_seq: i64, kind: ReportKind) -> Report {
    Report { task_id: task_id.clone(), claim_seq, kind, progress: None }
}

fn succeed() -> ReportKind {
    ReportKind::Succeed { result: json!({"ok": true}) }
}

#[tokio::test]
async fn status_counters_equal_a_real_count_after_every_kind_of_transition() {
    let db = TestDb::new().await;
    let one_try = TaskTypeUpdate {
        max_retry_num: Some(1),
        shard_max_rows: Some(50),
        retention: Some(3600),
        ..Default::default()
    };
    register(&db, "mixed", one_try.clone()).await;
    register(&db, "fair", TaskTypeUpdate { fair_queues: Some(true), ..one_try.clone() }).await;
    let c = db.conn().await;
    let w = WorkerId::new("counter-test").unwrap();

    // creates: the direct path, the general path (a key), a bulk create with and without keys
    api::create_task(&c, "mixed", &NewTask::default()).await.unwrap();
    api::create_task(&c, "mixed", &NewTask { idempotency_key: Some("k1".into()), ..Default::default() }).await.unwrap();
    api::create_task(&c, "mixed", &NewTask { idempotency_key: Some("k1".into()), ..Default::default() }).await.unwrap();
    api::create_tasks(&c, "mixed", &vec![NewTask::default(); 60]).await.unwrap();
    let keyed = vec![
        NewTask { idempotency_key: Some("k2".into()), ..Default::default() },
        NewTask { idempotency_key: Some("k1".into()), ..Default::default() },
    ];
    api::create_tasks(&c, "mixed", &keyed).await.unwrap();
    let later = Utc::now() + chrono::Duration::hours(1);
    api::create_task(&c, "mixed", &NewTask { run_at: Some(later), ..Default::default() }).await.unwrap();
    let fair: Vec<NewTask> =
        (0..30).map(|i| NewTask { queue_key: Some(format!("q{}", i % 3)), ..Default::default() }).collect();
    api::create_tasks(&c, "fair", &fair).await.unwrap();
    // a create rolled back leaves the counts as they were
    {
        let mut raw = db.raw().await;
        let tx = raw.transaction().await.unwrap();
        tx.execute("select asyncflow.create_task('mixed')", &[]).await.unwrap();
        tx.rollback().await.unwrap();
    }
    assert_exact(&db, "creates").await;

    // concurrent claims from four connections
    let mut claims = Vec::new();
    for i in 0..4 {
        let pool = db.pool.clone();
        claims.push(tokio::spawn(async move {
            let c = pool.get().await.unwrap();
            let w = WorkerId::new(&format!("claimer-{i}")).unwrap();
            (w.clone(), api::claim_tasks(&c, "mixed", &w, 5, None).await.unwrap())
        }));
    }
    let mut claimed = Vec::new();
    for claim in claims {
        claimed.push(claim.await.unwrap());
    }
    assert_eq!(claimed.iter().map(|(_, t)| t.len()).sum::<usize>(), 20);
    assert_exact(&db, "concurrent claims").await;

    // reports of every outcome
    let (w0, t0) = &claimed[0];
    let reports = vec![
        report(&t0[0].task_id, t0[0].claim_seq, succeed()),
        report(&t0[1].task_id, t0[1].claim_seq, ReportKind::Advance { stage: "two".into(), context: None }),
        report(&t0[2].task_id, t0[2].claim_seq, ReportKind::Later { delay: 600.0, context: None }),
        report(&t0[3].task_id, t0[3].claim_seq, ReportKind::Fail { error: "again".into(), retry: true }),
        report(&t0[4].task_id, t0[4].claim_seq, ReportKind::Fail { error: "never".into(), retry: false }),
    ];
    api::report_tasks(&c, w0, &reports, None).await.unwrap();
    let (w1, t1) = &claimed[1];
    let only_successes: Vec<Report> = t1.iter().take(3).map(|t| report(&t.task_id, t.claim_seq, succeed())).collect();
    api::report_tasks(&c, w1, &only_successes, None).await.unwrap();
    let (w2, t2) = &claimed[2];
    let others = vec![
        report(&t2[0].task_id, t2[0].claim_seq, ReportKind::Heartbeat),
        report(&t2[1].task_id, t2[1].claim_seq, ReportKind::Release),
        // a stale token changes nothing
        report(&t2[2].task_id, t2[2].claim_seq - 1, succeed()),
    ];
    api::report_tasks(&c, w2, &others, None).await.unwrap();
    assert_exact(&db, "reports").await;

    // cancels of a pending and a running task; retries by hand of a failed and a cancelled one
    let pending = api::create_task(&c, "mixed", &NewTask::default()).await.unwrap();
    assert!(api::cancel_task(&c, pending.as_str()).await.unwrap());
    assert!(api::cancel_task(&c, t2[3].task_id.as_str()).await.unwrap());
    assert!(!api::cancel_task(&c, t2[3].task_id.as_str()).await.unwrap(), "already cancelled");
    assert!(api::retry_task(&c, t0[4].task_id.as_str()).await.unwrap());
    assert!(api::retry_task(&c, pending.as_str()).await.unwrap());
    assert!(!api::retry_task(&c, pending.as_str()).await.unwrap(), "already pending");
    assert_exact(&db, "cancels and retries").await;

    // held claims: a success, an advance and a call still running at the finish
    {
        let mut pooled = db.conn().await;
        let tx = pooled.transaction().await.unwrap();
        let ty = TypeName::new("mixed").unwrap();
        let held = api::hold_tasks(&tx, &ty, &w, 3).await.unwrap();
        assert_eq!(held.len(), 3);
        let succeeded = succeed();
        let advance = ReportKind::Advance { stage: "next".into(), context: None };
        let finish: Vec<(&TaskId, i64, Option<&ReportKind>, Option<f64>, Option<&serde_json::Value>)> = vec![
            (&held[0].0.task_id, held[0].0.claim_seq, Some(&succeeded), Some(0.01), None),
            (&held[1].0.task_id, held[1].0.claim_seq, Some(&advance), Some(0.01), None),
            (&held[2].0.task_id, held[2].0.claim_seq, None, None, None),
        ];
        api::finish_held(&tx, &ty, &w, &finish).await.unwrap();
        tx.commit().await.unwrap();
    }
    assert_exact(&db, "a held claim").await;

    // the fair claim (and its hold)
    let fair_claimed = api::claim_tasks(&c, "fair", &w, 7, None).await.unwrap();
    assert_eq!(fair_claimed.len(), 7);
    let fair_reports: Vec<Report> = fair_claimed.iter().map(|t| report(&t.task_id, t.claim_seq, succeed())).collect();
    api::report_tasks(&c, &w, &fair_reports, None).await.unwrap();
    {
        let mut pooled = db.conn().await;
        let tx = pooled.transaction().await.unwrap();
        let ty = TypeName::new("fair").unwrap();
        let held = api::hold_tasks(&tx, &ty, &w, 4).await.unwrap();
        let succeeded = succeed();
        let finish: Vec<(&TaskId, i64, Option<&ReportKind>, Option<f64>, Option<&serde_json::Value>)> =
            held.iter().map(|(t, _)| (&t.task_id, t.claim_seq, Some(&succeeded), Some(0.01), None)).collect();
        api::finish_held(&tx, &ty, &w, &finish).await.unwrap();
        tx.commit().await.unwrap();
    }
    assert_exact(&db, "fair claims").await;

    // rescue: leases that ran out go back to pending, or fail when out of tries
    let lease_end = Utc::now() + chrono::Duration::days(1);
    let rescued = api::rescue_expired(&c, Some(lease_end), 1000, &[]).await.unwrap();
    assert!(rescued.len() >= 10, "the claimed tasks not reported were rescued: {}", rescued.len());
    assert_exact(&db, "a rescue").await;

    // retention: finish every task of the first shard, close it, drop it
    let now = Utc::now();
    loop {
        let batch = api::claim_tasks(&c, "mixed", &w, 1000, Some(now + chrono::Duration::days(2))).await.unwrap();
        if batch.is_empty() {
            break;
        }
        let done: Vec<Report> = batch.iter().map(|t| report(&t.task_id, t.claim_seq, succeed())).collect();
        api::report_tasks(&c, &w, &done, None).await.unwrap();
    }
    api::roll_shard(&c, "mixed", None).await.unwrap();
    api::advance_begin_pos(&c, "mixed", None).await.unwrap();
    let dropped = api::drop_expired_shards(&c, "mixed", Some(now + chrono::Duration::hours(2))).await.unwrap();
    assert!(!dropped.is_empty(), "a shard was dropped");
    assert_exact(&db, "a retention drop").await;
    let left = counted(&db).await["mixed"];
    assert!(left[2] < 60, "the dropped tasks left the succeeded count: {left:?}");
}

fn at(h: u32, m: u32, s: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2031, 3, 4, h, m, s).unwrap()
}

/// Claims `n` ready tasks of `ty` and reports them all with `kind`.
async fn run_tasks(db: &TestDb, ty: &str, n: usize, kind: ReportKind) {
    let c = db.conn().await;
    let w = WorkerId::new("history-test").unwrap();
    api::create_tasks(&c, ty, &vec![NewTask::default(); n]).await.unwrap();
    let claimed = api::claim_tasks(&c, ty, &w, n as i32, None).await.unwrap();
    assert_eq!(claimed.len(), n);
    let reports: Vec<Report> = claimed.iter().map(|t| report(&t.task_id, t.claim_seq, kind.clone())).collect();
    api::report_tasks(&c, &w, &reports, None).await.unwrap();
}

#[tokio::test]
async fn the_sampler_keeps_minute_and_hour_points_and_overwrites_those_a_turn_old() {
    let db = TestDb::new().await;
    register(&db, "hist", TaskTypeUpdate::default()).await;
    register(&db, "other", TaskTypeUpdate::default()).await;
    let sampler = HistorySampler::new(db.pool.clone(), Duration::from_secs(5));
    let c = db.conn().await;

    // a type's first sample counts from itself
    run_tasks(&db, "hist", 1, succeed()).await;
    sampler.run_once(Some(at(10, 0, 5))).await.unwrap();
    run_tasks(&db, "hist", 2, succeed()).await;
    run_tasks(&db, "hist", 1, ReportKind::Fail { error: "no".into(), retry: false }).await;
    run_tasks(&db, "other", 1, succeed()).await;
    sampler.run_once(Some(at(10, 0, 40))).await.unwrap();
    run_tasks(&db, "hist", 3, succeed()).await;
    sampler.run_once(Some(at(10, 1, 10))).await.unwrap();
    // a sample from before the newest point in its slot changes nothing there
    sampler.run_once(Some(at(10, 0, 50))).await.unwrap();

    let points = api::stats_history(&c, Some("hist"), "hour", Some(at(10, 1, 30))).await.unwrap();
    let counts: Vec<(DateTime<Utc>, i64, i64)> = points.iter().map(|p| (p.at, p.succeeded, p.failed)).collect();
    assert_eq!(counts, vec![(at(10, 0, 0), 2, 1), (at(10, 1, 0), 3, 0)]);
    let month = api::stats_history(&c, Some("hist"), "month", Some(at(10, 1, 30))).await.unwrap();
    let counts: Vec<(DateTime<Utc>, i64, i64)> = month.iter().map(|p| (p.at, p.succeeded, p.failed)).collect();
    assert_eq!(counts, vec![(at(10, 0, 0), 5, 1)]);
    let all = api::stats_history(&c, None, "hour", Some(at(10, 1, 30))).await.unwrap();
    let counts: Vec<(DateTime<Utc>, i64)> = all.iter().map(|p| (p.at, p.succeeded)).collect();
    assert_eq!(counts, vec![(at(10, 0, 0), 3), (at(10, 1, 0), 3)], "all types summed");
    assert!(
        api::stats_history(&c, Some("hist"), "hour", Some(at(11, 30, 0))).await.unwrap().is_empty(),
        "an hour later"
    );

    // a day later the 10:00 minute slot comes round again: its old point is overwritten
    let next_day = at(10, 0, 20) + chrono::Duration::days(1);
    run_tasks(&db, "hist", 4, succeed()).await;
    sampler.run_once(Some(next_day)).await.unwrap();
    let day = api::stats_history(&c, Some("hist"), "day", Some(next_day)).await.unwrap();
    let counts: Vec<(DateTime<Utc>, i64)> = day.iter().map(|p| (p.at, p.succeeded)).collect();
    assert_eq!(counts, vec![(at(10, 1, 0), 3), (at(10, 0, 0) + chrono::Duration::days(1), 4)]);
    let minute_rows: i64 = c
        .query_one("select count(*) from asyncflow.stats_points where task_type = 'hist' and resolution = 60", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(minute_rows, 2, "the ring reused the slot");

    // 31 days on, the hour slot comes round: the hour ring holds 744 slots at most
    let next_month = at(10, 0, 20) + chrono::Duration::hours(744);
    sampler.run_once(Some(next_month)).await.unwrap();
    let hour_rows: i64 = c
        .query_one("select count(*) from asyncflow.stats_points where task_type = 'hist' and resolution = 3600", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(hour_rows, 2, "10:00 of day 1 overwritten by day 32; 10:00 of day 2 kept");
    let month = api::stats_history(&c, Some("hist"), "month", Some(next_month)).await.unwrap();
    assert_eq!(month.last().map(|p| (p.at, p.succeeded)), Some((next_month - chrono::Duration::seconds(20), 0)));

    // bad input is refused
    let e = api::stats_history(&c, Some("hist"), "week", None).await.unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    let e = api::stats_history(&c, Some("nope"), "hour", None).await.unwrap_err();
    assert!(matches!(e, Error::UnknownTaskType(_)), "{e}");
}

#[tokio::test]
async fn heartbeat_rows_show_live_workers_and_stale_ones_are_pruned() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    let t0 = at(12, 0, 0);
    let row = api::WorkerRow {
        id: "w-1".into(),
        host: "box".into(),
        pid: 42,
        types: vec!["a".into(), "b".into()],
        in_flight: 3,
        started_at: t0,
        last_seen: t0,
    };
    api::heartbeat_worker(&c, &row, Some(t0)).await.unwrap();
    api::heartbeat_worker(
        &c,
        &api::WorkerRow { id: "w-2".into(), ..row.clone() },
        Some(t0 - chrono::Duration::seconds(45)),
    )
    .await
    .unwrap();
    let live = api::list_workers(&c, 30.0, Some(t0)).await.unwrap();
    assert_eq!(live, vec![row.clone()], "w-2 was last seen too long ago to be listed");
    let pruner = WorkerPruner::new(db.pool.clone(), Duration::from_secs(6), Duration::from_secs(60));
    assert_eq!(pruner.run_once(Some(t0)).await.unwrap().changed, 0, "w-2 is not stale yet");
    assert_eq!(pruner.run_once(Some(t0 + chrono::Duration::seconds(20))).await.unwrap().changed, 1);
    assert!(api::remove_worker(&c, "w-1").await.unwrap());
    assert!(api::list_workers(&c, 30.0, Some(t0)).await.unwrap().is_empty());

    // bad rows are refused and write nothing
    let bad = api::WorkerRow { id: String::new(), ..row.clone() };
    assert!(matches!(api::heartbeat_worker(&c, &bad, None).await, Err(Error::InvalidArgument(_))));
    let bad = api::WorkerRow { in_flight: -1, ..row };
    assert!(matches!(api::heartbeat_worker(&c, &bad, None).await, Err(Error::InvalidArgument(_))));
    let n: i64 = c.query_one("select count(*) from asyncflow.workers", &[]).await.unwrap().get(0);
    assert_eq!(n, 0);
}

#[tokio::test]
async fn a_worker_writes_its_row_with_its_calls_in_flight_and_removes_it_on_a_clean_exit() {
    let db = TestDb::new().await;
    let gate = Arc::new(tokio::sync::Notify::new());
    let opened = gate.clone();
    let config = WorkerConfig {
        worker_id: WorkerId::new("presence-worker").unwrap(),
        concurrency: 4,
        shutdown_grace: Duration::from_secs(10),
        ..WorkerConfig::default()
    };
    let worker = Worker::new(db.pool.clone(), db.url.clone(), config).register(
        TypeName::new("sleepy").unwrap(),
        move |_call: StageCall| {
            let gate = opened.clone();
            async move {
                gate.notified().await;
                StageReply::Succeeded { result: json!(null) }
            }
        },
        None,
        TaskTypeUpdate { schedule_interval: Some(0.2), ..Default::default() },
    );
    let stop = CancellationToken::new();
    let running = tokio::spawn(worker.run(stop.clone()));
    wait_until(Duration::from_secs(20), "the worker's row", || async {
        !api::list_workers(&db.conn().await, 30.0, None).await.unwrap().is_empty()
    })
    .await;
    let c = db.conn().await;
    api::create_tasks(&c, "sleepy", &vec![NewTask::default(); 2]).await.unwrap();
    // the row is written every few seconds: the in-flight count shows at the next beat
    wait_until(Duration::from_secs(20), "two calls in flight in the row", || async {
        let rows = api::list_workers(&db.conn().await, 30.0, None).await.unwrap();
        rows.first().is_some_and(|w| w.in_flight == 2)
    })
    .await;
    let rows = api::list_workers(&c, 30.0, None).await.unwrap();
    let w = &rows[0];
    assert_eq!((w.id.as_str(), w.types.clone()), ("presence-worker", vec!["sleepy".to_string()]));
    assert_eq!(w.pid, i32::try_from(std::process::id()).unwrap());
    assert!(w.started_at <= w.last_seen);
    stop.cancel();
    gate.notify_waiters();
    gate.notify_one();
    running.await.unwrap().unwrap();
    assert!(api::list_workers(&c, 30.0, None).await.unwrap().is_empty(), "removed on a clean exit");
}

#[tokio::test]
async fn the_maintenance_leader_is_recorded_while_it_leads() {
    let db = TestDb::new().await;
    let stop = CancellationToken::new();
    let maintainer = Maintainer::new(db.url.clone(), Duration::from_millis(100), vec![])
        .with_identity(leader::Identity { id: "leader-a".into(), host: "box-a".into() });
    let running = tokio::spawn(maintainer.run(stop.clone()));
    wait_until(Duration::from_secs(20), "the leader's row", || async {
        api::current_leader(&db.conn().await, 30.0, None).await.unwrap().is_some()
    })
    .await;
    let shown = api::current_leader(&db.conn().await, 30.0, None).await.unwrap().unwrap();
    assert_eq!((shown.id.as_str(), shown.host.as_str()), ("leader-a", "box-a"));
    assert!(shown.since <= shown.last_seen);
    // not shown once it has not said so for longer than the bound
    let much_later = Utc::now() + chrono::Duration::minutes(5);
    assert!(api::current_leader(&db.conn().await, 30.0, Some(much_later)).await.unwrap().is_none());
    stop.cancel();
    running.await.unwrap();
    wait_until(Duration::from_secs(10), "the row removed when it stopped", || async {
        api::current_leader(&db.conn().await, 30.0, None).await.unwrap().is_none()
    })
    .await;
}

async fn get_json(app: &axum::Router, uri: &str) -> (u16, Value) {
    let (status, _, body) = request(app, "GET", uri, None, None, Some(TOKEN)).await;
    (status.as_u16(), serde_json::from_slice(&body).unwrap_or(Value::Null))
}

#[tokio::test]
async fn the_dashboard_routes_answer_the_contract() {
    let db = TestDb::new().await;
    register(&db, "shown", TaskTypeUpdate::default()).await;
    register(&db, "keyed", TaskTypeUpdate { fair_queues: Some(true), ..Default::default() }).await;
    let c = db.conn().await;
    run_tasks(&db, "shown", 2, succeed()).await;
    api::create_tasks(&c, "shown", &vec![NewTask::default(); 3]).await.unwrap();
    api::create_task(&c, "keyed", &NewTask { queue_key: Some("stop".into()), ..Default::default() }).await.unwrap();
    api::set_queue_limit(&c, "keyed", &asyncflow::task::QueueLimit { queue_key: "stop".into(), concurrency: Some(0) })
        .await
        .unwrap();
    api::sample_stats(&c, None).await.unwrap();
    let app = router(db.pool.clone(), &common::http_config(&[TOKEN], 1 << 20));

    let (status, overview) = get_json(&app, "/v1/dashboard").await;
    assert_eq!(status, 200, "{overview}");
    let shown = &overview["types"][1];
    assert_eq!(shown["type"], "shown");
    assert_eq!((shown["ready"].as_i64(), shown["succeeded"].as_i64()), (Some(3), Some(2)));
    assert_eq!((shown["paused"].as_bool(), shown["held"].as_bool()), (Some(false), Some(false)));
    let keyed = &overview["types"][0];
    assert_eq!(
        (keyed["held"].as_bool(), keyed["held_tasks"].as_i64(), keyed["ready"].as_i64()),
        (Some(true), Some(1), Some(0))
    );
    assert_eq!(overview["totals"]["ready"], 3);
    assert_eq!(overview["totals"]["succeeded"], 2);
    assert_eq!(overview["totals"]["held_tasks"], 1);
    assert!(overview["leader"].is_null());

    let (status, history) = get_json(&app, "/v1/stats/history?type=shown&range=hour").await;
    assert_eq!(status, 200, "{history}");
    assert_eq!((history["type"].as_str(), history["range"].as_str()), (Some("shown"), Some("hour")));
    assert_eq!(history["resolution_seconds"], 60);
    let point = &history["points"][0];
    for field in ["at", "succeeded", "failed", "retried", "ready", "running", "lag_seconds"] {
        assert!(!point[field].is_null(), "{field} in {point}");
    }
    assert_eq!(point["ready"], 3);
    let (status, all) = get_json(&app, "/v1/stats/history?range=month").await;
    assert_eq!((status, all["type"].clone(), all["resolution_seconds"].clone()), (200, Value::Null, json!(3600)));
    for bad in [
        "/v1/stats/history?type=shown&range=week",
        "/v1/stats/history?type=nope&range=day",
        "/v1/stats/history?type=shown",
        "/v1/stats/history?range=hour&extra=1",
        "/v1/stats/history?type=Bad%20Name&range=hour",
    ] {
        let (status, body) = get_json(&app, bad).await;
        assert_eq!(status, 400, "{bad}: {body}");
        assert!(body["message"].is_string(), "{bad}: {body}");
    }
    let (status, _, _) = request(&app, "GET", "/v1/stats/history?range=hour", None, None, None).await;
    assert_eq!(status.as_u16(), 401, "behind the token");

    let t = Utc::now();
    let row = api::WorkerRow {
        id: "w".into(),
        host: "h".into(),
        pid: 7,
        types: vec!["shown".into()],
        in_flight: 1,
        started_at: t,
        last_seen: t,
    };
    api::heartbeat_worker(&c, &row, None).await.unwrap();
    c.execute("select asyncflow.note_leader('m-1', 'h')", &[]).await.unwrap();
    let (status, workers) = get_json(&app, "/v1/workers").await;
    assert_eq!(status, 200, "{workers}");
    let w = &workers["workers"][0];
    assert_eq!(
        (w["id"].as_str(), w["host"].as_str(), w["pid"].as_i64(), w["in_flight"].as_i64()),
        (Some("w"), Some("h"), Some(7), Some(1))
    );
    assert_eq!(w["types"], json!(["shown"]));
    assert!(w["started_at"].is_string() && w["last_seen"].is_string());
    assert_eq!(workers["leader"]["id"], "m-1");
    for field in ["host", "since", "last_seen"] {
        assert!(workers["leader"][field].is_string(), "{field}");
    }
    let (_, overview) = get_json(&app, "/v1/dashboard").await;
    assert_eq!(overview["leader"]["id"], "m-1");
}

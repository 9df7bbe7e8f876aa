//! Maintenance services with an injected clock: rolling shards, begin_pos, retention, the
//! rescuer, and leader election.
use crate::common;

use std::time::Duration;

use asyncflow::cli::maintain;
use asyncflow::db::api;
use asyncflow::maintenance::{leader, Maintainer, MaintenanceConfig, Rescuer, Service};
use asyncflow::task::{NewTask, Report, ReportKind, TaskStatus};
use asyncflow::task_type::TaskTypeUpdate;
use asyncflow::{TaskId, TypeName, WorkerId};
use chrono::Utc;
use common::{wait_until, TestDb};
use serde_json::json;
use tokio_util::sync::CancellationToken;

async fn register(db: &TestDb, name: &str, settings: TaskTypeUpdate) {
    api::register_task_type(&db.conn().await, &TypeName::new(name).unwrap(), &settings).await.unwrap();
}

fn small_shards(retention: Option<i64>) -> TaskTypeUpdate {
    TaskTypeUpdate { shard_max_rows: Some(100), retention, ..Default::default() }
}

/// Creates `rounds` x 100 tasks, rolling after each round: one shard per round.
async fn fill(db: &TestDb, ty: &str, rounds: usize) -> Vec<TaskId> {
    let c = db.conn().await;
    let mut ids = Vec::new();
    for _ in 0..rounds {
        ids.extend(api::create_tasks(&c, ty, &vec![NewTask::default(); 100]).await.unwrap());
        api::roll_shard(&c, ty, None).await.unwrap();
    }
    ids
}

async fn leaf_exists(db: &TestDb, ty: &str, shard: i32) -> bool {
    let name = format!("asyncflow.tasks_{ty}_{shard}");
    db.conn().await.query_one("select to_regclass($1) is not null", &[&name]).await.unwrap().get(0)
}

/// Claims every ready task of `ty` until none is left; whether `id` was among them.
async fn claimed_before_empty(db: &TestDb, ty: &str, id: &TaskId) -> bool {
    let c = db.conn().await;
    let w = WorkerId::new("drainer").unwrap();
    let mut found = false;
    loop {
        let batch = api::claim_tasks(&c, ty, &w, 1000, None).await.unwrap();
        if batch.is_empty() {
            return found;
        }
        found |= batch.iter().any(|t| &t.task_id == id);
    }
}

/// Claims and succeeds every ready task of `ty` whose id is in `which`.
async fn finish(db: &TestDb, ty: &str, which: &[TaskId]) {
    let c = db.conn().await;
    let w = WorkerId::new("finisher").unwrap();
    let wanted: std::collections::HashSet<&str> = which.iter().map(|i| i.as_str()).collect();
    loop {
        let claimed = api::claim_tasks(&c, ty, &w, 1000, None).await.unwrap();
        if claimed.is_empty() {
            return;
        }
        let reports: Vec<Report> = claimed
            .iter()
            .map(|t| Report {
                task_id: t.task_id.clone(),
                claim_seq: t.claim_seq,
                kind: if wanted.contains(t.task_id.as_str()) {
                    ReportKind::Succeed { result: json!(1) }
                } else {
                    ReportKind::Release
                },
                progress: None,
            })
            .collect();
        api::report_tasks(&c, &w, &reports, None).await.unwrap();
        if claimed.iter().all(|t| !wanted.contains(t.task_id.as_str())) {
            return;
        }
    }
}

#[tokio::test]
async fn tasks_spread_over_shards_stay_reachable_and_are_claimed_in_order_time_order_across_them() {
    let db = TestDb::new().await;
    register(&db, "spread", small_shards(None)).await;
    let c = db.conn().await;
    assert_eq!(api::roll_shard(&c, "spread", None).await.unwrap(), None, "an empty end shard does not roll");
    let old = fill(&db, "spread", 9).await;
    // The newest shard gets a task an hour ahead: it must come out first.
    let urgent = api::create_task(&c, "spread", &NewTask { priority: Some(3600), ..Default::default() }).await.unwrap();
    let more = api::create_tasks(&c, "spread", &vec![NewTask::default(); 99]).await.unwrap();
    let pos = api::positions_of(&c, "spread").await.unwrap().unwrap();
    assert_eq!((pos.begin_pos, pos.end_pos, pos.shards), (1, 10, 10));
    for shard in 1..=10 {
        assert!(leaf_exists(&db, "spread", shard).await, "leaf {shard}");
    }
    assert_eq!(urgent.shard(), 10);
    assert_eq!(old[0].shard(), 1);
    for id in old.iter().chain(&more).chain(std::iter::once(&urgent)) {
        assert!(api::get_task(&c, id.as_str()).await.unwrap().is_some(), "{id} reachable by id");
    }
    let w = WorkerId::new("w").unwrap();
    let first = api::claim_tasks(&c, "spread", &w, 1, None).await.unwrap();
    assert_eq!(first[0].task_id, urgent, "the high-priority task in the newest shard comes first");
    // Claimed in batches of 50, the order_time never goes backwards across batches or shards.
    let mut last = None;
    let mut claimed = 0;
    loop {
        let batch = api::claim_tasks(&c, "spread", &w, 50, None).await.unwrap();
        if batch.is_empty() {
            break;
        }
        let ids: Vec<TaskId> = batch.iter().map(|t| t.task_id.clone()).collect();
        let tasks = api::get_tasks(&c, &ids).await.unwrap();
        let min = tasks.iter().map(|t| t.order_time).min().unwrap();
        let max = tasks.iter().map(|t| t.order_time).max().unwrap();
        if let Some(prev) = last {
            assert!(min >= prev, "order_time went backwards across batches");
        }
        last = Some(max);
        claimed += batch.len();
    }
    assert_eq!(claimed, 999);
}

#[tokio::test]
async fn begin_pos_moves_past_finished_shards_and_back_for_a_task_retried_by_hand() {
    let db = TestDb::new().await;
    register(&db, "moving", small_shards(None)).await;
    let ids = fill(&db, "moving", 3).await;
    let c = db.conn().await;
    let (shard1, shard2): (Vec<TaskId>, Vec<TaskId>) =
        ids.iter().filter(|i| i.shard() <= 2).cloned().partition(|i| i.shard() == 1);
    // One task of shard 1 fails for good; everything else of shards 1 and 2 succeeds.
    let w = WorkerId::new("w").unwrap();
    let doomed = shard1[0].clone();
    let finished: Vec<TaskId> = shard1.iter().skip(1).chain(&shard2).cloned().collect();
    finish(&db, "moving", &finished).await;
    assert_eq!(api::advance_begin_pos(&c, "moving", None).await.unwrap(), 1, "shard 1 still holds a pending task");
    let claimed = loop {
        let batch = api::claim_tasks(&c, "moving", &w, 1000, None).await.unwrap();
        let mine = batch.iter().find(|t| t.task_id == doomed).cloned();
        let release: Vec<Report> = batch
            .iter()
            .filter(|t| t.task_id != doomed)
            .map(|t| Report {
                task_id: t.task_id.clone(),
                claim_seq: t.claim_seq,
                kind: ReportKind::Release,
                progress: None,
            })
            .collect();
        api::report_tasks(&c, &w, &release, None).await.unwrap();
        if let Some(t) = mine {
            break t;
        }
    };
    let fail = Report {
        task_id: doomed.clone(),
        claim_seq: claimed.claim_seq,
        kind: ReportKind::Fail { error: "no".into(), retry: false },
        progress: None,
    };
    api::report_tasks(&c, &w, &[fail], None).await.unwrap();
    assert_eq!(api::advance_begin_pos(&c, "moving", None).await.unwrap(), 3, "shards 1 and 2 hold no live task");
    let closed: i64 = c
        .query_one("select count(*) from asyncflow.shards where task_type = 'moving' and closed_at is not null", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(closed, 2);
    // Retrying the failed task reopens shard 1 at once.
    assert!(api::retry_task(&c, doomed.as_str()).await.unwrap());
    assert_eq!(api::positions_of(&c, "moving").await.unwrap().unwrap().begin_pos, 1);
    assert!(claimed_before_empty(&db, "moving", &doomed).await, "claimable again");
}

/// Dropping a shard takes the type's table before the shard, the order a claim takes them in:
/// taking the shard first would deadlock with a claim that holds the type's table and then
/// reaches for the shard.
#[tokio::test]
async fn dropping_a_shard_takes_its_locks_in_the_claims_order() {
    let db = TestDb::new().await;
    register(&db, "locked", small_shards(Some(0))).await;
    let c = db.conn().await;
    let ids = fill(&db, "locked", 2).await;
    let old: Vec<TaskId> = ids.iter().filter(|i| i.shard() == 1).cloned().collect();
    finish(&db, "locked", &old).await;
    assert_eq!(api::advance_begin_pos(&c, "locked", None).await.unwrap(), 2);
    // a transaction holding the type's table, as a claim does before it reaches the shards
    let mut claimer = db.raw().await;
    let tx = claimer.transaction().await.unwrap();
    tx.batch_execute("lock table only asyncflow.tasks_locked in access share mode").await.unwrap();
    let dropper = db.raw().await;
    let later = Utc::now() + chrono::Duration::seconds(60);
    let dropping = tokio::spawn(async move {
        dropper.query("select asyncflow.drop_expired_shards('locked', $1)", &[&later]).await.map(|rows| rows.len())
    });
    let watcher = db.raw().await;
    common::wait_for_lock_wait(&watcher, "drop_expired_shards").await;
    // the shard is not locked by the waiting drop: the claim reaches it at once (before, it met
    // the drop's lock on the shard: a deadlock, unless the drop's own 1 s lock_timeout ran out
    // first)
    tx.batch_execute("set local lock_timeout = '100ms'").await.unwrap();
    let read = tx.query("select count(*) from asyncflow.tasks_locked_1", &[]).await;
    assert!(read.is_ok(), "the claim's side went on: {read:?}");
    tx.commit().await.unwrap();
    let dropped = dropping.await.unwrap();
    assert!(dropped.is_ok(), "the drop waited (or gave up for this pass) without a deadlock: {dropped:?}");
}

#[tokio::test]
async fn retention_drops_old_finished_shards_whole_and_never_a_live_one() {
    let db = TestDb::new().await;
    register(&db, "kept", small_shards(Some(3600))).await;
    let c = db.conn().await;
    let keyed = api::create_task(&c, "kept", &NewTask { idempotency_key: Some("k-1".into()), ..Default::default() })
        .await
        .unwrap();
    let ids = fill(&db, "kept", 4).await;
    let old: Vec<TaskId> = ids.iter().filter(|i| i.shard() <= 2).cloned().collect();
    let live = ids.iter().find(|i| i.shard() == 3).cloned().unwrap();
    let mut done = old.clone();
    done.push(keyed.clone());
    finish(&db, "kept", &done).await;
    let now = Utc::now();
    assert_eq!(api::advance_begin_pos(&c, "kept", Some(now)).await.unwrap(), 3);
    assert!(api::drop_expired_shards(&c, "kept", Some(now)).await.unwrap().is_empty(), "not older than retention yet");
    let dropped = api::drop_expired_shards(&c, "kept", Some(now + chrono::Duration::seconds(3601))).await.unwrap();
    assert_eq!(dropped, vec![1, 2]);
    assert!(!leaf_exists(&db, "kept", 1).await && !leaf_exists(&db, "kept", 2).await, "partitions gone");
    assert!(leaf_exists(&db, "kept", 3).await && leaf_exists(&db, "kept", 5).await);
    let rows: i64 = c
        .query_one("select count(*) from asyncflow.tasks where task_type = 'kept' and shard <= 2", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 0, "no rows left in dropped shards");
    assert!(api::get_task(&c, old[0].as_str()).await.unwrap().is_none());
    assert!(api::get_task(&c, keyed.as_str()).await.unwrap().is_none());
    let keys: i64 = c
        .query_one("select count(*) from asyncflow.idempotency_keys where task_type = 'kept'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(keys, 0, "idempotency keys go with their shard");
    let fresh = api::create_task(&c, "kept", &NewTask { idempotency_key: Some("k-1".into()), ..Default::default() })
        .await
        .unwrap();
    assert_ne!(fresh, keyed, "the key is free again");
    assert_eq!(
        api::get_task(&c, live.as_str()).await.unwrap().unwrap().status,
        TaskStatus::Pending,
        "live shards untouched"
    );
    let stats: i64 = c
        .query_one("select count(*) from asyncflow.shards where task_type = 'kept' and dropped_at is not null", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(stats, 2);

    // A task that somehow sits in a shard below begin_pos (an insert that raced a roll) is found
    // again and its shard is never dropped.
    c.batch_execute("update asyncflow.positions set begin_pos = 4 where task_type = 'kept'").await.unwrap();
    c.batch_execute(
        "update asyncflow.shards set closed_at = now() - interval '2 hours' where task_type = 'kept' and shard = 3",
    )
    .await
    .unwrap();
    assert!(api::drop_expired_shards(&c, "kept", Some(now + chrono::Duration::seconds(7200)))
        .await
        .unwrap()
        .is_empty());
    assert!(leaf_exists(&db, "kept", 3).await);
    assert_eq!(api::advance_begin_pos(&c, "kept", None).await.unwrap(), 3, "recomputed from the bottom");
}

#[tokio::test]
async fn a_long_delayed_task_keeps_only_its_own_shard_from_retention() {
    // begin_pos stops at the oldest live shard, but every shard with no live task is closed and
    // dropped: closing only the shards below begin_pos, one task delayed by a month would keep
    // every newer shard.
    let db = TestDb::new().await;
    register(&db, "later", small_shards(Some(3600))).await;
    let c = db.conn().await;
    let now = Utc::now();
    let delayed = api::create_task(
        &c,
        "later",
        &NewTask { run_at: Some(now + chrono::Duration::days(30)), ..Default::default() },
    )
    .await
    .unwrap();
    assert_eq!(delayed.shard(), 1);
    let ids = fill(&db, "later", 3).await;
    let live = ids.iter().find(|i| i.shard() == 3).cloned().unwrap();
    let done: Vec<TaskId> = ids.iter().filter(|i| i.shard() != 3).cloned().collect();
    finish(&db, "later", &done).await;
    assert_eq!(api::advance_begin_pos(&c, "later", Some(now)).await.unwrap(), 1, "the delayed task is live");
    let closed: Vec<i32> = c
        .query(
            "select shard from asyncflow.shards where task_type = 'later' and closed_at is not null order by shard",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(closed, vec![2], "the finished shard above it is closed; shards 1 and 3 are live");
    assert!(api::drop_expired_shards(&c, "later", Some(now)).await.unwrap().is_empty(), "not older than retention");
    let dropped = api::drop_expired_shards(&c, "later", Some(now + chrono::Duration::seconds(3601))).await.unwrap();
    assert_eq!(dropped, vec![2]);
    assert!(leaf_exists(&db, "later", 1).await && !leaf_exists(&db, "later", 2).await);
    assert!(leaf_exists(&db, "later", 3).await && leaf_exists(&db, "later", 4).await);
    assert_eq!(api::get_task(&c, delayed.as_str()).await.unwrap().unwrap().status, TaskStatus::Pending);
    assert_eq!(api::get_task(&c, live.as_str()).await.unwrap().unwrap().status, TaskStatus::Pending);

    // shard 3 finishes too: it is closed and dropped in turn while shard 1 waits for its task
    let rest: Vec<TaskId> = ids.iter().filter(|i| i.shard() == 3).cloned().collect();
    finish(&db, "later", &rest).await;
    let later = now + chrono::Duration::seconds(4000);
    assert_eq!(api::advance_begin_pos(&c, "later", Some(later)).await.unwrap(), 1);
    let dropped = api::drop_expired_shards(&c, "later", Some(later + chrono::Duration::seconds(3601))).await.unwrap();
    assert_eq!(dropped, vec![3]);
    // the delayed task is still claimed when due
    let w = WorkerId::new("w").unwrap();
    let due = now + chrono::Duration::days(30) + chrono::Duration::seconds(1);
    let claimed = api::claim_tasks(&c, "later", &w, 10, Some(due)).await.unwrap();
    assert_eq!(claimed.iter().map(|t| t.task_id.clone()).collect::<Vec<_>>(), vec![delayed]);
}

/// retry_task holds the type's positions row, and a begin_pos pass, finding it busy past 1 s,
/// changes nothing. Otherwise a pass that ran before the retry committed would not see the task,
/// would close its shard and move past it, and no claim would read the task, left below
/// begin_pos, until the next pass.
#[tokio::test]
async fn a_retry_by_hand_keeps_its_shard_open_against_a_begin_pos_pass_beside_it() {
    let db = TestDb::new().await;
    register(&db, "racing", small_shards(None)).await;
    let ids = fill(&db, "racing", 2).await;
    let c = db.conn().await;
    let shard1: Vec<TaskId> = ids.iter().filter(|i| i.shard() == 1).cloned().collect();
    let doomed = shard1[0].clone();
    assert!(api::cancel_task(&c, doomed.as_str()).await.unwrap());
    finish(&db, "racing", &shard1[1..]).await;
    assert_eq!(api::positions_of(&c, "racing").await.unwrap().unwrap().begin_pos, 1, "no pass has run yet");

    let mut app = db.raw().await;
    let tx = app.transaction().await.unwrap();
    let retried: bool = tx.query_one("select asyncflow.retry_task($1)", &[&doomed.as_str()]).await.unwrap().get(0);
    assert!(retried);
    let soon = Duration::from_secs(10);
    let pass = tokio::time::timeout(soon, api::advance_begin_pos(&c, "racing", None)).await;
    assert_eq!(pass.expect("the pass does not wait for the retry").unwrap(), 1, "and changes nothing");
    let roll = tokio::time::timeout(soon, api::roll_shard(&c, "racing", None)).await;
    assert_eq!(roll.expect("nor does the roller wait").unwrap(), None);
    tx.commit().await.unwrap();

    let open: bool = c
        .query_one("select closed_at is null from asyncflow.shards where task_type = 'racing' and shard = 1", &[])
        .await
        .unwrap()
        .get(0);
    assert!(open, "shard 1 holds the retried task");
    assert_eq!(api::advance_begin_pos(&c, "racing", None).await.unwrap(), 1);
    assert!(claimed_before_empty(&db, "racing", &doomed).await, "the retried task is claimed");
}

#[tokio::test]
async fn the_rescuer_requeues_expired_leases_or_fails_tasks_out_of_tries() {
    let db = TestDb::new().await;
    register(
        &db,
        "lost",
        TaskTypeUpdate {
            max_processing_time: Some(10),
            max_retry_num: Some(1),
            max_retry_interval: Some(5),
            ..Default::default()
        },
    )
    .await;
    let c = db.conn().await;
    let id = api::create_task(&c, "lost", &NewTask::default()).await.unwrap();
    let w = WorkerId::new("gone").unwrap();
    // PostgreSQL keeps microseconds.
    let t0 = chrono::SubsecRound::trunc_subsecs(Utc::now(), 6);
    api::claim_tasks(&c, "lost", &w, 1, Some(t0)).await.unwrap();
    let rescuer = Rescuer::new(db.pool.clone(), Duration::from_secs(1), 100);
    assert_eq!(rescuer.run_once(Some(t0 + chrono::Duration::seconds(9))).await.unwrap().changed, 0, "lease not over");
    let report = rescuer.run_once(Some(t0 + chrono::Duration::seconds(11))).await.unwrap();
    assert_eq!(report.changed, 1, "{report:?}");
    let t = api::get_task(&c, id.as_str()).await.unwrap().unwrap();
    assert_eq!((t.status, t.retry_count, t.owner.clone()), (TaskStatus::Pending, 1, None));
    // the 1 s back-off after the first try, less up to a tenth at random (jitter)
    let rescued_at = t0 + chrono::Duration::seconds(11);
    assert!(
        t.order_time >= rescued_at + chrono::Duration::milliseconds(900)
            && t.order_time <= rescued_at + chrono::Duration::seconds(1),
        "back-off after the first try: {}",
        t.order_time
    );
    assert_eq!(t.schedule_log[0].outcome.as_deref(), Some("rescued"));
    assert_eq!(t.schedule_log[0].worker.as_deref(), Some("gone"));
    // Second try also lost: out of tries (max_retry_num = 1) -> failed.
    let t1 = t0 + chrono::Duration::seconds(20);
    api::claim_tasks(&c, "lost", &w, 1, Some(t1)).await.unwrap();
    rescuer.run_once(Some(t1 + chrono::Duration::seconds(11))).await.unwrap();
    let t = api::get_task(&c, id.as_str()).await.unwrap().unwrap();
    assert_eq!((t.status, t.retry_count), (TaskStatus::Failed, 2));
    assert!(t.error.unwrap().contains("lease expired"));
    // All services in one pass, as `asyncflow maintain --once` runs them.
    let tasks = MaintenanceConfig::default();
    let services = maintain::services(&db.pool, &tasks, &Default::default());
    let reports = Maintainer::new(db.url.clone(), tasks.leader_check, services).run_once(None).await.unwrap();
    let names: Vec<&str> = reports.iter().map(|r| r.service).collect();
    assert_eq!(
        names,
        vec![
            "rescuer",
            "shard_roller",
            "begin_advancer",
            "retention",
            "scheduler",
            "unique_key_retention",
            "history_sampler",
            "worker_pruner",
            "rate_bucket_pruner",
            "run_checker",
            "run_retention",
            "callbacks"
        ]
    );
}

#[tokio::test]
async fn two_maintainers_never_lead_at_once_and_the_second_takes_over_when_the_first_connection_dies() {
    let db = TestDb::new().await;
    let stop = CancellationToken::new();
    let mut a = leader::spawn(db.url.clone(), leader::MAINTENANCE_LOCK, Duration::from_millis(100), stop.clone());
    let mut b = leader::spawn(db.url.clone(), leader::MAINTENANCE_LOCK, Duration::from_millis(100), stop.clone());
    wait_until(Duration::from_secs(10), "one leader", || {
        let (a, b) = (*a.is_leader.borrow(), *b.is_leader.borrow());
        async move { a || b }
    })
    .await;
    for _ in 0..50 {
        assert!(!(*a.is_leader.borrow() && *b.is_leader.borrow()), "two leaders at once");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (first, second) = if *a.is_leader.borrow() { (&mut a, &mut b) } else { (&mut b, &mut a) };
    let pid = first.backend_pid.borrow().expect("the leader's connection pid");
    db.raw().await.execute("select pg_terminate_backend($1)", &[&pid]).await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (f, s) = (*first.is_leader.borrow(), *second.is_leader.borrow());
        if s {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the second did not take over");
        tokio::time::sleep(Duration::from_millis(20)).await;
        let _ = f;
    }
    // The first steps down and, once reconnected, does not lead while the second does.
    for _ in 0..50 {
        assert!(!(*a.is_leader.borrow() && *b.is_leader.borrow()), "two leaders at once after the takeover");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.cancel();
}

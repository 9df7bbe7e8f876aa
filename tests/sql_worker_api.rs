//! The worker side of the SQL API: claims, fenced reports, stages, retries and back-off, claim order and plan, concurrent claimers.
//! Claims, malformed reports, held claims and chained stages have submodules in `tests/sql_worker_api/`.
#[path = "sql_worker_api/chains.rs"]
mod chains;
#[path = "sql_worker_api/claims.rs"]
mod claims;
use crate::common;
#[path = "sql_worker_api/holds.rs"]
mod holds;
#[path = "sql_worker_api/malformed.rs"]
mod malformed;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use asyncflow::db::api;
use asyncflow::task::{Report, ReportKind, TaskStatus};
use common::{sqlstate, TestDb};
use serde_json::{json, Value};

use common::sql::*;

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
    // the back-offs 1, 2, 4 and 8 s, each less up to a tenth at random (jitter)
    for (wait, backoff) in waits.iter().zip([1.0, 2.0, 4.0, 8.0]) {
        assert!((0.9 * backoff - 0.001..=backoff).contains(wait), "waits {waits:?}");
    }

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
        let wait = t.order_time - now;
        assert!(wait >= secs(6.3) - secs(0.001) && wait <= secs(7.0), "7 s less up to a tenth: {wait}");
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
        now += secs(30.0);
    }
    let t = api::get_task(&c, id.as_str()).await.unwrap().unwrap();
    assert_eq!(t.retry_count, 0);
    assert_eq!(t.context, json!({"round": 24}));
    assert_eq!(t.schedule_log.len(), 20, "bounded log");
    assert_eq!(t.schedule_log.last().and_then(|e| e.outcome.clone()).as_deref(), Some("later"));
}

#[tokio::test]
async fn a_success_writes_no_log_entry_and_reads_as_if_it_had() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    let raw = db.raw().await;
    register(&raw, "poll", json!({})).await;
    let id = api::create_task(&c, "poll", &Default::default()).await.unwrap();
    let w = worker("w-7");
    // 21 'later' rounds, then a success 1.25 s after its claim.
    let mut now = t0();
    for _ in 0..21 {
        let claimed = api::claim_tasks(&c, "poll", &w, 1, Some(now)).await.unwrap();
        let later = ReportKind::Later { delay: 1.0, context: None };
        api::report_tasks(&c, &w, &[rep(id.as_str(), claimed[0].claim_seq, later)], Some(now)).await.unwrap();
        now += secs(1.0);
    }
    let claimed = api::claim_tasks(&c, "poll", &w, 1, Some(now)).await.unwrap();
    let done = now + secs(1.25);
    let r = api::report_tasks(
        &c,
        &w,
        &[rep(id.as_str(), claimed[0].claim_seq, ReportKind::Succeed { result: json!({"ok": true}) })],
        Some(done),
    )
    .await
    .unwrap();
    assert!(r[0].accepted);

    // The row holds the 20 'later' entries only: the report wrote none.
    let row = raw
        .query_one(
            "select jsonb_array_length(schedule_log), schedule_log -> -1 ->> 'outcome', owner from asyncflow.tasks",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, i32>(0), 20);
    assert_eq!(row.get::<_, Option<String>>(1).as_deref(), Some("later"));
    assert_eq!(row.get::<_, Option<String>>(2).as_deref(), Some("w-7"), "a success keeps its worker");

    // A reader sees the last 20 entries, the success's last, made from the row.
    let t = api::get_task(&c, id.as_str()).await.unwrap().unwrap();
    assert_eq!(t.status, TaskStatus::Succeeded);
    assert_eq!(t.owner, None, "owner shown only while it means something");
    assert_eq!(t.schedule_log.len(), 20, "bounded log");
    let last = t.schedule_log.last().unwrap();
    assert_eq!(last.outcome.as_deref(), Some("succeed"));
    assert_eq!(last.worker.as_deref(), Some("w-7"));
    assert_eq!(last.stage.as_deref(), Some("start"));
    assert_eq!(last.attempt, Some(1));
    assert_eq!(last.start, Some(now));
    assert_eq!(last.cost_ms, Some(1250.0));
    assert_eq!(t.schedule_log[18].outcome.as_deref(), Some("later"));
    assert_eq!(t.finished_at, Some(done));

    // The histogram counts the success with its duration from the row: 21 'later' calls of 0 s
    // (claimed and reported at the same instant) and one of 1.25 s.
    let row = raw
        .query_one("select sum(calls)::bigint, sum(seconds) from asyncflow.stage_times where task_type = 'poll'", &[])
        .await
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), 22);
    assert!((row.get::<_, f64>(1) - 1.25).abs() < 1e-9);
    let succeeded: i64 = raw
        .query_one("select sum(succeeded)::bigint from asyncflow.type_counters where task_type = 'poll'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(succeeded, 1);

    // A batch of successes only (its own statement) is answered as the general statement answers
    // it: in report order, the last report of a task named twice applied, a stale fence and a
    // finished task refused. The same batch plus a hand-back goes through the general statement.
    let mut answers = Vec::new();
    for with_release in [false, true] {
        let mut ids = Vec::new();
        for _ in 0..4 {
            ids.push(api::create_task(&c, "poll", &Default::default()).await.unwrap());
        }
        let claimed = api::claim_tasks(&c, "poll", &w, 4, Some(done)).await.unwrap();
        assert_eq!(claimed.len(), 4);
        let seq = |id: &asyncflow::ids::TaskId| claimed.iter().find(|t| t.task_id == *id).unwrap().claim_seq;
        let ok = |n: i64| ReportKind::Succeed { result: json!({"n": n}) };
        let mut batch = vec![
            rep(ids[0].as_str(), seq(&ids[0]), ok(1)),
            rep(ids[1].as_str(), seq(&ids[1]) + 1, ok(2)),
            rep(id.as_str(), 22, ok(3)),
            rep(ids[0].as_str(), seq(&ids[0]), ok(4)),
            rep(ids[2].as_str(), seq(&ids[2]), ok(5)),
        ];
        if with_release {
            batch.push(rep(ids[3].as_str(), seq(&ids[3]), ReportKind::Release));
        }
        let results = api::report_tasks(&c, &w, &batch, Some(done)).await.unwrap();
        answers.push(results.iter().take(5).map(|r| (r.accepted, r.status, r.lease_until)).collect::<Vec<_>>());
        let t = api::get_task(&c, ids[0].as_str()).await.unwrap().unwrap();
        assert_eq!(t.result, Some(json!({"n": 4})), "the last report of a task named twice wins");
        assert_eq!(t.schedule_log.last().and_then(|e| e.outcome.clone()).as_deref(), Some("succeed"));
        let t = api::get_task(&c, ids[1].as_str()).await.unwrap().unwrap();
        assert_eq!(t.status, TaskStatus::Running, "a stale fence changes nothing");
        if !with_release {
            // ids[3] is still held: hand it back so the next round claims fresh tasks only
            let r = ReportKind::Release;
            api::report_tasks(&c, &w, &[rep(ids[3].as_str(), seq(&ids[3]), r)], Some(done)).await.unwrap();
        }
        let stale = ReportKind::Release;
        api::report_tasks(&c, &w, &[rep(ids[1].as_str(), seq(&ids[1]), stale)], Some(done)).await.unwrap();
        raw.execute(
            "update asyncflow.tasks set status = 'cancelled', finished_at = $1 where status = 'pending'",
            &[&done],
        )
        .await
        .unwrap();
    }
    assert_eq!(answers[0], answers[1], "both statements answer alike");
    let accepted: Vec<_> = answers[0].iter().map(|a| a.0).collect();
    assert_eq!(accepted, vec![false, false, false, true, true]);
    assert_eq!(answers[0][2].1, Some(TaskStatus::Succeeded));

    // A succeeded task with its entry already in the log and no owner reads as written (task_log
    // adds a success's entry only while the task keeps its worker as owner).
    let old = api::create_task(&c, "poll", &Default::default()).await.unwrap();
    raw.execute(
        "update asyncflow.tasks set status = 'succeeded', finished_at = $2, claimed_at = $2, owner = null, \
           schedule_log = jsonb_build_array(jsonb_build_object('worker', 'old', 'stage', 'start', 'attempt', 1, \
             'start', $2::timestamptz, 'cost_ms', 3, 'outcome', 'succeed')) \
         where asyncflow.format_task_id(task_type, shard, id) = $1",
        &[&old.as_str(), &t0()],
    )
    .await
    .unwrap();
    let t = api::get_task(&c, old.as_str()).await.unwrap().unwrap();
    assert_eq!(t.schedule_log.len(), 1, "no second entry");
    assert_eq!(t.schedule_log[0].worker.as_deref(), Some("old"));
    assert_eq!(t.schedule_log[0].cost_ms, Some(3.0));
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
    let rescued = api::rescue_expired(&c, Some(now + secs(16.0)), 100, &[]).await.unwrap();
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
    assert!(second.claim_seq > first.claim_seq, "a newer token");
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

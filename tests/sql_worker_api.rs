//! The worker side of the SQL API: claims, fenced reports, stages, retries and back-off, claim order and plan, concurrent claimers.
mod common;

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
    let hb = api::report_tasks(
        &c,
        &a,
        &[rep(id.as_str(), first.claim_seq, ReportKind::Heartbeat { progress: None })],
        Some(now + secs(5.0)),
    )
    .await
    .unwrap();
    assert!(hb[0].accepted);
    assert_eq!(hb[0].lease_until, Some(now + secs(15.0)));
    let rescued = api::rescue_expired(&c, Some(now + secs(16.0)), 100).await.unwrap();
    assert_eq!(rescued.len(), 1);
    let before = api::get_task(&c, id.as_str()).await.unwrap().unwrap();
    for kind in [
        ReportKind::Succeed { result: json!(1) },
        ReportKind::Heartbeat { progress: None },
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

#[tokio::test]
async fn the_claim_reads_only_pending_rows_through_the_partial_index() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    register(&c, "video", json!({})).await;
    // 2,000 finished tasks and 5 pending ones.
    c.query(
        "select asyncflow.create_tasks('video', (select jsonb_agg('{}'::jsonb) from generate_series(1, 2000)))",
        &[],
    )
    .await
    .unwrap();
    c.batch_execute("update asyncflow.tasks set status = 'succeeded', finished_at = now(); analyze asyncflow.tasks")
        .await
        .unwrap();
    c.query("select asyncflow.create_tasks('video', (select jsonb_agg('{}'::jsonb) from generate_series(1, 5)))", &[])
        .await
        .unwrap();
    // The claim's row selection, exactly as asyncflow.claim_tasks runs it.
    let plan: Value = c
        .query_one(
            "explain (analyze, format json) select shard, id from asyncflow.tasks \
             where task_type = 'video' and shard >= 1 and status = 'pending' and order_time <= now() \
             order by order_time limit 100 for update skip locked",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let text = plan.to_string();
    assert!(!text.contains("Seq Scan"), "no sequential scan: {text}");
    let mut scans = Vec::new();
    fn walk(node: &Value, out: &mut Vec<Value>) {
        if node.get("Index Name").is_some() {
            out.push(node.clone());
        }
        if let Some(children) = node.get("Plans").and_then(Value::as_array) {
            for ch in children {
                walk(ch, out);
            }
        }
    }
    walk(&plan[0]["Plan"], &mut scans);
    assert!(!scans.is_empty(), "an index scan: {text}");
    let mut rows_read = 0;
    for scan in &scans {
        let index = scan["Index Name"].as_str().unwrap().to_string();
        let def: String = c
            .query_one("select pg_get_indexdef(to_regclass('asyncflow.' || quote_ident($1)))", &[&index])
            .await
            .unwrap()
            .get(0);
        assert!(def.contains("WHERE (status = 'pending'"), "partial index on pending rows: {def}");
        rows_read += scan["Actual Rows"].as_i64().unwrap_or(0)
            + scan.get("Rows Removed by Filter").and_then(Value::as_i64).unwrap_or(0);
    }
    assert_eq!(rows_read, 5, "only the 5 pending rows were read, none of the 2,000 finished ones");
}

#[tokio::test]
async fn claims_and_reports_probe_only_their_rows_however_many_types_there_are() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    // A plan made for every leaf of every type at once (the type a parameter) once read the whole
    // primary key of the type to claim one task, from a few dozen types on.
    for k in 0..40 {
        register(&c, &format!("other{k}"), json!({})).await;
    }
    register(&c, "video", json!({})).await;
    c.query(
        "select asyncflow.create_tasks('video', (select jsonb_agg('{}'::jsonb) from generate_series(1, 5000)))",
        &[],
    )
    .await
    .unwrap();
    c.batch_execute("analyze asyncflow.tasks").await.unwrap();
    // rows read from the type's leaf and its indexes, as the statistics count them
    async fn reads(c: &tokio_postgres::Client) -> i64 {
        c.batch_execute("select pg_stat_force_next_flush()").await.unwrap();
        c.query_one(
            "select ((select coalesce(sum(idx_tup_read), 0) from pg_stat_user_indexes where relname = 'tasks_video_1') \
             + (select coalesce(sum(seq_tup_read), 0) from pg_stat_user_tables where relname = 'tasks_video_1'))::bigint",
            &[],
        )
        .await
        .unwrap()
        .get(0)
    }
    let w = worker("w");
    let p = db.conn().await;
    let before = reads(&p).await;
    // more calls than PostgreSQL's five custom plans before it may settle on a generic one
    for k in 0..10 {
        // the worker's way (the type's own claim function) and the SQL API's (claim_tasks)
        let (id, claim_seq): (String, i64) = if k % 2 == 0 {
            let claimed = api::claim_tasks(&p, "video", &w, 1, None).await.unwrap();
            assert_eq!(claimed.len(), 1);
            (claimed[0].task_id.to_string(), claimed[0].claim_seq)
        } else {
            let row = p
                .query_one("select task_id, claim_seq from asyncflow.claim_tasks('video', $1, 1)", &[&w.as_str()])
                .await
                .unwrap();
            (row.get(0), row.get(1))
        };
        let done = rep(&id, claim_seq, ReportKind::Succeed { result: json!({}) });
        let r = api::report_tasks(&p, &w, &[done], None).await.unwrap();
        assert!(r[0].accepted);
    }
    let read = reads(&p).await - before;
    assert!(read < 500, "10 claims and 10 reports of one task read {read} rows of a type holding 5,000");
}

#[tokio::test]
async fn a_batch_mixing_types_is_answered_in_report_order() {
    let db = TestDb::new().await;
    let c = db.conn().await;
    for ty in ["video", "audio"] {
        register(&db.raw().await, ty, json!({})).await;
        api::create_tasks(&c, ty, &[Default::default(), Default::default()]).await.unwrap();
    }
    let w = worker("w");
    let video = api::claim_tasks(&c, "video", &w, 2, None).await.unwrap();
    let audio = api::claim_tasks(&c, "audio", &w, 2, None).await.unwrap();
    let done = |t: &asyncflow::task::ClaimedTask| {
        rep(t.task_id.as_str(), t.claim_seq, ReportKind::Succeed { result: json!({}) })
    };
    let reports = vec![
        done(&audio[1]),
        done(&video[0]),
        rep("nosuchtype-1-1", 1, ReportKind::Succeed { result: json!({}) }),
        rep(audio[0].task_id.as_str(), audio[0].claim_seq + 1, ReportKind::Succeed { result: json!({}) }),
        done(&video[1]),
        rep("video-1-999", 1, ReportKind::Succeed { result: json!({}) }),
    ];
    let got = api::report_tasks(&c, &w, &reports, None).await.unwrap();
    let ids: Vec<&str> = got.iter().map(|r| r.task_id.as_str()).collect();
    let sent: Vec<String> = reports.iter().map(|r| r.task_id.to_string()).collect();
    assert_eq!(ids, sent.iter().map(String::as_str).collect::<Vec<_>>(), "one answer per report, in order");
    let accepted: Vec<bool> = got.iter().map(|r| r.accepted).collect();
    assert_eq!(accepted, vec![true, true, false, false, true, false]);
    assert_eq!(got[0].status, Some(TaskStatus::Succeeded));
    assert_eq!(got[2].status, None, "a type that does not exist: no such task");
    assert_eq!(got[3].status, Some(TaskStatus::Running), "a stale fence: the task's current status");
    assert_eq!(got[5].status, None, "no such task of a known type");
    // the refused one is still running and its right report lands
    let late = api::report_tasks(&c, &w, &[done(&audio[0])], None).await.unwrap();
    assert!(late[0].accepted);
}

#[tokio::test]
async fn eight_concurrent_claimers_never_hold_the_same_task_and_finish_all_10000() {
    let db = TestDb::new().await;
    register(&db.raw().await, "bulk", json!({"schedule_limit": 50})).await;
    {
        let c = db.raw().await;
        c.query("select asyncflow.create_tasks('bulk', (select jsonb_agg(jsonb_build_object('priority', g % 7)) from generate_series(1, 10000) g))", &[])
            .await
            .unwrap();
    }
    let held: Arc<Mutex<HashSet<String>>> = Arc::new(Mutex::new(HashSet::new()));
    let done = Arc::new(Mutex::new(0usize));
    let mut workers = Vec::new();
    for n in 0..8 {
        let pool = db.pool.clone();
        let held = held.clone();
        let done = done.clone();
        workers.push(tokio::spawn(async move {
            let w = worker(&format!("w{n}"));
            loop {
                let c = pool.get().await.unwrap();
                let claimed = api::claim_tasks(&c, "bulk", &w, 50, None).await.unwrap();
                if claimed.is_empty() {
                    return;
                }
                {
                    let mut h = held.lock().unwrap();
                    for t in &claimed {
                        assert!(h.insert(t.task_id.to_string()), "{} held twice at once", t.task_id);
                    }
                }
                let reports: Vec<Report> = claimed
                    .iter()
                    .map(|t| Report {
                        task_id: t.task_id.clone(),
                        claim_seq: t.claim_seq,
                        kind: ReportKind::Succeed { result: json!(n) },
                    })
                    .collect();
                // Release our hold before reporting: after the report another claimer may see it.
                {
                    let mut h = held.lock().unwrap();
                    for t in &claimed {
                        h.remove(t.task_id.as_str());
                    }
                }
                let results = api::report_tasks(&c, &w, &reports, None).await.unwrap();
                assert!(results.iter().all(|r| r.accepted));
                *done.lock().unwrap() += results.len();
            }
        }));
    }
    for w in workers {
        w.await.unwrap();
    }
    assert_eq!(*done.lock().unwrap(), 10000);
    let c = db.conn().await;
    let counts = api::count_by_status(&c, "bulk").await.unwrap();
    assert_eq!(counts, vec![(TaskStatus::Succeeded, 10000)]);
    let claims: i64 = c.query_one("select count(*) from asyncflow.tasks where attempt <> 1", &[]).await.unwrap().get(0);
    assert_eq!(claims, 0, "every task was claimed exactly once");
}

#[tokio::test]
async fn malformed_reports_are_refused_whole_naming_the_report_and_field() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    register(&c, "clip", json!({})).await;
    let id: String = c.query_one("select asyncflow.create_task('clip')", &[]).await.unwrap().get(0);
    let claimed = c.query("select claim_seq from asyncflow.claim_tasks('clip', 'w1', 1)", &[]).await.unwrap();
    let seq: i64 = claimed[0].get(0);
    let good = json!({"task_id": id, "claim_seq": seq, "outcome": "succeed"});
    for (bad, says) in [
        (json!({"task_id": "clip-1", "claim_seq": seq, "outcome": "succeed"}), "reports[1]: task_id must be a task id"),
        (json!({"task_id": "Clip-1-1", "claim_seq": seq, "outcome": "succeed"}), "task_id must be a task id"),
        (json!({"task_id": "clip-1-99999999999999999999", "claim_seq": 1, "outcome": "succeed"}), "task_id"),
        (json!({"task_id": id, "claim_seq": 1.5, "outcome": "succeed"}), "claim_seq must be an integer"),
        (json!({"task_id": id, "claim_seq": seq, "outcome": "fail", "error": 7}), "error must be a string"),
        (json!({"task_id": id, "claim_seq": seq, "outcome": "advance", "stage": ["x"]}), "stage"),
        (json!({"task_id": id, "claim_seq": seq, "outcome": "succeed", "delay": "soon"}), "delay must be a number"),
    ] {
        let err = c
            .query("select * from asyncflow.report_tasks('w1', $1)", &[&json!([good, bad])])
            .await
            .expect_err("a malformed report is refused");
        assert_eq!(sqlstate(&err), "AF006", "{err}");
        let text = err.as_db_error().map(|d| d.message().to_string()).unwrap_or_default();
        assert!(text.contains(says), "{text:?} should say {says:?}");
        // nothing applied: the good report in the same batch did not land
        assert_eq!(task(&c, &id).await["status"], "running");
    }
    // JSON numbers beyond a double precision's range: refused by name, not with a raw 22003
    // (the JSON is sent as text: serde_json cannot hold them)
    for delay in ["1e400", "-1e400", "31536001"] {
        let reports =
            format!(r#"[{good}, {{"task_id": "{id}", "claim_seq": {seq}, "outcome": "later", "delay": {delay}}}]"#);
        let err = c
            .query("select * from asyncflow.report_tasks('w1', $1::text::jsonb)", &[&reports])
            .await
            .expect_err("an out-of-range delay is refused");
        assert_eq!(sqlstate(&err), "AF006", "{err}");
        let text = err.as_db_error().map(|d| d.message().to_string()).unwrap_or_default();
        assert!(text.contains("reports[1]: delay must be a number of seconds between 0 and 31536000"), "{text}");
        assert_eq!(task(&c, &id).await["status"], "running");
    }
    // one that underflows is a delay of zero
    let reports = format!(r#"[{{"task_id": "{id}", "claim_seq": {seq}, "outcome": "later", "delay": 1e-400}}]"#);
    let rows =
        c.query("select accepted from asyncflow.report_tasks('w1', $1::text::jsonb)", &[&reports]).await.unwrap();
    assert!(rows[0].get::<_, bool>(0));
    assert_eq!(task(&c, &id).await["status"], "pending");
}

#[tokio::test]
async fn malformed_report_arrays_are_refused_whole_naming_the_report_and_field() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    register(&c, "clip", json!({})).await;
    let id: String = c.query_one("select asyncflow.create_task('clip')", &[]).await.unwrap().get(0);
    let claimed = c.query("select claim_seq from asyncflow.claim_tasks('clip', 'w1', 1)", &[]).await.unwrap();
    let seq: i64 = claimed[0].get(0);
    let call = "select * from asyncflow.report_task_arrays('w1', $1::text[], $2::bigint[], $3::text[], $4::text[], \
                null, null, null, null, $5::float8[])";
    let no_stage: Vec<Option<&str>> = vec![None, None];
    let no_delay: Vec<Option<f64>> = vec![None, None];
    let bad_ids: Vec<Option<&str>> = vec![Some(&id), Some("Clip-1-1")];
    let null_outcome: Vec<Option<&str>> = vec![Some("succeed"), None];
    let later_delay: Vec<Option<f64>> = vec![None, Some(-1.0)];
    // (task ids, claim_seqs, outcomes, stages, delays, words of the refusal)
    type Case<'a> =
        (Vec<Option<&'a str>>, Vec<i64>, Vec<Option<&'a str>>, Vec<Option<&'a str>>, Vec<Option<f64>>, &'a str);
    let cases: Vec<Case> = vec![
        (vec![Some(&id)], vec![seq, seq], vec![Some("succeed")], vec![None], vec![None], "one element per report"),
        (bad_ids, vec![seq, seq], vec![Some("succeed"); 2], no_stage.clone(), no_delay.clone(), "reports[1]: task_id"),
        (vec![Some(&id); 2], vec![seq, seq], null_outcome, no_stage.clone(), no_delay.clone(), "reports[1]: outcome"),
        (
            vec![Some(&id); 2],
            vec![seq, seq],
            vec![Some("succeed"), Some("advance")],
            vec![None, Some("bad stage!")],
            no_delay,
            "reports[1]: stage must match",
        ),
        (vec![Some(&id); 2], vec![seq, seq], vec![Some("succeed"), Some("later")], no_stage, later_delay, "delay"),
    ];
    for (ids, seqs, outcomes, stages, delays, says) in cases {
        let err = c.query(call, &[&ids, &seqs, &outcomes, &stages, &delays]).await.expect_err("refused");
        assert_eq!(sqlstate(&err), "AF006", "{err}");
        let text = err.as_db_error().map(|d| d.message().to_string()).unwrap_or_default();
        assert!(text.contains(says), "{text:?} should say {says:?}");
        // nothing applied: the good report in the same batch did not land
        assert_eq!(task(&c, &id).await["status"], "running");
    }
    // a two-dimensional array is refused, not flattened
    let err = c
        .query(
            "select * from asyncflow.report_task_arrays('w1', array[[$1::text]], array[[$2::bigint]], array[['succeed']])",
            &[&id, &seq],
        )
        .await
        .expect_err("refused");
    assert_eq!(sqlstate(&err), "AF006", "{err}");
    // and the good report alone lands
    let rows = c
        .query(
            "select accepted, status::text from asyncflow.report_task_arrays('w1', $1, $2, $3)",
            &[&vec![id.as_str()], &vec![seq], &vec!["succeed"]],
        )
        .await
        .unwrap();
    assert!(rows[0].get::<_, bool>(0));
    assert_eq!(rows[0].get::<_, String>(1), "succeeded");
    assert_eq!(task(&c, &id).await["status"], "succeeded");
}

/// Held claims: a hold locks ready tasks in the caller's transaction without changing
/// them; its finish writes the successes straight from pending to succeeded and claims the rest
/// as running; a rollback leaves everything as it was. Types under a concurrency limit or
/// watched by a pipeline are claimed the usual way.
#[tokio::test]
async fn a_held_claim_locks_its_tasks_and_its_finish_writes_successes_and_claims_the_rest() {
    let db = TestDb::new().await;
    let a = db.conn().await;
    let b = db.conn().await;
    register(&**a, "held", json!({"max_processing_time": 60})).await;
    let ty = asyncflow::TypeName::new("held").unwrap();
    let ids = api::create_tasks(&a, "held", &vec![asyncflow::task::NewTask::default(); 5]).await.unwrap();
    let w = worker("w");

    a.batch_execute("begin").await.unwrap();
    let held = api::hold_tasks(&a, &ty, &w, 3).await.unwrap();
    assert_eq!(held.len(), 3);
    // the token the claim will have: the clock in microseconds since 1970 (asyncflow.next_claim_seq)
    assert!(held.iter().all(|(t, held)| *held && t.attempt == 1 && t.claim_seq > 1_700_000_000_000_000));
    // the rows are unchanged, and locked: another hold skips them
    assert_eq!(task(&**b, held[0].0.task_id.as_str()).await["status"], "pending");
    b.batch_execute("begin").await.unwrap();
    let other = api::hold_tasks(&b, &ty, &worker("v"), 10).await.unwrap();
    assert_eq!(other.len(), 2, "the two tasks not held by the first");
    b.batch_execute("rollback").await.unwrap();

    // the first succeeded, the second is still running, the third's result is too large
    let big = ReportKind::Succeed { result: json!({"blob": "x".repeat(2 * 1024 * 1024)}) };
    let ok = json!({"ok": 1});
    let ok_reply = ReportKind::Succeed { result: ok.clone() };
    let t: Vec<_> = held.iter().map(|(t, _)| t).collect();
    let answers = api::finish_held(
        &a,
        &ty,
        &w,
        &[
            (&t[0].task_id, t[0].claim_seq, Some(&ok_reply), Some(0.002)),
            (&t[1].task_id, t[1].claim_seq, None, None),
            (&t[2].task_id, t[2].claim_seq, Some(&big), Some(0.5)),
        ],
    )
    .await
    .unwrap();
    a.batch_execute("commit").await.unwrap();
    assert_eq!(answers.len(), 1, "only the task that did not end as asked: {answers:?}");
    assert_eq!(answers[0].task_id, t[2].task_id.as_str());
    assert!(answers[0].accepted && answers[0].status == Some(TaskStatus::Running));

    let done = task(&**b, t[0].task_id.as_str()).await;
    assert_eq!(done["status"], "succeeded");
    assert_eq!(done["result"], ok);
    assert_eq!(done["attempt"], 1);
    assert_eq!(done["schedule_log"][0]["worker"], "w", "the success's log entry: {done}");
    assert_eq!(done["schedule_log"][0]["outcome"], "succeed");
    assert_eq!(done["schedule_log"][0]["cost_ms"], 2, "the call's own time: {done}");
    for running in [t[1], t[2]] {
        let row = task(&**b, running.task_id.as_str()).await;
        assert_eq!(row["status"], "running");
        assert_eq!(row["owner"], "w");
    }
    // a claimed task reports as usual, with the claim_seq the hold gave it
    let r = api::report_tasks(
        &b,
        &w,
        &[rep(t[1].task_id.as_str(), t[1].claim_seq, ReportKind::Succeed { result: json!(2) })],
        None,
    )
    .await
    .unwrap();
    assert!(r[0].accepted && r[0].status == Some(TaskStatus::Succeeded));
    let counted: (i64, i64) = {
        let row = b
            .query_one(
                "select sum(claimed)::bigint, sum(succeeded)::bigint from asyncflow.type_counters where task_type = 'held'",
                &[],
            )
            .await
            .unwrap();
        (row.get(0), row.get(1))
    };
    assert_eq!(counted, (3, 2));

    // a rolled-back hold changes nothing
    a.batch_execute("begin").await.unwrap();
    let again = api::hold_tasks(&a, &ty, &w, 10).await.unwrap();
    assert_eq!(again.len(), 2);
    let fences: Vec<_> = again.iter().map(|(t, _)| (&t.task_id, t.claim_seq, Some(&ok_reply), None)).collect();
    api::finish_held(&a, &ty, &w, &fences).await.unwrap();
    a.batch_execute("rollback").await.unwrap();
    // a finish without the hold (another transaction, the right fences) changes nothing either
    let refused = api::finish_held(&b, &ty, &w, &fences).await.unwrap();
    assert_eq!(refused.len(), 2);
    assert!(refused.iter().all(|r| !r.accepted && r.status == Some(TaskStatus::Pending)), "{refused:?}");
    let pending: i64 = b
        .query_one(
            "select count(*) from asyncflow.tasks where task_type = 'held' and status = 'pending' and attempt = 0",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(pending, 2);
    // a finish of tasks not held as given (wrong fence) changes nothing and says so
    let wrong: Vec<_> = again.iter().map(|(t, _)| (&t.task_id, t.claim_seq + 5, Some(&ok_reply), None)).collect();
    let refused = api::finish_held(&b, &ty, &w, &wrong).await.unwrap();
    assert_eq!(refused.len(), 2);
    assert!(refused.iter().all(|r| !r.accepted && r.status == Some(TaskStatus::Pending)));
    assert_eq!(ids.len(), 5);

    // A key-share lock (a foreign key's check, say) cannot join a hold's lock, which would make
    // the row's xmax a multixact the finish does not know: the hold locks FOR UPDATE, skipping
    // a row already key-share locked, and keeping a later key-share locker out.
    register(&**a, "keyed", json!({})).await;
    let keyed = api::create_tasks(&a, "keyed", &vec![asyncflow::task::NewTask::default(); 2]).await.unwrap();
    let kt = asyncflow::TypeName::new("keyed").unwrap();
    let key_share = "select 1 from asyncflow.tasks where task_type = 'keyed' and id = $1 for key share";
    b.batch_execute("begin").await.unwrap();
    b.execute(key_share, &[&keyed[0].number()]).await.unwrap();
    a.batch_execute("begin").await.unwrap();
    let held = api::hold_tasks(&a, &kt, &w, 10).await.unwrap();
    assert_eq!(held.len(), 1, "the key-share locked task is skipped");
    assert_eq!(held[0].0.task_id, keyed[1]);
    b.batch_execute("rollback; begin; set local lock_timeout = '100ms'").await.unwrap();
    let err = b.execute(key_share, &[&keyed[1].number()]).await.expect_err("the held row's lock keeps it out");
    assert_eq!(sqlstate(&err), "55P03", "{err}");
    b.batch_execute("rollback").await.unwrap();
    let fences: Vec<_> = held.iter().map(|(t, _)| (&t.task_id, t.claim_seq, Some(&ok_reply), None)).collect();
    assert!(api::finish_held(&a, &kt, &w, &fences).await.unwrap().is_empty(), "finished as asked");
    a.batch_execute("commit").await.unwrap();
    assert_eq!(task(&**b, keyed[1].as_str()).await["status"], "succeeded");

    // a type under a concurrency limit is claimed the usual way: held = false, running
    register(&**a, "limited", json!({"concurrency": 2})).await;
    api::create_tasks(&a, "limited", &vec![asyncflow::task::NewTask::default(); 3]).await.unwrap();
    let limited = asyncflow::TypeName::new("limited").unwrap();
    a.batch_execute("begin").await.unwrap();
    let claimed = api::hold_tasks(&a, &limited, &w, 10).await.unwrap();
    a.batch_execute("commit").await.unwrap();
    assert_eq!(claimed.len(), 2, "the limit holds");
    assert!(claimed.iter().all(|(_, held)| !held));
    assert_eq!(task(&**b, claimed[0].0.task_id.as_str()).await["status"], "running");
}

/// Held advances: a finish writes a call's "next stage" as its report would have (pending
/// at the next stage, attempt 0, no owner, the same schedule-log entry, ready at once, the call
/// in the stage-time histogram); an advance report_tasks would refuse is claimed instead, and
/// an outcome other than succeed or advance is refused whole.
#[tokio::test]
async fn a_held_advance_goes_on_to_its_next_stage_as_its_report_would() {
    let db = TestDb::new().await;
    let a = db.conn().await;
    let b = db.conn().await;
    register(&**a, "staged", json!({"max_processing_time": 60})).await;
    let ty = asyncflow::TypeName::new("staged").unwrap();
    let context = json!({"n": 0});
    let new = asyncflow::task::NewTask { context: Some(context.clone()), ..Default::default() };
    api::create_tasks(&a, "staged", &vec![new; 5]).await.unwrap();
    let w = worker("w");

    // one task claimed and reported the usual way, as the reference
    let claimed = api::claim_tasks(&b, "staged", &w, 1, None).await.unwrap();
    let next = |context: Option<Value>| ReportKind::Advance { stage: "s2".into(), context };
    let r = api::report_tasks(
        &b,
        &w,
        &[rep(claimed[0].task_id.as_str(), claimed[0].claim_seq, next(Some(json!({"n": 1}))))],
        None,
    )
    .await
    .unwrap();
    assert!(r[0].accepted && r[0].status == Some(TaskStatus::Pending));
    let reported = task(&**b, claimed[0].task_id.as_str()).await;

    a.batch_execute("begin").await.unwrap();
    let held = api::hold_tasks(&a, &ty, &w, 10).await.unwrap();
    assert_eq!(held.len(), 5, "the reported task is ready again, at s2");
    // the reported task is left out of the finish: a held task not named stays as it was
    let held: Vec<_> = held.into_iter().map(|(t, _)| t).filter(|t| t.stage == "start").collect();
    assert_eq!(held.len(), 4);
    let with_context = next(Some(json!({"n": 1})));
    let keeps_context = next(None);
    let bad_stage = ReportKind::Advance { stage: "no spaces".into(), context: None };
    let big_context = next(Some(json!({"blob": "x".repeat(2 * 1024 * 1024)})));
    let answers = api::finish_held(
        &a,
        &ty,
        &w,
        &[
            (&held[0].task_id, held[0].claim_seq, Some(&with_context), Some(0.003)),
            (&held[1].task_id, held[1].claim_seq, Some(&keeps_context), Some(0.001)),
            (&held[2].task_id, held[2].claim_seq, Some(&bad_stage), Some(0.001)),
            (&held[3].task_id, held[3].claim_seq, Some(&big_context), Some(0.001)),
        ],
    )
    .await
    .unwrap();
    a.batch_execute("commit").await.unwrap();
    let claimed_instead: Vec<_> = answers.iter().map(|r| (r.task_id.as_str(), r.accepted, r.status)).collect();
    assert_eq!(
        claimed_instead,
        vec![
            (held[2].task_id.as_str(), true, Some(TaskStatus::Running)),
            (held[3].task_id.as_str(), true, Some(TaskStatus::Running))
        ],
        "only the advances report_tasks would refuse are answered, claimed"
    );

    let advanced = task(&**b, held[0].task_id.as_str()).await;
    // (claim_seq too is the one its claim gave, each claim's own: see asyncflow.next_claim_seq)
    assert_eq!(advanced["claim_seq"], json!(held[0].claim_seq));
    for field in ["status", "stage", "context", "attempt", "owner", "lease_until", "result", "retry_count"] {
        assert_eq!(advanced[field], reported[field], "{field}: held {advanced} reported {reported}");
    }
    let (entry, reference) = (&advanced["schedule_log"][0], &reported["schedule_log"][0]);
    let keys = |v: &Value| v.as_object().map(|o| o.keys().cloned().collect::<Vec<_>>()).unwrap_or_default();
    assert_eq!(keys(entry), keys(reference), "the same entry: {entry} {reference}");
    for field in ["worker", "stage", "attempt", "outcome"] {
        assert_eq!(entry[field], reference[field], "{field}");
    }
    assert_eq!(entry["cost_ms"], 3, "the call's own time");
    assert_eq!(advanced["schedule_log"].as_array().map(Vec::len), Some(1));
    let kept = task(&**b, held[1].task_id.as_str()).await;
    assert_eq!((kept["stage"].clone(), kept["context"].clone()), (json!("s2"), context));
    for refused in [&held[2], &held[3]] {
        let row = task(&**b, refused.task_id.as_str()).await;
        assert_eq!((row["status"].clone(), row["stage"].clone()), (json!("running"), json!("start")));
    }
    // the two advances are in the histogram of the stage they ran, as the reported one
    let calls: i64 = b
        .query_one(
            "select coalesce(sum(calls), 0)::bigint from asyncflow.stage_times where task_type = 'staged' and stage = 'start'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(calls, 3);

    // the advanced tasks are ready at their next stage: held again, and succeed there
    a.batch_execute("begin").await.unwrap();
    let again = api::hold_tasks(&a, &ty, &w, 10).await.unwrap();
    let stages: Vec<_> = again.iter().map(|(t, _)| (t.stage.as_str(), t.attempt)).collect();
    assert_eq!(stages, vec![("s2", 1); 3]);
    // a newer token than the claim before (the finish's, for the first stage)
    let before = task(&**b, again[0].0.task_id.as_str()).await["claim_seq"].as_i64().unwrap_or(i64::MAX);
    assert!(again.iter().all(|(t, _)| t.claim_seq > before), "{before}");
    let done = ReportKind::Succeed { result: json!("ok") };
    let fences: Vec<_> = again.iter().map(|(t, _)| (&t.task_id, t.claim_seq, Some(&done), Some(0.001))).collect();
    assert!(api::finish_held(&a, &ty, &w, &fences).await.unwrap().is_empty());
    a.batch_execute("commit").await.unwrap();
    let finished = task(&**b, held[0].task_id.as_str()).await;
    assert_eq!(finished["status"], "succeeded");
    assert_eq!(finished["schedule_log"].as_array().map(Vec::len), Some(2), "{finished}");

    // The call's time in whole milliseconds, as a report counts it (1.0015 s is 1001 ms: not
    // floored to 1.001 and then again from 1000.99..., as double precision has it); an advance
    // with a result too large is claimed, as report_tasks refuses it; and a success sent to the
    // type's finish directly, its nine arguments bound as parameters, is written with its result.
    api::create_tasks(&a, "staged", &vec![asyncflow::task::NewTask::default(); 3]).await.unwrap();
    a.batch_execute("begin").await.unwrap();
    let last: Vec<_> = api::hold_tasks(&a, &ty, &w, 10).await.unwrap().into_iter().map(|(t, _)| t).collect();
    assert_eq!(last.len(), 3);
    a.batch_execute("select pg_sleep(1.01)").await.unwrap();
    let with_result = ReportKind::Advance { stage: "s2".into(), context: None };
    let answers =
        api::finish_held(&a, &ty, &w, &[(&last[0].task_id, last[0].claim_seq, Some(&with_result), Some(1.0015))])
            .await
            .unwrap();
    assert!(answers.is_empty(), "{answers:?}");
    // the advance's result (which the worker never sends) is checked as report_tasks checks it
    let claimed = a
        .query(
            "select accepted, status::text from asyncflow.type_finish__staged('w', array[$1::integer], array[$2::bigint], \
             array[$4::bigint], array['advance'], array[$3::jsonb], array['s2'], array[null::jsonb], array[0.001::float8])",
            &[
                &last[1].task_id.shard(),
                &last[1].task_id.number(),
                &json!({"blob": "x".repeat(2 * 1024 * 1024)}),
                &last[1].claim_seq,
            ],
        )
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!((claimed[0].get::<_, bool>(0), claimed[0].get::<_, String>(1)), (true, "running".to_string()));
    let succeeded = a
        .query(
            "select * from asyncflow.type_finish__staged($1, $2, $3, $4, $5, $6, $7, $8, $9)",
            &[
                &"w",
                &vec![last[2].task_id.shard()],
                &vec![last[2].task_id.number()],
                &vec![last[2].claim_seq],
                &vec![Some("succeed")],
                &vec![Some(json!(7))],
                &vec![None::<&str>],
                &vec![None::<serde_json::Value>],
                &vec![Some(0.002f64)],
            ],
        )
        .await
        .unwrap();
    assert!(succeeded.is_empty());
    a.batch_execute("commit").await.unwrap();
    let timed = task(&**b, last[0].task_id.as_str()).await;
    assert_eq!(timed["schedule_log"][0]["cost_ms"], 1001, "{timed}");
    assert_eq!(task(&**b, last[1].task_id.as_str()).await["status"], "running");
    let old = task(&**b, last[2].task_id.as_str()).await;
    assert_eq!((old["status"].clone(), old["result"].clone()), (json!("succeeded"), json!(7)));

    // arrays of more than one dimension are refused, not flattened
    a.batch_execute("begin").await.unwrap();
    let err = a
        .query(
            "select * from asyncflow.type_finish__staged('w', array[[1]], array[[1::bigint]], array[[1]], \
             array[['succeed']], array[[null::jsonb]], array[[null::text]], array[[null::jsonb]], array[[null::float8]])",
            &[],
        )
        .await
        .expect_err("refused");
    assert_eq!(sqlstate(&err), "AF006", "{err}");
    a.batch_execute("rollback").await.unwrap();

    // an outcome a hold does not write is refused whole, and nothing changes
    a.batch_execute("begin").await.unwrap();
    let err = a
        .query(
            "select * from asyncflow.type_finish__staged('w', array[1], array[1::bigint], array[1], array['fail'], \
             array[null::jsonb], array[null::text], array[null::jsonb], array[null::float8])",
            &[],
        )
        .await
        .expect_err("refused");
    assert_eq!(sqlstate(&err), "AF006", "{err}");
    a.batch_execute("rollback").await.unwrap();
}

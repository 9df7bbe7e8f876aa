//! Held claims: locked, not written, and finished in one statement.
use super::*;

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
            (&t[0].task_id, t[0].claim_seq, Some(&ok_reply), Some(0.002), None),
            (&t[1].task_id, t[1].claim_seq, None, None, None),
            (&t[2].task_id, t[2].claim_seq, Some(&big), Some(0.5), None),
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
    let fences: Vec<_> = again.iter().map(|(t, _)| (&t.task_id, t.claim_seq, Some(&ok_reply), None, None)).collect();
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
    let wrong: Vec<_> = again.iter().map(|(t, _)| (&t.task_id, t.claim_seq + 5, Some(&ok_reply), None, None)).collect();
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
    let fences: Vec<_> = held.iter().map(|(t, _)| (&t.task_id, t.claim_seq, Some(&ok_reply), None, None)).collect();
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
            (&held[0].task_id, held[0].claim_seq, Some(&with_context), Some(0.003), None),
            (&held[1].task_id, held[1].claim_seq, Some(&keeps_context), Some(0.001), None),
            (&held[2].task_id, held[2].claim_seq, Some(&bad_stage), Some(0.001), None),
            (&held[3].task_id, held[3].claim_seq, Some(&big_context), Some(0.001), None),
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
    let fences: Vec<_> = again.iter().map(|(t, _)| (&t.task_id, t.claim_seq, Some(&done), Some(0.001), None)).collect();
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
        api::finish_held(&a, &ty, &w, &[(&last[0].task_id, last[0].claim_seq, Some(&with_result), Some(1.0015), None)])
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

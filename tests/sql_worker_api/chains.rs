//! A finish's chained stages (`passed`): stages a worker ran at once within its hold are written
//! as their reports would have written them; a `passed` that breaks the rules is refused, and
//! its task left as it was.
use super::*;

/// A `passed` value: the stage reached, its context, when its call began, and the stages passed.
fn passed(stage: &str, context: Value, start_ms: u64, log: &[(&str, u64, u64)]) -> Value {
    let log: Vec<Value> =
        log.iter().map(|(s, start, cost)| json!({"stage": s, "start_ms": start, "cost_ms": cost})).collect();
    json!({"stage": stage, "context": context, "start_ms": start_ms, "log": log})
}

#[tokio::test]
async fn a_finish_writes_the_stages_a_worker_chained_and_refuses_a_passed_that_breaks_the_rules() {
    let db = TestDb::new().await;
    let a = db.conn().await;
    let b = db.conn().await;
    register(&**a, "chained", json!({"max_processing_time": 60})).await;
    let ty = asyncflow::TypeName::new("chained").unwrap();
    let new = asyncflow::task::NewTask { context: Some(json!({"n": 0})), ..Default::default() };
    api::create_tasks(&a, "chained", &vec![new; 7]).await.unwrap();
    let w = worker("w");

    a.batch_execute("begin").await.unwrap();
    let held: Vec<_> = api::hold_tasks(&a, &ty, &w, 10).await.unwrap().into_iter().map(|(t, _)| t).collect();
    assert_eq!(held.len(), 7);
    let done = ReportKind::Succeed { result: json!("ok") };
    let on = ReportKind::Advance { stage: "s4".into(), context: Some(json!({"n": 4})) };
    let two_passed = passed("s3", json!({"n": 2}), 5, &[("start", 0, 2), ("s2", 2, 3)]);
    let one_passed = passed("s2", Value::Null, 1, &[("start", 0, 1)]);
    let bad_stage = passed("no spaces", Value::Null, 1, &[("start", 0, 1)]);
    let log_not_array = json!({"stage": "s2", "context": null, "start_ms": 1, "log": "start"});
    let not_object = json!(5);
    let big_context = passed("s2", json!({"blob": "x".repeat(2 * 1024 * 1024)}), 1, &[("start", 0, 1)]);
    let answers = api::finish_held(
        &a,
        &ty,
        &w,
        &[
            // start → s2 → s3 in the worker, then a success at s3
            (&held[0].task_id, held[0].claim_seq, Some(&done), Some(0.007), Some(&two_passed)),
            // start → s2 in the worker, whose call is still running: claimed at s2
            (&held[1].task_id, held[1].claim_seq, None, None, Some(&one_passed)),
            // start → s2 → s3 in the worker, then an advance to s4
            (&held[2].task_id, held[2].claim_seq, Some(&on), Some(0.009), Some(&two_passed)),
            (&held[3].task_id, held[3].claim_seq, Some(&done), Some(0.002), Some(&bad_stage)),
            (&held[4].task_id, held[4].claim_seq, Some(&done), Some(0.002), Some(&log_not_array)),
            (&held[5].task_id, held[5].claim_seq, Some(&done), Some(0.002), Some(&not_object)),
            (&held[6].task_id, held[6].claim_seq, Some(&done), Some(0.002), Some(&big_context)),
        ],
    )
    .await
    .unwrap();
    a.batch_execute("commit").await.unwrap();
    let refused: Vec<_> = answers.iter().map(|r| (r.task_id.as_str(), r.accepted)).collect();
    let expected: Vec<_> = held[3..].iter().map(|t| (t.task_id.as_str(), false)).collect();
    assert_eq!(refused, expected, "only the tasks with a bad passed are answered: refused");

    let entries = |t: &Value| -> Vec<(String, String, i64, i64)> {
        t["schedule_log"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|e| {
                (
                    e["stage"].as_str().unwrap_or_default().to_string(),
                    e["outcome"].as_str().unwrap_or_default().to_string(),
                    e["attempt"].as_i64().unwrap_or(-1),
                    e["cost_ms"].as_i64().unwrap_or(-1),
                )
            })
            .collect()
    };
    let s = |v: &str| v.to_string();

    let succeeded = task(&**b, held[0].task_id.as_str()).await;
    assert_eq!(
        (&succeeded["status"], &succeeded["stage"], &succeeded["context"], &succeeded["result"]),
        (&json!("succeeded"), &json!("s3"), &json!({"n": 2}), &json!("ok"))
    );
    assert_eq!(
        entries(&succeeded),
        vec![(s("start"), s("advance"), 1, 2), (s("s2"), s("advance"), 1, 3), (s("s3"), s("succeed"), 1, 2)],
        "{succeeded}"
    );
    // each entry starts where the one before it ended
    let log = succeeded["schedule_log"].as_array().cloned().unwrap_or_default();
    let starts: Vec<_> = log.iter().map(|e| at(e, "start")).collect();
    assert_eq!(starts[1] - starts[0], chrono::Duration::milliseconds(2), "{succeeded}");
    assert_eq!(starts[2] - starts[1], chrono::Duration::milliseconds(3), "{succeeded}");

    let running = task(&**b, held[1].task_id.as_str()).await;
    assert_eq!(
        (&running["status"], &running["stage"], &running["context"], &running["attempt"]),
        (&json!("running"), &json!("s2"), &json!({"n": 0}), &json!(1))
    );
    assert_eq!(entries(&running), vec![(s("start"), s("advance"), 1, 1)]);
    // its call's reply is reported as usual, with the hold's token
    let r = api::report_tasks(&b, &w, &[rep(held[1].task_id.as_str(), held[1].claim_seq, done.clone())], None)
        .await
        .unwrap();
    assert!(r[0].accepted && r[0].status == Some(TaskStatus::Succeeded), "{r:?}");
    let ended = task(&**b, held[1].task_id.as_str()).await;
    assert_eq!(entries(&ended).iter().map(|e| e.0.clone()).collect::<Vec<_>>(), vec![s("start"), s("s2")]);

    let advanced = task(&**b, held[2].task_id.as_str()).await;
    assert_eq!(
        (&advanced["status"], &advanced["stage"], &advanced["context"], &advanced["attempt"]),
        (&json!("pending"), &json!("s4"), &json!({"n": 4}), &json!(0))
    );
    assert_eq!(
        entries(&advanced),
        vec![(s("start"), s("advance"), 1, 2), (s("s2"), s("advance"), 1, 3), (s("s3"), s("advance"), 1, 4)]
    );

    // refused: as they were before the hold (pending at start, nothing logged, no try counted)
    for t in &held[3..] {
        let row = task(&**b, t.task_id.as_str()).await;
        assert_eq!(
            (&row["status"], &row["stage"], &row["attempt"], &row["context"]),
            (&json!("pending"), &json!("start"), &json!(0), &json!({"n": 0})),
            "{row}"
        );
        assert_eq!(row["schedule_log"], json!([]));
    }

    // every call written is in the stage-time histogram, under the stage it ran: start for the
    // three tasks, s2 for all three (the running one by its report), s3 for two
    let calls = common::stage_calls(&**b, "chained").await;
    assert_eq!(calls, vec![(s("s2"), 3), (s("s3"), 2), (s("start"), 3)]);
}

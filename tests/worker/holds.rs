//! Held claims in the worker: the hold window, chained stages, a producer that waits for its hold.
use super::*;

/// Held claims (on the database, the default): the calls that end within the hold window are
/// written with it (succeeded from pending, one row change, no report of their own); slower
/// ones are claimed as running when the window passes and report as usual.
#[tokio::test]
async fn calls_within_the_hold_window_end_with_it_and_slower_ones_are_claimed_running() {
    let db = TestDb::new().await;
    let stop = CancellationToken::new();
    let worker = Worker::new(
        db.pool.clone(),
        db.url.clone(),
        WorkerConfig { hold_window: Duration::from_millis(50), exit_when_idle: true, ..config(20) },
    )
    .register(
        TypeName::new("mixed").unwrap(),
        |call: StageCall| async move {
            let n = call.context["n"].as_u64().unwrap_or(0);
            if n.is_multiple_of(4) {
                tokio::time::sleep(Duration::from_millis(600)).await;
            }
            StageReply::Succeeded { result: json!({"n": n, "attempt": call.attempt}) }
        },
        None,
        fast(TaskTypeUpdate::default()),
    );
    api::register_task_type(&db.conn().await, &TypeName::new("mixed").unwrap(), &fast(TaskTypeUpdate::default()))
        .await
        .unwrap();
    let tasks: Vec<NewTask> =
        (0..20).map(|n| NewTask { context: Some(json!({"n": n})), ..Default::default() }).collect();
    let ids = api::create_tasks(&db.conn().await, "mixed", &tasks).await.unwrap();
    let running = tokio::spawn(worker.run(stop.clone()));
    let c = db.raw().await;
    let count = |status: &'static str| {
        let c = &c;
        async move {
            let n: i64 = c
                .query_one("select count(*) from asyncflow.tasks where status::text = $1", &[&status])
                .await
                .unwrap()
                .get(0);
            n
        }
    };
    // past the window, while the slow calls run: the fast ones succeeded, the slow ones are
    // running under the worker's name
    wait_until(Duration::from_secs(10), "the slow calls' tasks claimed", || async {
        count("running").await == 5 && count("succeeded").await == 15
    })
    .await;
    let owners: i64 = c
        .query_one("select count(*) from asyncflow.tasks where status = 'running' and owner = 'test-worker'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(owners, 5);
    let summary = running.await.unwrap().unwrap();
    assert_eq!((summary.claimed, summary.succeeded, summary.refused), (20, 20, 0), "{summary:?}");
    assert!(all_final(&db, &ids).await);
    for id in &ids {
        let task = api::get_task(&db.conn().await, id.as_str()).await.unwrap().unwrap();
        assert_eq!(task.status, TaskStatus::Succeeded);
        assert_eq!(task.result.as_ref().map(|r| r["attempt"].clone()), Some(json!(1)), "{task:?}");
    }
    // One row change per fast task, two per slow one (claimed at the hold's end, then its
    // report): 25, where claims without holds make 40.
    assert_eq!(row_updates(&c, "mixed", 25).await, 25);
}

/// The settings of a type that chains its stages speculatively.
fn chained() -> TaskTypeUpdate {
    fast(TaskTypeUpdate { speculative_chaining: Some(true), ..Default::default() })
}

/// Chained stages (a type with speculative_chaining): a call that goes on to a next stage while
/// its hold is open has that stage run at once, in the same hold, so a three-stage task whose calls are quick is claimed once and
/// costs one row change (a claim and a report per stage would make six), and ends as reported
/// ones do: each stage in its schedule log, the contexts carried, each call in the histogram.
#[tokio::test]
async fn quick_stages_chain_within_their_hold_and_a_task_costs_one_row_change() {
    let db = TestDb::new().await;
    let ty = TypeName::new("steps").unwrap();
    let worker = Worker::new(
        db.pool.clone(),
        db.url.clone(),
        WorkerConfig { hold_window: Duration::from_millis(500), exit_when_idle: true, ..config(20) },
    )
    .register(
        ty.clone(),
        |call: StageCall| async move {
            let n = call.context["n"].as_u64().unwrap_or(0);
            match call.stage.as_str() {
                "start" => {
                    StageReply::Next { next_stage: "two".into(), context: Some(json!({"n": n, "seen": ["start"]})) }
                }
                "two" => StageReply::Next { next_stage: "three".into(), context: None },
                _ => {
                    StageReply::Succeeded { result: json!({"n": n, "context": call.context, "attempt": call.attempt}) }
                }
            }
        },
        None,
        chained(),
    );
    api::register_task_type(&db.conn().await, &ty, &chained()).await.unwrap();
    let tasks: Vec<NewTask> =
        (0..10).map(|n| NewTask { context: Some(json!({"n": n})), ..Default::default() }).collect();
    let ids = api::create_tasks(&db.conn().await, "steps", &tasks).await.unwrap();
    let summary = worker.run(CancellationToken::new()).await.unwrap();
    assert_eq!((summary.advanced, summary.succeeded, summary.refused), (20, 10, 0), "{summary:?}");
    assert_eq!(summary.claimed, 10, "each task claimed once: {summary:?}");
    for (n, id) in ids.iter().enumerate() {
        let task = api::get_task(&db.conn().await, id.as_str()).await.unwrap().unwrap();
        assert_eq!(task.status, TaskStatus::Succeeded);
        // the context the first stage wrote, kept by the second; the last stage's first try
        assert_eq!(
            task.result,
            Some(json!({"n": n, "context": {"n": n, "seen": ["start"]}, "attempt": 1})),
            "{task:?}"
        );
        assert_eq!(task.stage, "three");
        let log: Vec<(String, String, i32, String)> = task
            .schedule_log
            .iter()
            .map(|e| {
                (
                    e.stage.clone().unwrap_or_default(),
                    e.outcome.clone().unwrap_or_default(),
                    e.attempt.unwrap_or_default(),
                    e.worker.clone().unwrap_or_default(),
                )
            })
            .collect();
        let expected = [("start", "advance"), ("two", "advance"), ("three", "succeed")];
        assert_eq!(
            log,
            expected.map(|(s, o)| (s.to_string(), o.to_string(), 1, "test-worker".to_string())),
            "{task:?}"
        );
        // the entries follow one another in time
        let starts: Vec<_> = task.schedule_log.iter().map(|e| e.start).collect();
        assert!(starts.windows(2).all(|w| w[0] <= w[1]), "{starts:?}");
        assert_eq!(task.attempt, 1);
    }
    // one row change per task, where a claim and a report per stage make six
    let c = db.raw().await;
    assert_eq!(row_updates(&c, "steps", 10).await, 10);
    // every call in the stage-time histogram, under the stage it ran
    let calls = common::stage_calls(&c, "steps").await;
    assert_eq!(calls, vec![("start".to_string(), 10), ("three".to_string(), 10), ("two".to_string(), 10)]);
}

/// A chained stage that outlasts the hold: the hold ends with the task claimed (running) at that
/// stage, the stage before it written, and the slow call's reply is reported as usual. Each
/// stage runs once.
#[tokio::test]
async fn a_chained_stage_slower_than_the_hold_is_claimed_at_its_stage_and_reported() {
    let db = TestDb::new().await;
    let ty = TypeName::new("slowtwo").unwrap();
    let calls = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let seen = calls.clone();
    let worker = Worker::new(
        db.pool.clone(),
        db.url.clone(),
        WorkerConfig { hold_window: Duration::from_millis(100), exit_when_idle: true, ..config(4) },
    )
    .register(
        ty.clone(),
        move |call: StageCall| {
            let seen = seen.clone();
            async move {
                seen.lock().unwrap().push(format!("{} {}", call.stage, call.attempt));
                match call.stage.as_str() {
                    "start" => StageReply::Next { next_stage: "slow".into(), context: Some(json!({"step": 1})) },
                    _ => {
                        tokio::time::sleep(Duration::from_millis(600)).await;
                        StageReply::Succeeded { result: call.context }
                    }
                }
            }
        },
        None,
        TaskTypeUpdate { max_processing_time: Some(30), ..chained() },
    );
    api::register_task_type(&db.conn().await, &ty, &chained()).await.unwrap();
    let id = api::create_task(&db.conn().await, "slowtwo", &NewTask::default()).await.unwrap();
    let watcher = {
        let db_conn = db.conn().await;
        let id = id.clone();
        tokio::spawn(async move {
            // while the slow call runs, the task reads as running at the chained stage
            for _ in 0..100 {
                let task = api::get_task(&db_conn, id.as_str()).await.unwrap().unwrap();
                if task.status == TaskStatus::Running {
                    return Some((task.stage, task.attempt, task.schedule_log.len()));
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            None
        })
    };
    let summary = worker.run(CancellationToken::new()).await.unwrap();
    assert_eq!((summary.advanced, summary.succeeded, summary.refused), (1, 1, 0), "{summary:?}");
    assert_eq!(watcher.await.unwrap(), Some(("slow".to_string(), 1, 1)), "running at the chained stage");
    assert_eq!(*calls.lock().unwrap(), vec!["start 1".to_string(), "slow 1".to_string()], "each stage once");
    let task = api::get_task(&db.conn().await, id.as_str()).await.unwrap().unwrap();
    assert_eq!(task.status, TaskStatus::Succeeded);
    assert_eq!(task.result, Some(json!({"step": 1})));
    let log: Vec<_> = task.schedule_log.iter().map(|e| (e.stage.clone(), e.outcome.clone())).collect();
    assert_eq!(
        log,
        vec![(Some("start".into()), Some("advance".into())), (Some("slow".into()), Some("succeed".into()))]
    );
    // the success's entry times the slow call alone
    let cost = task.schedule_log[1].cost_ms.unwrap_or_default();
    assert!((550.0..5000.0).contains(&cost), "{cost}");
}

/// While a hold is open its tasks are pending and ready: a producer whose claim came back short
/// waits (at most the window) instead of claiming again and again for as long as the hold lasts.
#[tokio::test]
async fn a_producer_does_not_spin_while_a_hold_is_open() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    let ty = TypeName::new("patient").unwrap();
    api::register_task_type(&db.conn().await, &ty, &fast(TaskTypeUpdate::default())).await.unwrap();
    api::create_tasks(&db.conn().await, "patient", &vec![NewTask::default(); 3]).await.unwrap();
    let before = commits(&c).await;
    let worker = Worker::new(
        db.pool.clone(),
        db.url.clone(),
        WorkerConfig { hold_window: Duration::from_millis(400), exit_when_idle: true, ..config(10) },
    )
    .register(
        ty,
        |_call: StageCall| async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            StageReply::Succeeded { result: json!(null) }
        },
        None,
        fast(TaskTypeUpdate::default()),
    );
    let summary = worker.run(CancellationToken::new()).await.unwrap();
    assert_eq!(summary.succeeded, 3);
    let spent = commits(&c).await - before;
    // a few claims, next_due and idle checks; spinning through the 300 ms made hundreds
    assert!(spent < 40, "{spent} transactions");
}

/// Replies PostgreSQL cannot hold (a NUL in a result, in an advance's context or in its stage
/// name) are not taken by the hold, whose finish would fail for the whole batch and have the
/// same tasks claimed and called again and again: they go to the reporter, which counts a
/// failed try for those tasks alone, and the rest of the batch is written.
#[tokio::test]
async fn a_reply_postgres_cannot_hold_is_a_failed_try_and_does_not_stall_the_hold() {
    let db = TestDb::new().await;
    let stop = CancellationToken::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let ty = TypeName::new("nul_replies").unwrap();
    let worker = Worker::new(
        db.pool.clone(),
        db.url.clone(),
        WorkerConfig { hold_window: Duration::from_millis(300), exit_when_idle: true, ..config(10) },
    )
    .register(
        ty.clone(),
        move |call: StageCall| {
            counted.fetch_add(1, Ordering::SeqCst);
            async move {
                match (call.stage.as_str(), call.context["n"].as_u64().unwrap_or(0)) {
                    ("start", 0) => StageReply::Succeeded { result: json!({"a": "x\u{0}y"}) },
                    ("start", 1) => StageReply::Next { next_stage: "two".into(), context: Some(json!({"k": "\u{0}"})) },
                    ("start", 2) => StageReply::Next { next_stage: "tw\u{0}o".into(), context: None },
                    // against the stage rule: the finish refuses it, the report then fails the try
                    ("start", 3) => StageReply::Next { next_stage: "bad stage!".into(), context: None },
                    ("start", _) => StageReply::Next { next_stage: "two".into(), context: None },
                    _ => StageReply::Succeeded { result: json!({"ok": true}) },
                }
            }
        },
        None,
        fast(TaskTypeUpdate::default()),
    );
    api::register_task_type(&db.conn().await, &ty, &fast(TaskTypeUpdate::default())).await.unwrap();
    let tasks: Vec<NewTask> =
        (0..7).map(|n| NewTask { context: Some(json!({"n": n})), ..Default::default() }).collect();
    let ids = api::create_tasks(&db.conn().await, "nul_replies", &tasks).await.unwrap();
    let summary = tokio::time::timeout(Duration::from_secs(30), worker.run(stop.clone()))
        .await
        .expect("the worker ends: no task is claimed again and again")
        .unwrap();
    // each stage claimed once: four bad replies refused, three good tasks through both stages
    // (each stage a claim of its own: no speculative chaining by default)
    assert_eq!((summary.claimed, summary.succeeded, summary.retried), (10, 3, 4), "{summary:?}");
    assert_eq!(calls.load(Ordering::SeqCst), 10, "each stage called once");
    for (n, id) in ids.iter().enumerate() {
        let task = api::get_task(&db.conn().await, id.as_str()).await.unwrap().unwrap();
        if n <= 3 {
            // a failed try, as for any reply the database refuses: back in the queue for its
            // retries, with the reason
            assert_eq!((task.status, task.retry_count), (TaskStatus::Pending, 1), "{n}: {task:?}");
            let error = task.error.clone().unwrap_or_default();
            let reason = if n == 3 { "stage must match" } else { "NUL" };
            assert!(error.starts_with("the reply was refused: ") && error.contains(reason), "{n}: {error}");
        } else {
            assert_eq!(task.status, TaskStatus::Succeeded, "{n}: {task:?}");
            assert_eq!(task.result, Some(json!({"ok": true})), "{n}");
        }
    }
}

//! Claims: order, plans that read only their rows, mixed batches, concurrent claimers.
use super::*;

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
                        progress: None,
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

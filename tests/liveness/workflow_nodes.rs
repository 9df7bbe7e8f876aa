//! Workflow nodes: timeouts count calls, pinned versions keep running, callbacks are sent and delivered.
use super::*;

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

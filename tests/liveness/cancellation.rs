//! Cancellation: a cancelled task or run stops its running call within a second, whatever runs it.
use super::*;

/// Whether process `pid` has ended (gone, or a zombie waiting to be reaped).
fn process_ended(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

/// A worker of one executable function `sleeper` (writes its pid to `pid`, then sleeps 200 s)
/// with the default lease (300 s); returns the pid file's path, the worker and its stop token.
async fn sleeper_worker(
    db: &TestDb,
    dir: &std::path::Path,
) -> (std::path::PathBuf, tokio::task::JoinHandle<asyncflow::Result<asyncflow::worker::WorkerSummary>>, CancellationToken)
{
    use std::os::unix::fs::PermissionsExt;
    let pid_file = dir.join("pid");
    let script = dir.join("run");
    std::fs::write(&script, format!("#!/bin/sh\necho $$ > {}\nexec sleep 200\n", pid_file.display())).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let function = std::sync::Arc::new(asyncflow::function::exec::ExecFunction::new(
        "sleeper",
        vec![script.display().to_string()],
        dir.to_path_buf(),
        1 << 20,
    ));
    let stop = CancellationToken::new();
    let config = WorkerConfig { worker_id: WorkerId::new("cancel-worker").unwrap(), ..WorkerConfig::default() };
    let worker = Worker::new(db.pool.clone(), db.url.clone(), config).register_arc(
        TypeName::new("sleeper").unwrap(),
        function,
        None,
        TaskTypeUpdate { schedule_interval: Some(0.2), ..Default::default() },
        "test",
    );
    let running = run_registered(&db, worker, &stop).await;
    (pid_file, running, stop)
}

/// The running function's pid, once it has written it.
async fn started_pid(pid_file: &std::path::Path) -> i32 {
    let mut pid = 0;
    wait_until(Duration::from_secs(10), "the function started", || {
        let read = std::fs::read_to_string(pid_file).ok().and_then(|s| s.trim().parse::<i32>().ok());
        if let Some(p) = read {
            pid = p;
        }
        async move { read.is_some() }
    })
    .await;
    pid
}

/// Cancelling a running task stops its executable within a second (the default 300 s lease: a
/// heartbeat would have found out after 100 s), and the type's slot is free at once.
#[tokio::test]
async fn cancelling_a_running_task_kills_its_process_within_a_second() {
    let db = TestDb::new().await;
    let dir = std::env::temp_dir().join(format!("af-cancel-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let (pid_file, running, stop) = sleeper_worker(&db, &dir).await;
    let id = api::create_task(&db.conn().await, "sleeper", &NewTask::default()).await.unwrap();
    let pid = started_pid(&pid_file).await;
    assert!(!process_ended(pid));
    let cancelled_at = std::time::Instant::now();
    assert!(api::cancel_task(&db.conn().await, id.as_str()).await.unwrap());
    while !process_ended(pid) {
        assert!(cancelled_at.elapsed() < Duration::from_secs(5), "the call ran on after its task was cancelled");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let took = cancelled_at.elapsed();
    eprintln!("from cancel_task to the process's end: {took:?}");
    assert!(took < Duration::from_secs(1), "{took:?}");
    stop.cancel();
    running.await.unwrap().unwrap();
    let t = api::get_task(&db.conn().await, id.as_str()).await.unwrap().unwrap();
    assert_eq!(t.status, TaskStatus::Cancelled);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A Rust handler's cancel token fires when its task is cancelled, so work it started outside
/// its future stops too.
#[tokio::test]
async fn a_rust_handler_is_told_when_its_task_is_cancelled() {
    let db = TestDb::new().await;
    let told = std::sync::Arc::new(tokio::sync::Notify::new());
    let tell = told.clone();
    let stop = CancellationToken::new();
    let config = WorkerConfig { worker_id: WorkerId::new("token-worker").unwrap(), ..WorkerConfig::default() };
    let worker = Worker::new(db.pool.clone(), db.url.clone(), config).register(
        TypeName::new("watched").unwrap(),
        move |call: StageCall| {
            let tell = tell.clone();
            async move {
                let cancel = call.cancel.clone();
                tokio::spawn(async move {
                    cancel.cancelled().await;
                    tell.notify_one();
                });
                tokio::time::sleep(Duration::from_secs(200)).await;
                StageReply::Succeeded { result: json!(null) }
            }
        },
        None,
        TaskTypeUpdate { schedule_interval: Some(0.2), ..Default::default() },
    );
    let running = run_registered(&db, worker, &stop).await;
    let id = api::create_task(&db.conn().await, "watched", &NewTask::default()).await.unwrap();
    wait_until(Duration::from_secs(10), "running", || async {
        api::get_task(&db.conn().await, id.as_str()).await.unwrap().unwrap().status == TaskStatus::Running
    })
    .await;
    assert!(api::cancel_task(&db.conn().await, id.as_str()).await.unwrap());
    tokio::time::timeout(Duration::from_secs(1), told.notified()).await.expect("the handler's token fired within 1 s");
    stop.cancel();
    running.await.unwrap().unwrap();
}

/// Cancelling a workflow run stops the call of its running node within a second, as cancelling
/// the task does (every way a run takes a task away goes through cancel_task).
#[tokio::test]
async fn cancelling_a_run_kills_its_running_nodes_process_within_a_second() {
    let db = TestDb::new().await;
    let dir = std::env::temp_dir().join(format!("af-cancel-run-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let (pid_file, running, stop) = sleeper_worker(&db, &dir).await;
    let c = db.raw().await;
    let definition = json!({"nodes": [{"name": "start", "type": "start"},
        {"name": "nap", "type": "task", "function": "sleeper"}, {"name": "end", "type": "end"}],
        "edges": [["start", "nap"], ["nap", "end"]]});
    c.execute("select asyncflow.put_pipeline('naps', $1)", &[&definition]).await.unwrap();
    let run_id: String = c.query_one("select asyncflow.start_run('naps', '{}'::jsonb)", &[]).await.unwrap().get(0);
    let pid = started_pid(&pid_file).await;
    let cancelled_at = std::time::Instant::now();
    let cancelled: bool = c.query_one("select asyncflow.cancel_run($1)", &[&run_id]).await.unwrap().get(0);
    assert!(cancelled);
    while !process_ended(pid) {
        assert!(cancelled_at.elapsed() < Duration::from_secs(5), "the node's call ran on after its run was cancelled");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let took = cancelled_at.elapsed();
    eprintln!("from cancel_run to the process's end: {took:?}");
    assert!(took < Duration::from_secs(1), "{took:?}");
    stop.cancel();
    running.await.unwrap().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

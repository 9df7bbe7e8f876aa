//! Holds that wait (`POST /v1/worker/hold` with `wait`, a long-poll): a worker on a server starts
//! a task committed on an idle queue at once, not at its type's next poll; a SIGTERM does not
//! wait for the hold; the protocol's answers with and without a LISTEN behind the server.
use super::*;

/// A poll interval no test can wait for: a start within seconds came from a wake-up.
const POLL_SECS: f64 = 30.0;
/// How long a start may take in these tests: well under the poll interval.
const START_BOUND: Duration = Duration::from_secs(5);

/// A server, a `worker --server` on type `name` (polling every 30 s) and its functions folder,
/// after the worker has run a first task: from then on its queue is idle.
async fn idle_remote_worker(db: &TestDb, name: &str, id: &str) -> (Server, Child, Folder) {
    let port = free_port();
    let server = Server::start(db, port).await;
    let toml = format!("command = [\"./run\"]\n[settings]\nschedule_interval = {POLL_SECS}\n");
    let dir = folder(name, &toml, "cat > /dev/null; echo '{\"result\": 1}'");
    register(db, name, TaskTypeUpdate { schedule_interval: Some(POLL_SECS), ..Default::default() }).await;
    let child = worker(&format!("http://127.0.0.1:{port}"), &dir.0, id, &[]);
    let first = api::create_task(&db.conn().await, name, &NewTask::default()).await.unwrap();
    wait_until(Duration::from_secs(30), "the worker's first task", || async {
        succeeded(db, std::slice::from_ref(&first)).await == 1
    })
    .await;
    (server, child, dir)
}

async fn status(db: &TestDb, id: &TaskId) -> TaskStatus {
    api::get_task(&db.conn().await, id.as_str()).await.unwrap().unwrap().status
}

/// Without a hold that waits, the task below would wait for the worker's next poll, 30 s on.
#[tokio::test]
async fn a_worker_on_a_server_starts_a_task_committed_on_an_idle_queue_at_once_not_at_its_poll() {
    let db = TestDb::new().await;
    let (_server, child, _dir) = idle_remote_worker(&db, "idle", "waker").await;
    // past the first task's report: the worker's producer is waiting, not claiming
    tokio::time::sleep(Duration::from_millis(300)).await;
    let committed = Instant::now();
    let id = api::create_task(&db.conn().await, "idle", &NewTask::default()).await.unwrap();
    wait_until(START_BOUND, "the task started", || async { status(&db, &id).await != TaskStatus::Pending }).await;
    eprintln!("commit -> claimed on an idle worker on a server: {:?}", committed.elapsed());
    wait_until(START_BOUND, "the task succeeded", || async { status(&db, &id).await == TaskStatus::Succeeded }).await;
    common::process::signal(&child, nix::sys::signal::Signal::SIGTERM);
    let (exit, out, err) = wait_child(child, Duration::from_secs(30)).await;
    assert!(exit.success(), "exit status {exit:?}: {err}");
    assert!(out.contains("\"succeeded\":2"), "{out}");
}

/// A hold waits up to 20 s on the server; a SIGTERM ends the worker without waiting for it, and
/// the server drops the hold with its connection, so it claims nothing for a worker gone.
#[tokio::test]
async fn sigterm_ends_a_worker_on_a_server_at_once_while_its_hold_waits() {
    let db = TestDb::new().await;
    let (_server, child, _dir) = idle_remote_worker(&db, "quiet", "leaver").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let signalled = Instant::now();
    common::process::signal(&child, nix::sys::signal::Signal::SIGTERM);
    let (exit, out, err) = wait_child(child, START_BOUND).await;
    eprintln!("SIGTERM -> exit of a worker on a server whose hold waited: {:?}", signalled.elapsed());
    assert!(exit.success(), "exit status {exit:?}: {err}");
    assert!(out.contains("\"stopped_by\":\"Shutdown\""), "{out}");
    let id = api::create_task(&db.conn().await, "quiet", &NewTask::default()).await.unwrap();
    // a hold left waiting on the server would claim this within milliseconds of its commit
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(status(&db, &id).await, TaskStatus::Pending, "claimed for a worker that is gone");
}

/// `wait` over HTTP: answered as soon as a task is committed, empty when the wait runs out
/// (even past the server's header and body timeouts, which bound the request's arrival, not
/// its answer), at once without it (as before), and bounded.
#[tokio::test]
async fn a_hold_that_waits_answers_when_a_task_is_committed_and_empty_when_its_wait_runs_out() {
    let db = TestDb::new().await;
    let port = free_port();
    let _server = Server::start_with(&db, port, &["--header-timeout", "1s", "--body-timeout", "1s"]).await;
    register(&db, "lp", TaskTypeUpdate { schedule_interval: Some(POLL_SECS), ..Default::default() }).await;
    let url = format!("http://127.0.0.1:{port}/v1/worker/hold");
    let hold = |body: Value| {
        let request = reqwest::Client::new().post(&url).bearer_auth(TOKEN).json(&body);
        async move {
            let answer = request.send().await.unwrap();
            (answer.status().as_u16(), answer.json::<Value>().await.unwrap())
        }
    };
    let started = Instant::now();
    let (s, held) = hold(json!({"type": "lp", "worker_id": "w", "wait": 1.5})).await;
    assert_eq!((s, &held["tasks"]), (200, &json!([])), "{held}");
    assert!(started.elapsed() >= Duration::from_millis(1490), "it waited: {:?}", started.elapsed());
    let (s, held) = hold(json!({"type": "lp", "worker_id": "w"})).await;
    assert_eq!((s, &held["tasks"]), (200, &json!([])), "no wait: answered at once, as before");

    let waiting = tokio::spawn(hold(json!({"type": "lp", "worker_id": "w", "wait": 20})));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let committed = Instant::now();
    let id = api::create_task(&db.conn().await, "lp", &NewTask::default()).await.unwrap();
    let (s, held) = tokio::time::timeout(START_BOUND, waiting).await.expect("answered at the commit").unwrap();
    eprintln!("commit -> answer of a waiting hold: {:?}", committed.elapsed());
    assert_eq!((s, held["tasks"][0]["task_id"].as_str()), (200, Some(id.as_str())), "{held}");

    for bad in [json!(-1), json!(30.5), json!("5"), json!(null)] {
        let body = json!({"type": "lp", "worker_id": "w", "wait": bad});
        let (s, e) = hold(body).await;
        if bad.is_null() {
            assert_eq!(s, 200, "null is no wait: {e}");
        } else {
            assert_eq!(s, 400, "wait {bad}: {e}");
            let message = e["message"].as_str().unwrap();
            assert!(bad.is_string() || message.contains("wait must be 0 to 30 seconds"), "{e}");
        }
    }
    let started = Instant::now();
    let (s, e) = hold(json!({"type": "nosuch", "worker_id": "w", "wait": 5})).await;
    assert_eq!((s, e["code"].as_str()), (404, Some("unknown_task_type")), "{e}");
    assert!(started.elapsed() < Duration::from_secs(4), "an unknown type is refused before any wait");
}

/// The router alone (no LISTEN connection, as behind a pooler that cannot LISTEN): a waiting
/// hold looks again every second, so it still answers when a task is committed.
#[tokio::test]
async fn a_hold_waits_by_polling_on_a_server_without_a_listen() {
    let db = TestDb::new().await;
    register(&db, "polled", TaskTypeUpdate { schedule_interval: Some(POLL_SECS), ..Default::default() }).await;
    let app = asyncflow::http::router(db.pool.clone(), &common::http_config(&[], 64 * 1024));
    let body = json!({"type": "polled", "worker_id": "w", "wait": 20}).to_string();
    let waiting = tokio::spawn(async move {
        common::request(&app, "POST", "/v1/worker/hold", Some(body), Some("application/json"), None).await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let id = api::create_task(&db.conn().await, "polled", &NewTask::default()).await.unwrap();
    let (s, _, bytes) = tokio::time::timeout(START_BOUND, waiting).await.expect("answered by a poll").unwrap();
    let held: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!((s.as_u16(), held["tasks"][0]["task_id"].as_str()), (200, Some(id.as_str())), "{held}");
}

/// A waiting hold takes no slot while it waits (the other types' producers keep them), so it may
/// bring a task no slot is free for: that task is handed back at once (`release`, the try given
/// back) and run once a slot frees, never beside the calls that fill the worker.
#[tokio::test]
async fn a_task_a_waiting_hold_brings_beyond_the_free_slots_is_handed_back_and_runs_later() {
    use asyncflow::function::{StageCall, StageReply};
    use asyncflow::worker::{RemoteClient, Worker, WorkerConfig};
    use tokio_util::sync::CancellationToken;

    let db = TestDb::new().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let stop_server = CancellationToken::new();
    let (pool, url, stop) = (db.pool.clone(), db.url.clone(), stop_server.clone());
    let config = common::http_config(&[], 1 << 20);
    let server = tokio::spawn(async move { asyncflow::http::serve_on(listener, pool, &url, config, stop).await });

    let settings = TaskTypeUpdate { schedule_interval: Some(POLL_SECS), ..Default::default() };
    for name in ["slow", "quick"] {
        register(&db, name, settings.clone()).await;
    }
    let gate = Arc::new(tokio::sync::Notify::new());
    let opened = gate.clone();
    let worker_config =
        WorkerConfig { worker_id: asyncflow::WorkerId::new("one-slot").unwrap(), concurrency: 1, ..Default::default() };
    let worker = Worker::remote(RemoteClient::new(&base, None).unwrap(), worker_config)
        .register(
            TypeName::new("slow").unwrap(),
            move |_: StageCall| {
                let gate = opened.clone();
                async move {
                    gate.notified().await;
                    StageReply::Succeeded { result: json!("slow") }
                }
            },
            None,
            settings.clone(),
        )
        .register(
            TypeName::new("quick").unwrap(),
            |_: StageCall| async { StageReply::Succeeded { result: json!("quick") } },
            None,
            settings.clone(),
        );
    let stop_worker = CancellationToken::new();
    let running = tokio::spawn(worker.run(stop_worker.clone()));
    // both producers idle, each with a hold waiting on the server for its one free slot
    tokio::time::sleep(Duration::from_millis(500)).await;
    let slow = api::create_task(&db.conn().await, "slow", &NewTask::default()).await.unwrap();
    wait_until(START_BOUND, "the slow task running", || async { status(&db, &slow).await == TaskStatus::Running })
        .await;
    let quick = api::create_task(&db.conn().await, "quick", &NewTask::default()).await.unwrap();
    let released = || async {
        let t = api::get_task(&db.conn().await, quick.as_str()).await.unwrap().unwrap();
        t.schedule_log.iter().any(|e| e.outcome.as_deref() == Some("release"))
    };
    wait_until(START_BOUND, "the quick task handed back", released).await;
    let t = api::get_task(&db.conn().await, quick.as_str()).await.unwrap().unwrap();
    assert_eq!(
        (t.status, t.attempt),
        (TaskStatus::Pending, 0),
        "handed back, the try given back: {:?}",
        t.schedule_log
    );
    assert_eq!(status(&db, &slow).await, TaskStatus::Running, "the one slot is still the slow call's");

    gate.notify_one();
    wait_until(START_BOUND, "both succeeded", || async { succeeded(&db, &[slow.clone(), quick.clone()]).await == 2 })
        .await;
    stop_worker.cancel();
    let summary = running.await.unwrap().unwrap();
    assert_eq!((summary.claimed, summary.succeeded), (2, 2), "{summary:?}");
    stop_server.cancel();
    server.await.unwrap().unwrap();
}

//! Outages: workers and servers wait for what they need, and answer clearly while it is gone.
use super::*;

/// `serve` answers 503 (try again), not 500 (final), when the database connection drops in the
/// middle of a request: the request waits on a lock, and its backend is terminated meanwhile.
#[tokio::test]
async fn a_request_whose_database_connection_dropped_gets_503() {
    let db = TestDb::new().await;
    let app = asyncflow::http::router(db.pool.clone(), &common::http_config(&[], 64 * 1024));
    let mut blocker = db.raw().await;
    let tx = blocker.transaction().await.unwrap();
    tx.batch_execute("lock table asyncflow.task_types in access exclusive mode").await.unwrap();
    let request = tokio::spawn({
        let app = app.clone();
        async move { common::request(&app, "GET", "/v1/task-types", None, None, None).await }
    });
    let watcher = db.raw().await;
    let mut pid = None;
    for _ in 0..100 {
        let row = watcher
            .query_opt(
                "select pid from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock' \
                 and pid <> pg_backend_pid()",
                &[],
            )
            .await
            .unwrap();
        if let Some(row) = row {
            pid = Some(row.get::<_, i32>(0));
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let pid = pid.expect("the request waits on the lock");
    watcher.execute("select pg_terminate_backend($1)", &[&pid]).await.unwrap();
    let (status, _, body) = request.await.unwrap();
    tx.rollback().await.unwrap();
    let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(status, axum::http::StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["code"], "unavailable");
}

/// `asyncflow worker` started while PostgreSQL is down waits for it (saying so), and starts when
/// it comes up; SIGTERM while it waits ends it at once. (It exited 1 at once.) The database
/// "comes up" as a TCP proxy to the test server that starts listening 2 s later.
#[tokio::test]
async fn a_worker_started_before_the_database_waits_for_it_and_then_starts() {
    let db = TestDb::new().await;
    let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = probe.local_addr().unwrap().port();
    drop(probe);
    let target = {
        let config: tokio_postgres::Config = db.url.parse().unwrap();
        let host = match config.get_hosts().first() {
            Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
            _ => "127.0.0.1".to_string(),
        };
        format!("{host}:{}", config.get_ports().first().copied().unwrap_or(5432))
    };
    let via_proxy = {
        let mut url = url::Url::parse(&db.url).unwrap();
        url.set_port(Some(port)).unwrap();
        url.to_string()
    };
    let functions = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("functions");
    let log = std::env::temp_dir().join(format!("af-wait-{}.log", uuid::Uuid::new_v4().simple()));
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_asyncflow"))
        .args(["worker", "--functions"])
        .arg(&functions)
        .args(["--types", "echo", "--no-maintenance", "--exit-when-idle"])
        .env("DATABASE_URL", &via_proxy)
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut child = child;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(child.try_wait().unwrap().is_none(), "the worker waits instead of exiting");
    let waiting = std::fs::read_to_string(&log).unwrap();
    assert!(waiting.contains("waiting for the database"), "{waiting}");
    // the database comes up
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await.unwrap();
    let proxy = tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            let target = target.clone();
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "the worker did not start and finish");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(status.success(), "{}", std::fs::read_to_string(&log).unwrap_or_default());
    let registered: i64 = db
        .raw()
        .await
        .query_one("select count(*) from asyncflow.task_types where task_type = 'echo'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(registered, 1, "the worker started once the database came up");
    proxy.abort();

    // SIGTERM while waiting: it leaves at once, with 0
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_asyncflow"))
        .args(["worker", "--functions"])
        .arg(&functions)
        .args(["--types", "echo", "--no-maintenance"])
        .env("DATABASE_URL", format!("postgres://postgres@127.0.0.1:{port}/none"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(child.try_wait().unwrap().is_none());
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGTERM).unwrap();
    let stopped = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(stopped.elapsed() < Duration::from_secs(5), "SIGTERM while waiting did not end the worker");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(status.success());
    let _ = std::fs::remove_file(&log);
}

/// `worker --server` whose server is not up at start-up retries it, and SIGTERM meanwhile ends it
/// at once with 0. (It waited out its 30 s of retries, ignoring the signal.)
#[tokio::test]
async fn a_remote_worker_waiting_for_its_server_stops_at_once_on_sigterm() {
    let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = probe.local_addr().unwrap().port();
    drop(probe);
    let functions = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("functions");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_asyncflow"))
        .args(["worker", "--functions"])
        .arg(&functions)
        .args(["--types", "echo", "--server", &format!("http://127.0.0.1:{port}")])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(child.try_wait().unwrap().is_none(), "still retrying its server");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGTERM).unwrap();
    let stopped = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(stopped.elapsed() < Duration::from_secs(3), "SIGTERM did not end the waiting worker");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    eprintln!("SIGTERM to exit: {:?}", stopped.elapsed());
    assert!(status.success());
}

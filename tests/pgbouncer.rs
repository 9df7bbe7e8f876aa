//! Every asyncflow process through a real PgBouncer (Debian's package, 1.18) in transaction mode,
//! with its defaults plus `ignore_startup_parameters = extra_float_digits`
//! (`asyncflow::bench::pgbouncer`): the CLI, `migrate` (on the direct URL), `maintain`, `serve`
//! with a worker on it, and database workers, poll-only and woken by a direct `--listen-url`.
//! Processes follow each other on the pooler's server connections, where a named statement left
//! by one would make the next fail (`prepared statement "s0" already exists`).
//!
//! PgBouncer must be installed, or installable (root with apt-get: the test installs it);
//! otherwise the test fails and says so, it never passes silently.
use crate::common;

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use asyncflow::bench::pgbouncer::PgBouncer;
use asyncflow::task::NewTask;
use common::cli::ok;
use common::TestDb;

/// `asyncflow --pool-mode transaction ARGS` through the pooler (`pooled`), with `direct` as
/// --listen-url when given.
fn pooled_command(pooled: &str, direct: Option<&str>, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_asyncflow"));
    cmd.args(["--pool-mode", "transaction"])
        .args(args)
        .env("DATABASE_URL", pooled)
        .env_remove("ASYNCFLOW_SERVER")
        .env_remove("ASYNCFLOW_TOKEN")
        .env_remove("ASYNCFLOW_POOL_MODE")
        .env_remove("ASYNCFLOW_LISTEN_URL")
        .stdin(Stdio::null());
    if let Some(direct) = direct {
        cmd.args(["--listen-url", direct]);
    }
    cmd
}

fn run(pooled: &str, direct: Option<&str>, args: &[&str]) -> Output {
    pooled_command(pooled, direct, args).output().expect("run asyncflow")
}

fn spawn(pooled: &str, direct: Option<&str>, args: &[&str], log: &std::path::Path) -> Child {
    pooled_command(pooled, direct, args)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log).expect("log file"))
        .spawn()
        .expect("spawn asyncflow")
}

/// Nothing any process logged says a statement or the session went wrong under the pooler.
fn assert_clean(log: &std::path::Path) {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    for bad in ["prepared statement", "42P05", "26000", "ERROR", "panicked"] {
        assert!(!text.contains(bad), "{} says {bad:?}:\n{text}", log.display());
    }
}

async fn counts(db: &TestDb, ty: &str) -> (i64, i64) {
    let c = db.conn().await;
    let row = c
        .query_one(
            "select count(*) filter (where status = 'succeeded'), count(*) from asyncflow.tasks where task_type = $1",
            &[&ty],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

#[tokio::test]
async fn worker_maintain_serve_and_the_cli_run_through_pgbouncer_in_transaction_mode() {
    tokio::task::spawn_blocking(common::process::install_pgbouncer).await.unwrap();
    let db = TestDb::new().await;
    let bouncer = PgBouncer::start(&db.url, 4).expect("start pgbouncer");
    let pooled = bouncer.url(&db.name);
    let direct = db.url.clone();
    let logs = std::env::temp_dir().join(format!("af-pgbouncer-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&logs).unwrap();

    // migrate needs the direct URL (a session lock): refused without one, applied with it
    let refused = run(&pooled, None, &["migrate"]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--listen-url"), "{refused:?}");
    ok(&run(&pooled, Some(&direct), &["migrate"]));

    // two types: one polled every second, one that a poll would not find for a minute
    let folder = common::Folder::new(&[
        ("polled", "command = [\"./run\"]\n[settings]\nschedule_interval = 1\n", r#"echo '{"result": 1}'"#),
        ("woken", "command = [\"./run\"]\n[settings]\nschedule_interval = 60\n", r#"echo '{"result": 2}'"#),
    ]);
    let functions = folder.0.to_str().unwrap().to_string();

    // the CLI, process after process on the pooler's few server connections
    ok(&run(&pooled, None, &["type", "set", "polled", r#"{"schedule_interval": 1}"#]));
    ok(&run(&pooled, None, &["type", "set", "woken", r#"{"schedule_interval": 60}"#]));
    for i in 0..12 {
        let ty = if i % 2 == 0 { "polled" } else { "woken" };
        ok(&run(&pooled, None, &["task", "create", ty, "--context", &format!("{{\"i\": {i}}}")]));
    }
    ok(&run(&pooled, None, &["type", "list"]));
    ok(&run(&pooled, None, &["status"]));
    ok(&run(&pooled, None, &["task", "list", "--type", "polled"]));

    // maintain leads by its lease row
    let maintain_log = logs.join("maintain.log");
    let mut maintain = spawn(&pooled, None, &["maintain"], &maintain_log);
    common::wait_until(Duration::from_secs(20), "maintain to lead by its lease", || async {
        let c = db.conn().await;
        let row = c.query_opt("select id from asyncflow.maintenance_leader", &[]).await.unwrap();
        row.is_some_and(|r| r.get::<_, String>(0).ends_with(&format!("-{}", maintain.id())))
    })
    .await;

    // database workers that exit when idle: poll-only, then one more after it
    for n in 0..2 {
        let log = logs.join(format!("drain{n}.log"));
        let child = spawn(&pooled, None, &["worker", "--functions", &functions, "--exit-when-idle"], &log);
        let (status, out) = common::process::wait_child(child, Duration::from_secs(60)).await;
        assert!(status.success(), "worker exited {status:?}: {out}");
        assert_clean(&log);
    }
    assert_eq!(counts(&db, "polled").await, (6, 6));
    assert_eq!(counts(&db, "woken").await, (6, 6));

    // a long-lived worker with a direct LISTEN connection: a new task of the type polled once a
    // minute starts at once; a poll-only one finds the type polled every second within it
    let listen_log = logs.join("listening.log");
    let mut listening =
        spawn(&pooled, Some(&direct), &["worker", "--functions", &functions, "--types", "woken"], &listen_log);
    let poll_log = logs.join("polling.log");
    let mut polling = spawn(&pooled, None, &["worker", "--functions", &functions, "--types", "polled"], &poll_log);
    tokio::time::sleep(Duration::from_secs(3)).await;
    for (ty, within) in [("woken", Duration::from_secs(5)), ("polled", Duration::from_secs(5))] {
        let asked = Instant::now();
        ok(&run(&pooled, None, &["task", "create", ty]));
        common::wait_until(within, &format!("the new {ty} task to succeed"), || async {
            counts(&db, ty).await == (7, 7)
        })
        .await;
        eprintln!("{ty}: created -> succeeded in {:?}", asked.elapsed());
    }

    // serve through the pooler (no LISTEN: its holds answer at once) and a worker on it
    let served = {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let log = logs.join("serve.log");
        let child =
            spawn(&pooled, None, &["serve", "--listen", &format!("127.0.0.1:{port}"), "--insecure-no-auth"], &log);
        let base = format!("http://127.0.0.1:{port}");
        let client = reqwest::Client::new();
        let ready = format!("{base}/readyz");
        common::wait_until(Duration::from_secs(30), "serve to be ready", || async {
            client.get(&ready).send().await.map(|r| r.status().is_success()).unwrap_or(false)
        })
        .await;
        (child, base, log)
    };
    let (mut serve, base, serve_log) = served;
    for i in 0..5 {
        let context = format!("{{\"s\": {i}}}");
        ok(&common::cli::asyncflow(None, &["task", "create", "polled", "--server", &base, "--context", &context]));
    }
    let mut remote = Command::new(env!("CARGO_BIN_EXE_asyncflow"))
        .args(["worker", "--server", &base, "--functions", &functions, "--types", "polled", "--exit-when-idle"])
        .env_remove("DATABASE_URL")
        .env_remove("ASYNCFLOW_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let status = tokio::task::spawn_blocking(move || common::process::wait_exit(&mut remote, Duration::from_secs(60)))
        .await
        .unwrap();
    assert!(status.success(), "the worker on serve exited {status:?}");
    common::wait_until(Duration::from_secs(20), "every task to succeed", || async {
        counts(&db, "polled").await == (12, 12)
    })
    .await;

    for child in [&mut listening, &mut polling, &mut serve, &mut maintain] {
        common::process::signal(child, nix::sys::signal::Signal::SIGTERM);
        let status = common::process::wait_exit(child, Duration::from_secs(40));
        assert!(status.success(), "a process exited {status:?} on SIGTERM");
    }
    for log in [&maintain_log, &listen_log, &poll_log, &serve_log] {
        assert_clean(log);
    }
    drop(bouncer);
    let _ = std::fs::remove_dir_all(&logs);
}

/// Ephemeral workers through PgBouncer, poll-only (no direct connection of their own), started in
/// waves against a pooler whose few server connections they share: every task succeeds, none
/// ends with a connection error as its last error, every worker exits 0. (The 200-worker,
/// 100,000-task form against `max_connections = 100` is measured by the benchmark's notes in
/// docs/scaling.md.)
#[tokio::test]
async fn waves_of_ephemeral_workers_drain_a_queue_through_pgbouncer() {
    const WAVES: usize = 4;
    const PER_WAVE: usize = 10;
    const TASKS: i64 = 2_000;
    tokio::task::spawn_blocking(common::process::install_pgbouncer).await.unwrap();
    let db = TestDb::new().await;
    let bouncer = PgBouncer::start(&db.url, 10).expect("start pgbouncer");
    let pooled = bouncer.url(&db.name);
    let folder = common::Folder::new(&[(
        "burst",
        "command = [\"./run\"]\n[settings]\nschedule_interval = 1\n",
        r#"echo '{"result": 1}'"#,
    )]);
    let functions = folder.0.to_str().unwrap().to_string();
    ok(&run(&pooled, None, &["type", "set", "burst", r#"{"schedule_interval": 1}"#]));
    {
        let c = db.conn().await;
        let tasks: Vec<NewTask> = (0..TASKS)
            .map(|i| NewTask { context: Some(serde_json::json!({ "i": i })), ..Default::default() })
            .collect();
        asyncflow::db::api::create_tasks(&c, "burst", &tasks).await.unwrap();
    }
    let logs = std::env::temp_dir().join(format!("af-pgbouncer-waves-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&logs).unwrap();
    let mut waves = Vec::new();
    for wave in 0..WAVES {
        let mut children = Vec::new();
        for n in 0..PER_WAVE {
            let log = logs.join(format!("w{wave}-{n}.log"));
            let child = spawn(
                &pooled,
                None,
                &["worker", "--functions", &functions, "--exit-when-idle", "--no-maintenance", "--concurrency", "8"],
                &log,
            );
            children.push((child, log));
        }
        waves.push(children);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    for (child, log) in waves.into_iter().flatten() {
        let (status, out) = common::process::wait_child(child, Duration::from_secs(120)).await;
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(status.success(), "an ephemeral worker exited {status:?}: {out}\n{text}");
        assert_clean(&log);
    }
    // what the waves left (a worker that found the queue empty exits at once) is drained by one more
    let log = logs.join("last.log");
    let child =
        spawn(&pooled, None, &["worker", "--functions", &functions, "--exit-when-idle", "--no-maintenance"], &log);
    let (status, _) = common::process::wait_child(child, Duration::from_secs(120)).await;
    assert!(status.success());
    assert_eq!(counts(&db, "burst").await, (TASKS, TASKS));
    let c = db.conn().await;
    let connection_errors: i64 = c
        .query_one(
            "select count(*) from asyncflow.tasks where task_type = 'burst' and last_error is not null \
             and (last_error ilike '%connection%' or last_error ilike '%closed%' or last_error ilike '%timed out%')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(connection_errors, 0);
    let _ = std::fs::remove_dir_all(&logs);
}

//! Failover to a streaming standby behind a multi-host `DATABASE_URL`: a private primary with a
//! synchronous standby (`pg_basebackup -R -X stream`, `synchronous_standby_names = '*'`), a
//! worker process on `postgres://...@primary,standby/...?target_session_attrs=read-write`, the
//! primary crashed in the middle of the work (SIGQUIT, `pg_ctl stop -m immediate`) and the
//! standby promoted (`pg_promote()`). The worker goes on on the promoted standby: every task
//! succeeds there, from a call of its own, none is lost, none failed, and a task created after
//! the promotion through the same URL runs too.
use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::str::FromStr;
use std::time::{Duration, Instant};

use asyncflow::db::api;
use asyncflow::db::embedded::{base_backup, EmbeddedConfig, EmbeddedPostgres};
use asyncflow::task::{NewTask, TaskStatus};
use asyncflow::task_type::TaskTypeUpdate;
use asyncflow::{TaskId, TypeName};
use common::crash::crash;
use common::process::{signal, wait_exit};
use common::{wait_until, Folder};

/// Tasks created before the worker starts.
const TASKS: usize = 300;
/// Tasks that have succeeded on the primary when it is crashed (the rest run after the failover).
const DONE_BEFORE_CRASH: i64 = 60;

/// What the test started: the worker, both servers and their directory, stopped and removed when
/// the test ends, passed or not (the worker first: it hands its tasks back through a server).
struct Cluster {
    root: PathBuf,
    worker: Option<Child>,
    primary: Option<EmbeddedPostgres>,
    standby: Option<EmbeddedPostgres>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Some(mut worker) = self.worker.take() {
            let _ = worker.kill();
            let _ = worker.wait();
        }
        drop(self.primary.take());
        drop(self.standby.take());
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

fn port_of(url: &str) -> u16 {
    tokio_postgres::Config::from_str(url).unwrap().get_ports()[0]
}

fn read(log: &Path) -> String {
    std::fs::read_to_string(log).unwrap_or_default()
}

/// One connection outside any pool, driven on a task.
async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, _driver) = asyncflow::db::connect(url).await.unwrap_or_else(|e| panic!("connect to {url}: {e}"));
    client
}

/// The function takes 50 ms per call, appends its task's id to `calls`, and succeeds with the
/// task's id as its result. Its lease is 10 s: a claim the worker never heard of (committed on
/// the primary, its answer lost in the crash) is rescued within seconds, not the default 5 min.
fn function(calls: &Path) -> Folder {
    Folder::new(&[(
        "failover",
        "command = [\"./run\"]\n[settings]\nmax_processing_time = 10\n",
        &format!(
            "sleep 0.05\necho \"$ASYNCFLOW_TASK_ID\" >> '{}'\necho \"{{\\\"result\\\": \\\"$ASYNCFLOW_TASK_ID\\\"}}\"",
            calls.display()
        ),
    )])
}

/// A primary and a synchronous standby on two loopback ports; a worker on the URL naming both,
/// read-write only. The primary is crashed once 60 of 300 tasks have succeeded, and the standby
/// promoted 1 s later (the worker meanwhile finds one server gone and the other read-only).
/// Within 60 s of the promotion all 300 have succeeded on the promoted standby, each with its
/// own id as its result; a task created then through the multi-host URL runs too; the worker
/// was never restarted, and exits 0 on SIGTERM.
#[tokio::test]
async fn a_worker_on_a_multi_host_url_goes_on_on_the_promoted_standby_without_losing_a_task() {
    let root = std::env::temp_dir().join(format!("asyncflow-failover-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&root).unwrap();
    let mut cluster = Cluster { root: root.clone(), worker: None, primary: None, standby: None };
    let (primary_dir, standby_dir) = (root.join("primary"), root.join("standby"));

    // every commit that waits for its flush (synchronous_commit on) waits for the standby too;
    // given on the command line, so that the standby's copy of the data directory has none
    let primary = EmbeddedPostgres::start(
        EmbeddedConfig::new(&primary_dir)
            .setting("wal_level", "replica")
            .setting("max_wal_senders", "4")
            .setting("synchronous_standby_names", "*"),
    )
    .await
    .expect("the primary");
    let primary_url = primary.url().to_string();
    let primary_port = port_of(&primary_url);
    cluster.primary = Some(primary);
    base_backup(primary_port, standby_dir.clone()).await.expect("a base backup of the primary");
    let standby = EmbeddedPostgres::start(EmbeddedConfig::new(&standby_dir)).await.expect("the standby");
    let standby_url = standby.url().to_string();
    let standby_port = port_of(&standby_url);
    cluster.standby = Some(standby);

    let admin = connect(&primary_url).await;
    wait_until(Duration::from_secs(30), "the standby to stream synchronously", || async {
        let row = admin
            .query_one(
                "select count(*) from pg_stat_replication where state = 'streaming' and sync_state = 'sync'",
                &[],
            )
            .await
            .unwrap();
        row.get::<_, i64>(0) == 1
    })
    .await;
    let in_recovery: bool =
        connect(&standby_url).await.query_one("select pg_is_in_recovery()", &[]).await.unwrap().get(0);
    assert!(in_recovery, "the standby is a standby");

    asyncflow::db::migrate::migrate(&primary_url).await.expect("migrate");
    let calls = root.join("calls.log");
    let folder = function(&calls);
    let primary_pool = asyncflow::db::pool(&primary_url, 2).unwrap();
    let c = primary_pool.get().await.unwrap();
    let ty = TypeName::new("failover").unwrap();
    api::register_task_type(&c, &ty, &TaskTypeUpdate { max_processing_time: Some(10), ..Default::default() })
        .await
        .unwrap();
    let ids: Vec<TaskId> = api::create_tasks(&c, "failover", &vec![NewTask::default(); TASKS]).await.unwrap();

    let both = format!(
        "postgres://postgres@127.0.0.1:{primary_port},127.0.0.1:{standby_port}/postgres\
         ?target_session_attrs=read-write&connect_timeout=2"
    );
    let log = root.join("worker.log");
    let functions = folder.0.to_str().unwrap().to_string();
    cluster.worker = Some(
        Command::new(env!("CARGO_BIN_EXE_asyncflow"))
            .args(["worker", "--functions", &functions, "--concurrency", "4"])
            .env("DATABASE_URL", &both)
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .env_remove("ASYNCFLOW_SERVER")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("spawn asyncflow worker"),
    );

    let succeeded = |c: deadpool_postgres::Object, ids: Vec<TaskId>| async move {
        let counts = api::count_by_status_of(&c, &ids).await.unwrap();
        counts.iter().find(|(s, _)| *s == TaskStatus::Succeeded).map(|(_, n)| *n).unwrap_or(0)
    };
    wait_until(Duration::from_secs(30), &format!("{DONE_BEFORE_CRASH} tasks to succeed on the primary"), || async {
        succeeded(primary_pool.get().await.unwrap(), ids.clone()).await >= DONE_BEFORE_CRASH
    })
    .await;
    drop(c);
    drop(primary_pool);
    drop(admin);
    crash(&primary_dir, cluster.primary.take().unwrap());
    let crashed = Instant::now();
    tokio::time::sleep(Duration::from_secs(1)).await;

    let standby_pool = asyncflow::db::pool(&standby_url, 2).unwrap();
    let at_crash = succeeded(standby_pool.get().await.unwrap(), ids.clone()).await;
    assert!(at_crash >= DONE_BEFORE_CRASH, "every success the primary had shown is on the standby: {at_crash}");
    assert!(at_crash < TASKS as i64, "work was left for the promoted standby: {at_crash}");
    let promoted: bool = standby_pool.get().await.unwrap().query_one("select pg_promote()", &[]).await.unwrap().get(0);
    assert!(promoted, "pg_promote");
    let promotion = Instant::now();

    wait_until(Duration::from_secs(60), "every task to succeed on the promoted standby", || async {
        succeeded(standby_pool.get().await.unwrap(), ids.clone()).await == TASKS as i64
    })
    .await;
    let all_done = Instant::now();
    let worker = cluster.worker.as_mut().unwrap();
    assert!(worker.try_wait().unwrap().is_none(), "the worker runs on: {}", read(&log));

    let c = standby_pool.get().await.unwrap();
    let counts = api::count_by_status_of(&c, &ids).await.unwrap();
    assert_eq!(counts, vec![(TaskStatus::Succeeded, TASKS as i64)], "none lost, none failed");
    let mut retried = 0;
    for id in &ids {
        let task = api::get_task(&c, id.as_str()).await.unwrap().expect("the task");
        assert_eq!(task.result, Some(serde_json::json!(id.as_str())), "a call of its own: {id}");
        retried += usize::from(task.retry_count > 0);
    }
    let called = read(&calls).lines().count();
    assert!(called >= TASKS, "each task was called: {called}");

    // a task created after the promotion, through the URL naming both servers
    let both_pool = asyncflow::db::pool(&both, 2).unwrap();
    let after = api::create_task(&both_pool.get().await.unwrap(), "failover", &NewTask::default()).await.unwrap();
    wait_until(Duration::from_secs(30), "the task created after the promotion to succeed", || async {
        let task = api::get_task(&c, after.as_str()).await.unwrap().expect("the task");
        task.status == TaskStatus::Succeeded
    })
    .await;

    // it lost its connections, and the read-only standby refused it until the promotion
    let text = read(&log);
    assert!(text.contains("LISTEN connection lost"), "{text}");
    assert!(text.contains("database does not allow writes"), "{text}");
    assert!(!text.contains("panicked"), "{text}");
    let worker = cluster.worker.as_mut().unwrap();
    signal(worker, nix::sys::signal::Signal::SIGTERM);
    let status = wait_exit(worker, Duration::from_secs(30));
    assert!(status.success(), "the worker exits 0 on SIGTERM: {status:?}\n{}", read(&log));
    eprintln!(
        "crashed at {DONE_BEFORE_CRASH}+ done ({at_crash} on the standby 1 s later); all {TASKS} succeeded {:?} \
         after the promotion, {:?} after the crash; {called} calls for {TASKS} tasks, {retried} retried",
        all_done - promotion,
        all_done - crashed
    );
    drop(c);
    drop(standby_pool);
    drop(both_pool);
}

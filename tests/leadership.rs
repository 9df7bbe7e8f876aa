//! Maintenance leadership under partitions and restarts, and only for roles that can lead
//! (`src/maintenance/leader.rs`): a leader cut off by a network that stops forwarding steps down
//! and another process leads within the documented bound; at the heal, the cut process's own
//! rescuer never overtakes its queued reports; workers backing off claim again as soon as
//! PostgreSQL is back; a worker role never takes the lead, and a leader whose services are
//! refused steps down.
use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::str::FromStr;
use std::time::{Duration, Instant};

use asyncflow::db::api;
use asyncflow::maintenance::{leader, Maintainer, MaintenanceConfig, LEADER_CHECK_DEFAULT, RESCUE_INTERVAL_DEFAULT};
use asyncflow::task::{NewTask, TaskStatus};
use asyncflow::task_type::TaskTypeUpdate;
use asyncflow::{TypeName, WorkerId};
use common::proxy::Proxy;
use common::{wait_until, TestDb};
use tokio_util::sync::CancellationToken;

/// Child processes, killed when the test ends, passed or not.
struct Children(Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn log_path(what: &str) -> PathBuf {
    std::env::temp_dir().join(format!("af-lead-{what}-{}.log", uuid::Uuid::new_v4().simple()))
}

/// `asyncflow <args>` on `url`, logging at INFO to `log`.
fn spawn(url: &str, args: &[&str], log: &Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_asyncflow"))
        .args(args)
        .env("DATABASE_URL", url)
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .env_remove("ASYNCFLOW_SERVER")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).expect("log file"))
        .spawn()
        .expect("spawn asyncflow")
}

fn read(log: &Path) -> String {
    std::fs::read_to_string(log).unwrap_or_default()
}

/// The id the leader wrote in `asyncflow.maintenance_leader` (`<host>-<pid>`), if it is fresh.
async fn leader_id(c: &impl asyncflow::db::GenericClient) -> Option<String> {
    api::current_leader(c, 3.0, None).await.ok().flatten().map(|l| l.id)
}

fn id_of(child: &Child) -> String {
    format!("{}-{}", asyncflow::ids::host_name(), child.id())
}

/// A task of `ty` claimed by a worker that is gone, whose lease (1 s) has run out.
async fn orphan(c: &impl asyncflow::db::GenericClient, ty: &str) -> String {
    let name = TypeName::new(ty).unwrap();
    let settings = TaskTypeUpdate { max_processing_time: Some(1), ..Default::default() };
    api::register_task_type(c, &name, &settings).await.unwrap();
    let id = api::create_task(c, ty, &NewTask::default()).await.unwrap();
    let claimed = api::claim_tasks(c, ty, &WorkerId::new("gone").unwrap(), 1, None).await.unwrap();
    assert_eq!(claimed.len(), 1);
    id.as_str().to_string()
}

async fn status(c: &impl asyncflow::db::GenericClient, id: &str) -> Option<TaskStatus> {
    api::get_task(c, id).await.ok().flatten().map(|t| t.status)
}

/// The documented bounds hold for the default check interval: a leader steps down within 4 s
/// of its last answered check, and another process leads within 8 s.
#[test]
fn the_documented_bounds_follow_from_the_default_check_interval() {
    assert_eq!(leader::step_down_bound(LEADER_CHECK_DEFAULT), Duration::from_secs(4));
    assert_eq!(leader::takeover_bound(LEADER_CHECK_DEFAULT), Duration::from_secs(8));
    assert_eq!(leader::session_limits(LEADER_CHECK_DEFAULT).idle, Duration::from_secs(6));
}

/// A worker process leads; a network path that stops forwarding without closing its sockets
/// cuts it off. An `asyncflow maintain` beside it leads within the documented bound (8 s, plus
/// a second of slack for a loaded machine) and rescues a lease that expired during the cut
/// within one rescue interval more. (Before, the cut leader kept the lock until TCP gave up:
/// nothing was rescued and nobody else led.)
#[tokio::test]
async fn a_leader_cut_off_without_a_close_is_replaced_within_the_bound() {
    let db = TestDb::new().await;
    let proxy = Proxy::start(&db.url).await;
    let folder = common::Folder::new(&[("quick", "command = [\"./run\"]\n", r#"echo '{"result": 1}'"#)]);
    let functions = folder.0.to_str().unwrap().to_string();
    let (cut_log, other_log) = (log_path("cut"), log_path("other"));
    let cut = spawn(&proxy.url(&db.url), &["worker", "--functions", &functions], &cut_log);
    let c = db.conn().await;
    let cut_id = id_of(&cut);
    let mut children = Children(vec![cut]);
    wait_until(Duration::from_secs(30), "the worker to lead", || async { leader_id(&c).await == Some(cut_id.clone()) })
        .await;
    let other = spawn(&db.url, &["maintain"], &other_log);
    let other_id = id_of(&other);
    children.0.push(other);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(leader_id(&c).await, Some(cut_id.clone()), "the worker still leads");

    proxy.freeze();
    let cut_at = Instant::now();
    let task = orphan(&c, "orphaned").await;
    let bound = leader::takeover_bound(LEADER_CHECK_DEFAULT) + Duration::from_secs(1);
    wait_until(bound, "another process to lead", || async { leader_id(&c).await == Some(other_id.clone()) }).await;
    let led_after = cut_at.elapsed();
    wait_until(RESCUE_INTERVAL_DEFAULT + Duration::from_secs(1), "the expired lease to be rescued", || async {
        status(&c, &task).await == Some(TaskStatus::Pending)
    })
    .await;
    let rescued_after = cut_at.elapsed();
    let log = read(&cut_log);
    assert!(log.contains("leader check did not answer in time; stepping down"), "{log}");
    proxy.thaw();
    // the healed worker does not take the lead back from the process that leads
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(leader_id(&c).await, Some(other_id.clone()));
    eprintln!("cut at 0: another leads after {led_after:?}, the expired lease is rescued after {rescued_after:?}");
    drop(children);
    let _ = (std::fs::remove_file(&cut_log), std::fs::remove_file(&other_log));
}

/// A worker process leads alone; its calls (3 s, on a 6 s lease) are running when the network
/// freezes, end during the cut, and their reports wait in the process; the leases run out and
/// the leader's last rescue is held on the way. At the heal everything held is delivered in the
/// order it was sent, the rescue first: it leaves the leases of its own process's worker alone,
/// so every report is applied and no call runs twice. (Before, the rescue took the tasks from
/// their live worker, its reports were refused and the calls ran again.)
#[tokio::test]
async fn at_the_heal_a_process_never_rescues_its_own_workers_leases_before_their_reports() {
    let db = TestDb::new().await;
    let proxy = Proxy::start(&db.url).await;
    let calls = std::env::temp_dir().join(format!("af-calls-{}", uuid::Uuid::new_v4().simple()));
    let folder = common::Folder::new(&[(
        "nap",
        "command = [\"./run\"]\ntimeout = 60\n[settings]\nmax_processing_time = 6\nmax_retry_num = 5\n",
        &format!("echo call >> {}; sleep 3; echo '{{\"result\": 1}}'", calls.display()),
    )]);
    let functions = folder.0.to_str().unwrap().to_string();
    let log = log_path("heal");
    let cut = spawn(&proxy.url(&db.url), &["worker", "--functions", &functions, "--concurrency", "4"], &log);
    let cut_id = id_of(&cut);
    let children = Children(vec![cut]);
    let c = db.conn().await;
    wait_until(Duration::from_secs(30), "the worker to lead", || async { leader_id(&c).await == Some(cut_id.clone()) })
        .await;
    wait_until(Duration::from_secs(30), "the worker to start", || async { read(&log).contains("worker started") })
        .await;
    let mut ids = Vec::new();
    for _ in 0..4 {
        ids.push(api::create_task(&c, "nap", &NewTask::default()).await.unwrap().as_str().to_string());
    }
    let count = || std::fs::read_to_string(&calls).map(|t| t.lines().count()).unwrap_or(0);
    wait_until(Duration::from_secs(20), "the four calls to start", || async { count() == 4 }).await;
    proxy.freeze();
    // the leader's next rescue (every second) is held first, before the calls' first heartbeat
    // (a third into the 6 s lease); the calls end, the leases run out, the leader steps down
    // and the server ends its session (6 s)
    tokio::time::sleep(Duration::from_secs(12)).await;
    proxy.thaw();
    wait_until(Duration::from_secs(40), "the four tasks to succeed", || async {
        let mut done = 0;
        for id in &ids {
            if status(&c, id).await == Some(TaskStatus::Succeeded) {
                done += 1;
            }
        }
        done == ids.len()
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let text = read(&log);
    assert_eq!(count(), 4, "a call ran twice: {text}");
    for id in &ids {
        let task = common::sql::task(&**c, id).await;
        assert_eq!(task["retry_count"], 0, "{task}");
    }
    drop(children);
    let _ = (std::fs::remove_file(&log), std::fs::remove_file(&calls));
}

/// Two worker processes, one type each, wait while PostgreSQL is down for 12 s (idle, for the
/// wake-up of their LISTEN connection's return; a claim that failed backs off, by then for several
/// seconds). PostgreSQL comes back on the same
/// port: a task of each type, created at once, is claimed within 2 s. (Before, a producer slept
/// out its back-off, up to 25.6 s, and the LISTEN connection itself waited up to 10 s between
/// attempts.)
#[tokio::test]
async fn workers_backing_off_claim_within_two_seconds_of_a_postgres_restart() {
    use asyncflow::db::embedded::{EmbeddedConfig, EmbeddedPostgres};
    let dir = std::env::temp_dir().join(format!("asyncflow-restart-{}", uuid::Uuid::new_v4().simple()));
    let server = EmbeddedPostgres::start(EmbeddedConfig::new(&dir)).await.expect("a private server");
    let url = server.url().to_string();
    let port = tokio_postgres::Config::from_str(&url).unwrap().get_ports()[0];
    asyncflow::db::migrate::migrate(&url).await.expect("migrate");
    let folder = common::Folder::new(&[
        ("one", "type = \"one\"\ncommand = [\"./run\"]\n", r#"echo '{"result": 1}'"#),
        ("two", "type = \"two\"\ncommand = [\"./run\"]\n", r#"echo '{"result": 2}'"#),
    ]);
    let functions = folder.0.to_str().unwrap().to_string();
    let logs = [log_path("one"), log_path("two")];
    let children = Children(vec![
        spawn(&url, &["worker", "--functions", &functions, "--types", "one", "--no-maintenance"], &logs[0]),
        spawn(&url, &["worker", "--functions", &functions, "--types", "two", "--no-maintenance"], &logs[1]),
    ]);
    let pool = asyncflow::db::pool(&url, 2).unwrap();
    wait_until(Duration::from_secs(30), "both workers to start", || async {
        logs.iter().all(|l| read(l).contains("worker started"))
    })
    .await;
    drop(pool);

    drop(server); // a fast shutdown: every connection is closed
    tokio::time::sleep(Duration::from_secs(12)).await;
    for log in &logs {
        // an idle worker that LISTENs does not claim until woken: it sees the database go on its
        // LISTEN connection (a busy one backs its claims off, as `claim failed` says)
        let text = read(log);
        assert!(text.contains("LISTEN connection lost") || text.contains("claim failed"), "the worker waits: {text}");
    }
    let server = EmbeddedPostgres::start(EmbeddedConfig::new(&dir).port(port)).await.expect("the private server again");
    let back = Instant::now();
    let pool = asyncflow::db::pool(&url, 2).unwrap();
    let c = pool.get().await.expect("the database is back on its port");
    let ids = [
        api::create_task(&c, "one", &NewTask::default()).await.unwrap(),
        api::create_task(&c, "two", &NewTask::default()).await.unwrap(),
    ];
    wait_until(Duration::from_secs(2), "a claim of each type", || async {
        let mut claimed = 0;
        for id in &ids {
            if !matches!(status(&c, id.as_str()).await, Some(TaskStatus::Pending) | None) {
                claimed += 1;
            }
        }
        claimed == ids.len()
    })
    .await;
    eprintln!("both claimed {:?} after the database came back", back.elapsed());
    drop(children);
    drop(c);
    drop(pool);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
    for log in &logs {
        let _ = std::fs::remove_file(log);
    }
}

/// A role of one test (dropped at the end, with what it owns in the test's database).
struct Role {
    name: String,
    database: String,
}

impl Role {
    async fn new(kind: &str, database: &str, set_up: &str) -> Role {
        let name = format!("{kind}_{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
        let su = common::superuser().await;
        su.batch_execute(&set_up.replace("{role}", &name)).await.expect("the role");
        Role { name, database: database.to_string() }
    }

    async fn url(&self) -> String {
        common::server_url(&self.database, &self.name).await
    }
}

impl Drop for Role {
    fn drop(&mut self) {
        let (name, database) = (self.name.clone(), self.database.clone());
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
            rt.block_on(async {
                let su = common::superuser().await;
                let _ = su.batch_execute(&format!("drop database if exists {database} with (force)")).await;
                let _ = su.batch_execute(&format!("drop role if exists {name}")).await;
            });
        })
        .join();
    }
}

/// The documented least-privilege set-up: an owner without superuser migrates; a worker process
/// under a role granted only asyncflow_worker starts first, with maintenance on (the image's
/// default command). It never leads, and says once, at INFO, why. The owner's `asyncflow
/// maintain` leads and rescues an expired lease. (Before, the worker took the lock and failed
/// every pass with `permission denied`, and maintain never led: nothing was rescued.)
#[tokio::test]
async fn a_worker_role_never_leads_and_the_owners_maintain_leads_and_rescues() {
    let database = format!("lead_{}", uuid::Uuid::new_v4().simple());
    let owner = Role::new("op", &database, "create role {role} login nosuperuser nocreaterole nocreatedb").await;
    let worker = Role::new("wk", &database, "create role {role} login; grant asyncflow_worker to {role}").await;
    let su = common::superuser().await;
    su.batch_execute(&format!("create database {database} owner {}", owner.name)).await.expect("database");
    let (owner_url, worker_url) = (owner.url().await, worker.url().await);
    let migrated = tokio::task::spawn_blocking({
        let url = owner_url.clone();
        move || common::cli::asyncflow(Some(&url), &["migrate"])
    })
    .await
    .unwrap();
    common::cli::ok(&migrated);
    let folder = common::Folder::new(&[("quick", "command = [\"./run\"]\n", r#"echo '{"result": 1}'"#)]);
    let functions = folder.0.to_str().unwrap().to_string();
    let (worker_log, maintain_log) = (log_path("worker-role"), log_path("owner"));
    let mut children = Children(vec![spawn(&worker_url, &["worker", "--functions", &functions], &worker_log)]);
    wait_until(Duration::from_secs(30), "the worker to start", || async {
        read(&worker_log).contains("worker started")
    })
    .await;
    // long enough for several checks: it would have led by now
    tokio::time::sleep(LEADER_CHECK_DEFAULT * 2).await;
    let pool = asyncflow::db::pool(&owner_url, 2).unwrap();
    let c = pool.get().await.unwrap();
    assert_eq!(leader_id(&c).await, None, "nobody leads yet: {}", read(&worker_log));
    let maintain = spawn(&owner_url, &["maintain"], &maintain_log);
    let maintain_id = id_of(&maintain);
    children.0.push(maintain);
    wait_until(Duration::from_secs(20), "maintain to lead", || async {
        leader_id(&c).await == Some(maintain_id.clone())
    })
    .await;
    let task = orphan(&c, "orphaned").await;
    wait_until(Duration::from_secs(5), "the expired lease to be rescued", || async {
        status(&c, &task).await == Some(TaskStatus::Pending)
    })
    .await;
    let log = read(&worker_log);
    assert_eq!(log.matches("takes no part in maintenance").count(), 1, "{log}");
    assert!(log.contains("INFO"), "{log}");
    assert!(!log.contains("leading; starting services") && !log.contains("permission denied"), "{log}");
    drop(children);
    drop(c);
    drop(pool);
    let _ = (std::fs::remove_file(&worker_log), std::fs::remove_file(&maintain_log));
    drop(worker);
    drop(owner);
}

/// A role granted exactly the functions of `asyncflow.maintenance_functions()` runs a pass of
/// every service (the list is complete), and leads. Then its grant of rescue_expired is revoked:
/// its rescuer is refused, it steps down, and a maintainer of the owner's leads and rescues an
/// expired lease. (Before, the refused leader kept the lock for as long as it lived.)
#[tokio::test]
async fn a_leader_whose_services_are_refused_steps_down_and_another_leads() {
    let db = TestDb::new().await;
    let role = Role::new("mt", &db.name, "create role {role} login; grant asyncflow_worker to {role}").await;
    let c = db.conn().await;
    for f in api::maintenance_functions(&c).await.unwrap() {
        c.batch_execute(&format!(
            "do $$ declare p regprocedure; begin for p in select oid::regprocedure from pg_proc \
             where proname = '{f}' and pronamespace = 'asyncflow'::regnamespace loop \
             execute format('grant execute on function %s to {}', p); end loop; end $$",
            role.name
        ))
        .await
        .unwrap();
    }
    let role_url = role.url().await;
    let check = Duration::from_millis(200);
    let maintainer = |url: &str, pool: &asyncflow::db::DbPool, id: &str| {
        let config = MaintenanceConfig { leader_check: check, ..MaintenanceConfig::default() };
        let mut services = asyncflow::maintenance::services(pool, &config);
        services.extend(asyncflow::workflow::services(pool, &asyncflow::workflow::ServiceConfig::default()));
        Maintainer::new(url, check, services)
            .with_identity(leader::Identity { id: id.to_string(), host: "here".to_string() })
    };
    let role_pool = asyncflow::db::pool(&role_url, 4).unwrap();
    let first = maintainer(&role_url, &role_pool, "granted");
    first.run_once(None).await.expect("every service runs with the listed grants");
    let stop = CancellationToken::new();
    let running = tokio::spawn(first.run(stop.clone()));
    wait_until(Duration::from_secs(10), "the granted role to lead", || async {
        leader_id(&c).await.as_deref() == Some("granted")
    })
    .await;
    let second = tokio::spawn(maintainer(&db.url, &db.pool, "owner").run(stop.clone()));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(leader_id(&c).await.as_deref(), Some("granted"));

    c.batch_execute(&format!(
        "revoke execute on function asyncflow.rescue_expired(timestamptz, integer, text[]) from {}",
        role.name
    ))
    .await
    .unwrap();
    let task = orphan(&c, "orphaned").await;
    wait_until(Duration::from_secs(10), "the owner's maintainer to lead", || async {
        leader_id(&c).await.as_deref() == Some("owner")
    })
    .await;
    wait_until(Duration::from_secs(5), "the expired lease to be rescued", || async {
        status(&c, &task).await == Some(TaskStatus::Pending)
    })
    .await;
    stop.cancel();
    let _ = (running.await, second.await);
    drop(role_pool);
    drop(c);
    drop(db);
    drop(role);
}

//! The least-privilege setup of docs/operations.md (Roles and grants), run as written: the
//! superuser's one SQL block, `asyncflow migrate` as an owner that is neither a superuser nor has
//! CREATEROLE, and the owner's grants to the login roles. Then what each process checks at start,
//! and the deployment it is for: the image's default command as the worker role beside
//! `asyncflow maintain` as the owner, where maintenance must stay with the owner.
use super::{asyncflow, spawn, Children, Cluster};
use crate::common;

use common::cli::{ok, refused};

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

/// The SQL block that follows `step` in docs/operations.md, as the page shows it.
fn documented_sql(step: &str) -> String {
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/operations.md"))
        .expect("docs/operations.md");
    let from = page.find(step).unwrap_or_else(|| panic!("docs/operations.md has no {step:?}"));
    let rest = &page[from..];
    let start = rest.find("```sql\n").expect("an sql block after the step") + "```sql\n".len();
    let end = rest[start..].find("```").expect("the end of the block");
    rest[start..start + end].to_string()
}

const ROLES_STEP: &str = "**1. The roles, once per PostgreSQL cluster";
const GRANTS_STEP: &str = "**3. The login roles";

impl Cluster {
    /// Step 1 as a superuser, with this cluster's owner for `<owner>`.
    async fn run_roles_step(&self) {
        let sql = documented_sql(ROLES_STEP).replace("<owner>", &self.role("op"));
        common::superuser().await.batch_execute(&sql).await.expect("step 1, as a superuser");
    }

    /// Step 3 on the owner's connection, with this cluster's login roles for the page's names.
    async fn run_grants_step(&self) -> Result<(), tokio_postgres::Error> {
        let sql = documented_sql(GRANTS_STEP)
            .replace("my_app", &self.role("cl"))
            .replace("my_workers", &self.role("wk"))
            .replace("my_server", &self.role("sv"));
        connect(&self.url("op").await).await.batch_execute(&sql).await
    }

    /// Steps 1 to 3 as written: the roles, `asyncflow migrate` as the owner, the grants.
    async fn set_up_as_documented(&self) {
        self.run_roles_step().await;
        let owner = self.url("op").await;
        let out = tokio::task::spawn_blocking(move || ok(&asyncflow(&owner, &["migrate"]))).await.unwrap();
        assert!(out.contains("applied migrations"), "{out}");
        self.run_grants_step().await.expect("step 3, as the owner");
    }
}

async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.expect("connect");
    tokio::spawn(connection);
    client
}

/// Whether a worker has registered `name`.
async fn registered(client: &tokio_postgres::Client, name: &str) -> bool {
    let types: Vec<Value> = client
        .query("select asyncflow.list_task_types() as t", &[])
        .await
        .map(|rows| rows.iter().map(|r| r.get("t")).collect())
        .unwrap_or_default();
    types.iter().any(|t| t["task_type"] == name)
}

/// Writes `<dir>/<name>/function.toml`.
fn function(dir: &Path, name: &str, toml: &str) {
    std::fs::create_dir_all(dir.join(name)).unwrap();
    std::fs::write(dir.join(name).join("function.toml"), toml).unwrap();
}

/// A function that succeeds at once, released every second by a schedule of its own.
const TICK: &str = r#"command = ["sh", "-c", 'cat >/dev/null; echo "{\"result\": {}}"']
timeout = 10

[[schedules]]
name = "tick.every_second"
cron = "* * * * * *"
"#;

/// A function that outlives its 2 s lease unless its worker heartbeats.
const HANG: &str = r#"command = ["sh", "-c", "exec sleep 30"]
timeout = 60

[settings]
max_processing_time = 2
"#;

#[tokio::test]
async fn the_documented_grants_work_for_an_owner_without_createrole_and_for_a_second_owner() {
    let first = Cluster::bare().await;
    // Without step 1, the owner may not grant the roles: the trap of the old instructions.
    let err = first.run_grants_step().await.expect_err("the owner may not grant yet");
    assert!(err.as_db_error().is_some_and(|e| e.message().contains("admin option")), "{err:?}");
    first.set_up_as_documented().await;
    // Step 1 again (a second database, a second owner) changes nothing that was set up.
    first.run_roles_step().await;
    let second = Cluster::bare().await;
    second.set_up_as_documented().await;

    let su = common::superuser().await;
    for cluster in [&first, &second] {
        for (kind, role) in [("cl", "asyncflow_client"), ("wk", "asyncflow_worker"), ("sv", "asyncflow_worker")] {
            let login = cluster.role(kind);
            let member: bool =
                su.query_one("select pg_has_role($1, $2, 'MEMBER')", &[&login, &role]).await.unwrap().get(0);
            assert!(member, "{login} is not a member of {role}");
        }
        let owner: Value = su
            .query_one("select to_jsonb(r) from pg_roles r where rolname = $1", &[&cluster.role("op")])
            .await
            .unwrap()
            .get(0);
        assert_eq!((owner["rolsuper"].as_bool(), owner["rolcreaterole"].as_bool()), (Some(false), Some(false)));
    }
}

#[tokio::test]
async fn each_process_checks_at_start_the_grant_its_work_needs() {
    let cluster = Cluster::bare().await;
    cluster.set_up_as_documented().await;
    let work = std::env::temp_dir().join(format!("af-documented-{}", cluster.suffix));
    function(&work, "tick", TICK);
    let (cl, wk) = (cluster.url("cl").await, cluster.url("wk").await);
    let (role, dir) = (cluster.role("cl"), work.to_str().unwrap().to_string());
    tokio::task::spawn_blocking(move || {
        // The application's role may enqueue but not claim: a worker on it refuses to start and
        // names the grant, instead of retrying "permission denied" for ever.
        let err =
            refused(&asyncflow(&cl, &["worker", "--functions", &dir, "--no-maintenance", "--max-runtime", "20s"]));
        assert!(err.contains(&format!("grant asyncflow_worker to {role};")), "{err}");
        assert!(err.contains("may not call asyncflow.") && err.contains("asyncflow.claim_tasks"), "{err}");
        // The admin commands never migrate: the schedule commands work on the client's role.
        let set = ok(&asyncflow(&cl, &["schedule", "set", "tick.hourly", "@hourly", r#"{"type": "tick"}"#]));
        assert!(set.contains("tick.hourly"), "{set}");
        for args in [["schedule", "pause", "tick.hourly"], ["schedule", "resume", "tick.hourly"]] {
            ok(&asyncflow(&cl, &args));
        }
        let list: Value = serde_json::from_str(&ok(&asyncflow(&cl, &["schedule", "list"]))).unwrap();
        assert!(list.to_string().contains("tick.hourly"), "{list}");
        ok(&asyncflow(&cl, &["schedule", "remove", "tick.hourly"]));
        // maintain exists to lead: the worker's role may not, and is told so at start.
        let err = refused(&asyncflow(&wk, &["maintain", "--once"]));
        assert!(err.contains("may not run maintenance") && err.contains("asyncflow.rescue_expired"), "{err}");
        // The worker's role may work.
        let out = ok(&asyncflow(&wk, &["worker", "--functions", &dir, "--no-maintenance", "--exit-when-idle"]));
        assert!(out.contains("stopped_by"), "{out}");
    })
    .await
    .unwrap();
    let _ = std::fs::remove_dir_all(&work);
}

#[tokio::test]
async fn the_image_command_as_the_worker_role_leaves_maintenance_to_the_owner() {
    let cluster = Cluster::bare().await;
    cluster.set_up_as_documented().await;
    let work = std::env::temp_dir().join(format!("af-image-{}", cluster.suffix));
    let (image_functions, victim_functions) = (work.join("functions"), work.join("victim"));
    function(&image_functions, "tick", TICK);
    function(&victim_functions, "hang", HANG);
    let (op, wk, cl) = (cluster.url("op").await, cluster.url("wk").await, cluster.url("cl").await);
    let client = connect(&cl).await;
    let mut children = Children(Vec::new());

    // The image's default command (Dockerfile: worker --functions /functions), as the worker role,
    // first, so that it would win the election if it were allowed to stand.
    let image_log = work.join("image.log");
    children.0.push(spawn(&wk, &["worker", "--functions", image_functions.to_str().unwrap()], &image_log));
    common::wait_until(Duration::from_secs(60), "the image's worker to register tick", || registered(&client, "tick"))
        .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    children.0.push(spawn(
        &op,
        &["maintain", "--rescue-interval", "1s", "--schedule-interval", "1s"],
        &work.join("maintain.log"),
    ));

    // A schedule ticks: its tasks are released (by the leader) and run (by the image's worker).
    common::wait_until(Duration::from_secs(30), "two ticks of the schedule to succeed", || async {
        let n: Option<i64> = client
            .query_opt("select n from asyncflow.count_by_status('tick') where status = 'succeeded'", &[])
            .await
            .ok()
            .flatten()
            .map(|r| r.get("n"));
        n.unwrap_or(0) >= 2
    })
    .await;

    // A task whose worker is killed is rescued within its lease plus one rescue interval.
    let mut victim = spawn(
        &wk,
        &["worker", "--functions", victim_functions.to_str().unwrap(), "--no-maintenance"],
        &work.join("victim.log"),
    );
    common::wait_until(Duration::from_secs(60), "the victim to register hang", || registered(&client, "hang")).await;
    let id: String = client.query_one("select asyncflow.create_task('hang', '{}') as id", &[]).await.unwrap().get("id");
    let get = |id: String| {
        let client = &client;
        async move {
            let task: Value = client.query_one("select asyncflow.get_task($1) as t", &[&id]).await.unwrap().get("t");
            task
        }
    };
    common::wait_until(Duration::from_secs(30), "the hang task to run", || async {
        get(id.clone()).await["status"] == "running"
    })
    .await;
    let _ = victim.kill();
    let _ = victim.wait();
    let lease_until: chrono::DateTime<chrono::Utc> =
        serde_json::from_value(get(id.clone()).await["lease_until"].clone()).expect("a lease");
    let bound = lease_until + chrono::Duration::seconds(1) + chrono::Duration::milliseconds(2500);
    let wait = (bound - chrono::Utc::now()).to_std().unwrap_or_default();
    common::wait_until(wait, "the killed worker's task to be rescued by the owner's maintain", || async {
        get(id.clone()).await["status"] != "running"
    })
    .await;

    // The worker role's process never tried a maintenance function it may not run.
    let log = std::fs::read_to_string(&image_log).unwrap_or_default();
    assert!(!log.contains("permission denied"), "{log}");
    drop(children);
    let _ = std::fs::remove_dir_all(&work);
}

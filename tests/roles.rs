//! Least privilege, with the real binary and real roles: a fresh database whose owner is neither a
//! superuser nor has CREATEROLE runs `asyncflow migrate`; a worker role granted only
//! `asyncflow_worker`, a server role granted only `asyncflow_worker` (docs/operations.md) and a
//! client role granted only `asyncflow_client` then run the 3-stage media example end to end.
//! None of them has CREATE on the database or any privilege on a table.
use crate::common;

#[path = "roles/documented.rs"]
mod documented;

use common::cli::{ok, refused};

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

const TOKEN: &str = "roles-test-token-0123456789";

/// The roles and the database of one test, dropped at the end.
struct Cluster {
    suffix: String,
    database: String,
}

impl Cluster {
    fn role(&self, kind: &str) -> String {
        format!("{kind}_{}", self.suffix)
    }

    /// The owner, and the worker, server and client roles granted their asyncflow role by a
    /// superuser.
    async fn new() -> Cluster {
        let cluster = Cluster::bare().await;
        let (wk, sv, cl) = (cluster.role("wk"), cluster.role("sv"), cluster.role("cl"));
        common::superuser()
            .await
            .batch_execute(&format!(
                "grant asyncflow_worker to {wk}; grant asyncflow_worker to {sv}; grant asyncflow_client to {cl};"
            ))
            .await
            .expect("grants");
        cluster
    }

    /// The login roles, none granted anything, and the database, owned by a role that is neither
    /// a superuser nor has CREATEROLE or CREATEDB.
    async fn bare() -> Cluster {
        let suffix = uuid::Uuid::new_v4().simple().to_string()[..12].to_string();
        let cluster = Cluster { database: format!("roles_{suffix}"), suffix };
        let su = common::superuser().await;
        let (op, wk, sv, cl) = (cluster.role("op"), cluster.role("wk"), cluster.role("sv"), cluster.role("cl"));
        su.batch_execute(&format!(
            "create role {op} login nosuperuser nocreaterole nocreatedb;
             create role {wk} login; create role {sv} login; create role {cl} login;"
        ))
        .await
        .expect("roles");
        su.batch_execute(&format!("create database {} owner {op}", cluster.database)).await.expect("database");
        cluster
    }

    async fn url(&self, kind: &str) -> String {
        common::server_url(&self.database, &self.role(kind)).await
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let (database, roles) = (self.database.clone(), ["op", "wk", "sv", "cl"].map(|k| self.role(k)));
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
            rt.block_on(async {
                let su = common::superuser().await;
                let _ = su.batch_execute(&format!("drop database if exists {database} with (force)")).await;
                for role in roles {
                    let _ = su.batch_execute(&format!("drop role if exists {role}")).await;
                }
            });
        })
        .join();
    }
}

fn asyncflow(url: &str, args: &[&str]) -> Output {
    common::cli::asyncflow(Some(url), args)
}

fn spawn(url: &str, args: &[&str], log: &Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_asyncflow"))
        .args(args)
        .env("DATABASE_URL", url)
        .env_remove("ASYNCFLOW_SERVER")
        .env_remove("ASYNCFLOW_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).expect("log file"))
        .spawn()
        .expect("spawn asyncflow")
}

/// Kills the child processes when the test ends, passed or not.
struct Children(Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[tokio::test]
async fn least_privilege_roles_run_the_media_example_end_to_end() {
    let cluster = Cluster::new().await;
    let (op, wk, sv, cl) =
        (cluster.url("op").await, cluster.url("wk").await, cluster.url("sv").await, cluster.url("cl").await);

    // None of the three application roles may create anything in the database.
    let su = common::superuser().await;
    for kind in ["wk", "sv", "cl"] {
        let role = cluster.role(kind);
        let row = su
            .query_one(
                "select has_database_privilege($1, $2, 'CREATE') as c, \
                 (select rolsuper or rolcreaterole or rolcreatedb from pg_roles where rolname = $1) as r",
                &[&role, &cluster.database],
            )
            .await
            .unwrap();
        assert!(!row.get::<_, bool>("c") && !row.get::<_, bool>("r"), "{role} has too much");
    }

    let work = std::env::temp_dir().join(format!("af-roles-{}", cluster.suffix));
    std::fs::create_dir_all(&work).unwrap();
    let functions = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("functions");
    let functions = functions.to_str().unwrap().to_string();
    let (op2, wk2, cl2) = (op.clone(), wk.clone(), cl.clone());
    let functions2 = functions.clone();
    // Before migrate: the other commands refuse, naming the fix, and change nothing.
    tokio::task::spawn_blocking(move || {
        let err = refused(&asyncflow(&wk2, &["worker", "--functions", &functions2, "--no-maintenance"]));
        assert!(err.contains("asyncflow migrate"), "{err}");
        let err = refused(&asyncflow(&cl2, &["task", "get", "media-1-1"]));
        assert!(err.contains("asyncflow migrate"), "{err}");
        let err = refused(&asyncflow(&cl2, &["migrate"]));
        assert!(err.contains("permission denied"), "{err}");
        // The owner, not a superuser and without CREATEROLE, migrates (the roles exist).
        let first = ok(&asyncflow(&op2, &["migrate"]));
        assert!(first.contains("applied migrations"), "{first}");
        let again = ok(&asyncflow(&op2, &["migrate"]));
        assert!(again.contains("database is current"), "{again}");
    })
    .await
    .unwrap();
    // Nor read or write a table of the schema.
    let owner_db = tokio_postgres::connect(&op, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(owner_db.1);
    let owner_db = owner_db.0;
    let n: i64 = owner_db
        .query_one(
            "select count(*) from (select unnest($1::text[]) r) roles \
             cross join (select c.oid from pg_class c join pg_namespace n on n.oid = c.relnamespace \
               where n.nspname = 'asyncflow' and c.relkind in ('r', 'p')) t \
             where has_table_privilege(r, t.oid, 'SELECT') or has_table_privilege(r, t.oid, 'INSERT') \
               or has_table_privilege(r, t.oid, 'UPDATE') or has_table_privilege(r, t.oid, 'DELETE')",
            &[&vec![cluster.role("wk"), cluster.role("sv"), cluster.role("cl")]],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 0, "no table privilege for the application roles");

    // The server and the worker, each on its own role, without --migrate.
    let server = common::cli::Served::start(&sv, TOKEN, &[]).await;
    let base = server.base.clone();
    let mut children = Children(Vec::new());
    children.0.push(spawn(
        &wk,
        &["worker", "--functions", &functions, "--types", "media", "--no-maintenance"],
        &work.join("worker.log"),
    ));
    let http = reqwest::Client::new();
    // The worker registers its type on start-up.
    common::wait_until(Duration::from_secs(60), "the worker to register media", || async {
        let r = http.get(format!("{base}/v1/task-types/media")).bearer_auth(TOKEN).send().await;
        r.map(|r| r.status().is_success()).unwrap_or(false)
    })
    .await;

    // Enqueue twice: over HTTP, and in SQL as the client role.
    let wav = work.join("in.wav");
    asyncflow::demo::write_wav(&wav, 1.0, 330.0, 0.3).unwrap();
    let context = json!({"input": wav, "out_dir": work});
    let created: Value = http
        .post(format!("{base}/v1/tasks"))
        .bearer_auth(TOKEN)
        .json(&json!({"type": "media", "context": context}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let by_http = created["id"].as_str().expect("an id").to_string();
    let client = tokio_postgres::connect(&cl, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(client.1);
    let by_sql: String =
        client.0.query_one("select asyncflow.create_task('media', $1) as id", &[&context]).await.unwrap().get("id");

    for id in [&by_http, &by_sql] {
        common::wait_until(Duration::from_secs(120), &format!("{id} to succeed"), || async {
            let t = common::cli::get_json(&format!("{base}/v1/tasks/{id}"), TOKEN).await;
            assert_ne!(t["status"], "failed", "{t}");
            t["status"] == "succeeded"
        })
        .await;
    }
    // The server's listings, metrics and dashboard work on its role too.
    for path in ["/v1/task-types", "/v1/queue-depth", "/v1/dashboard", "/metrics", "/v1/tasks?type=media"] {
        let r = http.get(format!("{base}{path}")).bearer_auth(TOKEN).send().await.unwrap();
        assert!(r.status().is_success(), "{path}: {}", r.status());
    }

    // The client role reads with the binary: task get, task list, status.
    let (cl2, op2, ids) = (cl.clone(), op.clone(), [by_http.clone(), by_sql.clone()]);
    tokio::task::spawn_blocking(move || {
        for id in &ids {
            let task: Value = serde_json::from_str(&ok(&asyncflow(&cl2, &["task", "get", id]))).unwrap();
            assert_eq!((task["status"].as_str(), task["stage"].as_str()), (Some("succeeded"), Some("publish")));
            assert!(task["result"]["sha256"].is_string(), "{task}");
        }
        let status = ok(&asyncflow(&cl2, &["status"]));
        let line = status.lines().find(|l| l.starts_with("media")).expect("a media line");
        let header = status.lines().find(|l| l.starts_with("type")).expect("a header line");
        let succeeded = header.split_whitespace().position(|h| h == "succeeded").expect("a succeeded column");
        assert_eq!(line.split_whitespace().nth(succeeded), Some("2"), "two succeeded: {status}");
        // Maintenance stays the owner's.
        let once = ok(&asyncflow(&op2, &["maintain", "--once"]));
        assert!(once.contains("rescuer"), "{once}");
    })
    .await
    .unwrap();
    drop((children, server));
    let _ = std::fs::remove_dir_all(&work);
}

//! Test harness: one PostgreSQL server per test binary (DATABASE_URL, or the embedded server when
//! unset), a template database migrated once per schema version, and a fresh database per test
//! (`create database ... template ...`), dropped when the test ends. Connections run with an empty
//! search_path, proving that the SQL API qualifies every name.
#![allow(dead_code)]

pub mod browser;
pub mod cli;
pub mod crash;
pub mod docs;
pub mod process;
pub mod proxy;
pub mod sql;
pub mod workflow;

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use asyncflow::db::embedded::{EmbeddedConfig, EmbeddedPostgres};
use asyncflow::db::{self, DbPool};
use tokio_postgres::NoTls;

struct Server {
    /// URL of the server's `postgres` database.
    admin_url: String,
    template: String,
    _embedded: Option<EmbeddedPostgres>,
}

static SERVER: OnceLock<Result<Server, String>> = OnceLock::new();

fn url_for(base: &str, database: &str) -> String {
    let config = tokio_postgres::Config::from_str(base).expect("valid base URL");
    url_as(base, database, config.get_user().unwrap_or("postgres"))
}

/// The server of `base`, database `database`, as `user`.
fn url_as(base: &str, database: &str, user: &str) -> String {
    let config = tokio_postgres::Config::from_str(base).expect("valid base URL");
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
        _ => "127.0.0.1".to_string(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!("postgres://{user}@{host}:{port}/{database}")
}

fn migrations_hash() -> String {
    // the template database is made again when a migration or a file of the SQL API changes
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("sql");
    let mut files = Vec::new();
    for dir in ["migrations", "api", "api/templates"] {
        files.extend(std::fs::read_dir(root.join(dir)).expect("sql folder").flatten().map(|e| e.path()));
    }
    files.retain(|f| f.is_file());
    files.sort();
    let mut h = DefaultHasher::new();
    for f in files {
        f.strip_prefix(&root).unwrap_or(&f).hash(&mut h);
        std::fs::read(&f).expect("sql file").hash(&mut h);
    }
    format!("{:016x}", h.finish())
}

async fn admin(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, NoTls).await.expect("connect to the test server");
    tokio::spawn(conn);
    client
}

fn start() -> Result<Server, String> {
    let rt = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
    rt.block_on(async {
        let (admin_url, embedded) = match std::env::var("DATABASE_URL") {
            Ok(url) if !url.is_empty() => (url_for(&url, "postgres"), None),
            _ => {
                let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/test-pg");
                clean_stale(&root);
                let dir = root.join(format!("pg-{}", std::process::id()));
                let _ = std::fs::remove_dir_all(&dir);
                let config = EmbeddedConfig::new(&dir)
                    .setting("fsync", "off")
                    .setting("synchronous_commit", "off")
                    .setting("full_page_writes", "off")
                    .setting("max_connections", "300");
                let server = EmbeddedPostgres::start(config).await.map_err(|e| e.to_string())?;
                (server.url().to_string(), Some(server))
            }
        };
        let template = format!("asyncflow_tmpl_{}", migrations_hash());
        let client = admin(&admin_url).await;
        // One builder at a time across test binaries sharing a server.
        client.execute("select pg_advisory_lock(16710, 99)", &[]).await.map_err(|e| e.to_string())?;
        let exists = client
            .query_opt("select 1 from pg_database where datname = $1", &[&template])
            .await
            .map_err(|e| e.to_string())?
            .is_some();
        if !exists {
            let building = format!("{template}_building");
            client
                .batch_execute(&format!("drop database if exists {building} with (force)"))
                .await
                .map_err(|e| e.to_string())?;
            client.batch_execute(&format!("create database {building}")).await.map_err(|e| e.to_string())?;
            db::migrate::migrate(&url_for(&admin_url, &building)).await.map_err(|e| e.to_string())?;
            client
                .batch_execute(&format!("alter database {building} rename to {template}"))
                .await
                .map_err(|e| e.to_string())?;
        }
        client.execute("select pg_advisory_unlock(16710, 99)", &[]).await.map_err(|e| e.to_string())?;
        Ok(Server { admin_url, template, _embedded: embedded })
    })
}

/// Removes data directories left by test processes that are gone.
fn clean_stale(root: &std::path::Path) {
    for entry in std::fs::read_dir(root).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        if let Some(pid) = name.strip_prefix("pg-").and_then(|p| p.parse::<u32>().ok()) {
            if !PathBuf::from(format!("/proc/{pid}")).exists() {
                let _ = std::fs::remove_dir_all(entry.path());
                let _ = std::fs::remove_file(root.join(format!("{name}.log")));
            }
        }
    }
}

fn server() -> &'static Server {
    match SERVER
        .get_or_init(|| std::thread::spawn(start).join().unwrap_or_else(|_| Err("server start-up panicked".into())))
    {
        Ok(s) => s,
        Err(e) => panic!("test database server: {e}"),
    }
}

/// A fresh, migrated database for one test; dropped when this value is dropped.
pub struct TestDb {
    /// Connection URL (connections get an empty search_path).
    pub url: String,
    /// Database name.
    pub name: String,
    /// A pool over it.
    pub pool: DbPool,
    admin_url: String,
}

impl TestDb {
    /// Creates the database from the migrated template.
    pub async fn new() -> TestDb {
        let server = tokio::task::spawn_blocking(server).await.expect("server");
        let name = format!("t_{}", uuid::Uuid::new_v4().simple());
        let client = admin(&server.admin_url).await;
        client
            .batch_execute(&format!("create database {name} template {}", server.template))
            .await
            .expect("create test database");
        let url = format!("{}?options=-csearch_path%3D", url_for(&server.admin_url, &name));
        let pool = db::pool(&url, 16).expect("pool");
        TestDb { url, name, pool, admin_url: server.admin_url.clone() }
    }

    /// A pooled connection.
    pub async fn conn(&self) -> deadpool_postgres::Object {
        self.pool.get().await.expect("connection")
    }

    /// A connection outside the pool (for transactions, LISTEN, killing).
    pub async fn raw(&self) -> tokio_postgres::Client {
        admin(&self.url).await
    }

    /// Refuses (false) or allows again (true) new connections to this test's database, from the
    /// server's maintenance database: the database going away without the server going down.
    #[allow(dead_code)] // not every test binary uses it
    pub async fn allow_connections(&self, allow: bool) {
        let c = admin(&self.admin_url).await;
        c.batch_execute(&format!("alter database \"{}\" allow_connections {allow}", self.name))
            .await
            .expect("alter database allow_connections");
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let admin_url = self.admin_url.clone();
        let name = self.name.clone();
        let _ = std::thread::spawn(move || {
            if let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() {
                rt.block_on(async {
                    if let Ok((client, conn)) = tokio_postgres::connect(&admin_url, NoTls).await {
                        tokio::spawn(conn);
                        let _ = client.batch_execute(&format!("drop database if exists {name} with (force)")).await;
                    }
                });
            }
        })
        .join();
    }
}

/// A URL of the test server for `database` as `user` (the test server trusts local logins: no
/// password), for tests that make their own roles and databases.
pub async fn server_url(database: &str, user: &str) -> String {
    let server = tokio::task::spawn_blocking(server).await.expect("server");
    url_as(&server.admin_url, database, user)
}

/// The URL of the server's `postgres` database as its superuser.
pub async fn admin_url() -> String {
    tokio::task::spawn_blocking(server).await.expect("server").admin_url.clone()
}

/// A superuser's connection to the test server's maintenance database.
pub async fn superuser() -> tokio_postgres::Client {
    let server = tokio::task::spawn_blocking(server).await.expect("server");
    admin(&server.admin_url).await
}

/// Waits until `check` is true, polling every 20 ms; panics after `timeout`.
pub async fn wait_until<F, Fut>(timeout: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while !check().await {
        if Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits (at most 10 s) until another backend of `c`'s database, running a statement that
/// contains `text`, is waiting for a lock: a test that sets up a lock conflict knows its second
/// statement is blocked rather than merely started. `c` may be inside a transaction: the
/// activity snapshot, which a transaction otherwise keeps from its first read, is cleared before
/// each look.
pub async fn wait_for_lock_wait(c: &tokio_postgres::Client, text: &str) {
    let pattern = format!("%{text}%");
    wait_until(Duration::from_secs(10), &format!("a statement with {text} to wait for a lock"), || async {
        c.execute("select pg_stat_clear_snapshot()", &[]).await.unwrap();
        let n: i64 = c
            .query_one(
                "select count(*) from pg_stat_activity where datname = current_database() \
                 and pid <> pg_backend_pid() and wait_event_type = 'Lock' and query like $1",
                &[&pattern],
            )
            .await
            .unwrap()
            .get(0);
        n == 1
    })
    .await;
}

/// The SQLSTATE of a failed call's database error.
/// The calls in the stage-time histogram of `task_type`, per stage (sorted by stage).
pub async fn stage_calls(c: &impl tokio_postgres::GenericClient, task_type: &str) -> Vec<(String, i64)> {
    let rows = c
        .query(
            "select stage, sum(calls)::bigint from asyncflow.stage_times where task_type = $1 \
             group by stage order by stage",
            &[&task_type],
        )
        .await
        .unwrap();
    rows.iter().map(|r| (r.get(0), r.get(1))).collect()
}

pub fn sqlstate(e: &tokio_postgres::Error) -> String {
    e.code().map(|c| c.code().to_string()).unwrap_or_else(|| format!("no SQLSTATE: {e}"))
}

/// A server configuration for router tests: loopback, these tokens, this body limit.
pub fn http_config(tokens: &[&str], max_body: usize) -> asyncflow::http::HttpConfig {
    asyncflow::http::HttpConfig {
        listen: "127.0.0.1:0".parse().expect("loopback address"),
        tokens: tokens.iter().map(|t| t.to_string()).collect(),
        insecure_no_auth: false,
        max_body,
        header_timeout: asyncflow::http::HEADER_TIMEOUT_DEFAULT,
        body_timeout: asyncflow::http::BODY_TIMEOUT_DEFAULT,
    }
}

/// A functions folder in a temporary directory, removed when dropped.
pub struct Folder(pub PathBuf);

impl Drop for Folder {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Folder {
    /// One function per (name, function.toml, body of its `run` sh script).
    pub fn new(functions: &[(&str, &str, &str)]) -> Folder {
        use std::os::unix::fs::PermissionsExt;
        let root = std::env::temp_dir().join(format!("af-fn-{}", uuid::Uuid::new_v4().simple()));
        for (name, toml, body) in functions {
            let dir = root.join(name);
            std::fs::create_dir_all(&dir).expect("function folder");
            std::fs::write(dir.join("function.toml"), toml).expect("function.toml");
            let run = dir.join("run");
            std::fs::write(&run, format!("#!/bin/sh\n{body}\n")).expect("run script");
            std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        }
        Folder(root)
    }
}

/// One request through the router, in process: status, content type and body bytes. The body
/// goes as given, with `content_type` when set, and `Authorization: Bearer <token>` when set.
pub async fn request(
    app: &axum::Router,
    method: &str,
    uri: &str,
    body: Option<String>,
    content_type: Option<&str>,
    token: Option<&str>,
) -> (axum::http::StatusCode, String, Vec<u8>) {
    use tower::ServiceExt;
    let mut req = axum::http::Request::builder().method(method).uri(uri);
    if let Some(ct) = content_type {
        req = req.header("content-type", ct);
    }
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let req = req.body(body.map(axum::body::Body::from).unwrap_or_else(axum::body::Body::empty)).expect("request");
    let resp = app.clone().oneshot(req).await.expect("the router answers");
    let status = resp.status();
    let content_type = resp
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .map(|v| v.to_str().expect("content type is text").to_string())
        .unwrap_or_default();
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX).await.expect("response body");
    (status, content_type, bytes.to_vec())
}

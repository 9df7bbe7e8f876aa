//! The command line's own rules, with the real binary: global options after the subcommand,
//! migrations only when asked, no embedded server unless asked, one duration syntax, errors that
//! name what is wrong, an idempotent create that says so, and no panic on a closed stdout.
use crate::common;

use std::process::{Command, Stdio};

use common::cli::{asyncflow, ok, refused, Served};
use common::TestDb;
use serde_json::{json, Value};

const TOKEN: &str = "cli-options-token-0123456789";

fn json_out(out: &std::process::Output) -> Value {
    serde_json::from_str(&ok(out)).expect("JSON on stdout")
}

#[tokio::test]
async fn global_options_come_after_the_subcommand_and_status_asks_a_server() {
    let db = TestDb::new().await;
    let server = Served::start(&db.url, TOKEN, &[]).await;
    let (url, base2) = (db.url.clone(), server.base.clone());
    tokio::task::spawn_blocking(move || {
        ok(&asyncflow(None, &["type", "set", "clip", "{}", "--database-url", &url]));
        let created = json_out(&asyncflow(None, &["task", "create", "clip", "--database-url", &url]));
        let id = created["id"].as_str().unwrap().to_string();
        // --server and --token after the subcommand's own arguments
        let got = json_out(&asyncflow(None, &["task", "get", &id, "--server", &base2, "--token", TOKEN]));
        assert_eq!(got["id"], id.as_str());
        let listed = json_out(&asyncflow(None, &["type", "list", "--token", TOKEN, "--server", &base2]));
        assert_eq!(listed[0]["type"], "clip");
        // status, from the database and from the server, says the same
        let local = ok(&asyncflow(Some(&url), &["status"]));
        let remote = ok(&asyncflow(None, &["status", "--server", &base2, "--token", TOKEN]));
        fn line(s: &str) -> Option<Vec<String>> {
            let l = s.lines().find(|l| l.starts_with("clip"))?;
            Some(l.split_whitespace().take(7).map(str::to_string).collect())
        }
        assert_eq!(line(&local), line(&remote), "{local}\n{remote}");
        assert_eq!(line(&local).unwrap()[1], "1", "one ready: {local}");
    })
    .await
    .unwrap();
    drop(server);
}

#[tokio::test]
async fn the_http_api_says_whether_a_create_found_its_key_and_names_the_type_type() {
    let db = TestDb::new().await;
    let server = Served::start(&db.url, TOKEN, &[]).await;
    let http = reqwest::Client::new();
    let r = http.put(format!("{}/v1/task-types/clip", server.base)).bearer_auth(TOKEN).json(&json!({})).send().await;
    let settings: Value = r.unwrap().json().await.unwrap();
    assert_eq!((settings["type"].as_str(), settings.get("task_type")), (Some("clip"), None), "{settings}");
    let create = |body: Value| {
        let r = http.post(format!("{}/v1/tasks", server.base)).bearer_auth(TOKEN).json(&body).send();
        async move {
            let r = r.await.unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        }
    };
    let (s1, first) = create(json!({"type": "clip", "idempotency_key": "k"})).await;
    assert_eq!((s1, &first["created"]), (201, &json!(true)), "{first}");
    // the old field name is still read
    let (s2, again) = create(json!({"task_type": "clip", "idempotency_key": "k"})).await;
    assert_eq!((s2, &again["created"], &again["id"]), (200, &json!(false), &first["id"]), "{again}");
    let (s3, other) = create(json!({"type": "clip"})).await;
    assert_eq!((s3, &other["created"]), (201, &json!(true)), "{other}");
    // a unique key's duplicate is found, not created, alike
    let (s4, unique) = create(json!({"type": "clip", "unique_key": "u"})).await;
    assert_eq!((s4, &unique["created"]), (201, &json!(true)), "{unique}");
    let (s5, again) = create(json!({"type": "clip", "unique_key": "u"})).await;
    assert_eq!((s5, &again["created"], &again["id"]), (200, &json!(false), &unique["id"]), "{again}");
    let depth = common::cli::get_json(&format!("{}/v1/queue-depth", server.base), TOKEN).await;
    assert_eq!((depth[0]["type"].as_str(), depth[0]["ready"].as_i64()), (Some("clip"), Some(3)), "{depth}");
    drop(server);
}

#[tokio::test]
async fn migrations_run_only_when_asked() {
    let su = common::superuser().await;
    let name = format!("fresh_{}", uuid::Uuid::new_v4().simple());
    su.batch_execute(&format!("create database {name}")).await.unwrap();
    let url = common::server_url(&name, "postgres").await;
    let folder = common::Folder::new(&[("echo", "command = [\"./run\"]\n", r#"echo '{"result": 1}'"#)]);
    let functions = folder.0.to_str().unwrap().to_string();
    let u = url.clone();
    let f = functions.clone();
    tokio::task::spawn_blocking(move || {
        for args in [
            vec!["worker", "--functions", &f, "--exit-when-idle"],
            vec!["serve", "--listen", "127.0.0.1:0"],
            vec!["task", "list"],
            vec!["status"],
            vec!["maintain", "--once"],
        ] {
            let err = refused(&asyncflow(Some(&u), &args));
            assert!(err.contains("run `asyncflow migrate`"), "{args:?}: {err}");
        }
        // a worker given --migrate migrates first
        let summary = ok(&asyncflow(Some(&u), &["worker", "--functions", &f, "--exit-when-idle", "--migrate"]));
        assert!(summary.contains("stopped_by"), "{summary}");
        assert_eq!(json_out(&asyncflow(Some(&u), &["task", "list"]))["tasks"], json!([]));
        assert!(ok(&asyncflow(Some(&u), &["migrate"])).contains("database is current"));
    })
    .await
    .unwrap();
    // serve --migrate on a database already current starts as well
    drop(Served::start(&url, TOKEN, &["--migrate"]).await);
    let _ = su.batch_execute(&format!("drop database if exists {name} with (force)")).await;
}

#[tokio::test]
async fn no_database_named_is_an_error_except_for_the_demo_and_the_benchmark() {
    let cwd = std::env::temp_dir().join(format!("af-nodb-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&cwd).unwrap();
    for args in [
        vec!["task", "list"],
        vec!["status"],
        vec!["migrate"],
        vec!["worker"],
        vec!["serve"],
        vec!["maintain", "--once"],
        vec!["type", "list"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_asyncflow"))
            .args(&args)
            .current_dir(&cwd)
            .env_remove("DATABASE_URL")
            .env_remove("ASYNCFLOW_SERVER")
            .env("ASYNCFLOW_DATA_DIR", cwd.join(".asyncflow/pgdata"))
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = refused(&out);
        assert!(err.contains("no database named") && err.contains("--embedded"), "{args:?}: {err}");
        assert_eq!(err.matches("configuration:").count(), 1, "{err}");
    }
    assert!(!cwd.join(".asyncflow").exists(), "no private server was started");
    let _ = std::fs::remove_dir_all(&cwd);
}

#[tokio::test]
async fn maintain_takes_the_duration_syntax_and_plain_seconds() {
    let db = TestDb::new().await;
    let url = db.url.clone();
    tokio::task::spawn_blocking(move || {
        let args = [
            "maintain",
            "--once",
            "--rescue-interval",
            "10m",
            "--shard-interval",
            "1.5",
            "--retention-interval",
            "90s",
            "--check-interval",
            "500ms",
        ];
        assert!(ok(&asyncflow(Some(&url), &args)).contains("rescuer"));
        for bad in ["0", "0s", "soon", "-1"] {
            let err = refused(&asyncflow(Some(&url), &["maintain", "--once", &format!("--rescue-interval={bad}")]));
            assert!(err.contains("--rescue-interval"), "{bad}: {err}");
        }
        let err = refused(&asyncflow(Some(&url), &["task", "create", "clip", "--run-at", "whenever"]));
        assert!(err.contains("--run-at") && err.contains("RFC 3339"), "{err}");
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn errors_name_what_is_wrong_once() {
    let db = TestDb::new().await;
    let folder = common::Folder::new(&[(
        "clip",
        "command = [\"./run\"]\n[settings]\nmax_retry_num = \"three\"\n",
        r#"echo '{"result": 1}'"#,
    )]);
    let (url, functions) = (db.url.clone(), folder.0.to_str().unwrap().to_string());
    tokio::task::spawn_blocking(move || {
        let err = refused(&asyncflow(Some(&url), &["worker", "--functions", &functions, "--exit-when-idle"]));
        assert!(err.contains("clip/function.toml: settings.max_retry_num: invalid type"), "{err}");
        assert_eq!(err.matches("configuration:").count(), 1, "{err}");
        let err = refused(&asyncflow(Some(&url), &["demo", "--functions", "/nonexistent-af"]));
        assert!(err.contains("/nonexistent-af") && err.contains("pass --functions"), "{err}");
        assert_eq!(err.matches("configuration:").count(), 1, "{err}");
        let err = refused(&asyncflow(None, &["task", "get", "x-1-1", "--server", "http://127.0.0.1:1"]));
        assert!(err.contains("GET http://127.0.0.1:1/v1/tasks/x-1-1") && !err.contains("configuration"), "{err}");
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn no_printing_command_panics_on_a_closed_stdout() {
    let db = TestDb::new().await;
    let folder = common::Folder::new(&[("echo", "command = [\"./run\"]\n", r#"echo '{"result": 1}'"#)]);
    let functions = folder.0.to_str().unwrap().to_string();
    let url = db.url.clone();
    tokio::task::spawn_blocking(move || {
        ok(&asyncflow(Some(&url), &["type", "set", "echo", "{}"]));
        for _ in 0..3 {
            ok(&asyncflow(Some(&url), &["task", "create", "echo"]));
        }
        for args in [
            vec!["task", "list"],
            vec!["type", "list"],
            vec!["status"],
            vec!["migrate"],
            vec!["maintain", "--once"],
            vec!["worker", "--functions", &functions, "--exit-when-idle", "--no-maintenance"],
        ] {
            let mut child = Command::new(env!("CARGO_BIN_EXE_asyncflow"))
                .args(&args)
                .env("DATABASE_URL", &url)
                .env_remove("ASYNCFLOW_SERVER")
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            // the reader goes away before anything is written
            drop(child.stdout.take());
            let out = child.wait_with_output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                !stderr.contains("panicked") && out.status.code() != Some(101),
                "{args:?}: {:?} {stderr}",
                out.status
            );
        }
    })
    .await
    .unwrap();
}

/// `maintain --help` lists every service `maintain` runs (the scheduler and the workflows' among
/// them), each name as the built service gives it, in the order a pass runs them.
#[tokio::test]
async fn maintain_help_lists_every_service_maintain_runs() {
    use asyncflow::maintenance::MaintenanceConfig;
    // never connects: the services are only built to ask their names
    let pool = asyncflow::db::pool("postgres://postgres@127.0.0.1:1/nothing", 1).unwrap();
    let services = asyncflow::cli::maintain::services(&pool, &MaintenanceConfig::default(), &Default::default());
    let names: Vec<&str> = services.iter().map(|s| s.name()).collect();
    assert!(names.contains(&"scheduler") && names.contains(&"run_checker") && names.len() >= 12, "{names:?}");
    let help = tokio::task::spawn_blocking(|| ok(&asyncflow(None, &["maintain", "--help"]))).await.unwrap();
    let listed: Vec<&str> = help
        .lines()
        .filter(|l| l.starts_with("  ") && !l.trim_start().starts_with('-'))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| names.contains(name))
        .collect();
    assert_eq!(listed, names, "{help}");
}

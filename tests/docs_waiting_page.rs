//! docs/waiting.md, run as written: its function.toml and Python programs are written where the
//! page says, its setup is run by `sh`, a worker is started as the page starts it, and each
//! command of its "Run it" blocks is run with what it prints compared with the `# {...}` line
//! the page shows under it (the fields shown must be there with those values; a read is run
//! again until they are, as the worker may not have got there yet). Its SQL block is run too.
use crate::common;

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::docs::{block, open_page, sh, write_named};
use common::TestDb;
use serde_json::Value;

/// Whether `actual` has every field of `expected`, with the same values (objects compared field
/// by field, anything else as a whole).
fn has(actual: &Value, expected: &Value) -> bool {
    match (actual, expected) {
        (Value::Object(a), Value::Object(e)) => e.iter().all(|(k, v)| a.get(k).is_some_and(|x| has(x, v))),
        _ => actual == expected,
    }
}

/// A block's commands, each with the output the page shows under it.
fn commands(text: &str) -> Vec<(String, Value)> {
    let mut out: Vec<(String, Value)> = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        match line.trim().strip_prefix("# ") {
            Some(shown) => {
                let last = out.last_mut().expect("an output line follows its command");
                last.1 = serde_json::from_str(shown).unwrap_or_else(|e| panic!("{shown:?} is not JSON: {e}"));
            }
            None => out.push((line.to_string(), Value::Null)),
        }
    }
    out
}

/// Runs each command of a block; a read (`task get`, `task explain`) again until it prints what
/// the page shows, for at most 60 s.
fn run_block(dir: &Path, url: &str, text: &str) {
    for (command, shown) in commands(text) {
        assert!(!shown.is_null(), "the page shows what {command:?} prints");
        let read = command.contains(" task get ") || command.contains(" task explain ");
        let start = Instant::now();
        loop {
            let out = sh(dir, url, &command).output().unwrap();
            let printed: Value = serde_json::from_str(&common::cli::ok(&out)).unwrap_or(Value::Null);
            if has(&printed, &shown) {
                break;
            }
            assert!(
                read && start.elapsed() < Duration::from_secs(60),
                "{command}\nprinted {printed}\nthe page shows {shown}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

#[tokio::test]
async fn the_waiting_page_runs_as_written() {
    let db = TestDb::new().await;
    let (all, dir) = open_page("waiting.md");

    // 1. the functions, where the page names them, and its setup
    write_named(
        &all,
        &dir,
        &[
            ("toml", "myfunctions/approval/function.toml"),
            ("python", "myfunctions/approval/run"),
            ("python", "myfunctions/crawl/run"),
            ("python", "myfunctions/page/run"),
        ],
    );
    let setup = block(&all, "sh", "chmod +x");
    let out = sh(&dir, &db.url, setup).output().unwrap();
    assert!(out.status.success(), "{setup}: {}", String::from_utf8_lossy(&out.stderr));

    // 2. the worker, as the page starts it
    let start = block(&all, "sh", "asyncflow worker").trim();
    let mut worker = sh(&dir, &db.url, start).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    common::wait_until(Duration::from_secs(30), "the worker registered the page's types", || async {
        let c = db.conn().await;
        let n: i64 = c
            .query_one(
                "select count(*) from asyncflow.task_types where task_type in ('approval', 'crawl', 'page')",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        n == 3
    })
    .await;

    // 3. the approval, then the same from SQL, then the crawl
    run_block(&dir, &db.url, block(&all, "sh", "asyncflow task create approval"));
    let sql = block(&all, "sql", "asyncflow.send_event");
    let (create, send) = sql.split_once("-- ... later").expect("the SQL block sends the event later");
    let c = db.conn().await;
    let id: String = c.query_one(create.trim().trim_end_matches(';'), &[]).await.unwrap().get(0);
    common::wait_until(Duration::from_secs(60), "the SQL task waits", || async {
        common::sql::task(&**db.conn().await, &id).await["status"] == "waiting"
    })
    .await;
    let send = send.split_once('\n').map(|(_, s)| s).unwrap_or_default();
    let woken: i32 = c.query_one(send.trim().trim_end_matches(';'), &[]).await.unwrap().get(0);
    assert_eq!(woken, 1);
    common::wait_until(Duration::from_secs(60), "the SQL task was decided", || async {
        let t = common::sql::task(&**db.conn().await, &id).await;
        t["status"] == "succeeded" && t["result"]["approved"] == false
    })
    .await;
    run_block(&dir, &db.url, block(&all, "sh", "asyncflow task create crawl"));

    common::process::signal(&worker, nix::sys::signal::Signal::SIGTERM);
    let status = common::process::wait_exit(&mut worker, Duration::from_secs(30));
    assert!(status.success(), "the worker stops cleanly on SIGTERM: {status:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

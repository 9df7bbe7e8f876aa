//! docs/warm-functions.md, run as written: its function.toml and Python program are written
//! where the page says, its shell lines are run by `sh` (with `asyncflow` meaning this build's
//! binary), and what they print is compared with the `# ...` lines the page shows under them.
//! The page cannot drift from what the product does.
use crate::common;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use common::docs::{block, open_page, sh, write_named};
use common::TestDb;
use serde_json::Value;

/// Runs a shell block and checks its stdout, as JSON lines, against the `# {...}` lines the
/// page shows under the command.
fn run_and_compare(dir: &Path, url: &str, text: &str) {
    let expected: Vec<Value> = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("# {").map(|rest| format!("{{{rest}")))
        .map(|l| serde_json::from_str(&l).expect("the page's output line is JSON"))
        .collect();
    assert!(!expected.is_empty(), "the block shows its output: {text}");
    let out = sh(dir, url, text).output().unwrap();
    assert!(out.status.success(), "{text}: {}", String::from_utf8_lossy(&out.stderr));
    let printed: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?} is not JSON: {e}")))
        .collect();
    assert_eq!(printed, expected, "{text}");
}

#[tokio::test]
async fn the_warm_functions_page_runs_as_written() {
    let db = TestDb::new().await;
    // the page's `cp functions/sdk/...` is run from a checkout: the same path here
    let (all, dir) = open_page("warm-functions.md");

    // 1. the function: its function.toml and program where the page names them
    write_named(&all, &dir, &[("toml", "mode = \"warm\""), ("python", "asyncflow_function.run(handle)")]);
    let setup = block(&all, "sh", "chmod +x");
    let out = sh(&dir, &db.url, setup).output().unwrap();
    assert!(out.status.success(), "{setup}: {}", String::from_utf8_lossy(&out.stderr));
    // by hand, forked per call and as the worker talks to it in warm mode
    run_and_compare(&dir, &db.url, block(&all, "sh", "echo '{"));
    run_and_compare(&dir, &db.url, block(&all, "sh", "printf"));

    // 2. run it: the worker as the page starts it, the task it creates, what get shows
    let run = block(&all, "sh", "asyncflow worker");
    let lines: Vec<&str> = run.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 3, "worker, create, get: {run}");
    let mut worker = sh(&dir, &db.url, lines[0]).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    // the worker registers the folder's types when it starts
    common::wait_until(Duration::from_secs(30), "the worker registered thumbnail", || async {
        let c = db.conn().await;
        c.query_opt("select 1 from asyncflow.task_types where task_type = 'thumbnail'", &[]).await.unwrap().is_some()
    })
    .await;
    let created = sh(&dir, &db.url, lines[1]).output().unwrap();
    let created: Value = serde_json::from_str(&common::cli::ok(&created)).unwrap();
    let id = created["id"].as_str().expect("create prints the task's id").to_string();
    let (get, shown) = lines[2].split_once('#').expect("the page shows what get prints");
    assert!(get.contains(&id), "the page's get names the id create printed ({id}): {get}");
    let (status, result) = shown.trim().split_once(", result ").expect("status, result {...}");
    let result: Value = serde_json::from_str(result).unwrap();
    let shown =
        || -> Value { serde_json::from_str(&common::cli::ok(&sh(&dir, &db.url, get).output().unwrap())).unwrap() };
    common::wait_until(Duration::from_secs(30), "the task ended", || async {
        let task = shown();
        task["status"] != "pending" && task["status"] != "running"
    })
    .await;
    let task = shown();
    assert_eq!(task["status"], status, "{task}");
    assert_eq!(task["result"], result, "{task}");
    // both stages ran, each once: resize advanced to publish, which succeeded
    let log: Vec<(&str, &str, i64)> = task["schedule_log"]
        .as_array()
        .expect("the task's schedule log")
        .iter()
        .map(|e| {
            (e["stage"].as_str().unwrap_or(""), e["outcome"].as_str().unwrap_or(""), e["attempt"].as_i64().unwrap_or(0))
        })
        .collect();
    assert_eq!(log, [("resize", "advance", 1), ("publish", "succeed", 1)], "{task}");
    common::process::signal(&worker, nix::sys::signal::Signal::SIGTERM);
    let status = common::process::wait_exit(&mut worker, Duration::from_secs(30));
    assert!(status.success(), "the worker stops cleanly on SIGTERM: {status:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

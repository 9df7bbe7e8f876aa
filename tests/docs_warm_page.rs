//! docs/warm-functions.md, run as written: its function.toml and Python program are written
//! where the page says, its shell lines are run by `sh` (with `asyncflow` meaning this build's
//! binary), and what they print is compared with the `# ...` lines the page shows under them.
//! The page cannot drift from what the product does.
use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::TestDb;
use serde_json::Value;

/// The fenced blocks of a Markdown page: (language, text).
fn blocks(page: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut open: Option<(String, String)> = None;
    for line in page.lines() {
        match (&mut open, line.strip_prefix("```")) {
            (None, Some(lang)) => open = Some((lang.trim().to_string(), String::new())),
            (Some(_), Some(_)) => out.extend(open.take()),
            (Some((_, text)), None) => {
                text.push_str(line);
                text.push('\n');
            }
            (None, None) => {}
        }
    }
    out
}

/// The one block of `lang` that contains `needle`.
fn block<'a>(all: &'a [(String, String)], lang: &str, needle: &str) -> &'a str {
    let found: Vec<&str> =
        all.iter().filter(|(l, t)| l == lang && t.contains(needle)).map(|(_, t)| t.as_str()).collect();
    assert_eq!(found.len(), 1, "one {lang} block with {needle:?} in the page");
    found[0]
}

/// The path a block names in its first line (`# myfunctions/thumbnail/run`).
fn named_path(text: &str) -> &str {
    let line = text.lines().find(|l| l.contains("# myfunctions/")).expect("the block names its file");
    line.trim().trim_start_matches('#').trim()
}

/// `sh -c` in `dir`, with `asyncflow` the binary under test on the database at `url`.
fn sh(dir: &Path, url: &str, script: &str) -> Command {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(format!("asyncflow() {{ exec \"$AF_BIN\" \"$@\"; }}\n{script}"))
        .current_dir(dir)
        .env("AF_BIN", env!("CARGO_BIN_EXE_asyncflow"))
        .env("DATABASE_URL", url)
        .env_remove("ASYNCFLOW_SERVER")
        .env_remove("ASYNCFLOW_TOKEN")
        .stdin(Stdio::null());
    cmd
}

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
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let page = std::fs::read_to_string(root.join("docs/warm-functions.md")).unwrap();
    let all = blocks(&page);
    let dir = std::env::temp_dir().join(format!("af-docs-warm-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    // the page's `cp functions/sdk/...` is run from a checkout: the same path here
    std::os::unix::fs::symlink(root.join("functions"), dir.join("functions")).unwrap();

    // 1. the function: its function.toml and program where the page names them
    for (lang, needle) in [("toml", "mode = \"warm\""), ("python", "asyncflow_function.run(handle)")] {
        let text = block(&all, lang, needle);
        let path = dir.join(named_path(text));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
    }
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

//! The worker as PID 1, as in a container without an init, tested without a container runtime:
//! the real binary is the first process of a new PID namespace
//! (`unshare --pid --fork --mount-proc`, which needs root). As PID 1 it must collect the
//! processes its functions orphan, and a SIGTERM must still hand its tasks back and end it with
//! status 0 (a PID 1 receives only the signals it handles).
use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{wait_until, Folder, TestDb};

/// `asyncflow worker` on `dir` as PID 1 of a new PID namespace with its own /proc.
fn worker_as_pid1(db: &TestDb, dir: &Path, extra: &[&str]) -> Child {
    Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "--kill-child"])
        .arg(env!("CARGO_BIN_EXE_asyncflow"))
        .args(["worker", "--no-maintenance", "--functions"])
        .arg(dir)
        .args(extra)
        .env("DATABASE_URL", &db.url)
        .env("ASYNCFLOW_LOG", "asyncflow=debug")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("unshare (util-linux) runs the worker in a new PID namespace")
}

fn stat_of(proc_root: &Path, pid: &str) -> Option<(char, i32)> {
    let stat = std::fs::read_to_string(proc_root.join(pid).join("stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    Some((fields.next()?.chars().next()?, fields.next()?.parse().ok()?))
}

/// The pid, as the host sees it, of the namespace's first process once it runs asyncflow.
async fn namespace_init(unshare: &Child) -> i32 {
    let parent = unshare.id() as i32;
    let mut found = None;
    wait_until(Duration::from_secs(20), "the worker to start in its namespace", || {
        let pid = std::fs::read_dir("/proc").ok().and_then(|entries| {
            entries.flatten().filter_map(|e| e.file_name().to_str().map(str::to_string)).find(|pid| {
                stat_of(Path::new("/proc"), pid).is_some_and(|(_, ppid)| ppid == parent)
                    && std::fs::read_link(format!("/proc/{pid}/exe"))
                        .is_ok_and(|exe| exe.to_string_lossy().contains("asyncflow"))
            })
        });
        found = pid.and_then(|p| p.parse().ok());
        std::future::ready(found.is_some())
    })
    .await;
    found.unwrap_or_default()
}

/// The processes of the namespace, read from its own /proc (as its PID 1 sees it): pid, state,
/// parent.
fn namespace_processes(init: i32) -> Vec<(String, char, i32)> {
    let proc_root = PathBuf::from(format!("/proc/{init}/root/proc"));
    let Ok(entries) = std::fs::read_dir(&proc_root) else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str().filter(|n| n.parse::<u32>().is_ok()).map(str::to_string))
        .filter_map(|pid| stat_of(&proc_root, &pid).map(|(state, ppid)| (pid, state, ppid)))
        .collect()
}

async fn count_status(db: &TestDb, status: &str) -> i64 {
    let c = db.raw().await;
    let row = c
        .query_one("select count(*) from asyncflow.tasks where status = $1::text::asyncflow.task_status", &[&status])
        .await
        .unwrap();
    row.get(0)
}

async fn exit_of(mut child: Child, timeout: Duration) -> (std::process::ExitStatus, String) {
    tokio::task::spawn_blocking(move || {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                let mut log = String::new();
                if let Some(mut err) = child.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut err, &mut log);
                }
                return (status, log);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("the worker did not exit within {timeout:?}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    })
    .await
    .unwrap()
}

/// A function that leaves two orphans: one in its process group (killed when the call ends) and
/// one in a session of its own (ends by itself later). Both are re-parented to PID 1, which must
/// collect them: at the end the namespace holds the worker alone, no zombie.
#[tokio::test]
async fn the_worker_as_pid1_collects_the_orphans_of_its_functions() {
    let db = TestDb::new().await;
    let folder = Folder::new(&[(
        "orphans",
        "type = \"orphans\"\ncommand = [\"./run\"]\ntimeout = 10\n",
        "cat >/dev/null\n(sleep 5 &)\n(setsid sleep 0.3 </dev/null >/dev/null 2>&1 &)\necho '{\"result\": {}}'",
    )]);
    let c = db.raw().await;
    c.batch_execute(
        "select asyncflow.register_task_type('orphans', '{}'); \
         select asyncflow.create_task('orphans', '{}') from generate_series(1, 5);",
    )
    .await
    .unwrap();
    let unshare = worker_as_pid1(&db, &folder.0, &["--concurrency", "2"]);
    let init = namespace_init(&unshare).await;
    wait_until(Duration::from_secs(30), "the 5 tasks to succeed", || async {
        count_status(&db, "succeeded").await == 5
    })
    .await;
    let mut left = Vec::new();
    wait_until(Duration::from_secs(15), "the namespace to hold the worker alone", || {
        left = namespace_processes(init);
        std::future::ready(left.len() == 1)
    })
    .await;
    assert_eq!(left[0].0, "1", "{left:?}");
    assert!(left.iter().all(|(_, state, _)| *state != 'Z'), "zombies left: {left:?}");

    nix::sys::signal::kill(nix::unistd::Pid::from_raw(init), nix::sys::signal::Signal::SIGTERM).unwrap();
    let (status, log) = exit_of(unshare, Duration::from_secs(20)).await;
    assert!(status.success(), "{status:?}: {log}");
}

/// SIGTERM to the worker as PID 1: the calls in flight are given the grace, then their tasks go
/// back to pending (the try not counted), and the worker exits 0.
#[tokio::test]
async fn the_worker_as_pid1_hands_its_tasks_back_on_sigterm_and_exits_0() {
    let db = TestDb::new().await;
    let folder = Folder::new(&[(
        "long",
        "type = \"long\"\ncommand = [\"./run\"]\ntimeout = 120\n",
        "cat >/dev/null\nsleep 60\necho '{\"result\": {}}'",
    )]);
    let c = db.raw().await;
    c.batch_execute(
        "select asyncflow.register_task_type('long', '{}'); \
         select asyncflow.create_task('long', '{}') from generate_series(1, 3);",
    )
    .await
    .unwrap();
    let unshare = worker_as_pid1(&db, &folder.0, &["--shutdown-grace", "1s", "--hold-window", "0s"]);
    let init = namespace_init(&unshare).await;
    wait_until(Duration::from_secs(30), "the 3 tasks to run", || async { count_status(&db, "running").await == 3 })
        .await;
    wait_until(Duration::from_secs(10), "the functions to start", || {
        std::future::ready(namespace_processes(init).len() >= 4)
    })
    .await;

    nix::sys::signal::kill(nix::unistd::Pid::from_raw(init), nix::sys::signal::Signal::SIGTERM).unwrap();
    let (status, log) = exit_of(unshare, Duration::from_secs(30)).await;
    assert!(status.success(), "{status:?}: {log}");
    assert!(log.contains("shutdown signal received"), "{log}");
    let rows = c.query("select status::text, retry_count from asyncflow.tasks", &[]).await.unwrap();
    assert_eq!(rows.len(), 3);
    for row in rows {
        assert_eq!(row.get::<_, String>(0), "pending", "handed back");
        assert_eq!(row.get::<_, i32>(1), 0, "a hand-back does not count a try");
    }
}

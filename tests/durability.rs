//! A stage's call starts only from a completion of the stage before that is committed and
//! durable: no stage ever acts on a result the system later forgets, whether the worker that
//! wrote it is killed (SIGKILL) inside its hold, or PostgreSQL crashes before the WAL holding an
//! asynchronously committed completion was written.
//!
//! Each call records what it descends from: stage `a` makes a completion id and passes it to
//! `b` in the context; `b` logs the id it was called with. A `b` that ran from a completion the
//! system then forgot shows as a logged id that differs from the one the task ended with.
use crate::common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use asyncflow::db::api;
use asyncflow::task::{NewTask, ReportKind, TaskStatus};
use asyncflow::task_type::TaskTypeUpdate;
use asyncflow::{TaskId, TypeName};
use common::crash::{connect, crash, start};
use common::process::{signal, wait_exit};
use common::sql::{rep, worker};
use common::{wait_until, Folder, TestDb};
use serde_json::json;

/// Stage `a` logs `a <task> <id>` and advances to `b` with `{"from": <id>}`, a fresh id per call;
/// stage `b` logs `b <task> <from>`, then, while the file `slow` exists, waits, then succeeds
/// with `{"from": <from>}`. Both log lines are appended to `log`.
fn stages(log: &Path, slow: &Path) -> String {
    format!(
        r#"input=$(cat)
case "$ASYNCFLOW_STAGE" in
  a) id=$(cat /proc/sys/kernel/random/uuid)
     echo "a $ASYNCFLOW_TASK_ID $id" >> '{log}'
     echo "{{\"next_stage\": \"b\", \"context\": {{\"from\": \"$id\"}}}}" ;;
  b) from=$(printf '%s' "$input" | sed -n 's/.*"from": *"\([^"]*\)".*/\1/p')
     echo "b $ASYNCFLOW_TASK_ID $from" >> '{log}'
     while [ -f '{slow}' ]; do sleep 0.05; done
     echo "{{\"result\": {{\"from\": \"$from\"}}}}" ;;
esac"#,
        log = log.display(),
        slow = slow.display()
    )
}

/// The lines of the call log: (stage, task id, completion id).
fn calls(log: &Path) -> Vec<(String, String, String)> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| {
            let mut words = line.split(' ');
            Some((words.next()?.to_string(), words.next()?.to_string(), words.next()?.to_string()))
        })
        .collect()
}

fn start_worker(db: &TestDb, dir: &Path, extra: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_asyncflow"))
        .args(["worker", "--functions"])
        .arg(dir)
        .args(extra)
        .env("DATABASE_URL", &db.url)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the worker binary")
}

/// Many times over: a database worker holds a batch, stage `a` replies, and the worker is killed
/// (SIGKILL) as soon as a call of `b` has started; each round adds two tasks. At the end every
/// task succeeded, and every call of `b` ran from the completion of `a` the task kept: none from
/// a completion rolled back with the hold of a killed worker.
#[tokio::test]
async fn a_worker_killed_mid_hold_never_runs_b_from_a_completion_of_a_that_was_rolled_back() {
    const ROUNDS: usize = 8;
    let db = TestDb::new().await;
    let scratch: PathBuf = std::env::temp_dir().join(format!("af-fork-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&scratch).unwrap();
    let (log, slow) = (scratch.join("calls.log"), scratch.join("slow"));
    std::fs::write(&slow, "").unwrap();
    // a 4 s lease: the hold window is at most a quarter of it, 1 s here (the worker's longest)
    let settings = "initial_stage = \"a\"\nmax_processing_time = 4\nmax_retry_num = 100\n\
                    max_retry_interval = -1\nschedule_interval = 0.2\n";
    let folder =
        Folder::new(&[("fork", &format!("command = [\"./run\"]\n[settings]\n{settings}"), &stages(&log, &slow))]);
    let ty = TypeName::new("fork").unwrap();
    let update = TaskTypeUpdate {
        initial_stage: Some("a".into()),
        max_processing_time: Some(4),
        max_retry_num: Some(100),
        max_retry_interval: Some(-1),
        ..Default::default()
    };
    api::register_task_type(&db.conn().await, &ty, &update).await.unwrap();

    let mut ids: Vec<TaskId> = Vec::new();
    for round in 0..ROUNDS {
        ids.extend(
            api::create_tasks(&db.conn().await, "fork", &[NewTask::default(), NewTask::default()]).await.unwrap(),
        );
        let started = calls(&log).iter().filter(|(stage, _, _)| stage == "b").count();
        let mut child = start_worker(&db, &folder.0, &["--no-maintenance", "--hold-window", "1s"]);
        wait_until(Duration::from_secs(30), &format!("a call of b in round {round}"), || async {
            calls(&log).iter().filter(|(stage, _, _)| stage == "b").count() > started
        })
        .await;
        signal(&child, nix::sys::signal::Signal::SIGKILL);
        wait_exit(&mut child, Duration::from_secs(10));
    }

    // the rest runs to the end (the rescuer takes back the leases of the killed workers)
    std::fs::remove_file(&slow).unwrap();
    let mut child = start_worker(&db, &folder.0, &["--hold-window", "1s"]);
    wait_until(Duration::from_secs(60), "every task succeeded", || async {
        let counts = api::count_by_status_of(&db.conn().await, &ids).await.unwrap();
        counts.iter().any(|(s, n)| *s == TaskStatus::Succeeded && *n == ids.len() as i64)
    })
    .await;
    signal(&child, nix::sys::signal::Signal::SIGTERM);
    wait_exit(&mut child, Duration::from_secs(30));

    // every call of b ran from the completion of a its task kept
    let mut kept: HashMap<String, String> = HashMap::new();
    let c = db.conn().await;
    for id in &ids {
        let task = api::get_task(&c, id.as_str()).await.unwrap().expect("the task");
        let from = task.result.as_ref().and_then(|r| r["from"].as_str()).expect("a result with its a").to_string();
        kept.insert(id.to_string(), from);
    }
    let lines = calls(&log);
    let bs: Vec<_> = lines.iter().filter(|(stage, _, _)| stage == "b").collect();
    assert!(bs.len() >= ROUNDS, "a call of b started in every round: {bs:?}");
    let forks: Vec<String> = bs
        .iter()
        .filter(|(_, task, from)| kept.get(task) != Some(from))
        .map(|(_, task, from)| format!("{task}: b from {from}, the task kept a's {:?}", kept.get(task)))
        .collect();
    let a_calls = lines.iter().filter(|(stage, _, _)| stage == "a").count();
    assert!(
        forks.is_empty(),
        "{} of {} calls of b ran from a completion of a that was rolled back ({ROUNDS} kills, {a_calls} calls of a):\n{}",
        forks.len(),
        bs.len(),
        forks.join("\n")
    );
    let _ = std::fs::remove_dir_all(&scratch);
}

/// On a server that commits asynchronously (`synchronous_commit = off`, as some operators set
/// it for speed), three times: stage `a`'s completion is written, once by a report and once by a
/// hold's finish, and a third task's `a` replies "later" with a new context; the next calls
/// (`b`, `b`, `a` again) are then claimed from them; PostgreSQL crashes (an immediate stop before
/// the WAL writer's round) and restarts. Every task still has the completion its next call was
/// claimed from: no call ever ran from a completion the crash lost.
#[tokio::test]
async fn a_completion_the_next_stage_was_claimed_from_survives_a_postgres_crash() {
    let dir: PathBuf = std::env::temp_dir().join(format!("asyncflow-durability-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_file(dir.with_extension("log"));
    let settings = [("synchronous_commit", "off")];
    let mut server = start(&dir, &settings).await;
    asyncflow::db::migrate::migrate(server.url()).await.expect("migrate");
    let mut c = connect(server.url()).await;
    let w = worker("w");

    let mut lost = Vec::new();
    for round in 0..3 {
        // a type per round: a task a crash sent back to a is not in the next round's way
        let name = format!("crash{round}");
        let ty = TypeName::new(&name).unwrap();
        let update = TaskTypeUpdate { initial_stage: Some("a".into()), ..Default::default() };
        api::register_task_type(&c, &ty, &update).await.unwrap();
        let ids = api::create_tasks(&c, &name, &vec![NewTask::default(); 3]).await.unwrap();
        // the tasks are on disk before the round starts
        c.batch_execute("checkpoint").await.unwrap();

        // a's completion, written by a report ...
        let claimed = api::claim_tasks(&c, &name, &w, 1, None).await.unwrap().remove(0);
        assert_eq!((claimed.task_id.as_str(), claimed.stage.as_str()), (ids[0].as_str(), "a"));
        let advance =
            ReportKind::Advance { stage: "b".into(), context: Some(json!({"from": format!("report-{round}")})) };
        let r = api::report_tasks(&c, &w, &[rep(ids[0].as_str(), claimed.claim_seq, advance)], None).await.unwrap();
        assert!(r[0].accepted, "{r:?}");
        // ... and by a hold's finish
        c.batch_execute("begin").await.unwrap();
        let held = api::hold_tasks(&c, &ty, &w, 1).await.unwrap().remove(0).0;
        assert_eq!((held.task_id.as_str(), held.stage.as_str()), (ids[1].as_str(), "a"));
        let advance =
            ReportKind::Advance { stage: "b".into(), context: Some(json!({"from": format!("hold-{round}")})) };
        let r = api::finish_held(&c, &ty, &w, &[(&held.task_id, held.claim_seq, Some(&advance), Some(0.001), None)])
            .await
            .unwrap();
        assert!(r.is_empty(), "the advance was written: {r:?}");
        c.batch_execute("commit").await.unwrap();
        // ... and a "later" with the context a's next call starts from
        let claimed = api::claim_tasks(&c, &name, &w, 1, None).await.unwrap().remove(0);
        assert_eq!(claimed.task_id.as_str(), ids[2].as_str());
        let later = ReportKind::Later { delay: 0.0, context: Some(json!({"from": format!("later-{round}")})) };
        let r = api::report_tasks(&c, &w, &[rep(ids[2].as_str(), claimed.claim_seq, later)], None).await.unwrap();
        assert!(r[0].accepted, "{r:?}");

        // the next calls are claimed from those completions: they would start now
        let next = api::claim_tasks(&c, &name, &w, 10, None).await.unwrap();
        let started: Vec<(String, String, serde_json::Value)> =
            next.iter().map(|t| (t.task_id.to_string(), t.stage.clone(), t.context.clone())).collect();
        let stages: Vec<&str> = started.iter().map(|(_, stage, _)| stage.as_str()).collect();
        assert_eq!(stages, ["b", "b", "a"], "the three tasks claimed from their completions: {next:?}");

        crash(&dir, server);
        server = start(&dir, &settings).await;
        c = connect(server.url()).await;
        for (id, stage, context) in &started {
            let task = api::get_task(&c, id).await.unwrap().expect("the task survives");
            if &task.stage != stage || &task.context != context {
                lost.push(format!(
                    "round {round}: {id}: {stage} started from {context}, after the crash the task is at {} with {}",
                    task.stage, task.context
                ));
            }
        }
    }
    drop(c);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_file(dir.with_extension("log"));
    assert!(lost.is_empty(), "the crash lost completions that b had started from:\n{}", lost.join("\n"));
}

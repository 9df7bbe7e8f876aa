//! The fencing token (`claim_seq`) never repeats, even across a crash that loses a claim.
//!
//! Claims commit asynchronously (synchronous_commit off), so a PostgreSQL crash can lose a claim
//! and the token it handed out. The same worker id may then claim the task again after the
//! restart; were it handed the same token, a report from the lost attempt would be accepted.
//! This test loses a claim for real, on a private server of its own (never the shared one): a
//! claim committed asynchronously, an immediate shutdown (SIGQUIT to the postmaster, what
//! `pg_ctl stop -m immediate` sends) before the WAL writer has written it, a restart (crash
//! recovery), a second claim by the same worker id; the first attempt's report is refused, the
//! second's accepted.
use crate::common;

use std::path::{Path, PathBuf};

use asyncflow::db::api;
use asyncflow::db::embedded::{EmbeddedConfig, EmbeddedPostgres};
use asyncflow::task::{NewTask, ReportKind, TaskStatus};
use asyncflow::task_type::TaskTypeUpdate;
use asyncflow::TypeName;
use common::sql::{rep, worker};
use serde_json::json;

/// The private server: the WAL writer works in rounds 10 s apart (an asynchronous commit
/// reaches the WAL files only with its next round, or with a later synchronous commit), and no
/// autovacuum commits beside the test.
async fn start(dir: &Path) -> EmbeddedPostgres {
    let config = EmbeddedConfig::new(dir).setting("wal_writer_delay", "10000").setting("autovacuum", "off");
    EmbeddedPostgres::start(config).await.unwrap_or_else(|e| panic!("start the private server: {e}"))
}

/// One connection to the server (a pool of one, which the db::api functions take).
async fn connect(url: &str) -> deadpool_postgres::Object {
    let pool = asyncflow::db::pool(url, 1).expect("a pool");
    pool.get().await.expect("connect to the private server")
}

/// What `pg_ctl stop -m immediate` does: SIGQUIT to the postmaster (its pid is the first line
/// of postmaster.pid): no checkpoint, no WAL flush. Dropping `server` then waits for it to exit.
fn crash(dir: &Path, server: EmbeddedPostgres) {
    let text = std::fs::read_to_string(dir.join("postmaster.pid")).expect("postmaster.pid");
    let pid: i32 = text.lines().next().and_then(|l| l.trim().parse().ok()).expect("a pid");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGQUIT)
        .expect("SIGQUIT the postmaster");
    drop(server);
}

#[tokio::test]
async fn a_claim_lost_in_a_crash_never_hands_its_token_out_again() {
    let dir: PathBuf = std::env::temp_dir().join(format!("asyncflow-fencing-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_file(dir.with_extension("log"));
    let mut server = start(&dir).await;
    asyncflow::db::migrate::migrate(server.url()).await.expect("migrate");
    let mut c = connect(server.url()).await;
    let ty = TypeName::new("crash").unwrap();
    api::register_task_type(&c, &ty, &TaskTypeUpdate::default()).await.unwrap();
    // created with a synchronous commit: the task survives the crash
    let id =
        api::create_task(&c, "crash", &NewTask { context: Some(json!({"n": 1})), ..Default::default() }).await.unwrap();
    c.batch_execute("checkpoint").await.unwrap();
    let w = worker("same-worker");

    // a claim that commits asynchronously, then the crash before any flush: the claim is lost
    // (tried a few times, in case the WAL writer's round fell in between)
    let mut lost = None;
    for _ in 0..3 {
        let first = api::claim_tasks(&c, "crash", &w, 1, None).await.unwrap().remove(0);
        crash(&dir, server);
        server = start(&dir).await;
        c = connect(server.url()).await;
        let after = api::get_task(&c, id.as_str()).await.unwrap().unwrap();
        if after.status == TaskStatus::Pending {
            lost = Some(first);
            break;
        }
        // the claim reached the disk: hand it back, and try again
        let r =
            api::report_tasks(&c, &w, &[rep(id.as_str(), first.claim_seq, ReportKind::Release)], None).await.unwrap();
        assert!(r[0].accepted, "{r:?}");
    }
    let first = lost.expect("an asynchronous claim is lost by an immediate shutdown");

    let second = api::claim_tasks(&c, "crash", &w, 1, None).await.unwrap().remove(0);
    assert_eq!(second.task_id, first.task_id);
    assert_ne!(second.claim_seq, first.claim_seq, "the lost claim's token was handed out again");
    let stale = api::report_tasks(
        &c,
        &w,
        &[rep(id.as_str(), first.claim_seq, ReportKind::Succeed { result: json!("from the lost attempt") })],
        None,
    )
    .await
    .unwrap();
    assert!(!stale[0].accepted, "a report from the lost attempt is refused: {stale:?}");
    let task = api::get_task(&c, id.as_str()).await.unwrap().unwrap();
    assert_eq!(task.status, TaskStatus::Running, "and changes nothing");
    let fresh = api::report_tasks(
        &c,
        &w,
        &[rep(id.as_str(), second.claim_seq, ReportKind::Succeed { result: json!("from the second attempt") })],
        None,
    )
    .await
    .unwrap();
    assert!(fresh[0].accepted, "{fresh:?}");
    let task = api::get_task(&c, id.as_str()).await.unwrap().unwrap();
    assert_eq!(task.result, Some(json!("from the second attempt")));
    drop(c);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_file(dir.with_extension("log"));
}

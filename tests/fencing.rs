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

use std::path::PathBuf;

use asyncflow::db::api;
use asyncflow::task::{NewTask, ReportKind, TaskStatus};
use asyncflow::task_type::TaskTypeUpdate;
use asyncflow::TypeName;
use common::crash::{connect, crash, start};
use common::sql::{rep, worker};
use serde_json::json;

#[tokio::test]
async fn a_claim_lost_in_a_crash_never_hands_its_token_out_again() {
    let dir: PathBuf = std::env::temp_dir().join(format!("asyncflow-fencing-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_file(dir.with_extension("log"));
    let mut server = start(&dir, &[]).await;
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
        server = start(&dir, &[]).await;
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

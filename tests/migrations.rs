//! Migrations: from empty, idempotent, concurrent, and a database ahead of the code refused.
mod common;

use asyncflow::db::migrate::{latest_version, migrate, versions};
use common::TestDb;

/// A fresh empty database on the test server (dropped with `owner`'s server lifetime).
async fn empty_database(owner: &TestDb) -> (String, String) {
    let name = format!("m_{}", uuid::Uuid::new_v4().simple());
    owner.raw().await.batch_execute(&format!("create database {name}")).await.unwrap();
    let url = owner.url.replace(&owner.name, &name);
    (name, url)
}

async fn drop_database(owner: &TestDb, name: &str) {
    let _ = owner.raw().await.batch_execute(&format!("drop database if exists {name} with (force)")).await;
}

#[tokio::test]
async fn an_empty_database_gets_every_migration_and_a_second_run_does_nothing() {
    let db = TestDb::new().await;
    let (name, url) = empty_database(&db).await;
    let first = migrate(&url).await.unwrap();
    assert_eq!(first.applied, versions());
    assert_eq!(first.version, latest_version());
    let second = migrate(&url).await.unwrap();
    assert!(second.applied.is_empty());
    let (c, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(conn);
    let n: i64 = c
        .query_one(
            "select count(*) from pg_proc where pronamespace = 'asyncflow'::regnamespace and proname = 'create_task'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 1);
    drop(c);
    drop_database(&db, &name).await;
}

#[tokio::test]
async fn concurrent_migrators_apply_each_migration_once() {
    let db = TestDb::new().await;
    let (name, url) = empty_database(&db).await;
    let runs: Vec<_> = (0..4)
        .map(|_| {
            tokio::spawn({
                let url = url.clone();
                async move { migrate(&url).await }
            })
        })
        .collect();
    let mut applied = Vec::new();
    for r in runs {
        applied.extend(r.await.unwrap().expect("every migrator succeeds").applied);
    }
    applied.sort();
    assert_eq!(applied, versions(), "each version applied exactly once");
    drop_database(&db, &name).await;
}

#[tokio::test]
async fn a_database_ahead_of_the_code_is_refused_and_left_alone() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    c.batch_execute(
        "insert into asyncflow.refinery_schema_history (version, name, applied_on, checksum) \
         values (9999, 'from_the_future', now()::text, '0')",
    )
    .await
    .unwrap();
    let err = migrate(&db.url).await.unwrap_err().to_string();
    assert!(err.contains("9999") && err.contains("ahead"), "{err}");
    let n: i64 = c.query_one("select count(*) from asyncflow.refinery_schema_history", &[]).await.unwrap().get(0);
    assert_eq!(n, versions().len() as i64 + 1, "nothing changed");
}

#[tokio::test]
async fn an_edited_migration_is_refused() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    c.batch_execute("update asyncflow.refinery_schema_history set checksum = '1' where version = 1").await.unwrap();
    let err = migrate(&db.url).await.unwrap_err().to_string();
    assert!(err.contains("V1__schema") && err.contains("different"), "{err}");
}

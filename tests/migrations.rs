//! Migrations and the SQL API: from empty, idempotent, concurrent, a database ahead of the code or
//! made by a pre-release history refused, and the SQL API applied again when it changed.
use crate::common;

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
    assert!(first.api_applied);
    let second = migrate(&url).await.unwrap();
    assert!(second.applied.is_empty());
    assert!(!second.api_applied, "the SQL API is applied only when it changed");
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
    assert!(err.contains("V1__baseline") && err.contains("different"), "{err}");
}

#[tokio::test]
async fn a_database_of_the_pre_release_history_is_refused_and_left_alone() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    c.batch_execute("update asyncflow.refinery_schema_history set name = 'schema' where version = 1").await.unwrap();
    let err = migrate(&db.url).await.unwrap_err().to_string();
    assert!(err.contains("pre-release") && err.contains("recreate"), "{err}");
    let name: String =
        c.query_one("select name from asyncflow.refinery_schema_history where version = 1", &[]).await.unwrap().get(0);
    assert_eq!(name, "schema", "nothing changed");
}

#[tokio::test]
async fn a_changed_sql_api_is_applied_again_with_every_types_own_functions() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    c.batch_execute(
        "select asyncflow.register_task_type('plain', '{}'); \
         select asyncflow.register_task_type('fair', '{\"fair_queues\": true}'); \
         drop function asyncflow.type_claim__plain(text, integer, timestamptz); \
         drop function asyncflow.type_hold__fair(text, integer); \
         update asyncflow.sql_api set checksum = 'an older build'",
    )
    .await
    .unwrap();
    let report = migrate(&db.url).await.unwrap();
    assert!(report.applied.is_empty());
    assert!(report.api_applied);
    let checksum: String = c.query_one("select checksum from asyncflow.sql_api", &[]).await.unwrap().get(0);
    assert_eq!(checksum, asyncflow::db::migrate::sql_api_checksum());
    for (name, template) in [
        ("type_claim__plain", "claim_plain"),
        ("type_claim__fair", "claim_fair"),
        ("type_hold__fair", "hold"),
        ("type_finish__plain", "finish"),
        ("type_report__fair", "report"),
    ] {
        let row = c
            .query_opt(
                "select p.prosrc, has_function_privilege('asyncflow_worker', p.oid, 'execute') as worker, \
                   has_function_privilege('asyncflow_client', p.oid, 'execute') as client \
                 from pg_proc p where p.pronamespace = 'asyncflow'::regnamespace and p.proname = $1",
                &[&name],
            )
            .await
            .unwrap();
        let row = row.unwrap_or_else(|| panic!("{name} was made again"));
        let (worker, client): (bool, bool) = (row.get("worker"), row.get("client"));
        assert!(worker && !client, "{name}: executable by workers only");
        let body: String = c
            .query_one("select body from asyncflow.function_templates where name = $1", &[&template])
            .await
            .unwrap()
            .get(0);
        let src: String = row.get("prosrc");
        let first_line = src.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or_default().to_string();
        assert!(body.contains(&first_line), "{name} comes from template {template}: {first_line}");
    }
    // each type has one function of each kind: no overload left by an older build
    let n: i64 = c
        .query_one(
            "select count(*) from pg_proc where pronamespace = 'asyncflow'::regnamespace and proname like 'type\\_%'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 10);
    // the end of a wait runs inside the security definer event functions: no role is granted it
    let granted: i64 = c
        .query_one(
            "select count(*) from pg_proc p where p.pronamespace = 'asyncflow'::regnamespace \
               and p.proname like 'type\\_end\\_waits\\_\\_%' \
               and (has_function_privilege('asyncflow_worker', p.oid, 'execute') \
                 or has_function_privilege('asyncflow_client', p.oid, 'execute'))",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(granted, 0);
}

#[tokio::test]
async fn turning_fair_queues_on_and_off_switches_the_claim_template() {
    let db = TestDb::new().await;
    let c = db.raw().await;
    c.batch_execute("select asyncflow.register_task_type('crawl', '{}')").await.unwrap();
    assert!(!claims_by_turns(&c).await, "a plain type claims with claim_plain");
    c.batch_execute("select asyncflow.register_task_type('crawl', '{\"fair_queues\": true}')").await.unwrap();
    assert!(claims_by_turns(&c).await, "fair_queues on: claim_fair");
    c.batch_execute("select asyncflow.register_task_type('crawl', '{\"fair_queues\": false}')").await.unwrap();
    assert!(!claims_by_turns(&c).await, "fair_queues off: claim_plain again");
}

/// Whether type crawl's claim is the fair one (it keeps a cursor of queue keys).
async fn claims_by_turns(c: &tokio_postgres::Client) -> bool {
    let src: String =
        c.query_one("select prosrc from pg_proc where proname = 'type_claim__crawl'", &[]).await.unwrap().get(0);
    src.contains("queue_cursors")
}

#[tokio::test]
async fn types_registered_before_the_index_of_failed_and_cancelled_tasks_get_it_from_its_migration() {
    use asyncflow::db::api;
    use asyncflow::ids::TypeName;
    use asyncflow::task_type::TaskTypeUpdate;
    let db = TestDb::new().await;
    let c = db.conn().await;
    for name in ["alpha", "beta"] {
        api::register_task_type(&c, &TypeName::new(name).unwrap(), &TaskTypeUpdate::default()).await.unwrap();
    }
    let count = || async {
        c.query_one(
            "select count(*) from pg_catalog.pg_class where relname in ('tasks_alpha$failed_cancelled', 'tasks_beta$failed_cancelled')",
            &[],
        )
        .await
        .unwrap()
        .get::<_, i64>(0)
    };
    assert_eq!(count().await, 2, "register_task_type makes it");
    // a database from before the migration, with its types
    c.batch_execute(
        "drop index asyncflow.\"tasks_alpha$failed_cancelled\"; drop index asyncflow.\"tasks_beta$failed_cancelled\"; \
         delete from asyncflow.refinery_schema_history where version >= 11",
    )
    .await
    .unwrap();
    assert_eq!(count().await, 0);
    let report = migrate(&db.url).await.unwrap();
    // the later migrations run again too (a migration is never below one applied)
    assert_eq!(report.applied.first(), Some(&11), "{:?}", report.applied);
    assert_eq!(count().await, 2, "the migration made it for every type");
    let def: String = c
        .query_one("select pg_catalog.pg_get_indexdef('asyncflow.\"tasks_beta$failed_cancelled\"'::regclass)", &[])
        .await
        .unwrap()
        .get(0);
    assert!(def.contains("(id) WHERE (status = ANY (ARRAY['failed'::asyncflow.task_status, 'cancelled'"), "{def}");
}

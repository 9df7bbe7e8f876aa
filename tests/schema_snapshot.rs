//! `sql/schema.sql` is a snapshot of the migrated schema (never executed): it shows the current
//! body of every function after all migrations. This test keeps it current;
//! `UPDATE_SCHEMA=1 cargo test --test schema_snapshot` rewrites it.
mod common;

use std::path::PathBuf;
use std::process::Command;

fn normalise(dump: &str) -> String {
    let mut out = String::new();
    let mut blank = false;
    for line in dump.lines() {
        if line.starts_with("--")
            || line.starts_with("SET ")
            || line.starts_with("SELECT pg_catalog.set_config")
            || line.starts_with("\\")
        {
            continue;
        }
        if line.trim().is_empty() {
            if !blank && !out.is_empty() {
                out.push('\n');
            }
            blank = true;
            continue;
        }
        blank = false;
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[tokio::test]
async fn sql_schema_snapshot_matches_the_migrations() {
    let db = common::TestDb::new().await;
    let bin = asyncflow::db::embedded::find_bin_dir().expect("PostgreSQL binaries");
    let out = Command::new(bin.join("pg_dump"))
        .args(["--schema-only", "--schema=asyncflow", "--no-owner", "--no-tablespaces"])
        .arg(&db.url)
        .output()
        .expect("run pg_dump");
    assert!(out.status.success(), "pg_dump: {}", String::from_utf8_lossy(&out.stderr));
    let major: i32 = db
        .raw()
        .await
        .query_one("select current_setting('server_version_num')::int / 10000", &[])
        .await
        .unwrap()
        .get(0);
    let header = format!(
        "-- Snapshot of the schema after every migration (generated; never executed).\n\
         -- Regenerate: UPDATE_SCHEMA=1 cargo test --test schema_snapshot\n\
         -- Dumped by pg_dump from PostgreSQL {major}.\n\n"
    );
    let current = format!("{header}{}", normalise(&String::from_utf8_lossy(&out.stdout)));
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("sql/schema.sql");
    if std::env::var("UPDATE_SCHEMA").as_deref() == Ok("1") {
        std::fs::write(&path, &current).expect("write sql/schema.sql");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if !committed.contains(&format!("-- Dumped by pg_dump from PostgreSQL {major}.")) {
        // Another major version prints the same schema differently; the snapshot is compared
        // only by the version that wrote it.
        eprintln!("sql/schema.sql was dumped by another PostgreSQL major version than {major}: not compared");
        return;
    }
    assert!(
        committed == current,
        "sql/schema.sql is out of date with sql/migrations: run UPDATE_SCHEMA=1 cargo test --test schema_snapshot"
    );
}

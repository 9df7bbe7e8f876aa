//! `sql/schema.sql` is a snapshot of the migrated schema (never executed), a drift check: it must
//! equal what `asyncflow migrate` makes of an empty database. Tables, types, indexes, triggers,
//! views, grants and each function's signature and attributes are written out; a function's body
//! is written as a digest of its text (the text itself is in sql/api/, and only there). This test
//! keeps it current;
//! `UPDATE_SCHEMA=1 cargo test --test suite schema_snapshot::` rewrites it.
use crate::common;

use std::path::PathBuf;
use std::process::Command;

use sha2::{Digest, Sha256};

/// Replaces each function body of a pg_dump (`    AS $tag$` ... `$tag$;`) by its line count and
/// the start of its SHA-256.
fn digest_bodies(dump: &str) -> String {
    let mut out = String::new();
    let mut lines = dump.lines();
    while let Some(line) = lines.next() {
        let tag = line.strip_prefix("    AS $").and_then(|rest| rest.strip_suffix('$')).filter(|t| !t.contains('$'));
        let Some(tag) = tag else {
            out.push_str(line);
            out.push('\n');
            continue;
        };
        let close = format!("${tag}$;");
        let mut body = Vec::new();
        for l in lines.by_ref() {
            if l == close {
                break;
            }
            body.push(l);
        }
        let text = body.join("\n");
        let hash = hex::encode(Sha256::digest(text.as_bytes()));
        out.push_str(&format!("    AS -- body: {} lines, sha256 {}\n", body.len(), &hash[..16]));
    }
    out
}

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
        "-- Snapshot of the schema that asyncflow migrate makes (generated; never executed).\n\
         -- Regenerate: UPDATE_SCHEMA=1 cargo test --test suite schema_snapshot::\n\
         -- Dumped by pg_dump from PostgreSQL {major}.\n\n"
    );
    let current = format!("{header}{}", normalise(&digest_bodies(&String::from_utf8_lossy(&out.stdout))));
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
        "sql/schema.sql is out of date with sql/migrations and sql/api: run UPDATE_SCHEMA=1 cargo test --test suite schema_snapshot::"
    );
}

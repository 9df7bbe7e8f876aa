//! Embeds the SQL: `refinery::embed_migrations!` reads sql/migrations at compile time, and this
//! script lists sql/api/*.sql and sql/api/templates/*.sql (sorted by name) into
//! `$OUT_DIR/sql_api.rs` as `include_str!`s, so adding a file needs no Rust change. Cargo is told
//! to rebuild when either folder changes.
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn sql_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "sql"))
        .collect();
    files.sort();
    files
}

fn list(out: &mut String, name: &str, files: &[PathBuf]) {
    let _ = writeln!(out, "pub const {name}: &[(&str, &str)] = &[");
    for f in files {
        let stem = f.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
        let _ = writeln!(out, "    ({stem:?}, include_str!({:?})),", f.display().to_string());
    }
    let _ = writeln!(out, "];");
}

fn main() {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let api = root.join("sql/api");
    let templates = api.join("templates");
    println!("cargo:rerun-if-changed=sql/migrations");
    println!("cargo:rerun-if-changed=sql/api");
    println!("cargo:rerun-if-changed=sql/api/templates");
    let mut out = String::new();
    list(&mut out, "FILES", &sql_files(&api));
    list(&mut out, "TEMPLATES", &sql_files(&templates));
    let dest = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR")).join("sql_api.rs");
    std::fs::write(&dest, out).unwrap_or_else(|e| panic!("{}: {e}", dest.display()));
}

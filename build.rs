//! Rebuilds the crate when a migration changes or is added: `refinery::embed_migrations!` reads
//! sql/migrations at compile time, but cargo does not know to look there.
fn main() {
    println!("cargo:rerun-if-changed=sql/migrations");
}

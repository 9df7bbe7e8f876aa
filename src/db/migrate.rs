//! Applies `sql/migrations/` (embedded at build time by refinery) under a session advisory lock,
//! so any number of processes may migrate at once: one applies, the others wait and find nothing
//! to do. A database that has migrations this build does not know is refused.

use crate::db::{self, api};
use crate::error::{Error, Result};

mod embedded {
    refinery::embed_migrations!("sql/migrations");
}

/// Advisory lock key (class 'AF', 1) held while migrating.
const MIGRATION_LOCK: (i32, i32) = (16710, 1);

/// The newest migration this build knows.
pub fn latest_version() -> u32 {
    versions().last().copied().unwrap_or(0)
}

/// Every migration this build knows, oldest first. Numbers may have gaps: a number is taken
/// when a change that needs it is begun, and changes land in any order.
pub fn versions() -> Vec<u32> {
    let mut versions: Vec<u32> = embedded::migrations::runner().get_migrations().iter().map(|m| m.version()).collect();
    versions.sort_unstable();
    versions
}

/// What a migration run did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrateReport {
    /// Versions applied by this run (empty when the database was current).
    pub applied: Vec<u32>,
    /// The database's version afterwards.
    pub version: u32,
}

/// Brings the database at `url` to this build's schema.
pub async fn migrate(url: &str) -> Result<MigrateReport> {
    let (mut client, driver) = db::connect(url).await?;
    api::advisory_lock(&client, MIGRATION_LOCK).await?;
    let outcome = run_locked(&mut client).await;
    let _ = api::advisory_unlock(&client, MIGRATION_LOCK).await;
    drop(client);
    let _ = driver.await;
    outcome
}

async fn run_locked(client: &mut tokio_postgres::Client) -> Result<MigrateReport> {
    api::create_schema(client).await?;
    let mut runner = embedded::migrations::runner().set_abort_missing(true).set_abort_divergent(true);
    runner.set_migration_table_name("asyncflow.refinery_schema_history");
    let known = latest_version();
    if let Some(version) = api::schema_version(client).await? {
        if version > i64::from(known) {
            return Err(Error::Migration(format!(
                "the database is at version {version} but this build knows only up to {known}: \
                 run a newer asyncflow (refusing to touch a database that is ahead of the code)"
            )));
        }
    }
    let report = runner.run_async(client).await.map_err(migration_error)?;
    let applied: Vec<u32> = report.applied_migrations().iter().map(|m| m.version()).collect();
    Ok(MigrateReport { applied, version: known })
}

fn migration_error(e: refinery::Error) -> Error {
    Error::Migration(e.to_string())
}

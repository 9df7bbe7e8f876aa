//! `asyncflow migrate`: brings a database to this build's schema and SQL API, under a session
//! advisory lock, so any number of processes may migrate at once (one applies, the others wait
//! and find nothing to do).
//!
//! Two kinds of SQL, kept apart:
//!
//! ```text
//!   sql/migrations/V<n>__<change>.sql   schema changes (tables, types, indexes, roles), applied
//!                                       once each by refinery, never edited once landed
//!   sql/api/*.sql                       the current text of every function, trigger and view
//!   sql/api/templates/*.sql             the functions generated for each task type
//! ```
//!
//! After the migrations, the SQL API is applied as a whole, in one transaction, when the checksum
//! of its files differs from the one recorded in `asyncflow.sql_api`: the templates are stored,
//! the files run in name order (`create or replace`), and every registered type's own functions
//! are made again from the templates. A database that has migrations this build does not know,
//! or that was made by a pre-release build's migration history, is refused.

use sha2::{Digest, Sha256};

use crate::db::{self, api};
use crate::error::{Error, Result};

mod embedded {
    refinery::embed_migrations!("sql/migrations");
}

mod sql_api {
    include!(concat!(env!("OUT_DIR"), "/sql_api.rs"));
}

/// Advisory lock key (class 'AF', 1) held while migrating.
const MIGRATION_LOCK: (i32, i32) = (16710, 1);

/// The newest migration this build knows.
pub fn latest_version() -> u32 {
    versions().last().copied().unwrap_or(0)
}

/// Every migration this build knows, oldest first.
pub fn versions() -> Vec<u32> {
    let mut versions: Vec<u32> = embedded::migrations::runner().get_migrations().iter().map(|m| m.version()).collect();
    versions.sort_unstable();
    versions
}

/// The checksum of this build's SQL API: every file of sql/api/ and sql/api/templates/, name and
/// text.
pub fn sql_api_checksum() -> String {
    let mut hash = Sha256::new();
    for (kind, files) in [("api", sql_api::FILES), ("template", sql_api::TEMPLATES)] {
        for (name, text) in files {
            for part in [kind, name, text] {
                hash.update((part.len() as u64).to_le_bytes());
                hash.update(part.as_bytes());
            }
        }
    }
    hex::encode(hash.finalize())
}

/// What a migration run did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrateReport {
    /// Versions applied by this run (empty when the schema was current).
    pub applied: Vec<u32>,
    /// The database's version afterwards.
    pub version: u32,
    /// Whether this run applied the SQL API (it had changed, or the database was new).
    pub api_applied: bool,
}

/// Brings the database at `url` to this build's schema and SQL API.
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
    let missing = api::missing_roles(client).await?;
    if !missing.is_empty() && !api::may_create_roles(client).await? {
        return Err(Error::Migration(missing_roles_message(&missing)));
    }
    api::create_schema(client).await?;
    let history = api::schema_history(client).await?;
    check_history(&history)?;
    let mut runner = embedded::migrations::runner().set_abort_missing(true).set_abort_divergent(true);
    runner.set_migration_table_name("asyncflow.refinery_schema_history");
    let report = runner.run_async(client).await.map_err(|e| Error::Migration(e.to_string()))?;
    let applied: Vec<u32> = report.applied_migrations().iter().map(|m| m.version()).collect();
    let checksum = sql_api_checksum();
    let api_applied = api::sql_api_checksum(client).await?.as_deref() != Some(checksum.as_str());
    if api_applied {
        api::apply_sql_api(client, sql_api::FILES, sql_api::TEMPLATES, &checksum).await?;
    }
    Ok(MigrateReport { applied, version: latest_version(), api_applied })
}

/// The refusal when the roles are missing and the migrating role may not create them.
fn missing_roles_message(missing: &[String]) -> String {
    format!(
        "the role(s) {} do not exist, and this role may not create them (it is neither a superuser nor \
         has CREATEROLE). Once per PostgreSQL cluster, a superuser runs the SQL block of \
         docs/operations.md (Roles and grants, step 1), which creates them and lets this role grant \
         them: `create role asyncflow_client nologin; create role asyncflow_worker nologin; \
         grant asyncflow_client to asyncflow_worker; \
         grant asyncflow_client, asyncflow_worker to <owner> with admin option;`; then run \
         asyncflow migrate again as the database's owner",
        missing.join(", ")
    )
}

/// Whether the database at `url` is current for this build: its migrations are this build's
/// newest and its SQL API has this build's checksum. Otherwise an error that names the fix
/// (`asyncflow migrate`). Needs only what both roles have: USAGE on schema asyncflow and the
/// grant of `asyncflow.schema_state()`.
pub async fn check_current(url: &str) -> Result<()> {
    let pool = db::pool(url, 1)?;
    let client = pool.get().await.map_err(|e| match e {
        deadpool_postgres::PoolError::Backend(e) => Error::from_db(e),
        e => Error::from(e),
    })?;
    let state = api::schema_state(&client).await?;
    check_state(&state)
}

/// The work a process does, by the role whose grants it needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grant {
    /// Enqueue, read and manage tasks, runs and schedules: `asyncflow_client`.
    Client,
    /// Claim and report tasks (and everything a client may): `asyncflow_worker`.
    Worker,
}

impl Grant {
    /// The role that carries these grants.
    pub fn role(self) -> &'static str {
        match self {
            Grant::Client => "asyncflow_client",
            Grant::Worker => "asyncflow_worker",
        }
    }
}

/// Whether the connected role may do `grant`'s work (for the per-type functions, only those of
/// `task_types` when given); otherwise an error that names what it may not call and the grant
/// that gives it. A start-up check, so a process refuses at once instead of failing each call.
pub async fn check_grants<C: db::GenericClient>(c: &C, grant: Grant, task_types: Option<&[String]>) -> Result<()> {
    let (me, missing) = api::missing_grants(c, grant.role(), task_types).await?;
    if missing.is_empty() {
        return Ok(());
    }
    Err(Error::Config(missing_grants_message(&me, grant, &missing)))
}

/// The refusal of [`check_grants`].
pub fn missing_grants_message(me: &str, grant: Grant, missing: &[String]) -> String {
    const SHOWN: usize = 4;
    let mut names: Vec<String> = missing.iter().take(SHOWN).map(|f| format!("asyncflow.{f}")).collect();
    if missing.len() > SHOWN {
        names.push(format!("and {} more", missing.len() - SHOWN));
    }
    format!(
        "the database role {me} may not call {}: the schema's owner runs `grant {} to {};` (docs/operations.md, \
         Roles and grants)",
        names.join(", "),
        grant.role(),
        quote_role(me)
    )
}

/// A role name as SQL writes it: bare when it is a plain lowercase name, else double-quoted.
fn quote_role(name: &str) -> String {
    let plain = name.chars().next().is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if plain {
        name.to_string()
    } else {
        format!("\"{}\"", name.replace('"', "\"\""))
    }
}

/// [`check_current`] on what the database said.
pub fn check_state(state: &api::SchemaState) -> Result<()> {
    const FIX: &str = "run `asyncflow migrate` as the database's owner (or give serve or worker --migrate)";
    let known = i64::from(latest_version());
    match state {
        api::SchemaState::NotMigrated => {
            Err(Error::Migration(format!("the database has no current asyncflow schema: {FIX}")))
        }
        api::SchemaState::Migrated { version, .. } if version.unwrap_or(0) > known => Err(Error::Migration(format!(
            "the database is at version {} but this build knows only up to {known}: run a newer asyncflow",
            version.unwrap_or(0)
        ))),
        api::SchemaState::Migrated { version, .. } if *version != Some(known) => Err(Error::Migration(format!(
            "the database is at version {} but this build needs {known}: {FIX}",
            version.unwrap_or(0)
        ))),
        api::SchemaState::Migrated { sql_api_checksum: applied, .. }
            if applied.as_deref() != Some(sql_api_checksum().as_str()) =>
        {
            Err(Error::Migration(format!(
                "the database's SQL functions are not this build's (their checksum differs): {FIX}"
            )))
        }
        api::SchemaState::Migrated { .. } => Ok(()),
    }
}

/// Refuses a database ahead of this build, and one made by the migration history of a
/// pre-release build (its first migration was not the baseline).
fn check_history(history: &[(i64, String)]) -> Result<()> {
    if let Some((1, name)) = history.first() {
        if name != "baseline" {
            return Err(Error::Migration(format!(
                "this database was made by a pre-release build of asyncflow (its first migration is \
                 '{name}', not 'baseline'), whose schema cannot be upgraded: recreate it (a new \
                 database, or `drop schema asyncflow cascade`) and run asyncflow migrate again"
            )));
        }
    }
    let known = i64::from(latest_version());
    if let Some((version, _)) = history.last() {
        if *version > known {
            return Err(Error::Migration(format!(
                "the database is at version {version} but this build knows only up to {known}: \
                 run a newer asyncflow (refusing to touch a database that is ahead of the code)"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Checks this build's migrations, as (version, name, text), against `lock` (the format of
    /// sql/migrations.lock): every locked migration is present with its name and its text unchanged,
    /// and every migration not locked is numbered above the last locked one. The refusals, one per
    /// line, when not.
    fn check_migrations_lock(lock: &str, migrations: &[(u32, String, String)]) -> std::result::Result<(), String> {
        let mut problems = Vec::new();
        let mut locked = Vec::new();
        for line in lock.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
            let mut fields = line.split_whitespace();
            match (fields.next().and_then(|v| v.parse::<u32>().ok()), fields.next(), fields.next(), fields.next()) {
                (Some(version), Some(name), Some(sum), None) => locked.push((version, name, sum)),
                _ => problems.push(format!("sql/migrations.lock: malformed line {line:?}")),
            }
        }
        let last_locked = locked.iter().map(|(v, _, _)| *v).max().unwrap_or(0);
        for (version, name, sum) in &locked {
            match migrations.iter().find(|(v, _, _)| v == version) {
                None => problems.push(format!("V{version}__{name}.sql has landed and is gone (a landed migration stays)")),
                Some((_, n, _)) if n != name => {
                    problems.push(format!("V{version}__{name}.sql has landed and was renamed to V{version}__{n}.sql"))
                }
                Some((_, _, text)) if hex::encode(Sha256::digest(text.as_bytes())) != *sum => problems.push(format!(
                    "V{version}__{name}.sql has landed and was edited: a landed migration never changes, a fix is a new one"
                )),
                Some(_) => {}
            }
        }
        for (version, name, _) in migrations {
            if *version <= last_locked && !locked.iter().any(|(v, _, _)| v == version) {
                problems.push(format!(
                    "V{version}__{name}.sql is numbered below the last landed migration (V{last_locked}): \
                     number it above every landed one"
                ));
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("\n"))
        }
    }

    /// The landed migrations (sql/migrations.lock): version, name and SHA-256 of each file.
    const MIGRATIONS_LOCK: &str = include_str!("../../sql/migrations.lock");

    /// This build's migrations as (version, name, text), for [`check_migrations_lock`].
    fn embedded_migrations() -> Vec<(u32, String, String)> {
        embedded::migrations::runner()
            .get_migrations()
            .iter()
            .map(|m| (m.version(), m.name().to_string(), m.sql().unwrap_or_default().to_string()))
            .collect()
    }

    #[test]
    fn a_landed_migration_never_changes() {
        if let Err(problems) = check_migrations_lock(MIGRATIONS_LOCK, &embedded_migrations()) {
            panic!("sql/migrations.lock:\n{problems}");
        }
    }

    #[test]
    fn the_lock_refuses_an_edit_a_rename_a_removal_and_a_number_below_the_last() {
        let sum = |t: &str| hex::encode(Sha256::digest(t.as_bytes()));
        let lock = format!("# comment\n1 baseline {}\n3 more {}\n", sum("create a;"), sum("create b;"));
        let m = |v: u32, n: &str, t: &str| (v, n.to_string(), t.to_string());
        assert_eq!(check_migrations_lock(&lock, &[m(1, "baseline", "create a;"), m(3, "more", "create b;")]), Ok(()));
        assert_eq!(
            check_migrations_lock(&lock, &[m(1, "baseline", "create a;"), m(3, "more", "create b;"), m(4, "x", "")]),
            Ok(())
        );
        let edited =
            check_migrations_lock(&lock, &[m(1, "baseline", "create a; -- edited"), m(3, "more", "create b;")]);
        assert!(edited.unwrap_err().contains("V1__baseline.sql has landed and was edited"));
        let renamed = check_migrations_lock(&lock, &[m(1, "baseline", "create a;"), m(3, "other", "create b;")]);
        assert!(renamed.unwrap_err().contains("renamed to V3__other.sql"));
        let gone = check_migrations_lock(&lock, &[m(1, "baseline", "create a;")]);
        assert!(gone.unwrap_err().contains("V3__more.sql has landed and is gone"));
        let below =
            check_migrations_lock(&lock, &[m(1, "baseline", "create a;"), m(2, "late", ""), m(3, "more", "create b;")]);
        assert!(below.unwrap_err().contains("V2__late.sql is numbered below the last landed migration (V3)"));
        assert!(check_migrations_lock("1 baseline", &[]).unwrap_err().contains("malformed line"));
    }

    #[test]
    fn a_missing_grant_names_the_functions_and_the_grant_to_run() {
        let missing: Vec<String> =
            ["claim_tasks", "report_tasks", "type_hold__a", "type_hold__b", "type_hold__c"].map(String::from).to_vec();
        let m = missing_grants_message("app", Grant::Worker, &missing);
        assert!(m.contains("asyncflow.claim_tasks, asyncflow.report_tasks"), "{m}");
        assert!(m.contains("and 1 more"), "{m}");
        assert!(m.contains("`grant asyncflow_worker to app;`"), "{m}");
        let m = missing_grants_message("My \"App\"", Grant::Client, &missing[..1]);
        assert!(m.contains("`grant asyncflow_client to \"My \"\"App\"\"\";`"), "{m}");
    }

    #[test]
    fn the_sql_api_is_embedded_in_name_order() {
        let names: Vec<&str> = sql_api::FILES.iter().map(|(n, _)| *n).collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        assert_eq!(names, sorted);
        assert!(names.contains(&"20_enqueue"), "{names:?}");
        let templates: Vec<&str> = sql_api::TEMPLATES.iter().map(|(n, _)| *n).collect();
        assert_eq!(templates, ["claim_fair", "claim_plain", "end_waits", "finish", "hold", "report"]);
    }

    #[test]
    fn a_database_is_current_only_with_this_builds_version_and_checksum() {
        use api::SchemaState::{Migrated, NotMigrated};
        let known = i64::from(latest_version());
        let state =
            |version: i64, checksum: &str| Migrated { version: Some(version), sql_api_checksum: Some(checksum.into()) };
        assert!(check_state(&state(known, &sql_api_checksum())).is_ok());
        for stale in [NotMigrated, state(known - 1, &sql_api_checksum()), state(known, "older")] {
            let e = check_state(&stale).unwrap_err().to_string();
            assert!(e.contains("run `asyncflow migrate`") && e.contains("--migrate"), "{e}");
        }
        let e = check_state(&state(known + 1, &sql_api_checksum())).unwrap_err().to_string();
        assert!(e.contains("run a newer asyncflow"), "{e}");
        let e = missing_roles_message(&["asyncflow_worker".into()]);
        assert!(
            e.contains("asyncflow_worker do not exist") && e.contains("create role asyncflow_client nologin"),
            "{e}"
        );
    }

    #[test]
    fn a_pre_release_history_is_refused_and_a_newer_one_too() {
        let old = check_history(&[(1, "schema".into()), (2, "task_types".into())]).unwrap_err().to_string();
        assert!(old.contains("pre-release") && old.contains("recreate"), "{old}");
        let ahead = check_history(&[(1, "baseline".into()), (999_999, "future".into())]).unwrap_err().to_string();
        assert!(ahead.contains("ahead of the code"), "{ahead}");
        assert!(check_history(&[(1, "baseline".into())]).is_ok());
        assert!(check_history(&[]).is_ok());
    }
}

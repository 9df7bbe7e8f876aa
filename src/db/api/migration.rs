//! The statements of `asyncflow migrate` (src/db/migrate.rs): the schema history, and the SQL API
//! of sql/api/ applied as a whole with the templates of the per-type functions.

use super::{get, query_direct, query_direct_one, query_one, GenericClient};
use crate::error::{Error, Result};

/// What `asyncflow.schema_state()` says of a database: how far it is migrated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SchemaState {
    /// No schema asyncflow, or one without the SQL API (never migrated, or migrated by a build
    /// older than this check).
    NotMigrated,
    /// The newest migration applied and the checksum of the SQL API last applied.
    Migrated {
        /// Newest migration applied.
        version: Option<i64>,
        /// Checksum of the SQL API last applied.
        sql_api_checksum: Option<String>,
    },
}

/// `asyncflow.schema_state()`, readable by both roles (it needs only USAGE on the schema and the
/// grant of the function). A missing schema or function is [`SchemaState::NotMigrated`]; a role
/// without USAGE on the schema or EXECUTE on the function gets an error that says so.
pub async fn schema_state<C: GenericClient>(c: &C) -> Result<SchemaState> {
    use tokio_postgres::error::SqlState;
    let sql = "select version, sql_api_checksum from asyncflow.schema_state()";
    let rows = super::run(c, sql, &[]).await;
    match rows {
        Ok(rows) => match rows.first() {
            Some(r) => {
                Ok(SchemaState::Migrated { version: get(r, "version")?, sql_api_checksum: get(r, "sql_api_checksum")? })
            }
            None => Ok(SchemaState::NotMigrated),
        },
        Err(e) if matches!(e.code(), Some(c) if *c == SqlState::UNDEFINED_FUNCTION || *c == SqlState::INVALID_SCHEMA_NAME) => {
            Ok(SchemaState::NotMigrated)
        }
        Err(e) if e.code() == Some(&SqlState::INSUFFICIENT_PRIVILEGE) => Err(Error::Config(format!(
            "this database role may not read schema asyncflow ({}): grant it asyncflow_worker (a worker, \
             a server) or asyncflow_client (an application, the admin commands)",
            e.as_db_error().map(|d| d.message()).unwrap_or("permission denied")
        ))),
        Err(e) => Err(Error::from_db(e)),
    }
}

/// The roles of the schema (asyncflow_client, asyncflow_worker) that do not exist in the cluster.
pub async fn missing_roles(c: &tokio_postgres::Client) -> Result<Vec<String>> {
    let rows = c
        .query(
            "select r as name from unnest(array['asyncflow_client', 'asyncflow_worker']) r \
             where not exists (select from pg_catalog.pg_roles where rolname = r) order by r",
            &[],
        )
        .await
        .map_err(Error::from_db)?;
    rows.iter().map(|r| get(r, "name")).collect()
}

/// Whether the connected role may create roles (a superuser, or CREATEROLE).
pub async fn may_create_roles(c: &tokio_postgres::Client) -> Result<bool> {
    let row = c
        .query_one(
            "select coalesce((select rolsuper or rolcreaterole from pg_catalog.pg_roles \
             where rolname = current_user), false) as may",
            &[],
        )
        .await
        .map_err(Error::from_db)?;
    get(&row, "may")
}

/// Creates the asyncflow schema (refinery's history table lives in it).
pub async fn create_schema(c: &tokio_postgres::Client) -> Result<()> {
    c.batch_execute("create schema if not exists asyncflow").await.map_err(Error::from_db)
}

/// The migrations applied, as (version, name), oldest first; empty on a database never migrated.
pub async fn schema_history(c: &tokio_postgres::Client) -> Result<Vec<(i64, String)>> {
    let row =
        query_direct_one(c, "select to_regclass('asyncflow.refinery_schema_history') is not null as migrated", &[])
            .await?;
    if !get::<bool>(&row, "migrated")? {
        return Ok(Vec::new());
    }
    let rows = query_direct(
        c,
        "select version::bigint as version, name from asyncflow.refinery_schema_history order by version",
        &[],
    )
    .await?;
    rows.iter().map(|r| Ok((get(r, "version")?, get(r, "name")?))).collect()
}

/// The newest applied migration, or None on a database never migrated.
pub async fn schema_version(c: &tokio_postgres::Client) -> Result<Option<i64>> {
    Ok(schema_history(c).await?.last().map(|(v, _)| *v))
}

/// The checksum of the SQL API last applied (`asyncflow.sql_api`), None if never applied.
pub async fn sql_api_checksum(c: &tokio_postgres::Client) -> Result<Option<String>> {
    let row = query_direct_one(c, "select to_regclass('asyncflow.sql_api') is not null as present", &[]).await?;
    if !get::<bool>(&row, "present")? {
        return Ok(None);
    }
    let rows = query_direct(c, "select checksum from asyncflow.sql_api", &[]).await?;
    rows.first().map(|r| get(r, "checksum")).transpose()
}

/// In one transaction: stores the templates (name, text) in `asyncflow.function_templates`, runs
/// each file of the SQL API in order, recreates every registered type's own functions from the
/// templates (`asyncflow.create_type_functions`), and records `checksum`.
pub async fn apply_sql_api(
    c: &mut tokio_postgres::Client,
    files: &[(&str, &str)],
    templates: &[(&str, &str)],
    checksum: &str,
) -> Result<()> {
    let tx = c.transaction().await.map_err(Error::from_db)?;
    tx.execute("delete from asyncflow.function_templates", &[]).await.map_err(Error::from_db)?;
    for (name, body) in templates {
        tx.execute("insert into asyncflow.function_templates (name, body) values ($1, $2)", &[name, body])
            .await
            .map_err(Error::from_db)?;
    }
    for (name, text) in files {
        tx.batch_execute(text).await.map_err(|e| match e.as_db_error() {
            Some(db) => Error::Migration(format!("sql/api/{name}.sql: {}", db.message())),
            None => Error::from_db(e),
        })?;
    }
    tx.execute("select asyncflow.create_type_functions(task_type) from asyncflow.task_types order by task_type", &[])
        .await
        .map_err(Error::from_db)?;
    tx.execute(
        "insert into asyncflow.sql_api (singleton, checksum, applied_at) values (true, $1, now()) \
         on conflict (singleton) do update set checksum = excluded.checksum, applied_at = excluded.applied_at",
        &[&checksum],
    )
    .await
    .map_err(Error::from_db)?;
    tx.commit().await.map_err(Error::from_db)
}

/// `asyncflow.missing_grants`: the functions `role` (`asyncflow_client` or `asyncflow_worker`)
/// may execute and the connected role may not (only those of `task_types` among the per-type
/// functions, when given), with the connected role's name.
pub async fn missing_grants<C: GenericClient>(
    c: &C,
    role: &str,
    task_types: Option<&[String]>,
) -> Result<(String, Vec<String>)> {
    let sql = "select current_user::text as me, asyncflow.missing_grants($1, $2) as missing";
    let row = query_one(c, sql, &[&role, &task_types]).await?;
    Ok((get(&row, "me")?, get(&row, "missing")?))
}

//! The statements of `asyncflow migrate` (src/db/migrate.rs): the schema history, and the SQL API
//! of sql/api/ applied as a whole with the templates of the per-type functions.

use super::get;
use crate::error::{Error, Result};

/// Creates the asyncflow schema (refinery's history table lives in it).
pub async fn create_schema(c: &tokio_postgres::Client) -> Result<()> {
    c.batch_execute("create schema if not exists asyncflow").await.map_err(Error::from_db)
}

/// The migrations applied, as (version, name), oldest first; empty on a database never migrated.
pub async fn schema_history(c: &tokio_postgres::Client) -> Result<Vec<(i64, String)>> {
    let row = c
        .query_one("select to_regclass('asyncflow.refinery_schema_history') is not null as migrated", &[])
        .await
        .map_err(Error::from_db)?;
    if !get::<bool>(&row, "migrated")? {
        return Ok(Vec::new());
    }
    let rows = c
        .query("select version::bigint as version, name from asyncflow.refinery_schema_history order by version", &[])
        .await
        .map_err(Error::from_db)?;
    rows.iter().map(|r| Ok((get(r, "version")?, get(r, "name")?))).collect()
}

/// The newest applied migration, or None on a database never migrated.
pub async fn schema_version(c: &tokio_postgres::Client) -> Result<Option<i64>> {
    Ok(schema_history(c).await?.last().map(|(v, _)| *v))
}

/// The checksum of the SQL API last applied (`asyncflow.sql_api`), None if never applied.
pub async fn sql_api_checksum(c: &tokio_postgres::Client) -> Result<Option<String>> {
    let row = c
        .query_one("select to_regclass('asyncflow.sql_api') is not null as present", &[])
        .await
        .map_err(Error::from_db)?;
    if !get::<bool>(&row, "present")? {
        return Ok(None);
    }
    let row = c.query_opt("select checksum from asyncflow.sql_api", &[]).await.map_err(Error::from_db)?;
    row.map(|r| get(&r, "checksum")).transpose()
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

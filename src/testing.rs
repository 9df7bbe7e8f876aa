//! Helpers for your own tests (feature `testing`), in the spirit of River's `rivertest`: a fresh
//! database per test, "this transaction enqueued a task of this type with this context", and a
//! worker run until its queue is idle. They use the SQL API only, so they work on a role granted
//! `asyncflow_client` (and `asyncflow_worker` for the worker).
//!
//! ```no_run
//! # async fn example(admin_url: &str) -> asyncflow::Result<()> {
//! use asyncflow::testing::{require_enqueued, TestDatabase};
//! let db = TestDatabase::create(admin_url).await?;
//! let mut conn = db.pool.get().await?;
//! let tx = conn.transaction().await?;
//! // the code under test enqueues in its own transaction
//! asyncflow::db::api::create_task(&tx, "mail", &asyncflow::task::NewTask::with_context(
//!     serde_json::json!({"to": "ada@example.com", "template": "welcome"}),
//! )).await?;
//! let task = require_enqueued(&tx, "mail", &serde_json::json!({"template": "welcome"})).await?;
//! assert_eq!(task.stage, "start");
//! tx.rollback().await?;
//! db.drop_database().await?;
//! # Ok(())
//! # }
//! ```

use chrono::{DateTime, Utc};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::db::{self, api, api::TaskFilter, DbPool, GenericClient};
use crate::error::{Error, Result};
use crate::task::Task;
use crate::worker::{Worker, WorkerSummary};

/// A database of its own for one test, migrated, dropped by [`TestDatabase::drop_database`].
pub struct TestDatabase {
    /// Its URL.
    pub url: String,
    /// A pool on it.
    pub pool: DbPool,
    /// Its name.
    pub name: String,
    admin_url: String,
}

impl TestDatabase {
    /// A new database, `asyncflow_test_<random>`, on the server `admin_url` names (as a role
    /// that may create databases), migrated as that role.
    pub async fn create(admin_url: &str) -> Result<TestDatabase> {
        let name = format!("asyncflow_test_{}", uuid::Uuid::new_v4().simple());
        let (admin, driver) = db::connect(admin_url).await?;
        // the name is ours (a fixed prefix and hex digits), so it needs no quoting
        admin.batch_execute(&format!("create database {name}")).await.map_err(Error::from_db)?;
        drop(admin);
        let _ = driver.await;
        let url = url_of(admin_url, &name)?;
        db::migrate::migrate(&url).await?;
        let pool = db::pool(&url, 4)?;
        Ok(TestDatabase { url, pool, name, admin_url: admin_url.to_string() })
    }

    /// Drops the database, ending the connections still open on it.
    pub async fn drop_database(self) -> Result<()> {
        self.pool.close();
        let (admin, driver) = db::connect(&self.admin_url).await?;
        let outcome = admin.batch_execute(&format!("drop database if exists {} with (force)", self.name)).await;
        drop(admin);
        let _ = driver.await;
        outcome.map_err(Error::from_db)
    }
}

/// `admin_url` with its database replaced by `name`.
fn url_of(admin_url: &str, name: &str) -> Result<String> {
    let mut url = url::Url::parse(admin_url)
        .map_err(|e| Error::Config(format!("the admin URL must be a postgres:// URL ({e})")))?;
    url.set_path(&format!("/{name}"));
    Ok(url.to_string())
}

/// The tasks of `task_type` that the calling transaction created (and has not committed yet),
/// oldest first.
pub async fn enqueued_here<C: GenericClient>(c: &C, task_type: &str) -> Result<Vec<Task>> {
    // now() is the transaction's start: what it created is at or after it
    let row = c.query_one("select now() as started", &[]).await.map_err(Error::from_db)?;
    let started: DateTime<Utc> = row.try_get("started").map_err(Error::from_db)?;
    let mut filter = TaskFilter {
        task_type: Some(task_type.to_string()),
        created_after: Some(started),
        limit: Some(200),
        ..TaskFilter::default()
    };
    let mut here = Vec::new();
    loop {
        let page = api::list_tasks(c, &filter).await?;
        let Some(last) = page.last() else { break };
        filter.after = Some(last.id.to_string());
        for task in page {
            if api::task_created_here(c, task.id.as_str()).await? {
                here.push(task);
            }
        }
    }
    here.sort_by_key(|t| (t.created_at, t.id.number()));
    Ok(here)
}

/// The task of `task_type` that the calling transaction created with a context containing
/// `context` (as `@>` reads it: every key of `context` present with the same value, nested
/// objects alike); an error naming what it did create when there is none.
pub async fn require_enqueued<C: GenericClient>(c: &C, task_type: &str, context: &Value) -> Result<Task> {
    let here = enqueued_here(c, task_type).await?;
    let contexts: Vec<String> = here.iter().map(|t| t.context.to_string()).collect();
    here.into_iter().find(|t| contains(&t.context, context)).ok_or_else(|| {
        Error::InvalidArgument(format!(
            "this transaction enqueued no {task_type} task whose context contains {context}; it enqueued {} \
             {task_type} task(s){}",
            contexts.len(),
            if contexts.is_empty() { String::new() } else { format!(", with contexts {}", contexts.join(", ")) }
        ))
    })
}

/// Whether `whole` contains `part` as PostgreSQL's jsonb `@>` reads it.
pub fn contains(whole: &Value, part: &Value) -> bool {
    match (whole, part) {
        (Value::Object(w), Value::Object(p)) => p.iter().all(|(k, v)| w.get(k).is_some_and(|x| contains(x, v))),
        (Value::Array(w), Value::Array(p)) => p.iter().all(|v| w.iter().any(|x| contains(x, v))),
        (Value::Array(w), p) if !p.is_object() && !p.is_array() => w.contains(p),
        (w, p) => w == p,
    }
}

/// Runs `worker` until no task of its types is ready (and what was in flight has ended), then
/// returns its counters: for a test that enqueues, works the queue off, and checks the outcome.
pub async fn work_until_idle(worker: Worker) -> Result<WorkerSummary> {
    worker.exit_when_idle().run(CancellationToken::new()).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn containment_reads_as_jsonb_does() {
        let whole = json!({"a": 1, "b": {"c": [1, 2, {"d": 3}], "e": "x"}, "f": [1, 2]});
        assert!(contains(&whole, &json!({})));
        assert!(contains(&whole, &json!({"a": 1})));
        assert!(contains(&whole, &json!({"b": {"c": [{"d": 3}]}})));
        assert!(contains(&whole, &json!({"f": [2]})));
        assert!(!contains(&whole, &json!({"a": 2})));
        assert!(!contains(&whole, &json!({"b": {"e": "y"}})));
        assert!(!contains(&whole, &json!({"g": null})));
        assert!(contains(&json!([1, 2]), &json!(1)));
    }

    #[test]
    fn the_test_database_url_keeps_the_server_and_the_user() {
        let url = url_of("postgres://me:pw@db:5433/postgres?sslmode=disable", "asyncflow_test_1").unwrap();
        assert_eq!(url, "postgres://me:pw@db:5433/asyncflow_test_1?sslmode=disable");
        assert!(url_of("host=db user=me", "x").is_err());
    }
}

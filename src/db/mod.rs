//! Database access: the connection pool, the embedded server, migrations, the SQL API seam
//! ([`api`], the only module with SQL text), and the LISTEN connection.

pub mod api;
#[cfg(feature = "embedded")]
pub mod embedded;
pub mod listen;
pub mod migrate;

use std::str::FromStr;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio_postgres::NoTls;

use crate::error::{Error, Result};

pub use deadpool_postgres::{GenericClient, Pool as DbPool};

/// Builds a pool of `size` connections to `url`. Connections are made lazily.
pub fn pool(url: &str, size: usize) -> Result<Pool> {
    let mut pg =
        tokio_postgres::Config::from_str(url).map_err(|e| Error::Config(format!("invalid database URL: {e}")))?;
    if pg.get_application_name().is_none() {
        pg.application_name("asyncflow");
    }
    pg.connect_timeout(Duration::from_secs(10));
    let manager = Manager::from_config(pg, NoTls, ManagerConfig { recycling_method: RecyclingMethod::Fast });
    Pool::builder(manager)
        .max_size(size.max(1))
        .runtime(deadpool_postgres::Runtime::Tokio1)
        .wait_timeout(Some(Duration::from_secs(30)))
        .create_timeout(Some(Duration::from_secs(10)))
        .build()
        .map_err(|e| Error::Config(format!("connection pool: {e}")))
}

/// Opens one connection outside the pool (for LISTEN, leadership, migrations), driving it on a
/// spawned task. The returned handle ends when the connection does.
pub async fn connect(url: &str) -> Result<(tokio_postgres::Client, tokio::task::JoinHandle<()>)> {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await.map_err(Error::from_db)?;
    let driver = tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "database connection ended");
        }
    });
    Ok((client, driver))
}

/// Whether a database error means the connection (or the server) went away or could not be
/// made, rather than that a statement failed: the connection closed, an I/O error under it, or
/// the server's own class 08 (connection exception) and 57P01..57P03 (shutdown, restart, not yet
/// accepting). Such a failure may pass: a request may be tried again, a start-up may wait.
pub fn connection_failed(e: &tokio_postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    match e.as_db_error() {
        Some(db) => {
            let code = db.code().code();
            code.starts_with("08") || matches!(code, "57P01" | "57P02" | "57P03")
        }
        None => crate::error::find_cause::<std::io::Error>(e).is_some(),
    }
}

/// Waits until the database at `url` accepts a connection, retrying with back-off (0.2 s doubling
/// to 10 s) and saying so in the log, while the failure is one that may pass
/// ([`connection_failed`]: the server down, starting or restarting). Any other failure (a wrong
/// password, a missing database) is returned at once. False when `shutdown` fired first.
pub async fn wait_for_database(url: &str, shutdown: &tokio_util::sync::CancellationToken) -> Result<bool> {
    let mut pause = Duration::from_millis(200);
    let started = std::time::Instant::now();
    loop {
        let error = match tokio::select! {
            c = connect(url) => c,
            _ = shutdown.cancelled() => return Ok(false),
        } {
            Ok((client, driver)) => {
                drop(client);
                let _ = driver.await;
                if started.elapsed() > Duration::from_secs(1) {
                    tracing::info!(waited = ?started.elapsed(), "the database is up");
                }
                return Ok(true);
            }
            Err(e) => e,
        };
        let passing = matches!(&error, Error::Database(e) if connection_failed(e));
        if !passing {
            return Err(error);
        }
        tracing::warn!(error = %error, retry_in = ?pause, "waiting for the database");
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = shutdown.cancelled() => return Ok(false),
        }
        pause = (pause * 2).min(Duration::from_secs(10));
    }
}

/// The same server and credentials as `url`, database `database`: a URL (`postgres://...`) gets
/// its path replaced, a key=value string gets a `dbname` that overrides any earlier one.
pub fn with_database(url: &str, database: &str) -> Result<String> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let mut parsed = url::Url::parse(url).map_err(|e| Error::Config(format!("invalid database URL: {e}")))?;
        parsed.set_path(database);
        // a dbname in the query string would win over the path
        let pairs: Vec<(String, String)> = parsed
            .query_pairs()
            .filter(|(k, _)| k != "dbname")
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        if pairs.is_empty() {
            parsed.set_query(None);
        } else {
            parsed.query_pairs_mut().clear().extend_pairs(pairs);
        }
        Ok(parsed.to_string())
    } else {
        Ok(format!("{url} dbname={database}"))
    }
}

#[cfg(test)]
mod tests {
    use std::str::FromStr;

    use super::with_database;

    #[test]
    fn with_database_replaces_the_database_of_either_url_form() {
        let u = with_database("postgres://me:pw@db.example:6432/app?sslmode=disable", "other").unwrap();
        assert_eq!(u, "postgres://me:pw@db.example:6432/other?sslmode=disable");
        let u = with_database("postgresql://h/app?dbname=x&application_name=a", "b").unwrap();
        assert_eq!(u, "postgresql://h/b?application_name=a");
        assert_eq!(with_database("host=/tmp dbname=app", "b").unwrap(), "host=/tmp dbname=app dbname=b");
        let last = tokio_postgres::Config::from_str("host=/tmp dbname=app dbname=b").unwrap();
        assert_eq!(last.get_dbname(), Some("b"));
    }
}

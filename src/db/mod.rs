//! Database access: the connection pool, the embedded server, migrations, the SQL API seam
//! ([`api`], the only module with SQL text), and the LISTEN connection.

pub mod api;
#[cfg(feature = "embedded")]
pub mod embedded;
pub mod listen;
pub mod migrate;
pub mod pooling;

use std::str::FromStr;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio_postgres::NoTls;

use crate::error::{Error, Result};

pub use deadpool_postgres::Pool as DbPool;
pub use pooling::GenericClient;

/// Connect timeout when `DATABASE_URL` gives none (`connect_timeout`), per host tried.
pub const CONNECT_TIMEOUT_DEFAULT: Duration = Duration::from_secs(10);
/// TCP keepalive on every connection when the URL does not say (`keepalives_idle`,
/// `keepalives_interval`, `keepalives_retries`): a silent peer is probed after 10 s idle, then
/// every 5 s.
pub const KEEPALIVES_IDLE_DEFAULT: Duration = Duration::from_secs(10);
/// See [`KEEPALIVES_IDLE_DEFAULT`].
pub const KEEPALIVES_INTERVAL_DEFAULT: Duration = Duration::from_secs(5);
/// See [`KEEPALIVES_IDLE_DEFAULT`].
pub const KEEPALIVES_RETRIES_DEFAULT: u32 = 3;
/// `tcp_user_timeout` when the URL gives none: a connection whose sent data stays
/// unacknowledged this long, or whose keepalive probes go unanswered this long, is closed, so a
/// statement on a connection to an unreachable server fails within about this time instead of
/// the kernel's 15 minutes (2 h 11 min for an idle one).
pub const TCP_USER_TIMEOUT_DEFAULT: Duration = Duration::from_secs(30);

/// The connection settings of `url`, with asyncflow's defaults for what it does not say: the
/// application name, a connect timeout, TCP keepalive and a TCP user timeout. Settings given in
/// the URL are kept (`connect_timeout=30`, `keepalives=0`, `tcp_user_timeout=0`, a multi-host
/// URL with `target_session_attrs=read-write`, ...).
pub fn config(url: &str) -> Result<tokio_postgres::Config> {
    let mut pg =
        tokio_postgres::Config::from_str(url).map_err(|e| Error::Config(format!("invalid database URL: {e}")))?;
    let given = url_parameters(url);
    let says = |key: &str| given.iter().any(|k| k == key);
    if pg.get_application_name().is_none() {
        pg.application_name("asyncflow");
    }
    if pg.get_connect_timeout().is_none() {
        pg.connect_timeout(CONNECT_TIMEOUT_DEFAULT);
    }
    if !says("keepalives_idle") {
        pg.keepalives_idle(KEEPALIVES_IDLE_DEFAULT);
    }
    if !says("keepalives_interval") {
        pg.keepalives_interval(KEEPALIVES_INTERVAL_DEFAULT);
    }
    if !says("keepalives_retries") {
        pg.keepalives_retries(KEEPALIVES_RETRIES_DEFAULT);
    }
    if !says("tcp_user_timeout") {
        pg.tcp_user_timeout(TCP_USER_TIMEOUT_DEFAULT);
    }
    Ok(pg)
}

/// The names of the parameters `url` gives, in either form (`postgres://...?k=v&...` or
/// `k=v k=v`).
fn url_parameters(url: &str) -> Vec<String> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        match url::Url::parse(url) {
            Ok(parsed) => parsed.query_pairs().map(|(k, _)| k.into_owned()).collect(),
            // a multi-host URL is no valid URL for this parser: read the query by hand
            Err(_) => url
                .split_once('?')
                .map(|(_, q)| q.split('&').filter_map(|kv| kv.split('=').next()).map(str::to_string).collect())
                .unwrap_or_default(),
        }
    } else {
        url.split_whitespace().filter_map(|kv| kv.split_once('=')).map(|(k, _)| k.trim().to_string()).collect()
    }
}

/// Builds a pool of `size` connections to `url` (with the settings of [`config`]). Connections
/// are made lazily. Making one gives up after the URL's connect timeout for each of its hosts.
pub fn pool(url: &str, size: usize) -> Result<Pool> {
    let pg = config(url)?;
    let hosts = pg.get_hosts().len().max(1) as u32;
    let create = pg.get_connect_timeout().copied().unwrap_or(CONNECT_TIMEOUT_DEFAULT) * hosts;
    let manager = Manager::from_config(pg, NoTls, ManagerConfig { recycling_method: RecyclingMethod::Fast });
    Pool::builder(manager)
        .max_size(size.max(1))
        .runtime(deadpool_postgres::Runtime::Tokio1)
        .wait_timeout(Some(Duration::from_secs(30).max(create)))
        // the connect timeout of each host bounds it; this only catches a start-up that hangs
        .create_timeout(Some(create + Duration::from_secs(5)))
        .build()
        .map_err(|e| Error::Config(format!("connection pool: {e}")))
}

/// Opens one connection outside the pool (for LISTEN, leadership, migrations), with the settings
/// of [`config`], driving it on a spawned task. The returned handle ends when the connection
/// does.
pub async fn connect(url: &str) -> Result<(tokio_postgres::Client, tokio::task::JoinHandle<()>)> {
    let pg = config(url)?;
    let (client, connection) = within_connect_timeout(&pg, pg.connect(NoTls)).await?.map_err(Error::from_db)?;
    let driver = tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "database connection ended");
        }
    });
    Ok((client, driver))
}

/// Runs `connecting` (a connection's start-up on `pg`) within the connect timeout of each host
/// tried, plus a second: tokio-postgres applies `connect_timeout` to the socket's connect only,
/// so a server (or a network path) that accepts the socket and then says nothing would hang the
/// start-up for ever.
pub async fn within_connect_timeout<T>(
    pg: &tokio_postgres::Config,
    connecting: impl std::future::Future<Output = T>,
) -> Result<T> {
    let hosts = pg.get_hosts().len().max(1) as u32;
    let limit = pg.get_connect_timeout().copied().unwrap_or(CONNECT_TIMEOUT_DEFAULT) * hosts + Duration::from_secs(1);
    tokio::time::timeout(limit, connecting).await.map_err(|_| {
        Error::Io(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("the database did not answer the connection's start-up within {limit:?}"),
        ))
    })
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
        let passing = match &error {
            Error::Database(e) => connection_failed(e),
            Error::Io(e) => e.kind() == std::io::ErrorKind::TimedOut,
            _ => false,
        };
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

//! Database access: the connection pool, the embedded server, migrations, the SQL API seam
//! ([`api`], the only module with SQL text), and the LISTEN connection.

pub mod api;
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

//! Configuration: where the database is. Parsed once in `main` (flags with environment
//! fallbacks), validated, then passed down; nothing reads the environment after start-up.

use std::path::PathBuf;

use crate::db::embedded::{EmbeddedConfig, EmbeddedPostgres};
use crate::error::{Error, Result};

/// Default data directory of the embedded server, relative to the working directory.
pub const DATA_DIR_DEFAULT: &str = ".asyncflow/pgdata";
/// Default pool size.
pub const POOL_SIZE_DEFAULT: usize = 16;

/// Where the database is.
#[derive(Debug, Clone)]
pub struct DbConfig {
    /// Connection URL; None starts the embedded server.
    pub database_url: Option<String>,
    /// Data directory for the embedded server.
    pub data_dir: PathBuf,
    /// Connections in the pool.
    pub pool_size: usize,
}

impl DbConfig {
    /// Checks the values.
    pub fn validate(&self) -> Result<()> {
        if let Some(url) = &self.database_url {
            url.parse::<tokio_postgres::Config>()
                .map_err(|e| Error::Config(format!("DATABASE_URL is not a valid PostgreSQL URL: {e}")))?;
        }
        if self.pool_size == 0 || self.pool_size > 1000 {
            return Err(Error::Config("pool size must be between 1 and 1000".into()));
        }
        Ok(())
    }

    /// The database URL, starting the embedded server when none is configured and `embedded`
    /// allows it (the demo, the benchmark, `--embedded`); without it, no database named is an
    /// error. Keep the returned server alive as long as the database is used.
    pub async fn resolve(&self, embedded: bool) -> Result<(String, Option<EmbeddedPostgres>)> {
        self.validate()?;
        match &self.database_url {
            Some(url) => Ok((url.clone(), None)),
            None if !embedded => Err(Error::Config(
                "no database named: set DATABASE_URL (or --database-url), or give --embedded to start a \
                 private PostgreSQL in --data-dir"
                    .into(),
            )),
            None => {
                tracing::info!(data_dir = %self.data_dir.display(), "DATABASE_URL unset: starting the embedded PostgreSQL");
                let server = EmbeddedPostgres::start(EmbeddedConfig::new(&self.data_dir)).await?;
                Ok((server.url().to_string(), Some(server)))
            }
        }
    }
}

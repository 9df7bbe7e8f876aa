//! The connection mode: straight to PostgreSQL (or a pooler in session mode), or through a
//! pooler in transaction mode (PgBouncer's `pool_mode = transaction`), where consecutive
//! transactions of one client may run on different server connections.
//!
//! ```text
//!   session (default)                        transaction (--pool-mode transaction)
//!   statements prepared once per connection  one unnamed statement per call: parse, bind and
//!   (named "s0", "s1", ...)                  execute in one round trip (`query_typed`)
//!   LISTEN on the database URL               LISTEN on --listen-url (a direct connection), or
//!                                            none: producers poll at schedule_interval
//!   leadership: a session advisory lock      leadership: a lease row, renewed each check
//!   migrate on the database URL              migrate on --listen-url (direct), or refused
//! ```
//!
//! The mode is the process's, set once at start-up ([`set_mode`]); nothing in a transaction
//! keeps state for the next one in either mode (no `SET`, no session lock on a pooled
//! connection).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::Row;

use crate::error::{Error, Result};

/// How the process reaches the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum PoolMode {
    /// Straight to PostgreSQL, or through a pooler in session mode.
    #[default]
    Session,
    /// Through a pooler in transaction mode (PgBouncer's `pool_mode = transaction`).
    Transaction,
}

static TRANSACTION: AtomicBool = AtomicBool::new(false);

/// Sets the process's mode (at start-up, before any connection is made).
pub fn set_mode(mode: PoolMode) {
    TRANSACTION.store(mode == PoolMode::Transaction, Ordering::Relaxed);
}

/// The process's mode.
pub fn mode() -> PoolMode {
    if TRANSACTION.load(Ordering::Relaxed) {
        PoolMode::Transaction
    } else {
        PoolMode::Session
    }
}

static DIRECT_URL: OnceLock<String> = OnceLock::new();

/// Sets the process's direct URL (`--listen-url`): where it LISTENs, and migrates, when its
/// database URL goes through a pooler (at start-up; a second call changes nothing).
pub fn set_direct_url(url: String) {
    let _ = DIRECT_URL.set(url);
}

/// Where a process whose pool goes to `database_url` LISTENs: the direct URL when one is set,
/// else the database URL itself, except through a pooler in transaction mode, where a LISTEN
/// would last one transaction (None: poll).
pub fn listen_url(database_url: &str) -> Option<String> {
    match (DIRECT_URL.get(), mode()) {
        (Some(direct), _) => Some(direct.clone()),
        (None, PoolMode::Session) => Some(database_url.to_string()),
        (None, PoolMode::Transaction) => None,
    }
}

/// Where a process whose pool goes to `database_url` applies migrations, which hold a session
/// lock: the direct URL through a pooler in transaction mode (refused without one).
pub fn migration_url(database_url: &str) -> Result<String> {
    match (mode(), DIRECT_URL.get()) {
        (PoolMode::Session, _) => Ok(database_url.to_string()),
        (PoolMode::Transaction, Some(direct)) => Ok(direct.clone()),
        (PoolMode::Transaction, None) => Err(Error::Config(
            "migrations hold a session lock, which a pooler in transaction mode cannot keep: give --listen-url \
             (a direct connection) or run asyncflow migrate on a direct DATABASE_URL"
                .into(),
        )),
    }
}

/// Whether statements must go unnamed (transaction pooling).
pub fn unnamed_statements() -> bool {
    mode() == PoolMode::Transaction
}

/// A pooled connection, or a transaction on one, that the SQL API runs its statements on: the
/// pool's own client trait, and a statement sent unnamed (parse, bind and execute in one round
/// trip) for a pooler in transaction mode.
pub trait GenericClient: deadpool_postgres::GenericClient {
    /// Runs `sql` as an unnamed statement with `params` of the types given.
    fn query_unnamed<'a>(
        &'a self,
        sql: &'a str,
        params: &'a [(&'a (dyn ToSql + Sync), Type)],
    ) -> BoxFuture<'a, std::result::Result<Vec<Row>, tokio_postgres::Error>>;
}

impl GenericClient for deadpool_postgres::Client {
    fn query_unnamed<'a>(
        &'a self,
        sql: &'a str,
        params: &'a [(&'a (dyn ToSql + Sync), Type)],
    ) -> BoxFuture<'a, std::result::Result<Vec<Row>, tokio_postgres::Error>> {
        tokio_postgres::Client::query_typed(self, sql, params).boxed()
    }
}

impl GenericClient for deadpool_postgres::Transaction<'_> {
    fn query_unnamed<'a>(
        &'a self,
        sql: &'a str,
        params: &'a [(&'a (dyn ToSql + Sync), Type)],
    ) -> BoxFuture<'a, std::result::Result<Vec<Row>, tokio_postgres::Error>> {
        tokio_postgres::Transaction::query_typed(self, sql, params).boxed()
    }
}

/// The types a parameter is tried as, in this order: the first one its Rust type takes is sent
/// with it, so the server needs no statement described beforehand. Text before the other string
/// types, jsonb before json, timestamptz before timestamp: the types asyncflow's functions take.
const CANDIDATES: &[Type] = &[
    Type::TEXT,
    Type::INT4,
    Type::INT8,
    Type::FLOAT8,
    Type::BOOL,
    Type::JSONB,
    Type::TIMESTAMPTZ,
    Type::INT2,
    Type::FLOAT4,
    Type::BYTEA,
    Type::UUID,
    Type::INTERVAL,
    Type::TEXT_ARRAY,
    Type::INT4_ARRAY,
    Type::INT8_ARRAY,
    Type::FLOAT8_ARRAY,
    Type::BOOL_ARRAY,
    Type::JSONB_ARRAY,
    Type::TIMESTAMPTZ_ARRAY,
    Type::TIMESTAMP,
    Type::JSON,
    Type::VARCHAR,
];

/// The PostgreSQL type of each parameter (see [`CANDIDATES`]), for a statement sent unnamed.
pub fn typed<'a>(params: &[&'a (dyn ToSql + Sync)]) -> Result<Vec<(&'a (dyn ToSql + Sync), Type)>> {
    let mut scratch = bytes::BytesMut::new();
    params
        .iter()
        .enumerate()
        .map(|(i, p)| {
            for ty in CANDIDATES {
                scratch.clear();
                if p.to_sql_checked(ty, &mut scratch).is_ok() {
                    return Ok((*p, ty.clone()));
                }
            }
            Err(Error::Unexpected(format!("parameter ${} has a type no unnamed statement carries", i + 1)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_parameter_is_sent_as_the_type_its_rust_type_takes() {
        let text = "a";
        let int = 1i32;
        let big = 2i64;
        let json = serde_json::json!({"a": 1});
        let none: Option<chrono::DateTime<chrono::Utc>> = None;
        let list = vec!["a".to_string()];
        let params: Vec<&(dyn ToSql + Sync)> = vec![&text, &int, &big, &json, &none, &list];
        let types: Vec<Type> = typed(&params).unwrap().into_iter().map(|(_, t)| t).collect();
        assert_eq!(types, vec![Type::TEXT, Type::INT4, Type::INT8, Type::JSONB, Type::TIMESTAMPTZ, Type::TEXT_ARRAY]);
    }
}

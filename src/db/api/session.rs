//! The dedicated connections' part of the SQL seam: the maintenance leader's session lock, the
//! LISTEN connection's subscription and liveness, and session advisory locks (tests, tools).
//! Each takes a `tokio_postgres::Client` of its own, never a pooled connection: a session lock
//! or a LISTEN would go back into the pool with it.

use super::get;
use crate::error::{Error, Result};

/// Session advisory lock for maintenance leadership; true when this session now holds it.
/// (Dedicated connections only: a pooled connection would carry the lock back into the pool.)
pub async fn try_lead(c: &tokio_postgres::Client, key: i32) -> Result<bool> {
    let row = c.query_one("select pg_try_advisory_lock(16710, $1) as led", &[&key]).await.map_err(Error::from_db)?;
    get(&row, "led")
}

/// Waits for the session advisory lock `key` (class 16710, as [`try_lead`]) for at most the
/// session's `lock_timeout` (see [`super::SessionLimits`]): true once held, false when the wait ran
/// out (ask again). A participant that waits costs the server nothing until then, where one
/// that tried every few seconds cost a transaction each time.
pub async fn wait_lead(c: &tokio_postgres::Client, key: i32) -> Result<bool> {
    match c.execute("select pg_advisory_lock(16710, $1)", &[&key]).await {
        Ok(_) => Ok(true),
        Err(e)
            if e.code() == Some(&tokio_postgres::error::SqlState::LOCK_NOT_AVAILABLE)
                || e.code() == Some(&tokio_postgres::error::SqlState::QUERY_CANCELED) =>
        {
            Ok(false)
        }
        Err(e) => Err(Error::from_db(e)),
    }
}

/// Round trip that proves the connection is alive.
pub async fn ping(c: &tokio_postgres::Client) -> Result<()> {
    c.simple_query("select 1").await.map(|_| ()).map_err(Error::from_db)
}

/// Subscribes the (dedicated) connection to the wake-up, cancel and ended-task channels.
pub async fn listen(c: &tokio_postgres::Client) -> Result<()> {
    c.batch_execute("listen asyncflow; listen asyncflow_cancel; listen asyncflow_ended").await.map_err(Error::from_db)
}

/// The backend pid of this connection (tests terminate leaders by it).
pub async fn backend_pid(c: &tokio_postgres::Client) -> Result<i32> {
    let row = c.query_one("select pg_backend_pid() as pid", &[]).await.map_err(Error::from_db)?;
    get(&row, "pid")
}

/// Waits for a session advisory lock (class, key).
pub async fn advisory_lock(c: &tokio_postgres::Client, key: (i32, i32)) -> Result<()> {
    c.execute("select pg_advisory_lock($1, $2)", &[&key.0, &key.1]).await.map(|_| ()).map_err(Error::from_db)
}

/// Releases a session advisory lock (class, key).
pub async fn advisory_unlock(c: &tokio_postgres::Client, key: (i32, i32)) -> Result<()> {
    c.execute("select pg_advisory_unlock($1, $2)", &[&key.0, &key.1]).await.map(|_| ()).map_err(Error::from_db)
}

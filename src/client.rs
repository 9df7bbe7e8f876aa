//! The Rust client: enqueue and administer tasks, on the database or on an `asyncflow serve`.
//! One [`Client`], two backends, like the worker's: [`Client::Database`] calls the SQL API over a
//! pool and composes each answer (a task's `created`, a page's `next`) once; [`Client::Server`]
//! sends the same operation to the HTTP API, whose handlers answer with that same composition.
//! Both give the typed answers of [`crate::protocol`]'s resource modules. Each call takes a
//! connection from the pool; to enqueue inside your own transaction, call [`crate::db::api`] with
//! the transaction instead.

mod dashboard;
mod events;
pub mod remote;
mod schedules;
mod task_types;
mod tasks;
mod workflows;

pub use dashboard::LEADER_SEEN_WITHIN_SECS;
pub use remote::RemoteClient;

use crate::db::DbPool;
use crate::error::Result;

/// Enqueue and admin calls, on the database or on a server.
#[derive(Clone)]
pub enum Client {
    /// The SQL API over a pool.
    Database(DbPool),
    /// An `asyncflow serve`'s HTTP API.
    Server(RemoteClient),
}

/// No body, or no query string.
const NONE: Option<&()> = None;

impl Client {
    /// A client of the database over `pool`.
    pub fn new(pool: DbPool) -> Self {
        Client::Database(pool)
    }

    /// A client of the server at `server` (`http://host:port`), with a bearer token if it needs one.
    pub fn server(server: &str, token: Option<String>) -> Result<Self> {
        Ok(Client::Server(RemoteClient::new(server, token)?))
    }
}

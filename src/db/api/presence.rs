//! The presence part of the SQL seam: workers' heartbeat rows and the maintenance leader's.

use chrono::{DateTime, Utc};

use super::{get, query, query_direct_one, query_one};
use crate::db::GenericClient;
use crate::error::{Error, Result};

/// A worker as its heartbeat row says.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct WorkerRow {
    /// Worker id.
    pub id: String,
    /// Host it runs on.
    pub host: String,
    /// Its process id on that host.
    pub pid: i32,
    /// The task types it serves.
    pub types: Vec<String>,
    /// Calls it has running.
    pub in_flight: i32,
    /// When it started.
    pub started_at: DateTime<Utc>,
    /// Its last heartbeat.
    pub last_seen: DateTime<Utc>,
}

/// The maintenance leader as it last said.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct LeaderRow {
    /// The leading process's id.
    pub id: String,
    /// Host it runs on.
    pub host: String,
    /// Since when it leads.
    pub since: DateTime<Utc>,
    /// When it last said so.
    pub last_seen: DateTime<Utc>,
}

/// `asyncflow.heartbeat_worker`: writes the worker's row, last seen at `now` (None: the
/// database's clock).
pub async fn heartbeat_worker<C: GenericClient>(c: &C, worker: &WorkerRow, now: Option<DateTime<Utc>>) -> Result<()> {
    query(
        c,
        "select asyncflow.heartbeat_worker($1, $2, $3, $4, $5, $6, $7)",
        &[&worker.id, &worker.host, &worker.pid, &worker.types, &worker.in_flight, &worker.started_at, &now],
    )
    .await
    .map(|_| ())
}

/// `asyncflow.remove_worker`: the worker exited cleanly; whether it had a row.
pub async fn remove_worker<C: GenericClient>(c: &C, id: &str) -> Result<bool> {
    let row = query_one(c, "select asyncflow.remove_worker($1) as gone", &[&id]).await?;
    get(&row, "gone")
}

/// `asyncflow.prune_workers`: removes workers not seen for `stale_seconds`; how many.
pub async fn prune_workers<C: GenericClient>(c: &C, stale_seconds: f64, now: Option<DateTime<Utc>>) -> Result<i32> {
    let row = query_one(c, "select asyncflow.prune_workers($1, $2) as n", &[&stale_seconds, &now]).await?;
    get(&row, "n")
}

/// `asyncflow.list_workers`: the workers seen within `within_seconds`, by id.
pub async fn list_workers<C: GenericClient>(
    c: &C,
    within_seconds: f64,
    now: Option<DateTime<Utc>>,
) -> Result<Vec<WorkerRow>> {
    let rows = query(
        c,
        "select id, host, pid, types, in_flight, started_at, last_seen from asyncflow.list_workers($1, $2)",
        &[&within_seconds, &now],
    )
    .await?;
    rows.iter()
        .map(|r| {
            Ok(WorkerRow {
                id: get(r, "id")?,
                host: get(r, "host")?,
                pid: get(r, "pid")?,
                types: get(r, "types")?,
                in_flight: get(r, "in_flight")?,
                started_at: get(r, "started_at")?,
                last_seen: get(r, "last_seen")?,
            })
        })
        .collect()
}

/// `asyncflow.note_leader`: the caller leads maintenance (since now, or still). On the
/// leader's dedicated connection, like [`super::try_lead`].
pub async fn note_leader(c: &tokio_postgres::Client, id: &str, host: &str, now: Option<DateTime<Utc>>) -> Result<()> {
    c.execute("select asyncflow.note_leader($1, $2, $3)", &[&id, &host, &now]).await.map(|_| ()).map_err(Error::from_db)
}

/// `asyncflow.leave_leadership`: the leader `id` stepped down cleanly.
pub async fn leave_leadership(c: &tokio_postgres::Client, id: &str) -> Result<()> {
    c.execute("select asyncflow.leave_leadership($1)", &[&id]).await.map(|_| ()).map_err(Error::from_db)
}

/// `asyncflow.take_lead`: whether `id` leads maintenance by the lease (its own row, or one not
/// renewed for `lease_seconds`), renewing it if so. Through the pool: for processes behind a
/// pooler in transaction mode (see `maintenance::leader`).
pub async fn take_lead<C: GenericClient>(
    c: &C,
    id: &str,
    host: &str,
    lease_seconds: f64,
    now: Option<DateTime<Utc>>,
) -> Result<bool> {
    let row =
        query_one(c, "select asyncflow.take_lead($1, $2, $3, $4) as led", &[&id, &host, &lease_seconds, &now]).await?;
    get(&row, "led")
}

/// `asyncflow.leave_leadership` through the pool (the lease form of [`leave_leadership`]).
pub async fn leave_lease<C: GenericClient>(c: &C, id: &str) -> Result<()> {
    query(c, "select asyncflow.leave_leadership($1)", &[&id]).await.map(|_| ())
}

/// `asyncflow.current_leader`: the leader, if it said so within `within_seconds`.
pub async fn current_leader<C: GenericClient>(
    c: &C,
    within_seconds: f64,
    now: Option<DateTime<Utc>>,
) -> Result<Option<LeaderRow>> {
    let rows =
        query(c, "select id, host, since, last_seen from asyncflow.current_leader($1, $2)", &[&within_seconds, &now])
            .await?;
    rows.first()
        .map(|r| {
            Ok(LeaderRow {
                id: get(r, "id")?,
                host: get(r, "host")?,
                since: get(r, "since")?,
                last_seen: get(r, "last_seen")?,
            })
        })
        .transpose()
}

/// `asyncflow.max_context_bytes`: the largest context or result a report takes.
pub async fn max_context_bytes<C: GenericClient>(c: &C) -> Result<i32> {
    let row = query_one(c, "select asyncflow.max_context_bytes() as n", &[]).await?;
    get(&row, "n")
}

/// `asyncflow.can_maintain`: whether this connection's role may run every maintenance service;
/// if not, the functions it may not execute (or that are missing).
pub async fn can_maintain(c: &tokio_postgres::Client) -> Result<(bool, Vec<String>)> {
    let row = query_direct_one(c, "select ok, denied from asyncflow.can_maintain()", &[]).await?;
    Ok((get(&row, "ok")?, get(&row, "denied")?))
}

/// `asyncflow.maintenance_functions`: the functions the maintenance services call.
pub async fn maintenance_functions<C: GenericClient>(c: &C) -> Result<Vec<String>> {
    let rows = query(c, "select f from asyncflow.maintenance_functions() f", &[]).await?;
    rows.iter().map(|r| get(r, "f")).collect()
}

/// How long the server keeps a session that goes silent ([`limit_session`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionLimits {
    /// `idle_session_timeout`: a session idle this long is ended (and its locks freed).
    pub idle: std::time::Duration,
    /// `tcp_keepalives_idle`, `tcp_keepalives_interval`, `tcp_keepalives_count`: the server
    /// probes a silent peer after `keepalive_idle`, every `keepalive_interval`, this many times.
    pub keepalive_idle: std::time::Duration,
    /// See `keepalive_idle`.
    pub keepalive_interval: std::time::Duration,
    /// See `keepalive_idle`.
    pub keepalive_count: u32,
    /// `tcp_user_timeout`: data the server sent that stays unacknowledged this long ends the
    /// connection.
    pub user_timeout: std::time::Duration,
    /// `lock_timeout` (and `statement_timeout`, which would end the wait sooner, set to it): the
    /// longest one wait for the lock lasts ([`wait_lead`]) before it is asked again.
    pub lock_wait: std::time::Duration,
}

/// Sets, for this session only, how long the server keeps it once it goes silent (a client that
/// stopped, or a network that stopped forwarding): any role may set these. The TCP settings act
/// on TCP connections only (a Unix socket ignores them).
pub async fn limit_session(c: &tokio_postgres::Client, limits: &SessionLimits) -> Result<()> {
    let ms = |d: std::time::Duration| d.as_millis().max(1).to_string();
    let s = |d: std::time::Duration| d.as_secs().max(1).to_string();
    c.execute(
        "select set_config('idle_session_timeout', $1, false), set_config('tcp_keepalives_idle', $2, false), \
         set_config('tcp_keepalives_interval', $3, false), set_config('tcp_keepalives_count', $4, false), \
         set_config('tcp_user_timeout', $5, false), set_config('lock_timeout', $6, false), \
         set_config('statement_timeout', $6, false)",
        &[
            &ms(limits.idle),
            &s(limits.keepalive_idle),
            &s(limits.keepalive_interval),
            &limits.keepalive_count.to_string(),
            &ms(limits.user_timeout),
            &ms(limits.lock_wait),
        ],
    )
    .await
    .map(|_| ())
    .map_err(Error::from_db)
}

/// The role this connection acts as (`current_user`), for messages.
pub async fn current_role(c: &tokio_postgres::Client) -> Result<String> {
    let row = query_direct_one(c, "select current_user::text as r", &[]).await?;
    get(&row, "r")
}

//! The worker's heartbeat row: while it runs, a worker writes who it is, the
//! types it serves and how many calls it has in flight into `asyncflow.workers` every few
//! seconds (in the database, or through the server for a worker on `--server`), and removes the
//! row when it stops cleanly. A worker that dies leaves its row, which
//! maintenance removes once it is stale (`maintenance::WorkerPruner`).
//!
//! The row is for people and dashboards only: nothing in claiming or fencing reads it, so a
//! failed write is logged and tried again at the next beat. The same beat reads the database's
//! `max_context_bytes`, which the stages a hold chains must stay within.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use super::{Backend, Shared};
use crate::db::api;

/// Time between a worker's heartbeat rows.
pub const PRESENCE_INTERVAL: Duration = Duration::from_secs(5);

/// Writes the worker's row every [`PRESENCE_INTERVAL`] until `stop`, then removes it: in the
/// database, or through the server for a worker on `--server`.
pub(super) async fn run(backend: Backend, shared: Arc<Shared>, types: Vec<String>, stop: CancellationToken) {
    let started_at: DateTime<Utc> = Utc::now();
    let id = shared.worker_id.as_str().to_string();
    let host = crate::ids::host_name();
    let pid = i32::try_from(std::process::id()).unwrap_or(0);
    let mut tick = tokio::time::interval(PRESENCE_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.cancelled() => break,
        }
        let in_flight = i32::try_from(shared.lock_inflight().len()).unwrap_or(i32::MAX);
        let row = api::WorkerRow {
            id: id.clone(),
            host: host.clone(),
            pid,
            types: types.clone(),
            in_flight,
            started_at,
            last_seen: started_at,
        };
        let written = match &backend {
            Backend::Database(pool) => async { api::heartbeat_worker(&pool.get().await?, &row, None).await }.await,
            Backend::Server(client) => client.presence(&row).await,
        };
        if let Err(e) = written {
            tracing::warn!(worker = %id, error = %e, "could not write the worker's heartbeat row");
        }
        // what a hold's chained stages must stay within (see hold::chainable)
        if let Backend::Database(pool) = &backend {
            if let Err(e) = shared.read_context_limit(pool).await {
                tracing::warn!(worker = %id, error = %e, "could not read max_context_bytes");
            }
        }
    }
    let removed = match &backend {
        Backend::Database(pool) => async { api::remove_worker(&pool.get().await?, &id).await.map(|_| ()) }.await,
        Backend::Server(client) => client.gone(&id).await,
    };
    if let Err(e) = removed {
        tracing::warn!(worker = %id, error = %e, "could not remove the worker's heartbeat row");
    }
}

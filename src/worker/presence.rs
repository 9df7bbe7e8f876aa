//! The worker's heartbeat row: while it runs, a worker writes who it is, the
//! types it serves and how many calls it has in flight into `asyncflow.workers` every few
//! seconds (in the database, or through the server for a worker on `--server`), and removes the
//! row when it stops cleanly. A worker that dies leaves its row, which
//! maintenance removes once it is stale (`maintenance::WorkerPruner`).
//!
//! The row is for people and dashboards only: nothing in claiming or fencing reads it, so a
//! failed write is logged and tried again at the next beat. The same beat reads the database's
//! `max_context_bytes`, which the stages a hold chains must stay within.
//!
//! **An idle worker beats rarely.** While nothing runs and nothing was claimed since the last
//! beat, the row is written every [`PRESENCE_IDLE_INTERVAL`] instead, in one transaction with
//! the read and, for a worker that LISTENs, the sweep: the next due time of each of its types in
//! one statement, and a wake-up for each type with a task ready, in case its NOTIFY went missing
//! (a notifying transaction that committed before one whose NOTIFY it stood for). An idle worker
//! on the database so costs the server one transaction per idle interval.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use super::{Backend, Shared};
use crate::db::api;
use crate::db::listen::Wake;
use crate::db::DbPool;
use crate::error::{Error, Result};

/// Time between a worker's heartbeat rows.
pub const PRESENCE_INTERVAL: Duration = Duration::from_secs(5);

/// Time between the heartbeat rows of an idle worker (see the module docs); well within
/// `WORKER_STALE_DEFAULT`, the age at which maintenance removes a row.
pub const PRESENCE_IDLE_INTERVAL: Duration = Duration::from_secs(30);

/// Writes the worker's row every [`PRESENCE_INTERVAL`] until `stop`, then removes it: in the
/// database, or through the server for a worker on `--server`.
/// `wakes`: where the sweep's wake-ups go, for a worker that LISTENs (None: it polls).
pub(super) async fn run(
    backend: Backend,
    shared: Arc<Shared>,
    types: Vec<String>,
    wakes: Option<broadcast::Sender<Wake>>,
    stop: CancellationToken,
) {
    let started_at: DateTime<Utc> = Utc::now();
    let id = shared.worker_id.as_str().to_string();
    let host = crate::ids::host_name();
    let pid = i32::try_from(std::process::id()).unwrap_or(0);
    let mut tick = tokio::time::interval(PRESENCE_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_beat: Option<(tokio::time::Instant, u64)> = None;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.cancelled() => break,
        }
        let in_flight = i32::try_from(shared.lock_inflight().len()).unwrap_or(i32::MAX);
        let activity = shared.activity.load(Ordering::SeqCst);
        let idle = in_flight == 0 && last_beat.is_some_and(|(_, seen)| seen == activity);
        if idle && last_beat.is_some_and(|(at, _)| at.elapsed() < PRESENCE_IDLE_INTERVAL) {
            continue;
        }
        last_beat = Some((tokio::time::Instant::now(), activity));
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
            Backend::Database(pool) => beat(pool, &shared, &row, wakes.as_ref().filter(|_| idle)).await,
            Backend::Server(client) => client.presence(&row).await,
        };
        if let Err(e) = written {
            tracing::warn!(worker = %id, error = %e, "could not write the worker's heartbeat row");
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

/// One beat on the database, in one transaction: the row, `max_context_bytes` (what a hold's
/// chained stages must stay within, see hold::chainable) and, given `sweep`, the sweep (see the
/// module docs).
async fn beat(
    pool: &DbPool,
    shared: &Shared,
    row: &api::WorkerRow,
    sweep: Option<&broadcast::Sender<Wake>>,
) -> Result<()> {
    let mut conn = pool.get().await?;
    let tx = conn.transaction().await.map_err(Error::from_db)?;
    api::heartbeat_worker(&tx, row, None).await?;
    let limit = api::max_context_bytes(&tx).await?;
    let due = match sweep {
        Some(_) => api::next_due_each(&tx, &row.types).await?,
        None => Vec::new(),
    };
    tx.commit().await.map_err(Error::from_db)?;
    shared.context_limit.store(usize::try_from(limit).unwrap_or(0), Ordering::Relaxed);
    if let Some(wakes) = sweep {
        let now = Utc::now();
        for (task_type, _) in due.into_iter().filter(|(_, due)| due.is_some_and(|d| d <= now)) {
            tracing::debug!(task_type, "sweep: a task is ready that no wake-up announced");
            let _ = wakes.send(Some(task_type));
        }
    }
    Ok(())
}

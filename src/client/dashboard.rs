//! [`Client`]'s overview of every task type (`GET /v1/dashboard`, `asyncflow status`).

use std::collections::HashMap;

use reqwest::Method;
use tokio_postgres::IsolationLevel;

use super::{Client, NONE};
use crate::db::{api, DbPool};
use crate::error::{Error, Result};
use crate::protocol::dashboard::{Counts, Overview, TypeSummary};

/// The leader is shown while its last check is this recent (it checks every few seconds).
pub const LEADER_SEEN_WITHIN_SECS: f64 = 30.0;

impl Client {
    /// Per task type: queue depth, lag, counts per status and shard positions, read in one
    /// snapshot; their sums; the maintenance leader.
    pub async fn overview(&self) -> Result<Overview> {
        match self {
            Client::Database(pool) => overview(pool).await,
            Client::Server(r) => r.call(Method::GET, &r.url(&["v1", "dashboard"]), NONE, NONE).await,
        }
    }
}

async fn overview(pool: &DbPool) -> Result<Overview> {
    let mut c = pool.get().await?;
    let tx = c
        .build_transaction()
        .isolation_level(IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await
        .map_err(Error::from_db)?;
    let depth = api::queue_depth_held(&tx).await?;
    let mut figures: HashMap<String, api::TaskTypeFigures> =
        api::task_type_figures(&tx).await?.into_iter().map(|f| (f.task_type.clone(), f)).collect();
    let mut positions: HashMap<String, api::Positions> =
        api::positions(&tx).await?.into_iter().map(|p| (p.task_type.clone(), p)).collect();
    let mut counters: HashMap<String, api::TypeCounters> =
        api::type_counters(&tx).await?.into_iter().map(|c| (c.task_type.clone(), c)).collect();
    let leader = api::current_leader(&tx, LEADER_SEEN_WITHIN_SECS, None).await?;
    tx.commit().await.map_err(Error::from_db)?;
    let types: Vec<TypeSummary> = depth
        .into_iter()
        .map(|(d, held_tasks)| {
            let f = figures.remove(&d.task_type);
            let p = positions.remove(&d.task_type);
            let c = counters.remove(&d.task_type).unwrap_or_default();
            TypeSummary {
                paused: d.paused,
                held: held_tasks > 0,
                counts: Counts {
                    ready: d.ready,
                    delayed: d.delayed,
                    held_tasks,
                    running: d.running,
                    waiting: f.as_ref().map_or(0, |f| f.waiting),
                    succeeded: f.as_ref().map_or(0, |f| f.succeeded),
                    failed: f.as_ref().map_or(0, |f| f.failed),
                    cancelled: f.as_ref().map_or(0, |f| f.cancelled),
                    succeeded_total: c.succeeded,
                    failed_total: c.failed,
                    retried_total: c.retried,
                },
                oldest_ready_age: d.oldest_ready_age,
                oldest_running_age: f.as_ref().map_or(0.0, |f| f.oldest_running_age),
                begin_pos: p.as_ref().map(|p| p.begin_pos),
                end_pos: p.as_ref().map(|p| p.end_pos),
                shards: p.as_ref().map_or(0, |p| p.shards),
                task_type: d.task_type,
            }
        })
        .collect();
    let totals = types.iter().fold(Counts::default(), |t, s| t.plus(&s.counts));
    Ok(Overview { types, totals, leader })
}

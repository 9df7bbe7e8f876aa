//! The scheduler: releases the due ticks of every periodic schedule. Also here, the time-based
//! keys' retention: uniqueness keys whose window ended, and events sent longer ago than
//! `event_retention` ([`UniqueKeyRetention`]).
//!
//! ```text
//!   list_schedules ──> per schedule (not paused):
//!     Cron::parse(cron, time_zone)  ── unusable ──> note_schedule(error), next schedule
//!     Cron::due(max(since, last_tick), now, missed, max_catch_up)
//!       └─ each tick, oldest first, one transaction:
//!            release_schedule_tick(name, tick)
//!              (schedule, tick) key inserted ─> task created / run started
//!              key already there ─> nothing (another maintainer released it)
//!            note_schedule(next tick after now)
//!     note_schedule(next tick after now)  (when no tick was due: the next one may have moved)
//! ```
//!
//! A tick's release and the next tick commit together: `list_schedules` never shows a released
//! tick as the next one (it did, between two statements, about one poll in 400).
//!
//! Exactly one task or run per tick rests on the unique (schedule, tick) key alone, not on
//! leadership: two maintainers that both believe they lead, or a maintainer killed halfway, can
//! only lose a race or roll back, never release a tick twice. A schedule that fails (its type
//! gone, its context too large for a new limit) is noted and skipped; the others go on.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{RunOnceReport, Service};
use crate::db::{api, DbPool};
use crate::error::{Error, Result};
use crate::schedule::{Cron, Schedule};
use futures_util::future::BoxFuture;

/// Default scheduler pass interval: a per-second schedule is released within about a second.
pub const SCHEDULE_INTERVAL_DEFAULT: Duration = Duration::from_secs(1);

/// Releases due schedule ticks.
pub struct Scheduler {
    pool: DbPool,
    interval: Duration,
    /// Whether the last pass found any schedule (see [`Service::backs_off_when_idle`]).
    any: std::sync::atomic::AtomicBool,
}

impl Scheduler {
    /// The scheduler, run every `interval`.
    pub fn new(pool: DbPool, interval: Duration) -> Self {
        Scheduler { pool, interval, any: std::sync::atomic::AtomicBool::new(true) }
    }

    async fn release(
        &self,
        schedule: &Schedule,
        now: DateTime<Utc>,
        fixed_clock: bool,
        detail: &mut Vec<String>,
    ) -> Result<()> {
        let mut client = self.pool.get().await?;
        let cron = match Cron::parse(&schedule.cron, &schedule.time_zone) {
            Ok(cron) => cron,
            Err(why) => return api::note_schedule(&client, &schedule.name, None, Some(&why)).await,
        };
        let after = schedule.last_tick.map_or(schedule.since, |last| last.max(schedule.since));
        let cap = u32::try_from(schedule.max_catch_up).unwrap_or(1);
        let next = cron.next_after(now);
        let clock = if fixed_clock { Some(now) } else { None };
        let due = cron.due(after, now, schedule.missed, cap);
        if due.is_empty() {
            return api::note_schedule(&client, &schedule.name, next, None).await;
        }
        for tick in due {
            let tx = client.transaction().await.map_err(Error::from_db)?;
            let released = api::release_schedule_tick(&tx, &schedule.name, tick, clock).await?;
            api::note_schedule(&tx, &schedule.name, next, None).await?;
            tx.commit().await.map_err(Error::from_db)?;
            if let Some(id) = released {
                detail.push(format!("{} {} -> {id}", schedule.name, tick.to_rfc3339()));
            }
        }
        Ok(())
    }
}

impl Service for Scheduler {
    /// Due by the clock while there are schedules: backs off only while there are none.
    fn backs_off_when_idle(&self) -> bool {
        !self.any.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn name(&self) -> &'static str {
        "scheduler"
    }

    fn interval(&self) -> Duration {
        self.interval
    }

    fn run_once(&self, now: Option<DateTime<Utc>>) -> BoxFuture<'_, Result<RunOnceReport>> {
        Box::pin(async move {
            let (schedules, clock) = {
                let client = self.pool.get().await?;
                let schedules = api::list_schedules(&client).await?;
                self.any.store(!schedules.is_empty(), std::sync::atomic::Ordering::Relaxed);
                let clock = match now {
                    Some(t) => t,
                    None if schedules.is_empty() => Utc::now(),
                    None => api::database_now(&client).await?,
                };
                (schedules, clock)
            };
            let mut detail = Vec::new();
            for schedule in schedules.iter().filter(|s| !s.paused) {
                if let Err(e) = self.release(schedule, clock, now.is_some(), &mut detail).await {
                    tracing::warn!(schedule = %schedule.name, error = %e, "schedule tick not released");
                    if let Ok(client) = self.pool.get().await {
                        let _ =
                            api::note_schedule(&client, &schedule.name, schedule.next_tick, Some(&e.to_string())).await;
                    }
                }
            }
            Ok(RunOnceReport { service: self.name(), changed: detail.len() as u64, detail })
        })
    }
}

/// Removes uniqueness keys whose window has ended (`create_task`'s `unique_for`), and events sent
/// longer ago than `asyncflow.config.event_retention`, a batch at a time until none is left.
pub struct UniqueKeyRetention {
    pool: DbPool,
    interval: Duration,
}

impl UniqueKeyRetention {
    /// Most keys one statement removes.
    const BATCH: i32 = 10_000;

    /// The service, run every `interval`.
    pub fn new(pool: DbPool, interval: Duration) -> Self {
        UniqueKeyRetention { pool, interval }
    }
}

impl Service for UniqueKeyRetention {
    fn name(&self) -> &'static str {
        "unique_key_retention"
    }

    fn interval(&self) -> Duration {
        self.interval
    }

    fn run_once(&self, now: Option<DateTime<Utc>>) -> BoxFuture<'_, Result<RunOnceReport>> {
        Box::pin(async move {
            let client = self.pool.get().await?;
            let mut changed = 0u64;
            loop {
                let n = api::drop_expired_unique_keys(&client, now, Self::BATCH).await?;
                changed += u64::try_from(n).unwrap_or(0);
                if n < Self::BATCH {
                    break;
                }
            }
            let mut detail = if changed > 0 { vec![format!("{changed} expired uniqueness keys")] } else { Vec::new() };
            let mut events = 0u64;
            loop {
                let n = api::drop_expired_events(&client, now, Self::BATCH).await?;
                events += u64::try_from(n).unwrap_or(0);
                if n < Self::BATCH {
                    break;
                }
            }
            if events > 0 {
                detail.push(format!("{events} events past their retention"));
            }
            let changed = changed + events;
            Ok(RunOnceReport { service: self.name(), changed, detail })
        })
    }
}

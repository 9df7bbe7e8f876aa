//! [`Client`]'s calls on periodic schedules (`/v1/schedules`).

use reqwest::Method;

use super::{Client, NONE};
use crate::db::api;
use crate::error::{echo, Error, Result};
use crate::schedule::{Schedule, ScheduleRemoved, SetSchedule};

impl Client {
    /// Every schedule by name, with its next tick, its last tick and what it last released.
    pub async fn list_schedules(&self) -> Result<Vec<Schedule>> {
        match self {
            Client::Database(pool) => api::list_schedules(&pool.get().await?).await,
            Client::Server(r) => r.call(Method::GET, &r.url(&["v1", "schedules"]), NONE, NONE).await,
        }
    }

    /// Creates or replaces the schedule `name`; the schedule as stored. A cron expression that
    /// does not read in the spec's time zone is refused before anything is stored.
    pub async fn set_schedule(&self, name: &str, set: &SetSchedule) -> Result<Schedule> {
        match self {
            Client::Database(pool) => {
                set.check().map_err(Error::InvalidArgument)?;
                api::set_schedule(&pool.get().await?, name, &set.cron, &set.spec, None).await
            }
            Client::Server(r) => r.call(Method::PUT, &r.url(&["v1", "schedules", name]), NONE, Some(set)).await,
        }
    }

    /// Pauses the schedule: no tick is released until it is resumed.
    pub async fn pause_schedule(&self, name: &str) -> Result<Schedule> {
        self.set_schedule_paused(name, true).await
    }

    /// Resumes the schedule: the ticks after now are released.
    pub async fn resume_schedule(&self, name: &str) -> Result<Schedule> {
        self.set_schedule_paused(name, false).await
    }

    async fn set_schedule_paused(&self, name: &str, paused: bool) -> Result<Schedule> {
        match self {
            Client::Database(pool) => api::pause_schedule(&pool.get().await?, name, paused).await,
            Client::Server(r) => {
                let action = if paused { "pause" } else { "resume" };
                r.call(Method::POST, &r.url(&["v1", "schedules", name, action]), NONE, NONE).await
            }
        }
    }

    /// Removes the schedule (the tasks and runs it released stay); an unknown one is an error.
    pub async fn remove_schedule(&self, name: &str) -> Result<ScheduleRemoved> {
        match self {
            Client::Database(pool) => {
                if !api::remove_schedule(&pool.get().await?, name).await? {
                    return Err(Error::UnknownSchedule(format!("unknown schedule {}", echo(name))));
                }
            }
            Client::Server(r) => r.call_no_content(Method::DELETE, &r.url(&["v1", "schedules", name])).await?,
        }
        Ok(ScheduleRemoved { removed: name.to_string() })
    }
}

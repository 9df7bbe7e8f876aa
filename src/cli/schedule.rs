//! `asyncflow schedule ...`: list, set, pause, resume and remove periodic schedules, on the
//! database directly or on an `asyncflow serve` with `--server URL` (same operations, same
//! JSON). Output is JSON on stdout.

use clap::Subcommand;
use serde_json::{json, Value};

use super::remote::{call, encode, json_arg, Target};
use crate::db::api;
use crate::db::DbPool;
use crate::error::{Error, Result};
use crate::schedule::{ScheduleSpec, SetSchedule};

/// `schedule` subcommands.
#[derive(Debug, Subcommand)]
pub enum ScheduleCommand {
    /// List schedules with their next and last tick and their last task or run.
    List,
    /// Create or replace a schedule.
    Set {
        /// Schedule name.
        name: String,
        /// Cron expression: five fields, six with seconds first, or a nickname such as @hourly.
        cron: String,
        /// The spec, e.g. '{"type": "report", "context": {"kind": "daily"}, "time_zone": "Europe/Paris"}'.
        spec: String,
    },
    /// Stop releasing a schedule's ticks.
    Pause {
        /// Schedule name.
        name: String,
    },
    /// Release a paused schedule's ticks again (from now on).
    Resume {
        /// Schedule name.
        name: String,
    },
    /// Remove a schedule (the tasks and runs it released stay).
    Remove {
        /// Schedule name.
        name: String,
    },
}

/// Runs a `schedule` command; the JSON to print.
pub async fn schedule(pool: Option<&DbPool>, target: &Target, command: ScheduleCommand) -> Result<Value> {
    use reqwest::Method;
    match (pool, command) {
        (Some(p), ScheduleCommand::List) => Ok(json!(api::list_schedules(&p.get().await?).await?)),
        (None, ScheduleCommand::List) => call(target, Method::GET, "/v1/schedules", None).await,
        (pool, ScheduleCommand::Set { name, cron, spec }) => {
            let spec: ScheduleSpec = json_arg("spec", &spec)?;
            let set = SetSchedule { cron, spec };
            set.check().map_err(Error::InvalidArgument)?;
            match pool {
                Some(p) => Ok(json!(api::set_schedule(&p.get().await?, &name, &set.cron, &set.spec, None).await?)),
                None => call(target, Method::PUT, &format!("/v1/schedules/{}", encode(&name)), Some(json!(set))).await,
            }
        }
        (Some(p), ScheduleCommand::Pause { name }) => {
            Ok(json!(api::pause_schedule(&p.get().await?, &name, true).await?))
        }
        (Some(p), ScheduleCommand::Resume { name }) => {
            Ok(json!(api::pause_schedule(&p.get().await?, &name, false).await?))
        }
        (None, ScheduleCommand::Pause { name }) => {
            call(target, Method::POST, &format!("/v1/schedules/{}/pause", encode(&name)), None).await
        }
        (None, ScheduleCommand::Resume { name }) => {
            call(target, Method::POST, &format!("/v1/schedules/{}/resume", encode(&name)), None).await
        }
        (Some(p), ScheduleCommand::Remove { name }) => {
            if api::remove_schedule(&p.get().await?, &name).await? {
                Ok(json!({"removed": name}))
            } else {
                Err(Error::UnknownSchedule(format!("unknown schedule {}", crate::error::echo(&name))))
            }
        }
        (None, ScheduleCommand::Remove { name }) => {
            call(target, Method::DELETE, &format!("/v1/schedules/{}", encode(&name)), None).await?;
            Ok(json!({"removed": name}))
        }
    }
}

//! `asyncflow schedule ...`: list, set, pause, resume and remove periodic schedules, on the
//! database directly or on an `asyncflow serve` with `--server URL` (same operations, same
//! JSON). Output is JSON on stdout.

use clap::Subcommand;

use super::args::json_arg;
use super::print;
use crate::client::Client;
use crate::error::Result;
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

/// Runs a `schedule` command and prints its answer.
pub async fn schedule(client: &Client, command: ScheduleCommand) -> Result<()> {
    match command {
        ScheduleCommand::List => print(&client.list_schedules().await?),
        ScheduleCommand::Set { name, cron, spec } => {
            let spec: ScheduleSpec = json_arg("spec", &spec)?;
            print(&client.set_schedule(&name, &SetSchedule { cron, spec }).await?)
        }
        ScheduleCommand::Pause { name } => print(&client.pause_schedule(&name).await?),
        ScheduleCommand::Resume { name } => print(&client.resume_schedule(&name).await?),
        ScheduleCommand::Remove { name } => print(&client.remove_schedule(&name).await?),
    }
}

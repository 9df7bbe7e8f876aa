//! Periodic schedules: the data `asyncflow.set_schedule` takes and `asyncflow.list_schedules`
//! gives, and the tick arithmetic the maintenance scheduler runs on them (which ticks are due,
//! under which missed-tick policy; the next tick).
//!
//! Cron expressions are read by the `croner` crate (five fields, or six with seconds first;
//! `@hourly` and the like), in an IANA time zone read by `chrono-tz`. The database only checks an
//! expression's shape; every entry point (HTTP, CLI, `function.toml`) reads it with [`Cron::parse`]
//! first, so a bad field is refused before anything is stored, and the scheduler records an
//! unusable one on the schedule (`error`) instead of stopping.
//!
//! ```text
//!         since / last_tick                     now - MISSED_GRACE        now
//!   ----------|------x-------x--------x-------------|-------x------x-------|---->
//!                    missed ticks                         on-time ticks
//!   skip: none of the missed     last: the newest missed     all: the newest max_catch_up missed
//!   on-time ticks are released under every policy
//! ```

use std::time::Duration;

use chrono::{DateTime, Utc};
use croner::parser::{CronParser, Seconds, Year};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A tick released later than this after its time counts as missed (the policy decides whether
/// it runs); an earlier one is on time and always released. Covers a maintenance pass's delay
/// and a change of leader.
pub const MISSED_GRACE: Duration = Duration::from_secs(60);

/// Most on-time ticks looked at in one pass (a per-second schedule has 61 within the grace).
const ON_TIME_MAX: usize = 1000;

/// What a tick does when it is released late (after [`MISSED_GRACE`]), e.g. after downtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Missed {
    /// Missed ticks are not run.
    #[default]
    Skip,
    /// Only the newest missed tick runs.
    Last,
    /// The missed ticks run, at most `max_catch_up` of them (the newest).
    All,
}

impl Missed {
    /// `skip`, `last` or `all`.
    pub fn as_str(self) -> &'static str {
        match self {
            Missed::Skip => "skip",
            Missed::Last => "last",
            Missed::All => "all",
        }
    }

    /// Parses `skip`, `last` or `all`.
    pub fn parse(text: &str) -> Option<Missed> {
        match text {
            "skip" => Some(Missed::Skip),
            "last" => Some(Missed::Last),
            "all" => Some(Missed::All),
            _ => None,
        }
    }
}

/// What a schedule's ticks release and how (`spec` of `asyncflow.set_schedule`): a task of
/// `type`, or a run of `pipeline`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ScheduleSpec {
    /// Task type of the task each tick creates (or `pipeline`).
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub task_type: Option<String>,
    /// The task's context (a JSON object).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "server", schema(value_type = Option<Object>))]
    pub context: Option<Value>,
    /// The task's priority (seconds ahead in the queue).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    /// The task's queue key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_key: Option<String>,
    /// The task's first stage (default: the type's initial stage).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage: Option<String>,
    /// Pipeline each tick starts a run of (or `type`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pipeline: Option<String>,
    /// The run's input (a JSON object).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "server", schema(value_type = Option<Object>))]
    pub input: Option<Value>,
    /// IANA time zone the cron expression is read in (default UTC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
    /// Missed-tick policy (default skip).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missed: Option<Missed>,
    /// With `missed = all`: most missed ticks run (1..=1000, default 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_catch_up: Option<i32>,
    /// A paused schedule releases nothing; when resumed, only ticks after the resume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,
}

/// A schedule as `asyncflow.list_schedules` and `asyncflow.set_schedule` give it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct Schedule {
    /// Name (`^[a-z][a-z0-9_.-]{0,63}$`).
    pub name: String,
    /// Cron expression.
    pub cron: String,
    /// The spec, every key present.
    #[cfg_attr(feature = "server", schema(value_type = Object))]
    pub spec: Value,
    /// IANA time zone.
    pub time_zone: String,
    /// Missed-tick policy.
    pub missed: Missed,
    /// Most missed ticks run under `all`.
    pub max_catch_up: i32,
    /// Paused.
    pub paused: bool,
    /// Only ticks after this are released.
    pub since: DateTime<Utc>,
    /// The next tick, as of the scheduler's last pass (null while paused or before a pass).
    pub next_tick: Option<DateTime<Utc>>,
    /// The newest tick released.
    pub last_tick: Option<DateTime<Utc>>,
    /// The task released for the newest tick (a task type's schedule).
    pub last_task_id: Option<String>,
    /// The run released for the newest tick (a pipeline's schedule).
    pub last_run_id: Option<String>,
    /// When a tick was last released.
    pub last_released_at: Option<DateTime<Utc>>,
    /// Why the scheduler could not use the schedule on its last pass.
    pub error: Option<String>,
    /// Created.
    pub created_at: DateTime<Utc>,
    /// Last set.
    pub updated_at: DateTime<Utc>,
}

/// Checks a schedule name against `^[a-z][a-z0-9_.-]{0,63}$` (the database's rule).
pub fn check_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_lowercase());
    let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '_' | '.' | '-'));
    if first_ok && rest_ok && name.len() <= 64 {
        Ok(())
    } else {
        Err(format!("schedule name must match ^[a-z][a-z0-9_.-]{{0,63}}$, got {name:?}"))
    }
}

/// The body of `PUT /v1/schedules/{name}` (and of a `[[schedules]]` entry of `function.toml`,
/// with its name): the cron expression and the spec.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SetSchedule {
    /// Cron expression: five fields (minute hour day-of-month month day-of-week), six with
    /// seconds first, or a nickname such as `@hourly`.
    pub cron: String,
    /// What each tick releases, and how.
    pub spec: ScheduleSpec,
}

impl SetSchedule {
    /// Reads the cron expression in the spec's time zone: the error a client gets before
    /// anything is stored.
    pub fn check(&self) -> Result<Cron, String> {
        Cron::parse(&self.cron, self.spec.time_zone.as_deref().unwrap_or("UTC"))
    }
}

/// What the command line says of a removed schedule (`DELETE /v1/schedules/{name}` answers 204
/// without a body).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScheduleRemoved {
    /// The schedule's name.
    pub removed: String,
}

/// A cron expression in a time zone.
#[derive(Debug, Clone)]
pub struct Cron {
    cron: croner::Cron,
    tz: chrono_tz::Tz,
}

impl Cron {
    /// Reads `expr` (five fields, six with seconds first, or a nickname such as `@hourly`) in
    /// the IANA time zone `time_zone`; the error says what is wrong.
    pub fn parse(expr: &str, time_zone: &str) -> Result<Cron, String> {
        let tz: chrono_tz::Tz = time_zone
            .parse()
            .map_err(|_| format!("unknown time zone {time_zone:?} (an IANA name such as Europe/Paris)"))?;
        let fields = expr.split_whitespace().count();
        if !expr.trim_start().starts_with('@') && !(5..=6).contains(&fields) {
            return Err(format!("cron {expr:?} must have five fields, or six with seconds first (got {fields})"));
        }
        let parser = CronParser::builder().seconds(Seconds::Optional).year(Year::Disallowed).build();
        let cron = parser.parse(expr).map_err(|e| format!("cron {expr:?}: {e}"))?;
        Ok(Cron { cron, tz })
    }

    /// The first tick after `t`.
    pub fn next_after(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.cron.find_next_occurrence(&t.with_timezone(&self.tz), false).ok().map(|d| d.with_timezone(&Utc))
    }

    fn previous(&self, t: DateTime<Utc>, inclusive: bool) -> Option<DateTime<Utc>> {
        self.cron.find_previous_occurrence(&t.with_timezone(&self.tz), inclusive).ok().map(|d| d.with_timezone(&Utc))
    }

    /// The ticks to release at `now`, oldest first: those after `after` and not after `now`,
    /// all of those within [`MISSED_GRACE`] of `now`, and of the older (missed) ones what
    /// `missed` allows.
    pub fn due(
        &self,
        after: DateTime<Utc>,
        now: DateTime<Utc>,
        missed: Missed,
        max_catch_up: u32,
    ) -> Vec<DateTime<Utc>> {
        let late = now - chrono::Duration::from_std(MISSED_GRACE).unwrap_or_default();
        let missed_allowed = match missed {
            Missed::Skip => 0,
            Missed::Last => 1,
            Missed::All => max_catch_up as usize,
        };
        let mut ticks = Vec::new();
        let mut missed_taken = 0;
        let mut cursor = self.previous(now, true);
        while let Some(tick) = cursor {
            if tick <= after || ticks.len() >= ON_TIME_MAX + missed_allowed {
                break;
            }
            if tick < late {
                if missed_taken >= missed_allowed {
                    break;
                }
                missed_taken += 1;
            }
            ticks.push(tick);
            cursor = self.previous(tick, false);
        }
        ticks.reverse();
        ticks
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(h: u32, m: u32, s: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 3, 2, h, m, s).single().unwrap_or_default()
    }

    #[test]
    fn five_six_fields_and_nicknames_are_read_and_bad_ones_refused() {
        assert!(Cron::parse("*/5 * * * *", "UTC").is_ok());
        assert!(Cron::parse("* * * * * *", "UTC").is_ok());
        assert!(Cron::parse("@hourly", "Europe/Paris").is_ok());
        assert!(Cron::parse("* * * *", "UTC").unwrap_err().contains("five fields"));
        assert!(Cron::parse("0 0 * * * * 2030", "UTC").is_err());
        assert!(Cron::parse("61 * * * *", "UTC").is_err());
        assert!(Cron::parse("* * * * *", "Mars/Olympus").unwrap_err().contains("time zone"));
    }

    #[test]
    fn next_tick_honours_the_time_zone() {
        let cron = Cron::parse("0 9 * * *", "Europe/Paris").unwrap();
        // 09:00 in Paris in March (UTC+1) is 08:00 UTC
        assert_eq!(cron.next_after(at(7, 0, 0)), Some(at(8, 0, 0)));
    }

    #[test]
    fn on_time_ticks_are_all_due_and_missed_ones_follow_the_policy() {
        let cron = Cron::parse("* * * * *", "UTC").unwrap();
        // down from 10:00:30 to 10:10:30: 10:01 .. 10:09 are missed, 10:10 is on time
        let (after, now) = (at(10, 0, 30), at(10, 10, 30));
        assert_eq!(cron.due(after, now, Missed::Skip, 10), vec![at(10, 10, 0)]);
        assert_eq!(cron.due(after, now, Missed::Last, 10), vec![at(10, 9, 0), at(10, 10, 0)]);
        assert_eq!(cron.due(after, now, Missed::All, 3), vec![at(10, 7, 0), at(10, 8, 0), at(10, 9, 0), at(10, 10, 0)]);
        assert_eq!(cron.due(after, now, Missed::All, 100).len(), 10);
        // nothing after `after`
        assert!(cron.due(at(10, 10, 0), now, Missed::All, 10).is_empty());
    }

    #[test]
    fn a_per_second_schedule_is_due_every_second() {
        let cron = Cron::parse("* * * * * *", "UTC").unwrap();
        let ticks = cron.due(at(10, 0, 0), at(10, 0, 5) + chrono::Duration::milliseconds(400), Missed::Skip, 10);
        assert_eq!(ticks, (1..=5).map(|s| at(10, 0, s)).collect::<Vec<_>>());
    }
}

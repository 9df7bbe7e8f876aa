//! The dashboard's overview (`GET /v1/dashboard`): per task type its queue depth, lag, counts
//! and shard positions, and the maintenance leader; what `asyncflow status` prints too.

use serde::{Deserialize, Serialize};

use crate::db::api;

/// What `GET /v1/dashboard` answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "server", schema(as = DashboardOverview))]
pub struct Overview {
    /// One entry per registered task type, by name.
    pub types: Vec<TypeSummary>,
    /// The per-type counts summed.
    pub totals: Counts,
    /// The maintenance leader, or null when none has said so recently.
    pub leader: Option<api::LeaderRow>,
}

/// Task counts, of one type or of every type summed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "server", schema(as = DashboardCounts))]
pub struct Counts {
    /// Pending and due now.
    pub ready: i64,
    /// Pending, due later.
    pub delayed: i64,
    /// Pending in queue keys held at 0 (a limit of 0 on a fair type's key): no claim takes them.
    pub held_tasks: i64,
    /// Held by workers.
    pub running: i64,
    /// Waiting for an event or for their children to end: held by no worker, claimed by none
    /// until the wait ends.
    pub waiting: i64,
    /// Stored tasks that succeeded (from the counters; retention drops finished tasks).
    pub succeeded: i64,
    /// Stored tasks that failed.
    pub failed: i64,
    /// Stored tasks that were cancelled.
    pub cancelled: i64,
    /// Tasks that ever succeeded (a monotonic counter; retention does not lower it).
    pub succeeded_total: i64,
    /// Tasks that ever failed for good (monotonic).
    pub failed_total: i64,
    /// Failed tries that were tried again (monotonic).
    pub retried_total: i64,
}

impl Counts {
    /// The sum of two types' counts.
    pub fn plus(self, o: &Counts) -> Counts {
        Counts {
            ready: self.ready + o.ready,
            delayed: self.delayed + o.delayed,
            held_tasks: self.held_tasks + o.held_tasks,
            running: self.running + o.running,
            waiting: self.waiting + o.waiting,
            succeeded: self.succeeded + o.succeeded,
            failed: self.failed + o.failed,
            cancelled: self.cancelled + o.cancelled,
            succeeded_total: self.succeeded_total + o.succeeded_total,
            failed_total: self.failed_total + o.failed_total,
            retried_total: self.retried_total + o.retried_total,
        }
    }
}

/// One task type's figures on the dashboard.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "server", schema(as = DashboardTypeSummary))]
pub struct TypeSummary {
    /// Task type.
    #[serde(rename = "type")]
    pub task_type: String,
    /// Whether claims are paused.
    pub paused: bool,
    /// Whether some of its pending tasks are in queue keys held at 0, which no claim takes.
    pub held: bool,
    /// Its counts.
    #[serde(flatten)]
    pub counts: Counts,
    /// Seconds since the oldest ready task became ready (the lag; 0 when none is ready).
    pub oldest_ready_age: f64,
    /// Seconds since the longest-held running task was claimed (0 when none runs).
    pub oldest_running_age: f64,
    /// Oldest shard that may hold a live task (null if the type has no positions row).
    pub begin_pos: Option<i32>,
    /// Shard receiving inserts.
    pub end_pos: Option<i32>,
    /// Shards not dropped.
    pub shards: i64,
}

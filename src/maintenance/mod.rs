//! Maintenance: services that keep tasks moving and tables small, run by whichever process leads.
//!
//! ```text
//!   leader election (advisory lock on a dedicated connection)
//!        | becomes leader                      | loses the lock / connection
//!        v                                     v
//!   start every service loop            stop every service loop
//!     rescuer           running past lease -> pending with a retry, or failed
//!     shard_roller      end shard past shard_max_rows -> new shard, end_pos + 1
//!     begin_advancer    begin_pos = oldest shard with a live task
//!     retention         closed shards below end_pos, closed longer than retention -> dropped whole
//!     scheduler         due ticks of periodic schedules -> one task or run per tick
//!     unique keys       uniqueness keys whose window ended -> removed
//!     history_sampler   per-type counters -> minute and hour points of history
//!     worker_pruner     heartbeat rows of workers gone without a clean exit -> removed
//!     rate_bucket_pruner  per-key rate buckets refilled to full -> removed (a missing one is full)
//!     ...               any other service the caller hands over (the workflows' checker, run
//!                       retention and callback delivery)
//! ```
//!
//! Each service is a [`Service`]: a config plus `run_once(now)` (tests call it with any time they
//! like). The task engine's own services are [`services`]; a [`Maintainer`] is handed the list it
//! runs and only schedules `run_once` while it leads. Any number of processes may run a
//! Maintainer: only the leader acts.

mod history;
pub mod leader;
mod lease;
mod presence;
mod rate_buckets;
mod rescuer;
mod scheduler;
mod shards;

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

pub use history::{HistorySampler, HISTORY_INTERVAL_DEFAULT};
pub use presence::{WorkerPruner, WORKER_STALE_DEFAULT};
pub use rate_buckets::{RateBucketPruner, RATE_BUCKET_INTERVAL_DEFAULT};
pub use rescuer::Rescuer;
pub use scheduler::{Scheduler, UniqueKeyRetention, SCHEDULE_INTERVAL_DEFAULT};
pub use shards::{BeginAdvancer, RetentionDropper, ShardRoller};

use crate::db::DbPool;
use crate::error::Result;
use crate::ids::WorkerId;
use futures_util::future::BoxFuture;

/// What one `run_once` did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RunOnceReport {
    /// Service name.
    pub service: &'static str,
    /// Number of things changed (tasks rescued, shards rolled or dropped, positions moved).
    pub changed: u64,
    /// What changed, for logs.
    pub detail: Vec<String>,
}

/// A maintenance service.
pub trait Service: Send + Sync {
    /// Name for logs and reports.
    fn name(&self) -> &'static str;
    /// Time between passes.
    fn interval(&self) -> Duration;
    /// One pass. `now` = None uses the database's clock.
    fn run_once(&self, now: Option<DateTime<Utc>>) -> BoxFuture<'_, Result<RunOnceReport>>;
    /// Leaves alone the leases of these workers, which run in this process (only the rescuer
    /// acts on leases; see [`Maintainer::with_own_workers`]).
    fn leave_leases_of(&mut self, _workers: &[WorkerId]) {}
    /// Whether passes that keep changing nothing may come less often (see [`service_loop`]);
    /// false for work that comes due by the clock (the scheduler, while there are schedules).
    fn backs_off_when_idle(&self) -> bool {
        true
    }
}

/// How long a service's passes change nothing, the database having no task pending or running,
/// before they come less often.
pub const IDLE_BEFORE_BACK_OFF: Duration = Duration::from_secs(10);
/// How often the leader asks whether any task is pending or running (see [`service_loop`]).
pub const QUIET_PROBE_INTERVAL: Duration = Duration::from_secs(10);
/// The longest interval an idle service backs off to (its own interval if that is longer).
pub const IDLE_INTERVAL_MAX: Duration = Duration::from_secs(60);

/// Intervals of the task engine's services, and of the leadership check.
#[derive(Debug, Clone)]
pub struct MaintenanceConfig {
    /// Rescuer pass interval.
    pub rescue_interval: Duration,
    /// Most tasks one rescue statement takes.
    pub rescue_batch: i32,
    /// Shard roll and begin_pos pass interval.
    pub shard_interval: Duration,
    /// Retention pass interval.
    pub retention_interval: Duration,
    /// Scheduler (periodic schedules) pass interval.
    pub schedule_interval: Duration,
    /// How often leadership is tried for or checked.
    pub leader_check: Duration,
    /// Time between history samples.
    pub history_interval: Duration,
    /// Age after which a worker's heartbeat row is removed.
    pub worker_stale: Duration,
}

/// Default rescuer interval.
pub const RESCUE_INTERVAL_DEFAULT: Duration = Duration::from_secs(1);
/// Default shard roll / begin_pos interval.
pub const SHARD_INTERVAL_DEFAULT: Duration = Duration::from_secs(5);
/// Default retention interval.
pub const RETENTION_INTERVAL_DEFAULT: Duration = Duration::from_secs(60);
/// Default leadership check interval.
pub const LEADER_CHECK_DEFAULT: Duration = Duration::from_secs(2);

impl Default for MaintenanceConfig {
    fn default() -> Self {
        MaintenanceConfig {
            rescue_interval: RESCUE_INTERVAL_DEFAULT,
            rescue_batch: 1000,
            shard_interval: SHARD_INTERVAL_DEFAULT,
            retention_interval: RETENTION_INTERVAL_DEFAULT,
            schedule_interval: SCHEDULE_INTERVAL_DEFAULT,
            leader_check: LEADER_CHECK_DEFAULT,
            history_interval: HISTORY_INTERVAL_DEFAULT,
            worker_stale: WORKER_STALE_DEFAULT,
        }
    }
}

/// One service of a line-up: its name, what a pass of it does, and how it is built. A line-up
/// is a list of these ([`SERVICES`], [`crate::workflow::SERVICES`]): the services a process runs
/// and the list `asyncflow maintain --help` prints are both made from it.
pub struct ServiceEntry<C: 'static> {
    /// The name the built service gives ([`Service::name`]).
    pub name: &'static str,
    /// What one pass does, in a few words.
    pub about: &'static str,
    /// Builds the service on `pool` with the line-up's settings.
    pub build: fn(&DbPool, &C) -> Box<dyn Service>,
}

impl<C> ServiceEntry<C> {
    /// Every service of `entries`, built in their order.
    pub fn build_all(entries: &[ServiceEntry<C>], pool: &DbPool, config: &C) -> Vec<Box<dyn Service>> {
        entries.iter().map(|entry| (entry.build)(pool, config)).collect()
    }
}

/// The task engine's services, in the order a pass runs them.
pub const SERVICES: &[ServiceEntry<MaintenanceConfig>] = &[
    ServiceEntry {
        name: "rescuer",
        about: "tasks running past their lease -> pending with a retry, or failed",
        build: |pool, c| Box::new(Rescuer::new(pool.clone(), c.rescue_interval, c.rescue_batch)),
    },
    ServiceEntry {
        name: "shard_roller",
        about: "a type's end shard past shard_max_rows -> a new shard",
        build: |pool, c| Box::new(ShardRoller::new(pool.clone(), c.shard_interval)),
    },
    ServiceEntry {
        name: "begin_advancer",
        about: "begin_pos -> the oldest shard with a live task",
        build: |pool, c| Box::new(BeginAdvancer::new(pool.clone(), c.shard_interval)),
    },
    ServiceEntry {
        name: "retention",
        about: "closed shards older than the type's retention -> dropped whole",
        build: |pool, c| Box::new(RetentionDropper::new(pool.clone(), c.retention_interval)),
    },
    ServiceEntry {
        name: "scheduler",
        about: "due ticks of periodic schedules -> one task or run per tick",
        build: |pool, c| Box::new(Scheduler::new(pool.clone(), c.schedule_interval)),
    },
    ServiceEntry {
        name: "unique_key_retention",
        about: "uniqueness keys whose window ended -> removed",
        build: |pool, c| Box::new(UniqueKeyRetention::new(pool.clone(), c.retention_interval)),
    },
    ServiceEntry {
        name: "history_sampler",
        about: "per-type counters -> minute and hour points of history",
        build: |pool, c| Box::new(HistorySampler::new(pool.clone(), c.history_interval)),
    },
    ServiceEntry {
        name: "worker_pruner",
        about: "heartbeat rows of workers gone without a clean exit -> removed",
        // a tenth of the age that makes a row stale: rows go within 10 % of it
        build: |pool, c| Box::new(WorkerPruner::new(pool.clone(), c.worker_stale / 10, c.worker_stale)),
    },
    ServiceEntry {
        name: "rate_bucket_pruner",
        about: "per-key rate buckets refilled to full -> removed",
        build: |pool, _| Box::new(RateBucketPruner::new(pool.clone(), RATE_BUCKET_INTERVAL_DEFAULT)),
    },
];

/// The task engine's services ([`SERVICES`]), in the order a pass runs them.
pub fn services(pool: &DbPool, config: &MaintenanceConfig) -> Vec<Box<dyn Service>> {
    ServiceEntry::build_all(SERVICES, pool, config)
}

/// How many passes of one service in a row may fail (other than for a lost connection, which the
/// leader's check handles) before the leader steps down so that another process can lead.
pub const FAILED_PASSES_TO_RESIGN: u32 = 5;
/// How long a leader that stepped down because its services failed stays out of the election.
pub const RESIGN_PAUSE_DEFAULT: Duration = Duration::from_secs(30);

/// Tells `quiet` every [`QUIET_PROBE_INTERVAL`] whether no task is pending or running (a failed
/// question says not quiet), until `stop`.
async fn probe_quiet(pool: DbPool, quiet: tokio::sync::watch::Sender<bool>, stop: CancellationToken) {
    loop {
        let live = async { crate::db::api::live_tasks(&pool.get().await?).await }.await;
        quiet.send_if_modified(|q| std::mem::replace(q, matches!(live, Ok(0))) != matches!(live, Ok(0)));
        tokio::select! {
            _ = tokio::time::sleep(QUIET_PROBE_INTERVAL) => {}
            _ = stop.cancelled() => return,
        }
    }
}

/// Starts and stops all services as one group as leadership comes and goes.
pub struct Maintainer {
    /// Where the leader asks whether the database is quiet (None: never quiet, no back-off).
    probe: Option<DbPool>,
    database_url: String,
    leader_check: Duration,
    services: Vec<Box<dyn Service>>,
    identity: leader::Identity,
    resign_pause: Duration,
}

impl Maintainer {
    /// A maintainer running `services` (in this order in [`Maintainer::run_once`]), trying for
    /// or checking leadership on `database_url` every `leader_check`.
    pub fn new(database_url: impl Into<String>, leader_check: Duration, services: Vec<Box<dyn Service>>) -> Self {
        Maintainer {
            probe: None,
            database_url: database_url.into(),
            leader_check,
            services,
            identity: leader::Identity::of_this_process(),
            resign_pause: RESIGN_PAUSE_DEFAULT,
        }
    }

    /// Lets idle services back off while no task is pending or running, asked on `pool` (see
    /// [`service_loop`]); without it they keep their intervals.
    pub fn with_quiet_probe(mut self, pool: DbPool) -> Self {
        self.probe = Some(pool);
        self
    }

    /// Records this maintainer as `identity` while it leads (by default `<host>-<pid>`).
    pub fn with_identity(mut self, identity: leader::Identity) -> Self {
        self.identity = identity;
        self
    }

    /// How long it stays out of the election after its services failed (by default
    /// [`RESIGN_PAUSE_DEFAULT`]).
    pub fn with_resign_pause(mut self, pause: Duration) -> Self {
        self.resign_pause = pause;
        self
    }

    /// The workers running in this process beside the maintainer: their leases are theirs to end
    /// (their calls are alive, their reports may be queued), so the rescuer leaves them alone.
    pub fn with_own_workers(mut self, workers: &[WorkerId]) -> Self {
        for service in &mut self.services {
            service.leave_leases_of(workers);
        }
        self
    }

    /// One pass of every service, in order, without leadership (for `maintain --once` after it
    /// won the lock, and for tests).
    pub async fn run_once(&self, now: Option<DateTime<Utc>>) -> Result<Vec<RunOnceReport>> {
        let mut reports = Vec::with_capacity(self.services.len());
        for service in &self.services {
            reports.push(service.run_once(now).await?);
        }
        Ok(reports)
    }

    /// Takes part in the election until `shutdown`; runs the service loops while leading. A
    /// role that may not run every service takes no part (see [`leader`]); a leader whose
    /// services keep failing steps down for a while.
    pub async fn run(self, shutdown: CancellationToken) {
        let mut leader = leader::spawn_maintenance(
            self.database_url.clone(),
            self.leader_check,
            shutdown.clone(),
            self.identity.clone(),
        );
        let services: Vec<Arc<dyn Service>> = self.services.into_iter().map(Arc::from).collect();
        let (failing_tx, mut failing) = mpsc::unbounded_channel::<(&'static str, String)>();
        let mut group: Option<CancellationToken> = None;
        loop {
            let leading = *leader.is_leader.borrow_and_update();
            match (leading, &group) {
                (true, None) => {
                    tracing::info!("maintenance: leading; starting services");
                    let token = shutdown.child_token();
                    let (quiet_tx, quiet) = tokio::sync::watch::channel(false);
                    if let Some(pool) = &self.probe {
                        tokio::spawn(probe_quiet(pool.clone(), quiet_tx, token.clone()));
                    }
                    for service in &services {
                        tokio::spawn(service_loop(service.clone(), quiet.clone(), token.clone(), failing_tx.clone()));
                    }
                    group = Some(token);
                }
                (false, Some(token)) => {
                    tracing::info!("maintenance: no longer leading; stopping services");
                    token.cancel();
                    group = None;
                }
                _ => {}
            }
            tokio::select! {
                changed = leader.is_leader.changed() => if changed.is_err() { break },
                Some((service, why)) = failing.recv() => {
                    if group.is_some() {
                        tracing::warn!(service, error = %why, pause = ?self.resign_pause,
                            "maintenance: a service keeps failing; stepping down so that another process can lead");
                        if let Some(token) = group.take() {
                            token.cancel();
                        }
                        leader.resign(self.resign_pause);
                    }
                }
                _ = shutdown.cancelled() => break,
            }
        }
        if let Some(token) = group {
            token.cancel();
        }
    }
}

/// The longest a new leader's service waits for its first pass: one interval, at most this.
///
/// Not at once: every service's first pass at the start of a worker, together, cost a burn-down
/// of a few seconds about a fifth of its rate and its start and exit about 80 ms, while the
/// worker's own start was under way; a pass's work waits for its interval at any other time.
pub const FIRST_PASS_AFTER_MAX: Duration = Duration::from_secs(5);

/// Runs `service` every interval until `stop`, the first pass one interval (at most
/// [`FIRST_PASS_AFTER_MAX`]) after it starts; a pass under way when `stop` fires is dropped.
/// Says on `failing` when the service cannot do its work here: a pass refused for want of a
/// privilege, or [`FAILED_PASSES_TO_RESIGN`] failed passes in a row.
///
/// An idle database costs the leader little: while no task is pending or running (asked every
/// [`QUIET_PROBE_INTERVAL`] by [`probe_quiet`]) and a service's passes changed nothing for
/// [`IDLE_BEFORE_BACK_OFF`], the time to the next pass is as long as they have changed nothing
/// (so it doubles), up to [`IDLE_INTERVAL_MAX`]; it is back at the interval as soon as a task is
/// pending or running, or after a pass that changed something (for the services that
/// [`Service::backs_off_when_idle`]). With no task pending or running for a while, a run's
/// deadline is so seen, a callback sent, an event wait's timeout or a first schedule's first
/// tick released up to 60 s late rather than within the service's interval.
async fn service_loop(
    service: Arc<dyn Service>,
    mut quiet: tokio::sync::watch::Receiver<bool>,
    stop: CancellationToken,
    failing: mpsc::UnboundedSender<(&'static str, String)>,
) {
    let base = service.interval();
    let longest = IDLE_INTERVAL_MAX.max(base);
    let mut next = tokio::time::Instant::now() + base.min(FIRST_PASS_AFTER_MAX);
    // since when passes change nothing
    let mut quiet_since = tokio::time::Instant::now();
    let mut failures: u32 = 0;
    loop {
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(next) => break,
                _ = stop.cancelled() => return,
                changed = quiet.changed() => {
                    // work arrived: the pass comes at its interval again, at once if overdue
                    if changed.is_ok() && !*quiet.borrow_and_update() {
                        quiet_since = tokio::time::Instant::now();
                        next = next.min(quiet_since + base);
                    }
                }
            }
        }
        let started = tokio::time::Instant::now();
        let unchanged = started.duration_since(quiet_since);
        let wait = if *quiet.borrow() && unchanged >= IDLE_BEFORE_BACK_OFF && service.backs_off_when_idle() {
            unchanged.clamp(base, longest)
        } else {
            base
        };
        next = started + wait;
        let outcome = tokio::select! {
            outcome = service.run_once(None) => outcome,
            _ = stop.cancelled() => return,
        };
        match outcome {
            Ok(report) => {
                failures = 0;
                if report.changed > 0 {
                    quiet_since = tokio::time::Instant::now();
                }
                if report.changed > 0 {
                    tracing::info!(service = report.service, changed = report.changed, detail = ?report.detail, "maintenance pass")
                }
            }
            Err(e) => {
                tracing::warn!(service = service.name(), error = %e, "maintenance pass failed");
                let (denied, lost) = match &e {
                    crate::error::Error::Database(d) => (
                        d.code() == Some(&tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE),
                        crate::db::connection_failed(d),
                    ),
                    crate::error::Error::Pool(_) => (false, true),
                    _ => (false, false),
                };
                if !lost {
                    failures += 1;
                }
                if denied || failures >= FAILED_PASSES_TO_RESIGN {
                    let _ = failing.send((service.name(), e.to_string()));
                    failures = 0;
                }
            }
        }
    }
}

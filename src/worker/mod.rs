//! The worker: claims tasks of its types and runs their stages through [`Function`]s.
//!
//! ```text
//!             NOTIFY / poll tick / next-due timer / freed slot
//!                              |
//!   producer (one per type) -- claim_tasks(free slots) --> executor (one per task)
//!                                                           |  runs the function, watched by
//!   heartbeater  -- extends leases of long calls ---------->|  timeout, lease loss, shutdown
//!                                                           v
//!   reporter  <-------------- replies, batched into one report_tasks call
//! ```
//!
//! Claims and reports go through a [`Backend`]: the database ([`Worker::new`]) or an `asyncflow
//! serve` over the HTTP worker protocol ([`Worker::remote`], `asyncflow worker --server`). With
//! a server there is no NOTIFY: a producer with nothing to do sends a hold that waits on the
//! server (a long-poll, answered as soon as the server's own LISTEN hears of ready work), and
//! wakes on its worker's own reports that put tasks back in the queue (a next stage, a retry).
//!
//! Invariants: a task is run only while this worker holds its lease (a refused heartbeat
//! abandons the call); every report carries the claim's fencing token; at shutdown claiming
//! stops first, in-flight calls get the grace period, and what is still running after it is
//! handed back (`release`) without burning a try.
//!
//! A worker on the database also keeps a heartbeat row in `asyncflow.workers` (its id, host,
//! types and calls in flight) while it runs ([`presence`]), for `GET /v1/workers`.

pub mod backend;
mod executor;
pub mod folder;
mod hold;
mod pace;
mod presence;
mod producer;
pub mod remote;
mod reporter;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::function::registry::FunctionSpec;
use chrono::{DateTime, Utc};
use tokio::sync::{broadcast, watch, Notify, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The HTTP client a worker runs on a server with (the crate's one, [`crate::client::RemoteClient`]).
pub use crate::client::RemoteClient;
pub use backend::Backend;
pub use remote::{ServerBackend, HOLD_WAIT};

use crate::db::listen::Wake;
use crate::db::{self, DbPool};
use crate::error::{Error, Result};
use crate::function::Function;
use crate::ids::{TypeName, WorkerId};
use crate::schedule::SetSchedule;
use crate::task::{Report, ReportKind};
use crate::task_type::TaskTypeUpdate;

/// Default number of stage calls run at once.
pub const CONCURRENCY_DEFAULT: usize = 10;
/// Default time in-flight calls get to finish after a shutdown signal.
pub const SHUTDOWN_GRACE_DEFAULT: Duration = Duration::from_secs(30);
/// How often leases are looked at for extension.
pub const HEARTBEAT_CHECK_DEFAULT: Duration = Duration::from_secs(1);
/// Default hold window (see [`WorkerConfig::hold_window`]).
pub const HOLD_WINDOW_DEFAULT: Duration = Duration::from_millis(20);
/// Default ceiling of the hold window (see [`WorkerConfig::hold_window_max`]).
pub const HOLD_WINDOW_MAX_DEFAULT: Duration = Duration::from_millis(200);

/// How a worker runs.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// This worker's id (the owner stamped on claimed tasks).
    pub worker_id: WorkerId,
    /// Most stage calls at once, over all types.
    pub concurrency: usize,
    /// Time in-flight calls get after shutdown before they are handed back.
    pub shutdown_grace: Duration,
    /// The longest pause between two looks at the leases in flight: the heartbeater looks every
    /// sixth of the shortest lease in flight, at most this, and extends a lease once a third of
    /// it has gone.
    pub heartbeat_check: Duration,
    /// Stop (after finishing what is in flight) once no task of the worker's types is ready.
    /// Delayed tasks not yet due do not keep the worker alive.
    pub exit_when_idle: bool,
    /// Stop claiming after this many claims, finish them, and stop.
    pub max_tasks: Option<u64>,
    /// Stop after this long, like a shutdown signal (grace, then hand back).
    pub max_runtime: Option<Duration>,
    /// On the database, a batch is claimed as row locks in a transaction that ends when all its
    /// calls have replied or this long has passed (at most a quarter of the lease): the calls
    /// that succeeded or went on to a next stage by then are written with the claim, as one row
    /// change instead of two; the others are claimed as running then. Zero claims the usual way.
    /// Unused on a server. The floor of the window: each hold waits as long as the calls in
    /// flight are expected to take at the rate holds' calls have been replying, up to
    /// `hold_window_max`.
    pub hold_window: Duration,
    /// The ceiling of the hold window (see `hold_window`); at or below `hold_window`, the window
    /// is fixed at `hold_window`.
    pub hold_window_max: Duration,
    /// With `exit_when_idle`: also wait while workflow maintenance has work due (a callback to
    /// deliver, a scheduled run to begin, a node or run past its deadline), for a worker that
    /// runs the maintenance services beside it (see [`folder::run`]).
    pub idle_waits_for_maintenance: bool,
    /// Where a worker on the database LISTENs for wake-ups, when not on its database URL: a
    /// direct connection, for a pool that goes through a pooler in transaction mode (see
    /// [`db::pooling`]). Without it, such a worker polls each type at its schedule_interval.
    pub listen_url: Option<String>,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            worker_id: WorkerId::generate(),
            concurrency: CONCURRENCY_DEFAULT,
            shutdown_grace: SHUTDOWN_GRACE_DEFAULT,
            heartbeat_check: HEARTBEAT_CHECK_DEFAULT,
            exit_when_idle: false,
            max_tasks: None,
            max_runtime: None,
            hold_window: HOLD_WINDOW_DEFAULT,
            hold_window_max: HOLD_WINDOW_MAX_DEFAULT,
            idle_waits_for_maintenance: false,
            listen_url: None,
        }
    }
}

/// Why a worker stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum StopReason {
    /// The shutdown token fired (SIGTERM / SIGINT).
    Shutdown,
    /// `max_runtime` passed.
    MaxRuntime,
    /// `exit_when_idle` and nothing was ready.
    Idle,
    /// `max_tasks` claims were made and finished.
    MaxTasks,
}

/// A function registered for one task type.
#[derive(Clone)]
pub struct Registered {
    function: Arc<dyn Function>,
    timeout: Option<Duration>,
    settings: TaskTypeUpdate,
    /// Where it was declared (a function.toml path, "rust handler"), for error messages.
    origin: String,
}

/// Counters of what a worker did.
#[derive(Debug, Default)]
pub struct WorkerStats {
    /// Tasks claimed.
    pub claimed: AtomicU64,
    /// Stages advanced.
    pub advanced: AtomicU64,
    /// Tasks succeeded.
    pub succeeded: AtomicU64,
    /// Failed tries that will be retried.
    pub retried: AtomicU64,
    /// Tasks failed for good.
    pub failed: AtomicU64,
    /// "Later" replies.
    pub later: AtomicU64,
    /// "Wait" and "spawn" replies (the task waits for an event, or for its children).
    pub waited: AtomicU64,
    /// Tasks handed back at shutdown.
    pub released: AtomicU64,
    /// Reports refused by the fence (lease lost, cancelled).
    pub refused: AtomicU64,
}

/// A plain copy of [`WorkerStats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct WorkerSummary {
    /// Tasks claimed.
    pub claimed: u64,
    /// Stages advanced.
    pub advanced: u64,
    /// Tasks succeeded.
    pub succeeded: u64,
    /// Failed tries that will be retried.
    pub retried: u64,
    /// Tasks failed for good.
    pub failed: u64,
    /// "Later" replies.
    pub later: u64,
    /// "Wait" and "spawn" replies (the task waits for an event, or for its children).
    pub waited: u64,
    /// Tasks handed back at shutdown.
    pub released: u64,
    /// Reports refused by the fence.
    pub refused: u64,
    /// Why the worker stopped.
    pub stopped_by: Option<StopReason>,
}

impl WorkerStats {
    fn summary(&self) -> WorkerSummary {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        WorkerSummary {
            claimed: g(&self.claimed),
            advanced: g(&self.advanced),
            succeeded: g(&self.succeeded),
            retried: g(&self.retried),
            failed: g(&self.failed),
            later: g(&self.later),
            waited: g(&self.waited),
            released: g(&self.released),
            refused: g(&self.refused),
            stopped_by: None,
        }
    }
}

/// One call in flight, as the heartbeater and shutdown see it.
struct InFlight {
    /// Which executor made the entry: a task claimed again after a failed hold has the same id
    /// (and may have the same claim_seq) under a new executor, whose entry the old one must not
    /// remove.
    generation: u64,
    /// The hold the call's task is in, if it was claimed by one: no heartbeat while it is open
    /// (the task is not running yet).
    hold: Option<Arc<hold::Hold>>,
    claim_seq: i64,
    lease_until: DateTime<Utc>,
    lease_secs: i64,
    /// Fired when the lease is lost: the call is abandoned without a report.
    lost: CancellationToken,
    /// The call's progress, and the version of it the last accepted heartbeat carried.
    progress: crate::function::Progress,
    progress_sent: u64,
}

/// What producers, executors and the heartbeater share.
struct Shared {
    backend: Backend,
    worker_id: WorkerId,
    slots: Arc<Semaphore>,
    /// Slots in all (the configured concurrency).
    concurrency: usize,
    /// Bumped whenever a slot is freed, so producers waiting for one wake up.
    freed: watch::Sender<u64>,
    /// Per type: bumped when calls of the type end (their replies written), so that its
    /// producer, held back by the type's limits, claims again (see producer).
    ended: BTreeMap<String, watch::Sender<u64>>,
    inflight: Mutex<HashMap<String, InFlight>>,
    reporter: reporter::Reporter,
    stats: WorkerStats,
    tracker: TaskTracker,
    /// Claims not yet finished: reserved before a claim, released when its executor has
    /// reported. Zero means nothing in flight and nothing being claimed.
    active: std::sync::atomic::AtomicUsize,
    /// Bumped by every claim and every finished call: an idle check that saw the same value
    /// before and after looking at the database saw a quiet worker throughout.
    activity: AtomicU64,
    /// Notified when `active` falls to zero: an `exit_when_idle` worker looks then, not on a
    /// clock (see [`wait_until_idle`]).
    quiet: Notify,
    /// Notified when a call starts while none is in flight: the heartbeater then looks at once.
    started: Notify,
    /// The last InFlight generation handed out.
    generations: AtomicU64,
    /// Fired when the grace period is over: every call still running is abandoned and its task
    /// handed back.
    release: CancellationToken,
    /// Claims left under max_tasks (None: no limit); `budget_spent` fires at zero.
    budget: Mutex<Option<u64>>,
    budget_spent: CancellationToken,
    /// Holds that may be open at once (None: claims are not held).
    holds: Option<Arc<Semaphore>>,
    /// Each hold's window, between the configured floor and ceiling, from the pace at which the
    /// worker's held calls end (see [`pace`]).
    paces: Arc<pace::Paces>,
    /// On a server: how long a hold may wait there for ready work (None: holds answer at once,
    /// and producers poll; so with `exit_when_idle`, which stops when nothing is ready).
    hold_wait: Option<Duration>,
    /// The database's `max_context_bytes`, read by the presence loop; 0 until read (a hold then
    /// chains no stages, see hold::chainable).
    context_limit: AtomicUsize,
    /// Whether wake-ups come from a LISTEN connection, which hears every type's new work: an
    /// idle producer then sleeps until a wake-up or its next due task, and only the worker's
    /// sweep ([`sweep`]) looks for what a wake-up missed.
    listening: bool,
}

impl Shared {
    fn context_limit(&self) -> usize {
        self.context_limit.load(Ordering::Relaxed)
    }

    /// Reads the database's `max_context_bytes` into [`Shared::context_limit`] (at start, then on
    /// every presence beat); on an error the last value read stays.
    async fn read_context_limit(&self, pool: &DbPool) -> Result<()> {
        let limit = db::api::max_context_bytes(&pool.get().await?).await?;
        self.context_limit.store(usize::try_from(limit).unwrap_or(0), Ordering::Relaxed);
        Ok(())
    }

    fn lock_inflight(&self) -> std::sync::MutexGuard<'_, HashMap<String, InFlight>> {
        self.inflight.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Takes up to `want` claims from the budget (all of them when there is no limit).
    fn reserve(&self, want: usize) -> usize {
        let mut budget = self.budget.lock().unwrap_or_else(|p| p.into_inner());
        let granted = match budget.as_mut() {
            None => want,
            Some(left) => {
                let n = (*left).min(want as u64);
                *left -= n;
                n as usize
            }
        };
        self.active.fetch_add(granted, Ordering::SeqCst);
        self.activity.fetch_add(1, Ordering::SeqCst);
        granted
    }

    /// Gives back reserved claims that were not used; producers waiting for budget wake up.
    fn unreserve(&self, unused: usize) {
        let mut budget = self.budget.lock().unwrap_or_else(|p| p.into_inner());
        let limited = match budget.as_mut() {
            Some(left) => {
                *left += unused as u64;
                true
            }
            None => false,
        };
        drop(budget);
        self.less_active(unused);
        if limited && unused > 0 {
            self.freed.send_modify(|v| *v = v.wrapping_add(1));
        }
    }

    /// `n` calls of `task_type` have ended and their replies are written (or given up): their
    /// slots are free (the caller has dropped them), they are no longer active, producers
    /// waiting for a slot wake up, and so does the type's own if a limit held it back.
    fn calls_ended(&self, task_type: &str, n: usize) {
        self.activity.fetch_add(1, Ordering::SeqCst);
        self.less_active(n);
        self.freed.send_modify(|v| *v = v.wrapping_add(1));
        if let Some(ended) = self.ended.get(task_type) {
            ended.send_modify(|v| *v = v.wrapping_add(1));
        }
    }

    /// `n` claims are no longer active; at zero, an idle check looks ([`Shared::quiet`]).
    fn less_active(&self, n: usize) {
        if n > 0 && self.active.fetch_sub(n, Ordering::SeqCst) == n {
            self.quiet.notify_waiters();
        }
    }

    /// Called when claims were made: fires `budget_spent` when the budget is used up.
    fn check_budget(&self) {
        if self.budget.lock().unwrap_or_else(|p| p.into_inner()).as_ref() == Some(&0) {
            self.budget_spent.cancel();
        }
    }
}

/// A worker over a set of task types.
pub struct Worker {
    backend: Backend,
    /// Where the LISTEN connection goes (database mode only).
    listen_url: Option<String>,
    config: WorkerConfig,
    functions: BTreeMap<TypeName, Registered>,
    /// Schedules set at start, after the types: name, cron and spec, where each was declared.
    schedules: Vec<(String, SetSchedule, String)>,
}

impl Worker {
    /// A worker on the database, with no functions yet.
    pub fn new(pool: DbPool, database_url: impl Into<String>, config: WorkerConfig) -> Self {
        // no LISTEN through a pooler in transaction mode: only on a direct URL, when given
        let listen_url = config.listen_url.clone().or_else(|| db::pooling::listen_url(&database_url.into()));
        Worker {
            backend: Backend::Database(pool),
            listen_url,
            config,
            functions: BTreeMap::new(),
            schedules: Vec::new(),
        }
    }

    /// A worker on an `asyncflow serve` (the HTTP worker protocol), with no functions yet.
    pub fn remote(client: RemoteClient, config: WorkerConfig) -> Self {
        Worker {
            backend: Backend::Server(ServerBackend::new(client)),
            listen_url: None,
            config,
            functions: BTreeMap::new(),
            schedules: Vec::new(),
        }
    }

    /// Registers `function` for `task_type`; at start the type is created or its `settings`
    /// applied. `timeout` bounds each call (None: only the lease and heartbeats bound it).
    pub fn register(
        self,
        task_type: TypeName,
        function: impl Function,
        timeout: Option<Duration>,
        settings: TaskTypeUpdate,
    ) -> Self {
        self.register_arc(task_type, Arc::new(function), timeout, settings, "rust handler")
    }

    /// Like [`Worker::register`], for a shared function; `origin` names where it was declared.
    pub fn register_arc(
        mut self,
        task_type: TypeName,
        function: Arc<dyn Function>,
        timeout: Option<Duration>,
        settings: TaskTypeUpdate,
        origin: impl Into<String>,
    ) -> Self {
        self.functions.insert(task_type, Registered { function, timeout, settings, origin: origin.into() });
        self
    }

    /// Registers every function of a functions folder (see [`crate::function::registry`]).
    pub fn register_specs<'a>(mut self, specs: impl IntoIterator<Item = &'a FunctionSpec>) -> Result<Self> {
        for spec in specs {
            let function = spec.function()?;
            self = self.register_arc(
                spec.task_type.clone(),
                function,
                spec.call_timeout(),
                spec.settings.clone(),
                spec.file.display().to_string(),
            );
            for (name, set) in &spec.schedules {
                self.schedules.push((name.clone(), set.clone(), spec.file.display().to_string()));
            }
        }
        Ok(self)
    }

    /// Sets the periodic schedule `name` when the worker starts (after the types are
    /// registered), as `asyncflow.set_schedule` does; the cron expression is read here.
    pub fn schedule(mut self, name: impl Into<String>, set: SetSchedule) -> Result<Self> {
        let name = name.into();
        crate::schedule::check_name(&name).map_err(Error::InvalidArgument)?;
        set.check().map_err(Error::InvalidArgument)?;
        self.schedules.push((name, set, "rust handler".into()));
        Ok(self)
    }

    /// Stops once no task of its types is ready (see [`WorkerConfig::exit_when_idle`]).
    pub fn exit_when_idle(mut self) -> Self {
        self.config.exit_when_idle = true;
        self
    }

    /// The worker's id.
    pub fn id(&self) -> &WorkerId {
        &self.config.worker_id
    }

    /// Runs until `shutdown` fires, then drains (see the module docs) and returns the counters.
    pub async fn run(self, shutdown: CancellationToken) -> Result<WorkerSummary> {
        // all the types' settings, or none of them: a bad [settings] table in one function.toml
        // leaves the other types as they were
        let wanted: Vec<(&TypeName, &TaskTypeUpdate)> = self.functions.iter().map(|(n, r)| (n, &r.settings)).collect();
        // a server that is not up yet is retried; a signal meanwhile ends the worker at once
        let registering = self.backend.register_task_types(&wanted);
        let registered = tokio::select! {
            r = registering => r,
            _ = shutdown.cancelled() => {
                tracing::info!(worker = %self.config.worker_id, "stopped before the types were registered");
                return Ok(WorkerSummary { stopped_by: Some(StopReason::Shutdown), ..WorkerSummary::default() });
            }
        };
        let registered = registered.map_err(|(i, e)| match (e.is_client_error(), self.functions.values().nth(i)) {
            (true, Some(reg)) => Error::Config(format!("{}: settings: {e}", reg.origin)),
            _ => e,
        })?;
        let names: Vec<String> = self.functions.keys().map(|n| n.to_string()).collect();
        self.backend.check_may_claim(&names).await?;
        for (name, set, origin) in &self.schedules {
            self.backend
                .set_schedule(name, set)
                .await
                .map_err(|e| Error::Config(format!("{origin}: schedules {name:?}: {e}")))?;
        }
        let types: Vec<_> = self
            .functions
            .iter()
            .zip(registered)
            .map(|((name, reg), settings)| (name.clone(), reg.clone(), settings))
            .collect();
        let listener_stop = CancellationToken::new();
        // Database: NOTIFY fans out to every producer. Server: each type has a wake channel of
        // its own with one slot (wakes that come while its producer is busy collapse into one),
        // fed by the reporter when this worker's own reports queue tasks of the type again.
        let (listener, own_wakes) = match &self.listen_url {
            Some(url) => (Some(db::listen::spawn(url.clone(), listener_stop.clone())), None),
            None => {
                let channels: BTreeMap<String, broadcast::Sender<Wake>> =
                    types.iter().map(|(name, _, _)| (name.to_string(), broadcast::channel(1).0)).collect();
                (None, Some(Arc::new(channels)))
            }
        };
        let reporter_stop = CancellationToken::new();
        // fired when the grace period ends: calls still running are handed back, and the
        // reporter may give up writes the backend keeps failing
        let release = CancellationToken::new();
        let (reporter, reporter_task) = reporter::spawn(
            self.backend.clone(),
            self.config.worker_id.clone(),
            reporter_stop.clone(),
            release.clone(),
            own_wakes.clone(),
        );
        let shared = Arc::new(Shared {
            backend: self.backend.clone(),
            worker_id: self.config.worker_id.clone(),
            slots: Arc::new(Semaphore::new(self.config.concurrency.max(1))),
            concurrency: self.config.concurrency.max(1),
            freed: watch::channel(0).0,
            ended: types.iter().map(|(name, _, _)| (name.to_string(), watch::channel(0).0)).collect(),
            inflight: Mutex::new(HashMap::new()),
            reporter,
            stats: WorkerStats::default(),
            tracker: TaskTracker::new(),
            active: std::sync::atomic::AtomicUsize::new(0),
            activity: AtomicU64::new(0),
            quiet: Notify::new(),
            started: Notify::new(),
            generations: AtomicU64::new(0),
            release,
            budget: Mutex::new(self.config.max_tasks),
            budget_spent: CancellationToken::new(),
            holds: (matches!(self.backend, Backend::Database(_)) && !self.config.hold_window.is_zero())
                .then(|| Arc::new(Semaphore::new(hold::HOLDS_MAX))),
            paces: Arc::new(pace::Paces::new(self.config.hold_window, self.config.hold_window_max)),
            hold_wait: (matches!(self.backend, Backend::Server(_)) && !self.config.exit_when_idle)
                .then_some(remote::HOLD_WAIT),
            context_limit: AtomicUsize::new(0),
            listening: listener.is_some(),
        });
        // read once before the first claim, so that the first holds chain stages too (the
        // presence loop reads it again every beat)
        if let (Some(_), Backend::Database(pool)) = (&shared.holds, &self.backend) {
            if let Err(e) = shared.read_context_limit(pool).await {
                tracing::warn!(error = %e, "could not read max_context_bytes: no stages are chained until it is");
            }
        }
        if self.config.max_tasks == Some(0) {
            shared.budget_spent.cancel();
        }

        // cancels of running calls: the database's NOTIFY, or a server's cancel stream
        let cancels = match (&listener, &self.backend) {
            (Some(channels), _) => Some(channels.cancels.subscribe()),
            (None, Backend::Server(client)) => {
                let (sender, receiver) = broadcast::channel(1024);
                let names = types.iter().map(|(name, _, _)| name.to_string()).collect();
                tokio::spawn(client.clone().follow_cancels(names, sender, listener_stop.clone()));
                Some(receiver)
            }
            (None, Backend::Database(_)) => None,
        };
        if let Some(cancels) = cancels {
            tokio::spawn(executor::stop_cancelled_calls(shared.clone(), cancels, listener_stop.clone()));
        }
        let presence_stop = CancellationToken::new();
        let presence = Some(tokio::spawn(presence::run(
            self.backend.clone(),
            shared.clone(),
            types.iter().map(|(name, _, _)| name.to_string()).collect(),
            listener.as_ref().map(|channels| channels.wakes.clone()),
            presence_stop.clone(),
        )));
        let heartbeat_stop = CancellationToken::new();
        let heartbeater =
            tokio::spawn(executor::heartbeat_loop(shared.clone(), self.config.heartbeat_check, heartbeat_stop.clone()));
        let stop_claiming = CancellationToken::new();
        let mut producers = tokio::task::JoinSet::new();
        let type_names: Vec<TypeName> = types.iter().map(|(n, _, _)| n.clone()).collect();
        for (name, reg, settings) in types {
            let wakes = match (&listener, own_wakes.as_ref().and_then(|own| own.get(name.as_str()))) {
                (Some(notify), _) => notify.wakes.subscribe(),
                (None, Some(own)) => own.subscribe(),
                // not reached: every type has a channel; a closed one means polling alone
                (None, None) => broadcast::channel(1).1,
            };
            producers.spawn(producer::run(shared.clone(), name, reg, settings, wakes, stop_claiming.clone()));
        }
        tracing::info!(worker = %self.config.worker_id, types = self.functions.len(), "worker started");

        let runtime = async {
            match self.config.max_runtime {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        let idle = async {
            if self.config.exit_when_idle {
                wait_until_idle(&shared, &type_names, self.config.idle_waits_for_maintenance).await
            } else {
                std::future::pending().await
            }
        };
        let reason = tokio::select! {
            _ = shutdown.cancelled() => StopReason::Shutdown,
            _ = runtime => StopReason::MaxRuntime,
            _ = idle => StopReason::Idle,
            _ = shared.budget_spent.cancelled() => StopReason::MaxTasks,
        };
        tracing::info!(worker = %self.config.worker_id, ?reason, "worker stopping: no more claims");
        stop_claiming.cancel();
        while producers.join_next().await.is_some() {}
        if let Backend::Server(remote) = &self.backend {
            // holds given up while they waited may have claimed tasks: handed back now
            let swept = remote.sweep_abandoned(&self.config.worker_id);
            if tokio::time::timeout(SWEEP_PATIENCE, swept).await.is_err() {
                tracing::warn!("could not look for tasks a given-up hold claimed in time; their leases will run out");
            }
        }
        shared.tracker.close();
        let drain = matches!(reason, StopReason::Idle | StopReason::MaxTasks);
        // A drain lets in-flight calls finish however long they take, unless a signal comes.
        let grace_starts = async {
            if drain {
                shutdown.cancelled().await
            }
        };
        tokio::select! {
            _ = shared.tracker.wait() => {}
            _ = async { grace_starts.await; tokio::time::sleep(self.config.shutdown_grace).await } => {
                let unfinished = shared.lock_inflight().len();
                tracing::info!(count = unfinished, "grace period over: handing unfinished tasks back");
                shared.release.cancel();
                shared.tracker.wait().await;
            }
        }
        heartbeat_stop.cancel();
        let _ = heartbeater.await;
        // every call has ended: what is still queued is written, or given up if the backend
        // stays away (see reporter::spawn)
        shared.release.cancel();
        reporter_stop.cancel();
        let _ = reporter_task.await;
        listener_stop.cancel();
        presence_stop.cancel();
        if let Some(presence) = presence {
            let _ = presence.await;
        }
        // what functions keep between calls (warm instances) stops with the worker
        futures_util::future::join_all(self.functions.values().map(|reg| reg.function.stop())).await;
        let summary = WorkerSummary { stopped_by: Some(reason), ..shared.stats.summary() };
        // one field per count, as the stdout summary names them (not one Debug-formatted struct)
        let WorkerSummary { claimed, advanced, succeeded, retried, failed, later, waited, released, refused, .. } =
            summary;
        tracing::info!(
            worker = %self.config.worker_id,
            claimed,
            advanced,
            succeeded,
            retried,
            failed,
            later,
            waited,
            released,
            refused,
            stopped_by = ?reason,
            "worker stopped"
        );
        Ok(summary)
    }
}

/// How long a stopping worker on a server looks for tasks its given-up holds claimed.
const SWEEP_PATIENCE: Duration = Duration::from_secs(5);

/// How long an `exit_when_idle` worker waits for its claims to end before it looks at its own
/// state again anyway (it is told when they end, [`Shared::quiet`]: this only bounds a look that
/// a notification would have missed).
const IDLE_RECHECK: Duration = Duration::from_millis(250);
/// How often it looks while a server's backend has given-up holds to sweep.
const IDLE_UNSETTLED: Duration = Duration::from_millis(10);
/// After its claims have ended, how long it lets a producer claim again before it looks: most
/// ends of a batch are followed by the next claim at once.
const IDLE_SETTLE: Duration = Duration::from_millis(5);
/// How often at most it asks the database whether tasks are ready, while they are (a worker
/// waiting behind another's concurrency limit, say); with none ready, it asks again as soon as a
/// claim that ran beside the question has ended.
const IDLE_QUERY_EVERY: Duration = Duration::from_millis(100);

/// Returns once nothing is in flight or being claimed, the backend holds nothing unaccounted
/// for, no task of `types` is ready, and (with `maintenance`) no workflow maintenance is due.
///
/// It waits for the worker's claims to end rather than looking on a clock: in a fleet of
/// hundreds of processes on a few cores, a look every few milliseconds per process was most of
/// the fleet's CPU.
async fn wait_until_idle(shared: &Shared, types: &[TypeName], maintenance: bool) {
    let mut asked: Option<tokio::time::Instant> = None;
    loop {
        let quiet = shared.quiet.notified();
        tokio::pin!(quiet);
        // registered before the look below: a fall to zero from here on is not missed
        quiet.as_mut().enable();
        let before = shared.activity.load(Ordering::SeqCst);
        if shared.active.load(Ordering::SeqCst) != 0 {
            if tokio::time::timeout(IDLE_RECHECK, quiet).await.is_ok() {
                tokio::time::sleep(IDLE_SETTLE).await;
            }
            continue;
        }
        if !shared.backend.settled() {
            tokio::time::sleep(IDLE_UNSETTLED).await;
            continue;
        }
        if let Some(at) = asked {
            let next = at + IDLE_QUERY_EVERY;
            if tokio::time::Instant::now() < next {
                tokio::time::sleep_until(next).await;
                continue;
            }
        }
        let ready = shared.backend.any_ready(types).await || (maintenance && shared.backend.maintenance_due().await);
        if ready {
            asked = Some(tokio::time::Instant::now());
            continue;
        }
        if shared.active.load(Ordering::SeqCst) == 0 && shared.activity.load(Ordering::SeqCst) == before {
            return;
        }
        // nothing ready, but a producer claimed meanwhile (most often nothing): look again once
        // it is done, not a query period later
        asked = None;
        tokio::time::sleep(IDLE_SETTLE).await;
    }
}

fn report(
    task_id: &crate::ids::TaskId,
    claim_seq: i64,
    kind: ReportKind,
    progress: Option<serde_json::Value>,
) -> Report {
    Report { task_id: task_id.clone(), claim_seq, kind, progress }
}

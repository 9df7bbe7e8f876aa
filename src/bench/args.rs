//! `asyncflow bench`'s options, and their check before any phase runs.

use std::path::PathBuf;

use clap::Args;

use crate::error::{Error, Result};

/// `bench` options.
#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// Seconds for each timed phase (baselines, single-task enqueue, wake latency).
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    /// Tasks in each burn-down.
    #[arg(long, default_value_t = 100_000)]
    pub tasks: usize,
    /// Connections for the baselines and the single-task enqueue.
    #[arg(long, default_value_t = 8)]
    pub connections: usize,
    /// Connections loading at once in the bulk phase (create_tasks, 1,000 per call).
    #[arg(long, default_value_t = 2)]
    pub bulk_connections: usize,
    /// Worker concurrency for the burn-downs (no-op calls: slots only bound tasks in flight; a
    /// held batch keeps its slots until its commit, so 4,000 lets the worker's four holds of
    /// 1,000 overlap, where 2,000 allowed two).
    #[arg(long, default_value_t = 4000)]
    pub concurrency: usize,
    /// Finished tasks kept beside the aged burn-down.
    #[arg(long, default_value_t = 10_000_000)]
    pub aged_rows: i64,
    /// Rows in the expired shard that retention drops.
    #[arg(long, default_value_t = 1_000_000)]
    pub drop_rows: i64,
    /// Queue keys the fair burn-downs' tasks are spread over: one burn-down per count
    /// (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1,100,100000")]
    pub queue_keys: Vec<usize>,
    /// Tasks per second inserted during the wake-latency phase.
    #[arg(long, default_value_t = 50.0)]
    pub wake_rate: f64,
    /// Tasks in each drop-in burn-down (warm and HTTP functions, and their in-process reference).
    #[arg(long, default_value_t = 50_000)]
    pub dropin_tasks: usize,
    /// Tasks in the drop-in burn-down of the function forked per call (a process per call).
    #[arg(long, default_value_t = 200)]
    pub fork_tasks: usize,
    /// Instances of the warm Python function (`instances` in its function.toml).
    #[arg(long, default_value_t = 2)]
    pub instances: usize,
    /// `--concurrency` of the drop-in worker (default: --concurrency, as its reference).
    #[arg(long)]
    pub dropin_concurrency: Option<usize>,
    /// Tasks waiting for events in the events phase (each for a key of its own).
    #[arg(long, default_value_t = 1_000_000)]
    pub waiting_tasks: usize,
    /// Tasks filled before the dashboard phase's second timing (90 % finished, 10 % pending).
    #[arg(long, default_value_t = 10_000_000)]
    pub dashboard_tasks: i64,
    /// Only these phases (comma-separated: update, insert, enqueue, parts, bulk, limit, limit3, burndown,
    /// burndown3, chained3, fair, events, wake, aging, drop, dashboard, children, dropin, dropin3,
    /// waiters, packages, idle, wake_pgbouncer, ephemeral).
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Print the results as JSON.
    #[arg(long)]
    pub json: bool,
    /// Where results.json and chart.svg are written.
    #[arg(long, default_value = "target/bench")]
    pub out: PathBuf,
    /// Keep the benchmark database instead of dropping it at the end.
    #[arg(long)]
    pub keep_database: bool,
    /// Idle workers in the idle phase (each with its pool, LISTEN and election connection).
    #[arg(long, default_value_t = 50)]
    pub idle_workers: usize,
    /// Task types every idle worker serves.
    #[arg(long, default_value_t = 20)]
    pub idle_types: usize,
    /// Seconds each idle run is measured over (the bar is for 60).
    #[arg(long, default_value_t = 60.0)]
    pub idle_seconds: f64,
    /// Seconds each idle run settles first (idle maintenance backs off over about 40 s).
    #[arg(long, default_value_t = 60.0)]
    pub idle_settle: f64,
    /// The idle phase's large fleet: this many workers on a server and poll-only through
    /// PgBouncer (0: none).
    #[arg(long, default_value_t = 200)]
    pub idle_large: usize,
    /// Tasks each drain of the ephemeral phase works (4 direct workers, then the fleet).
    #[arg(long, default_value_t = 100_000)]
    pub ephemeral_tasks: usize,
    /// Worker processes in the ephemeral fleet (through PgBouncer, poll-only).
    #[arg(long, default_value_t = 200)]
    pub ephemeral_workers: usize,
    /// Waves the fleet starts in, a quarter of a second apart.
    #[arg(long, default_value_t = 8)]
    pub ephemeral_waves: usize,
}

impl BenchArgs {
    /// Refuses bad options, before any phase runs.
    pub(super) fn check(&self) -> Result<()> {
        if self.tasks == 0
            || self.connections == 0
            || self.concurrency == 0
            || self.concurrency > 10_000
            || self.bulk_connections == 0
            || self.bulk_connections > 64
            || self.queue_keys.is_empty()
            || self.queue_keys.len() > 10
            || self.queue_keys.iter().any(|&k| k == 0 || k > 1_000_000)
            || self.dropin_tasks == 0
            || self.fork_tasks == 0
            || !(1..=1024).contains(&self.instances)
            || self.dropin_concurrency.is_some_and(|c| !(1..=10_000).contains(&c))
        {
            return Err(Error::Config(
                "--tasks, --connections must be positive, --concurrency 1..=10000, --bulk-connections 1..=64, \
                 --queue-keys 1 to 10 counts of 1..=1000000, --dropin-tasks and --fork-tasks positive, \
                 --instances 1..=1024, --dropin-concurrency 1..=10000"
                    .into(),
            ));
        }
        if !(self.wake_rate > 0.0 && self.wake_rate <= 1000.0) || self.aged_rows < 0 || self.drop_rows < 1000 {
            return Err(Error::Config(
                "--wake-rate must be in (0, 1000], --aged-rows >= 0, --drop-rows >= 1000".into(),
            ));
        }
        if !(10..=1_000_000_000).contains(&self.dashboard_tasks) {
            return Err(Error::Config("--dashboard-tasks must be 10..=1000000000".into()));
        }
        if !(1..=100_000_000).contains(&self.waiting_tasks) {
            return Err(Error::Config("--waiting-tasks must be 1..=100000000".into()));
        }
        if self.ephemeral_tasks == 0 || !(1..=2000).contains(&self.ephemeral_workers) || self.ephemeral_waves == 0 {
            return Err(Error::Config(
                "--ephemeral-tasks must be positive, --ephemeral-workers 1..=2000, --ephemeral-waves positive".into(),
            ));
        }
        super::idle::check(self)
    }
}

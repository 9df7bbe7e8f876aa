//! `asyncflow bench`: measures asyncflow against the commit-rate ceiling of the same database in
//! the same run, and reports every figure both absolute and as a ratio to that baseline (the
//! machine is shared and noisy; ratios travel, absolute numbers do not).
//!
//! Baselines: 8 connections running a one-row `UPDATE ... WHERE id = random` (and a one-row
//! INSERT) in autocommit for a fixed time: what pgbench would show for this machine and server.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use rand::Rng;
use serde::Serialize;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::db::{api, DbPool};
use crate::error::{Error, Result};
use crate::function::{StageCall, StageReply};
use crate::ids::{TypeName, WorkerId};
use crate::task::NewTask;
use crate::task_type::TaskTypeUpdate;
use crate::worker::{Worker, WorkerConfig};

/// `bench` options.
#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// Seconds for each timed phase (baselines, single-task enqueue).
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    /// Tasks in each burn-down.
    #[arg(long, default_value_t = 100_000)]
    pub tasks: usize,
    /// Connections for the baselines and the single-task enqueue.
    #[arg(long, default_value_t = 8)]
    pub connections: usize,
    /// Worker concurrency for the burn-downs.
    #[arg(long, default_value_t = 1000)]
    pub concurrency: usize,
    /// Print the results as JSON.
    #[arg(long)]
    pub json: bool,
    /// Only these phases (comma-separated: update, insert, enqueue, bulk, burndown, burndown3).
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
}

/// One measured figure.
#[derive(Debug, Clone, Serialize)]
pub struct Figure {
    /// What was measured.
    pub name: String,
    /// Operations (tasks, commits) per second.
    pub per_second: f64,
    /// per_second / the one-row UPDATE baseline of the same run.
    pub ratio_to_update: Option<f64>,
    /// What one operation is.
    pub unit: String,
}

fn wants(args: &BenchArgs, phase: &str) -> bool {
    args.only.is_empty() || args.only.iter().any(|p| p == phase)
}

/// Runs the benchmark and prints the table.
pub async fn run(pool: DbPool, database_url: &str, args: &BenchArgs) -> Result<Vec<Figure>> {
    let seconds =
        Duration::try_from_secs_f64(args.seconds).map_err(|_| Error::Config("--seconds must be positive".into()))?;
    let mut figures: Vec<Figure> = Vec::new();
    let mut update_rate = None;
    if wants(args, "update") || wants(args, "insert") {
        prepare_baseline(&pool).await?;
    }
    if wants(args, "update") {
        let rate = timed(&pool, args.connections, seconds, |c, rng| {
            Box::pin(async move {
                let id: i32 = rng;
                api::bench_update(&c, id).await
            })
        })
        .await?;
        update_rate = Some(rate);
        figures.push(figure("baseline: one-row UPDATE, autocommit", rate, update_rate, "commits"));
    }
    if wants(args, "insert") {
        let rate =
            timed(&pool, args.connections, seconds, |c, rng| Box::pin(async move { api::bench_insert(&c, rng).await }))
                .await?;
        figures.push(figure("baseline: one-row INSERT, autocommit", rate, update_rate, "commits"));
    }
    if wants(args, "enqueue") {
        register(&pool, "bench_enqueue").await?;
        let rate = timed(&pool, args.connections, seconds, |c, _| {
            Box::pin(async move { api::create_task(&c, "bench_enqueue", &NewTask::default()).await.map(|_| ()) })
        })
        .await?;
        figures.push(figure("enqueue: create_task, one per transaction", rate, update_rate, "tasks"));
    }
    if wants(args, "bulk") {
        register(&pool, "bench_bulk").await?;
        let batch = vec![NewTask::default(); 1000];
        let start = Instant::now();
        let c = pool.get().await?;
        let mut made = 0;
        while made < args.tasks {
            made += api::create_tasks(&c, "bench_bulk", &batch).await?.len();
        }
        let rate = made as f64 / start.elapsed().as_secs_f64();
        figures.push(figure("enqueue: create_tasks, 1,000 per call", rate, update_rate, "tasks"));
    }
    if wants(args, "burndown") {
        let rate = burn_down(&pool, database_url, "bench_burn1", args.tasks, 1, args.concurrency).await?;
        figures.push(figure("burn-down: 1-stage no-op tasks", rate, update_rate, "tasks"));
    }
    if wants(args, "burndown3") {
        let rate = burn_down(&pool, database_url, "bench_burn3", args.tasks, 3, args.concurrency).await?;
        figures.push(figure("burn-down: 3-stage no-op tasks", rate, update_rate, "tasks"));
    }
    print(&figures, args.json);
    Ok(figures)
}

fn figure(name: &str, rate: f64, update: Option<f64>, unit: &str) -> Figure {
    Figure { name: name.into(), per_second: rate, ratio_to_update: update.map(|u| rate / u), unit: unit.into() }
}

fn print(figures: &[Figure], as_json: bool) {
    if as_json {
        println!("{}", json!(figures));
        return;
    }
    println!("{:<48} {:>12} {:>10}", "figure", "per second", "x UPDATE");
    for f in figures {
        let ratio = f.ratio_to_update.map(|r| format!("{r:.2}")).unwrap_or_else(|| "-".into());
        println!("{:<48} {:>12.0} {:>10}", f.name, f.per_second, ratio);
    }
}

async fn prepare_baseline(pool: &DbPool) -> Result<()> {
    api::bench_prepare(&pool.get().await?).await
}

async fn register(pool: &DbPool, name: &str) -> Result<()> {
    api::register_task_type(&pool.get().await?, &TypeName::new(name)?, &TaskTypeUpdate::default()).await.map(|_| ())
}

type OpFuture = crate::function::BoxFuture<'static, Result<()>>;

/// Runs `op` in a loop on `connections` connections for `duration`; operations per second.
async fn timed<F>(pool: &DbPool, connections: usize, duration: Duration, op: F) -> Result<f64>
where
    F: Fn(deadpool_postgres::Object, i32) -> OpFuture + Send + Sync + Clone + 'static,
{
    let count = Arc::new(AtomicU64::new(0));
    let stop = CancellationToken::new();
    let mut tasks = Vec::new();
    for _ in 0..connections.max(1) {
        let (pool, op, count, stop) = (pool.clone(), op.clone(), count.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            while !stop.is_cancelled() {
                let id = rand::thread_rng().gen_range(1..=100_000);
                let c = pool.get().await?;
                op(c, id).await?;
                count.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<(), Error>(())
        }));
    }
    let start = Instant::now();
    tokio::time::sleep(duration).await;
    stop.cancel();
    for t in tasks {
        t.await.map_err(|e| Error::Config(format!("bench task: {e}")))??;
    }
    Ok(count.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64())
}

/// Queues `tasks` no-op tasks of `stages` stages, then times a worker working them to the end.
async fn burn_down(pool: &DbPool, url: &str, name: &str, tasks: usize, stages: u32, concurrency: usize) -> Result<f64> {
    let ty = TypeName::new(name)?;
    let settings = TaskTypeUpdate { schedule_limit: Some(1000), ..Default::default() };
    api::register_task_type(&pool.get().await?, &ty, &settings).await?;
    {
        let c = pool.get().await?;
        let batch = vec![NewTask::default(); 1000];
        let mut made = 0;
        while made < tasks {
            made += api::create_tasks(&c, name, &batch[..1000.min(tasks - made)]).await?.len();
        }
    }
    let stop = CancellationToken::new();
    let config =
        WorkerConfig { worker_id: WorkerId::generate(), concurrency, exit_when_idle: true, ..WorkerConfig::default() };
    let worker = Worker::new(pool.clone(), url, config).register(
        ty,
        move |call: StageCall| async move {
            let n: u32 = call.stage.strip_prefix('s').and_then(|s| s.parse().ok()).unwrap_or(1);
            if call.stage == "start" && stages > 1 {
                StageReply::Next { next_stage: "s2".into(), context: None }
            } else if n < stages && call.stage != "start" {
                StageReply::Next { next_stage: format!("s{}", n + 1), context: None }
            } else {
                StageReply::Succeeded { result: json!(null) }
            }
        },
        None,
        settings,
    );
    let start = Instant::now();
    let summary = worker.run(stop).await?;
    let elapsed = start.elapsed().as_secs_f64();
    if summary.succeeded != tasks as u64 {
        return Err(Error::Config(format!("burn-down finished {} of {tasks} tasks", summary.succeeded)));
    }
    Ok(tasks as f64 / elapsed)
}

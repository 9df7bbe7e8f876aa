//! `asyncflow demo`: the README's main job. On the embedded default it migrates, registers the
//! functions of `functions/`, enqueues a batch of real multi-stage tasks with one SQL statement,
//! runs a worker (and the maintenance services) with a progress bar until every task has ended,
//! and prints a summary: per type and stage the calls and their p50/p95 time, retries, failures.
//!
//! The batch: `media` tasks (probe → transform → publish on generated WAV recordings: real
//! audio work by the Python function in functions/media), `flaky` tasks that fail twice before
//! succeeding (retries and back-off), and `echo` tasks; and workflow runs of
//! `pipelines/transcode.json` (see [`pipeline`]), whose signed callbacks it receives.

pub mod pipeline;

use std::collections::{BTreeMap, HashMap};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Args;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::db::{api, DbPool};
use crate::error::{Error, Result};
use crate::ids::TaskId;
use crate::maintenance::{Maintainer, MaintenanceConfig};
use crate::task::{NewTask, Task, TaskStatus};
use crate::worker::folder::{self, FolderOptions};
use crate::worker::WorkerConfig;
use crate::workflow::callback::CallbackConfig;

/// `demo` options.
#[derive(Debug, Clone, Args)]
pub struct DemoArgs {
    /// Media tasks to enqueue (each runs probe → transform → publish on its own recording).
    #[arg(long, default_value_t = 24)]
    pub tasks: usize,
    /// Stage calls at once.
    #[arg(long, default_value_t = 4)]
    pub concurrency: usize,
    /// The functions folder.
    #[arg(long, default_value = "functions")]
    pub functions: PathBuf,
    /// Where inputs and outputs go.
    #[arg(long, default_value = ".asyncflow/demo")]
    pub work_dir: PathBuf,
    /// Workflow runs of pipelines/transcode.json to start (0: none).
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// The pipelines folder.
    #[arg(long, default_value = "pipelines")]
    pub pipelines: PathBuf,
}

/// Types the demo enqueues; the worker runs only these.
const DEMO_TYPES: [&str; 4] = ["media", "flaky", "echo", "transcode"];

/// Writes a 16-bit stereo WAV: a tone with a slow tremolo, `seconds` long.
pub fn write_wav(path: &Path, seconds: f64, freq: f64, amplitude: f64) -> std::io::Result<()> {
    let rate = 22_050u32;
    let frames = (seconds * f64::from(rate)) as u32;
    let mut data = Vec::with_capacity(frames as usize * 4);
    for i in 0..frames {
        let t = f64::from(i) / f64::from(rate);
        let env = 0.6 + 0.4 * (2.0 * std::f64::consts::PI * 0.5 * t).sin();
        let left = (amplitude * env * (2.0 * std::f64::consts::PI * freq * t).sin() * 32767.0) as i16;
        let right = (amplitude * env * (2.0 * std::f64::consts::PI * freq * 1.5 * t).sin() * 32767.0) as i16;
        data.extend_from_slice(&left.to_le_bytes());
        data.extend_from_slice(&right.to_le_bytes());
    }
    let mut out = Vec::with_capacity(44 + data.len());
    out.extend_from_slice(b"RIFF");
    out.extend_from_slice(&(36 + data.len() as u32).to_le_bytes());
    out.extend_from_slice(b"WAVEfmt ");
    out.extend_from_slice(&16u32.to_le_bytes());
    out.extend_from_slice(&1u16.to_le_bytes()); // PCM
    out.extend_from_slice(&2u16.to_le_bytes()); // channels
    out.extend_from_slice(&rate.to_le_bytes());
    out.extend_from_slice(&(rate * 4).to_le_bytes()); // byte rate
    out.extend_from_slice(&4u16.to_le_bytes()); // block align
    out.extend_from_slice(&16u16.to_le_bytes()); // bits per sample
    out.extend_from_slice(b"data");
    out.extend_from_slice(&(data.len() as u32).to_le_bytes());
    out.extend_from_slice(&data);
    std::fs::write(path, out)
}

/// The maintenance the demo's worker runs beside it: the task engine's services and the
/// workflows', whose callbacks are signed with `secret`.
fn maintainer(pool: &DbPool, database_url: &str, secret: &str) -> Maintainer {
    let tasks = MaintenanceConfig::default();
    let callbacks = CallbackConfig { secret: Some(secret.to_string()), ..Default::default() };
    let mut services = crate::maintenance::services(pool, &tasks);
    services
        .extend(crate::workflow::services(pool, &crate::workflow::ServiceConfig { callbacks, ..Default::default() }));
    Maintainer::new(database_url, tasks.leader_check, services)
}

/// Runs the demo and prints its summary.
pub async fn run(pool: DbPool, database_url: &str, args: &DemoArgs) -> Result<()> {
    if args.tasks == 0 || args.tasks > 10_000 {
        return Err(Error::Config("--tasks must be between 1 and 10000".into()));
    }
    if args.runs > 100 {
        return Err(Error::Config("--runs must be between 0 and 100".into()));
    }
    // The maintenance services sign the workflow callbacks with this; the demo's receiver checks.
    let secret = uuid::Uuid::new_v4().simple().to_string();
    let options =
        FolderOptions { dir: args.functions.clone(), types: DEMO_TYPES.iter().map(|s| s.to_string()).collect() };
    // Check the folder first: a clear error before anything is enqueued.
    let specs = folder::load(&options)
        .map_err(|e| e.with_hint("run the demo from the repository root, or pass --functions DIR"))?;
    let started = Instant::now();
    let inputs = std::path::absolute(args.work_dir.join("in"))?;
    let outputs = std::path::absolute(args.work_dir.join("out"))?;
    std::fs::create_dir_all(&inputs)?;
    std::fs::create_dir_all(&outputs)?;
    let mut media = Vec::with_capacity(args.tasks);
    for i in 0..args.tasks {
        let path = inputs.join(format!("recording-{i:04}.wav"));
        let seconds = 1.0 + (i % 4) as f64 * 0.5;
        write_wav(&path, seconds, 220.0 + 20.0 * i as f64, 0.2 + 0.05 * (i % 10) as f64)?;
        media.push(NewTask {
            context: Some(json!({"input": path.display().to_string(), "out_dir": outputs.display().to_string()})),
            priority: Some(if i % 8 == 0 { 60 } else { 0 }),
            ..Default::default()
        });
    }
    // The worker applies each function.toml's settings when it starts; the tasks are enqueued
    // first, so apply them now (initial_stage above all).
    {
        let c = pool.get().await?;
        for spec in &specs {
            api::register_task_type(&c, &spec.task_type, &spec.settings).await?;
        }
    }
    let flaky: Vec<NewTask> = (0..4).map(|i| NewTask::with_context(json!({"fail_times": 2, "n": i}))).collect();
    let echo: Vec<NewTask> = (0..4).map(|i| NewTask::with_context(json!({"hello": "world", "n": i}))).collect();
    let mut ids: Vec<TaskId> = Vec::new();
    {
        let c = pool.get().await?;
        ids.extend(api::create_tasks(&c, "media", &media).await?);
        ids.extend(api::create_tasks(&c, "flaky", &flaky).await?);
        ids.extend(api::create_tasks(&c, "echo", &echo).await?);
    }
    crate::outln!(
        "enqueued {} tasks with asyncflow.create_tasks: {} media (probe -> transform -> publish on generated recordings), {} flaky, {} echo",
        ids.len(),
        media.len(),
        flaky.len(),
        echo.len()
    );
    let pipeline_demo = pipeline::start(&pool, &args.pipelines, args.runs, &inputs, &outputs, &secret).await?;

    let stop = CancellationToken::new();
    let config = WorkerConfig { concurrency: args.concurrency, ..WorkerConfig::default() };
    let maintainer = maintainer(&pool, database_url, &secret);
    let worker = {
        let (pool, url, options, stop) = (pool.clone(), database_url.to_string(), options.clone(), stop.clone());
        tokio::spawn(async move { folder::run(pool, &url, &options, config, Some(maintainer), stop).await })
    };
    let mut waited = progress(&pool, &ids, &worker).await;
    if waited.is_ok() {
        waited = pipeline_demo.wait(&pool, Duration::from_secs(300)).await;
    }
    stop.cancel();
    let summary = worker.await.map_err(|e| Error::Config(format!("worker task: {e}")))??;
    waited?;
    let tasks = api::get_tasks(&pool.get().await?, &ids).await?;
    print_summary(&tasks, started.elapsed(), summary.claimed, &outputs);
    pipeline_demo.print(&pool).await
}

/// Shows progress until every task has ended (or the worker stopped on its own).
async fn progress(
    pool: &DbPool,
    ids: &[TaskId],
    worker: &tokio::task::JoinHandle<Result<crate::worker::WorkerSummary>>,
) -> Result<()> {
    let tty = std::io::stdout().is_terminal();
    let mut last_line = Instant::now();
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let counts: HashMap<TaskStatus, i64> =
            api::count_by_status_of(&pool.get().await?, ids).await?.into_iter().collect();
        let get = |s| counts.get(&s).copied().unwrap_or(0);
        let done = get(TaskStatus::Succeeded) + get(TaskStatus::Failed) + get(TaskStatus::Cancelled);
        let total = ids.len() as i64;
        let width = 40usize;
        let filled = (done as usize * width) / (total.max(1) as usize);
        let line = format!(
            "[{}{}] {done}/{total} ended  (succeeded {}, failed {}, running {})",
            "#".repeat(filled),
            ".".repeat(width - filled),
            get(TaskStatus::Succeeded),
            get(TaskStatus::Failed),
            get(TaskStatus::Running),
        );
        if tty {
            crate::out!("\r{line}   ");
        } else if done >= total || last_line.elapsed() >= Duration::from_secs(2) {
            crate::outln!("{line}");
            last_line = Instant::now();
        }
        if done >= total {
            if tty {
                crate::outln!();
            }
            return Ok(());
        }
        if worker.is_finished() {
            return Err(Error::Config("the worker stopped before the tasks ended".into()));
        }
        if Instant::now() > deadline {
            return Err(Error::Config("the demo did not finish within 300 s".into()));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn print_summary(tasks: &[Task], elapsed: Duration, claims: u64, outputs: &Path) {
    let mut per_stage: BTreeMap<(String, String), Vec<f64>> = BTreeMap::new();
    let mut retries = 0;
    for t in tasks {
        for e in &t.schedule_log {
            if let (Some(stage), Some(cost)) = (&e.stage, e.cost_ms) {
                per_stage.entry((t.task_type.clone(), stage.clone())).or_default().push(cost);
            }
            if matches!(e.outcome.as_deref(), Some("fail") | Some("rescued")) && t.status == TaskStatus::Succeeded {
                retries += 1;
            }
        }
    }
    let count = |s: TaskStatus| tasks.iter().filter(|t| t.status == s).count();
    crate::outln!("\n{} tasks ended in {:.1} s ({claims} stage calls claimed)", tasks.len(), elapsed.as_secs_f64());
    crate::outln!(
        "  succeeded {}, failed {}, cancelled {}; {retries} failed tries retried to success",
        count(TaskStatus::Succeeded),
        count(TaskStatus::Failed),
        count(TaskStatus::Cancelled)
    );
    crate::outln!("\n  {:<8} {:<10} {:>6} {:>9} {:>9}", "type", "stage", "calls", "p50 ms", "p95 ms");
    for ((ty, stage), mut costs) in per_stage {
        costs.sort_by(|a, b| a.total_cmp(b));
        crate::outln!(
            "  {:<8} {:<10} {:>6} {:>9.1} {:>9.1}",
            ty,
            stage,
            costs.len(),
            percentile(&costs, 0.5),
            percentile(&costs, 0.95)
        );
    }
    for t in tasks.iter().filter(|t| t.status == TaskStatus::Failed).take(3) {
        crate::outln!(
            "\n  failed: {} ({}) at stage {}: {}",
            t.id,
            t.task_type,
            t.stage,
            t.error.as_deref().unwrap_or("")
        );
    }
    if let Some(t) = tasks.iter().find(|t| t.task_type == "media" && t.status == TaskStatus::Succeeded) {
        crate::outln!("\n  a media task: {} -> {}", t.id, t.result.as_ref().map(|r| r.to_string()).unwrap_or_default());
    }
    if let Some(t) = tasks.iter().find(|t| t.retry_count > 0 && t.status == TaskStatus::Succeeded) {
        crate::outln!("  a task that succeeded after retries: {} ({})", t.id, t.task_type);
        for e in &t.schedule_log {
            crate::outln!(
                "    {:<10} attempt {} {:<8} {:>7.1} ms {}",
                e.stage.as_deref().unwrap_or(""),
                e.attempt.unwrap_or(0),
                e.outcome.as_deref().unwrap_or(""),
                e.cost_ms.unwrap_or(0.0),
                e.error.as_deref().unwrap_or("")
            );
        }
    }
    crate::outln!("\n  outputs in {}", outputs.display());
}

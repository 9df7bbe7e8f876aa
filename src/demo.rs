//! `asyncflow demo`: registers a three-stage type, enqueues a batch of tasks from SQL (one
//! `asyncflow.create_tasks` statement), runs a worker with an in-process Rust function and the
//! maintenance services until every task has ended, and prints what happened.
//!
//! The pipeline does real work on generated documents:
//! `fetch` (build the document, some tasks first answer "later") -> `analyze` (count words; some
//! tasks fail once with a transient error and are retried) -> `publish` (write the report to
//! `.asyncflow/demo-out/<task>.json`; a few documents are refused for good).

use std::collections::{BTreeMap, HashMap};
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Args;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::db::{api, DbPool};
use crate::error::{Error, Result};
use crate::function::{StageCall, StageReply};
use crate::ids::{TaskId, TypeName};
use crate::maintenance::{Maintainer, MaintenanceConfig};
use crate::task::{NewTask, TaskStatus};
use crate::task_type::TaskTypeUpdate;
use crate::worker::{Worker, WorkerConfig};

/// The demo's task type.
pub const DEMO_TYPE: &str = "demo_pipeline";

/// `demo` options.
#[derive(Debug, Clone, Args)]
pub struct DemoArgs {
    /// Tasks to enqueue.
    #[arg(long, default_value_t = 200)]
    pub tasks: usize,
    /// Stage calls at once.
    #[arg(long, default_value_t = 8)]
    pub concurrency: usize,
    /// Where published reports are written.
    #[arg(long, default_value = ".asyncflow/demo-out")]
    pub out_dir: PathBuf,
}

const WORDS: [&str; 12] =
    ["queue", "stage", "task", "shard", "lease", "retry", "worker", "order", "claim", "fence", "notify", "commit"];

async fn pipeline(call: StageCall, out_dir: PathBuf) -> StageReply {
    let seed = call.context.get("seed").and_then(Value::as_u64).unwrap_or(0);
    match call.stage.as_str() {
        "fetch" => {
            if seed % 11 == 0 && call.context.get("waited").is_none() {
                let mut context = call.context.clone();
                context["waited"] = json!(true);
                return StageReply::Later { later: 0.3, context: Some(context) };
            }
            let length = 200 + (seed % 300) as usize;
            let text: Vec<&str> =
                (0..length).map(|i| WORDS[((seed as usize).wrapping_mul(31) + i * i) % WORDS.len()]).collect();
            let mut context = call.context.clone();
            context["text"] = json!(text.join(" "));
            StageReply::Next { next_stage: "analyze".into(), context: Some(context) }
        }
        "analyze" => {
            if seed % 7 == 0 && call.attempt == 1 {
                return StageReply::fail("transient: analysis service busy");
            }
            let text = call.context.get("text").and_then(Value::as_str).unwrap_or_default();
            let mut counts: BTreeMap<&str, u64> = BTreeMap::new();
            for w in text.split_whitespace() {
                *counts.entry(w).or_default() += 1;
            }
            let total: u64 = counts.values().sum();
            let top = counts.iter().max_by_key(|(_, n)| **n).map(|(w, _)| w.to_string()).unwrap_or_default();
            let context = json!({"seed": seed, "words": total, "distinct": counts.len(), "top": top});
            StageReply::Next { next_stage: "publish".into(), context: Some(context) }
        }
        "publish" => {
            if seed % 50 == 49 {
                return StageReply::Failed { error: "document refused by the publisher".into(), retry: false };
            }
            let path = out_dir.join(format!("{}.json", call.task_id));
            let body = json!({"task": call.task_id, "report": call.context});
            match tokio::fs::write(&path, body.to_string()).await {
                Ok(()) => StageReply::Succeeded {
                    result: json!({"published": path.display().to_string(), "words": call.context["words"]}),
                },
                Err(e) => StageReply::fail(format!("writing {}: {e}", path.display())),
            }
        }
        other => StageReply::Failed { error: format!("unknown stage {other}"), retry: false },
    }
}

/// Runs the demo and prints its summary.
pub async fn run(pool: DbPool, database_url: &str, args: &DemoArgs) -> Result<()> {
    if args.tasks == 0 || args.tasks > 1_000_000 {
        return Err(Error::Config("--tasks must be between 1 and 1000000".into()));
    }
    tokio::fs::create_dir_all(&args.out_dir).await?;
    let name = TypeName::new(DEMO_TYPE)?;
    let settings = TaskTypeUpdate {
        initial_stage: Some("fetch".into()),
        max_retry_num: Some(3),
        max_retry_interval: Some(1),
        max_processing_time: Some(30),
        schedule_interval: Some(1.0),
        ..Default::default()
    };
    let started = Instant::now();
    {
        let client = pool.get().await?;
        api::register_task_type(&client, &name, &settings).await?;
    }
    let tasks: Vec<NewTask> = (0..args.tasks)
        .map(|i| NewTask {
            context: Some(json!({"seed": i})),
            priority: Some(if i % 10 == 0 { 60 } else { 0 }),
            ..Default::default()
        })
        .collect();
    let ids = {
        let client = pool.get().await?;
        api::create_tasks(&client, DEMO_TYPE, &tasks).await?
    };
    println!(
        "enqueued {} '{DEMO_TYPE}' tasks (fetch -> analyze -> publish) with one asyncflow.create_tasks call",
        ids.len()
    );

    let stop = CancellationToken::new();
    let out_dir = args.out_dir.clone();
    let worker = Worker::new(
        pool.clone(),
        database_url,
        WorkerConfig { concurrency: args.concurrency, ..WorkerConfig::default() },
    )
    .register(
        name,
        move |call: StageCall| pipeline(call, out_dir.clone()),
        Some(Duration::from_secs(30)),
        settings,
    );
    let worker_task = tokio::spawn(worker.run(stop.clone()));
    let maintainer = Maintainer::new(pool.clone(), database_url, MaintenanceConfig::default());
    let maintenance_task = tokio::spawn(maintainer.run(stop.clone()));

    let tty = std::io::stdout().is_terminal();
    let mut last_line = Instant::now();
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let counts: HashMap<TaskStatus, i64> =
            api::count_by_status_of(&pool.get().await?, &ids).await?.into_iter().collect();
        let done: i64 = [TaskStatus::Succeeded, TaskStatus::Failed, TaskStatus::Cancelled]
            .iter()
            .map(|s| counts.get(s).copied().unwrap_or(0))
            .sum();
        let total = ids.len() as i64;
        let width = 40usize;
        let filled = (done as usize * width) / (total.max(1) as usize);
        let line = format!(
            "[{}{}] {done}/{total} ended  (succeeded {}, failed {}, running {})",
            "#".repeat(filled),
            ".".repeat(width - filled),
            counts.get(&TaskStatus::Succeeded).copied().unwrap_or(0),
            counts.get(&TaskStatus::Failed).copied().unwrap_or(0),
            counts.get(&TaskStatus::Running).copied().unwrap_or(0),
        );
        if tty {
            print!("\r{line}   ");
            let _ = std::io::stdout().flush();
        } else if done >= total || last_line.elapsed() >= Duration::from_secs(2) {
            println!("{line}");
            last_line = Instant::now();
        }
        if done >= total {
            if tty {
                println!();
            }
            break;
        }
        if Instant::now() > deadline {
            stop.cancel();
            return Err(Error::Config("the demo did not finish within 300 s".into()));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    stop.cancel();
    let summary = worker_task.await.map_err(|e| Error::Config(format!("worker task: {e}")))??;
    let _ = maintenance_task.await;
    print_summary(&pool, &ids, started.elapsed(), &summary).await
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

async fn print_summary(
    pool: &DbPool,
    ids: &[TaskId],
    elapsed: Duration,
    worker: &crate::worker::WorkerSummary,
) -> Result<()> {
    let client = pool.get().await?;
    let tasks = api::get_tasks(&client, ids).await?;
    let mut per_stage: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let (mut fails, mut laters) = (0, 0);
    for t in &tasks {
        for e in &t.schedule_log {
            if let (Some(stage), Some(cost)) = (&e.stage, e.cost_ms) {
                per_stage.entry(stage.clone()).or_default().push(cost);
            }
            match e.outcome.as_deref() {
                Some("fail") | Some("rescued") => fails += 1,
                Some("later") => laters += 1,
                _ => {}
            }
        }
    }
    let count = |s: TaskStatus| tasks.iter().filter(|t| t.status == s).count();
    println!("\n{} tasks ended in {:.1} s", tasks.len(), elapsed.as_secs_f64());
    println!(
        "  succeeded {}, failed {}, cancelled {}",
        count(TaskStatus::Succeeded),
        count(TaskStatus::Failed),
        count(TaskStatus::Cancelled)
    );
    println!("  failed tries retried or final: {fails}; 'later' replies: {laters}");
    println!(
        "  worker: {} claims, {} stage advances, {} reports refused",
        worker.claimed, worker.advanced, worker.refused
    );
    println!("\n  {:<10} {:>7} {:>10} {:>10}", "stage", "calls", "p50 ms", "p95 ms");
    for stage in ["fetch", "analyze", "publish"] {
        let mut costs = per_stage.remove(stage).unwrap_or_default();
        costs.sort_by(|a, b| a.total_cmp(b));
        println!(
            "  {:<10} {:>7} {:>10.1} {:>10.1}",
            stage,
            costs.len(),
            percentile(&costs, 0.5),
            percentile(&costs, 0.95)
        );
    }
    if let Some(t) = tasks.iter().find(|t| t.status == TaskStatus::Failed) {
        println!("\n  a failed task: {} at stage {}: {}", t.id, t.stage, t.error.as_deref().unwrap_or(""));
    }
    if let Some(t) = tasks.iter().find(|t| t.status == TaskStatus::Succeeded && t.retry_count > 0) {
        println!(
            "  a task that succeeded after a retry: {} -> {}",
            t.id,
            t.result.as_ref().map(|r| r.to_string()).unwrap_or_default()
        );
        for e in &t.schedule_log {
            println!(
                "    {:<8} attempt {} {:<8} {:>6.1} ms {}",
                e.stage.as_deref().unwrap_or(""),
                e.attempt.unwrap_or(0),
                e.outcome.as_deref().unwrap_or(""),
                e.cost_ms.unwrap_or(0.0),
                e.error.as_deref().unwrap_or("")
            );
        }
    }
    Ok(())
}

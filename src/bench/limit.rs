//! The physical-limit baseline: how fast this server can make the state change of a burn-down
//! at all, and how close the burn-down comes to it.
//!
//! The baseline is the cheapest SQL that makes the same change: in batches of the burn-down's
//! claim size (1,000), on as many connections as the worker keeps holds open (its concurrency
//! over the batch), one transaction per batch that locks the batch's ready rows in order
//! (FOR UPDATE SKIP LOCKED on the ready index) and writes them finished (succeeded, the try and
//! the claim counted, the worker, the times, a result), with a durable commit, as a held claim
//! and its finish do. Its table has the task rows' columns and the very rows the burn-down
//! works (copied from the queued type: the same width), and only the indexes that change needs
//! (the primary key and the ready index).
//!
//! Both run in turn, three times each (which goes first alternates), each after a checkpoint;
//! the figures are medians: rates, the machine's and this process's CPU per task, and the WAL
//! the server wrote per task (its WAL position before and after).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use super::cpu::{CpuMeter, CpuPerOp};
use super::{load, median, Figure};
use crate::db::{api, DbPool};
use crate::error::{Error, Result};

/// Rounds of each, in turn.
const ROUNDS: usize = 3;

/// The burn-down's claim size (the bench types' schedule_limit).
const BATCH: i64 = 1000;

/// The stages a 3-stage bench task goes through after its first (the type's initial stage), as
/// the burn-down's no-op function names them (load.rs): the second, and the last.
const STAGES_3: (&str, &str) = ("s2", "s3");

/// One measured run.
#[derive(Debug, Clone, Copy)]
struct Run {
    rate: f64,
    cpu: CpuPerOp,
    wal_per_task: f64,
}

/// Medians of each field over runs (taken one by one: the run with the median rate need not
/// have the median CPU).
fn medians(runs: &[Run]) -> Run {
    let pick = |f: &dyn Fn(&Run) -> Option<f64>| {
        let mut v: Vec<f64> = runs.iter().filter_map(f).collect();
        (!v.is_empty()).then(|| median(&mut v))
    };
    Run {
        rate: pick(&|r| Some(r.rate)).unwrap_or(f64::NAN),
        cpu: CpuPerOp { machine_us: pick(&|r| r.cpu.machine_us), own_us: pick(&|r| r.cpu.own_us) },
        wal_per_task: pick(&|r| Some(r.wal_per_task)).unwrap_or(f64::NAN),
    }
}

/// The baseline on `connections` connections until no ready row is left: every task written
/// finished in one stage, or through the 3-stage burn-down's stages ([`STAGES_3`]).
async fn limit_run(pool: &DbPool, tasks: u64, connections: usize, stages: u32) -> Result<Run> {
    api::bench_checkpoint(&pool.get().await?).await?;
    let wal_before = api::bench_wal_bytes(&pool.get().await?).await?;
    let done = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let meter = CpuMeter::start();
    let mut workers = Vec::new();
    for n in 0..connections {
        let (pool, done) = (pool.clone(), done.clone());
        workers.push(tokio::spawn(async move {
            let owner = format!("bench-limit-{n}");
            let mut c = pool.get().await?;
            loop {
                let tx = c.transaction().await.map_err(Error::from_db)?;
                let (changed, ended) = if stages == 1 {
                    let changed = api::bench_limit_batch(&tx, &owner, BATCH).await?;
                    (changed, changed)
                } else {
                    let (second, last) = STAGES_3;
                    api::bench_limit_batch_staged(&tx, &owner, BATCH, second, last).await?
                };
                tx.commit().await.map_err(Error::from_db)?;
                if changed == 0 {
                    return Ok::<(), Error>(());
                }
                done.fetch_add(ended, Ordering::Relaxed);
            }
        }));
    }
    for w in workers {
        w.await.map_err(|e| Error::Config(format!("bench task: {e}")))??;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let finished = done.load(Ordering::Relaxed);
    let cpu = meter.per_op(finished);
    let wal = api::bench_wal_bytes(&pool.get().await?).await? - wal_before;
    if finished != tasks {
        return Err(Error::Config(format!("the physical-limit baseline finished {finished} of {tasks} tasks")));
    }
    Ok(Run { rate: finished as f64 / elapsed, cpu, wal_per_task: wal / finished as f64 })
}

/// The burn-down of `stages` stages of the queued `name`, with the WAL it wrote.
async fn burn_run(pool: &DbPool, url: &str, name: &str, tasks: usize, stages: u32, concurrency: usize) -> Result<Run> {
    // burn_down checkpoints first: what is written from here on is the burn-down's (and the
    // checkpoint's own record)
    let wal_before = api::bench_wal_bytes(&pool.get().await?).await?;
    let timed = load::burn_down(pool, url, name, tasks, stages, concurrency).await?;
    let wal = api::bench_wal_bytes(&pool.get().await?).await? - wal_before;
    Ok(Run { rate: timed.rate, cpu: timed.cpu, wal_per_task: wal / tasks as f64 })
}

/// Runs the baseline and the burn-down of `stages` stages (1 or 3) in turn; their figures, the
/// burn-down's as a fraction of the baseline with the bar `>= 0.6 x`. A 3-stage
/// baseline is also given as a fraction of the 1-stage one when that ran (`limit1`): how much
/// of the 1-stage rate three durable stage changes per task leave at best.
pub(super) async fn run(
    pool: &DbPool,
    url: &str,
    tasks: usize,
    concurrency: usize,
    stages: u32,
    update: Option<f64>,
    limit1: Option<f64>,
) -> Result<Vec<Figure>> {
    let name = if stages == 1 { "bench_limit" } else { "bench_limit3" };
    let connections = concurrency.div_ceil(BATCH as usize).clamp(1, 16);
    let (mut limits, mut burns) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        load::queue(pool, name, tasks, None).await?;
        let copied = api::bench_limit_prepare(&pool.get().await?, name).await?;
        for limit_first in [round % 2 == 0, round % 2 == 1] {
            if limit_first {
                limits.push(limit_run(pool, copied as u64, connections, stages).await?);
            } else {
                burns.push(burn_run(pool, url, name, tasks, stages, concurrency).await?);
            }
        }
        super::aging::clear(pool, name).await?;
    }
    api::bench_limit_drop(&pool.get().await?).await?;
    let (limit, burn) = (medians(&limits), medians(&burns));
    let server = |r: &Run| match (r.cpu.machine_us, r.cpu.own_us) {
        (Some(m), Some(o)) => format!("{:.1}", m - o),
        _ => "?".into(),
    };
    if stages == 1 {
        let limit_name = format!(
            "physical limit: lock {BATCH} ready rows + write them finished, {connections} conns (median of {ROUNDS}; server {} us/task)",
            server(&limit)
        );
        let burn_name = format!(
            "burn-down: 1-stage, in turn with the limit (median of {ROUNDS}; server {} us/task)",
            server(&burn)
        );
        let pass = burn.rate >= 0.6 * limit.rate;
        return Ok(vec![
            Figure::new("limit", &limit_name, limit.rate, "tasks/s").ratio(update, "UPDATE").cpu(limit.cpu),
            Figure::new("limit_burndown", &burn_name, burn.rate, "tasks/s")
                .ratio(Some(limit.rate), "limit")
                .bar(">= 0.6 x physical limit", Some(pass))
                .cpu(burn.cpu),
            Figure::new("limit_wal", "physical limit: WAL per task", limit.wal_per_task, "bytes"),
            Figure::new("limit_burndown_wal", "burn-down: WAL per task", burn.wal_per_task, "bytes")
                .ratio(Some(limit.wal_per_task), "limit's WAL"),
        ]);
    }
    let limit_name = format!(
        "physical limit, 3 stages: {stages} times lock {BATCH} ready rows + write their next stage (median of {ROUNDS}; server {} us/task)",
        server(&limit)
    );
    let limit_fig = Figure::new("limit3", &limit_name, limit.rate, "tasks/s");
    let limit_fig = match limit1 {
        Some(l1) => limit_fig.ratio(Some(l1), "limit"),
        None => limit_fig.ratio(update, "UPDATE"),
    };
    let burn_name = format!(
        "burn-down: 3-stage, in turn with the 3-stage limit (median of {ROUNDS}; server {} us/task)",
        server(&burn)
    );
    Ok(vec![
        limit_fig.cpu(limit.cpu),
        // the 1-stage bar, against the limit of the same state changes
        Figure::new("limit3_burndown", &burn_name, burn.rate, "tasks/s")
            .ratio(Some(limit.rate), "3-stage limit")
            .bar(">= 0.6 x 3-stage limit", Some(burn.rate >= 0.6 * limit.rate))
            .cpu(burn.cpu),
        Figure::new("limit3_wal", "physical limit, 3 stages: WAL per task", limit.wal_per_task, "bytes"),
        Figure::new("limit3_burndown_wal", "burn-down, 3-stage: WAL per task", burn.wal_per_task, "bytes")
            .ratio(Some(limit.wal_per_task), "3-stage limit's WAL"),
    ])
}

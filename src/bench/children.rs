//! The children phase: a parent spawns 10,000 children (`{"spawn": [...]}`) and joins them, in
//! turn with a plain burn-down of as many tasks (its reference), three times each.
//!
//! ```text
//!   plain      10,000 no-op tasks queued, worked to the end
//!   children   one parent whose first stage spawns 10,000 no-op children, whose join stage
//!              then runs once: the children's burn-down (first claim to last end, as the
//!              database recorded them, as for the plain one) and the join's latency: from the
//!              last child's end (the write that ended it, in its transaction) to the claim of
//!              the join's call, and from the end of that child's call (which includes its
//!              hold's window and finish) to the same claim
//! ```
//!
//! Bars: the children's burn-down >= 0.8 x the plain one (medians), and every join within 1 s of
//! its last child's end.

use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::{aging, load, median, BenchArgs, Figure, Progress};
use crate::db::{api, DbPool};
use crate::error::{Error, Result};
use crate::function::{StageCall, StageReply};
use crate::ids::{TypeName, WorkerId};
use crate::task_type::TaskTypeUpdate;
use crate::worker::{Worker, WorkerConfig};

/// Children per parent (fewer when `--tasks` is smaller).
const CHILDREN: usize = 10_000;

/// Rounds of each burn-down, in turn.
const ROUNDS: usize = 3;

const PLAIN: &str = "bench_plain";
const PARENT: &str = "bench_parent";
const CHILD: &str = "bench_child";

/// Runs the phase and adds its figures.
pub(super) async fn run(
    pool: &DbPool,
    url: &str,
    args: &BenchArgs,
    figures: &mut Vec<Figure>,
    progress: &mut Progress,
) -> Result<()> {
    let n = CHILDREN.min(args.tasks);
    let (mut plain, mut children, mut joins) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        for plain_first in [round % 2 == 0, round % 2 == 1] {
            if plain_first {
                progress.detail(&format!("round {}: plain burn-down of {n}", round + 1));
                load::queue(pool, PLAIN, n, None).await?;
                load::burn_down(pool, url, PLAIN, n, 1, args.concurrency).await?;
                plain.push(rate(pool, PLAIN, n).await?);
                aging::clear(pool, PLAIN).await?;
            } else {
                progress.detail(&format!("round {}: a parent and {n} children", round + 1));
                let join = spawn_and_join(pool, url, n, args.concurrency).await?;
                children.push(rate(pool, CHILD, n).await?);
                joins.push(join);
                aging::clear(pool, CHILD).await?;
                aging::clear(pool, PARENT).await?;
            }
        }
    }
    let (plain, kids) = (median(&mut plain), median(&mut children));
    let worst_join = joins.iter().map(|j| j.0).fold(0.0, f64::max);
    let worst_call = joins.iter().map(|j| j.1).fold(0.0, f64::max);
    figures.push(
        Figure::new("children_plain", &format!("burn-down: {n} plain tasks (median of {ROUNDS})"), plain, "tasks/s")
            .ratio(Some(plain), "plain burn-down"),
    );
    figures.push(
        Figure::new(
            "children_burndown",
            &format!("burn-down: a parent's {n} children (median of {ROUNDS})"),
            kids,
            "tasks/s",
        )
        .ratio(Some(plain), "plain burn-down")
        .bar(">= 0.8 x plain burn-down", Some(kids >= 0.8 * plain)),
    );
    figures.push(
        Figure::new(
            "children_join",
            &format!("join after {n} children: last end -> join's claim, max of {ROUNDS}"),
            worst_join * 1000.0,
            "ms",
        )
        .bar("<= 1000 ms", Some(worst_join <= 1.0)),
    );
    figures.push(Figure::new(
        "children_join_from_call",
        &format!("join after {n} children: last child's call end -> join's claim, max of {ROUNDS}"),
        worst_call * 1000.0,
        "ms",
    ));
    Ok(())
}

/// Tasks per second of the type's burn-down, first claim to last end.
async fn rate(pool: &DbPool, task_type: &str, n: usize) -> Result<f64> {
    let (done, secs) = api::bench_burn_span(&pool.get().await?, task_type).await?;
    if done != n as i64 || secs <= 0.0 {
        return Err(Error::Config(format!("burn-down {task_type}: {done} of {n} tasks succeeded in {secs} s")));
    }
    Ok(n as f64 / secs)
}

/// One parent that spawns `n` no-op children and joins them, worked to the end by one worker;
/// the join's latency in seconds, from the last child's end and from the end of its call.
async fn spawn_and_join(pool: &DbPool, url: &str, n: usize, concurrency: usize) -> Result<(f64, f64)> {
    let settings = TaskTypeUpdate { schedule_limit: Some(1000), ..Default::default() };
    let c = pool.get().await?;
    for ty in [PARENT, CHILD] {
        api::register_task_type(&c, &TypeName::new(ty)?, &settings).await?;
    }
    let parent = api::create_task(&c, PARENT, &Default::default()).await?;
    drop(c);
    let config =
        WorkerConfig { worker_id: WorkerId::generate(), concurrency, exit_when_idle: true, ..WorkerConfig::default() };
    let spawn: Vec<serde_json::Value> = (0..n).map(|_| json!({"type": CHILD})).collect();
    let worker = Worker::new(pool.clone(), url, config)
        .register(
            TypeName::new(PARENT)?,
            move |call: StageCall| {
                let spawn = spawn.clone();
                async move {
                    match call.children {
                        None => StageReply::Spawn { spawn, next_stage: "join".into(), context: None },
                        Some(children) => {
                            StageReply::Succeeded { result: json!({"joined": children.as_array().map(Vec::len)}) }
                        }
                    }
                }
            },
            None,
            settings.clone(),
        )
        .register(
            TypeName::new(CHILD)?,
            |_: StageCall| async { StageReply::Succeeded { result: json!(null) } },
            None,
            settings,
        );
    api::bench_checkpoint(&pool.get().await?).await?;
    let summary = worker.run(CancellationToken::new()).await?;
    if summary.succeeded != n as u64 + 1 {
        return Err(Error::Config(format!("children phase: {} of {} tasks succeeded", summary.succeeded, n + 1)));
    }
    api::bench_join_latency(&pool.get().await?, parent.as_str(), CHILD)
        .await?
        .ok_or_else(|| Error::Config(format!("children phase: the parent {parent} did not join")))
}

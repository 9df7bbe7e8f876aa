//! What waiting for tasks (`asyncflow.watch_task`, sql/api/47_task_waiters.sql) costs the
//! burn-down: the 1-stage burn-down of three types, in turn, three times each (medians):
//!
//! ```text
//!   reference   its report and finish functions re-created without the call of notify_waiters
//!   nobody      as shipped: each report and finish statement looks for a waiter of its type
//!               (none: one probe of an empty index)                   bar >= 0.97 x reference
//!   elsewhere   as shipped, a client waiting on another task of the type: every statement
//!               looks its tasks up among the waited ones (none found, nothing notified)
//! ```

use super::{load, median, BenchArgs, Figure, Progress};
use crate::db::{api, DbPool};
use crate::error::Result;
use crate::ids::TypeName;

/// Rounds of each burn-down; the figures are medians.
const ROUNDS: usize = 3;

/// Runs the three burn-downs in turn and adds their figures.
pub(super) async fn run(
    pool: &DbPool,
    url: &str,
    args: &BenchArgs,
    figures: &mut Vec<Figure>,
    progress: &mut Progress,
) -> Result<()> {
    let kinds = [("reference", "bench_wait_ref"), ("nobody", "bench_wait_none"), ("elsewhere", "bench_wait_other")];
    for (_, name) in kinds {
        load::register(pool, name, None).await?;
    }
    let c = pool.get().await?;
    api::bench_without_waiters_check(&c, &TypeName::new("bench_wait_ref")?).await?;
    api::bench_waiter_elsewhere(&c, &TypeName::new("bench_wait_other")?).await?;
    drop(c);
    let mut rates: [Vec<f64>; 3] = Default::default();
    for round in 0..ROUNDS {
        // a different order each round, so no kind always runs first or last
        for k in 0..kinds.len() {
            let i = (k + round) % kinds.len();
            let (kind, name) = kinds[i];
            progress.detail(&format!("round {} of {ROUNDS}: {kind}", round + 1));
            load::queue(pool, name, args.tasks, None).await?;
            rates[i].push(load::burn_down(pool, url, name, args.tasks, 1, args.concurrency).await?.rate);
            super::aging::clear(pool, name).await?;
        }
    }
    let [reference, nobody, elsewhere] = rates.map(|mut r| median(&mut r));
    let to = "burn-down without the waiters' check";
    figures.push(
        Figure::new(
            "waiters_reference",
            &format!("burn-down: 1-stage, report and finish without the waiters' check (median of {ROUNDS})"),
            reference,
            "tasks/s",
        )
        .ratio(Some(reference), to),
    );
    figures.push(
        Figure::new(
            "waiters_nobody",
            &format!("burn-down: 1-stage, nobody waiting: the waiters' check as shipped (median of {ROUNDS})"),
            nobody,
            "tasks/s",
        )
        .ratio(Some(reference), to)
        .bar(">= 0.97 x without the check", Some(nobody >= 0.97 * reference)),
    );
    figures.push(
        Figure::new(
            "waiters_elsewhere",
            &format!("burn-down: 1-stage, a client waiting on another task of the type (median of {ROUNDS})"),
            elsewhere,
            "tasks/s",
        )
        .ratio(Some(reference), to),
    );
    Ok(())
}

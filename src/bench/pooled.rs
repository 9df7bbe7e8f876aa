//! `wake_pgbouncer`: the wake-up of an idle database worker whose pool goes through PgBouncer in
//! transaction mode and whose LISTEN connection is direct (`--listen-url`), beside the wake-up
//! of a worker connected directly, in the same run.
//!
//! ```text
//!   direct     pool and LISTEN on the server                         (session mode)
//!   pgbouncer  pool through PgBouncer, LISTEN on the server          (transaction mode)
//!   tasks created one per transaction at --wake-rate, insert call -> function start
//! ```
//!
//! Without a direct LISTEN connection a worker behind the pooler finds a task at its next poll
//! of the type, so the wake-up is bounded by the type's `schedule_interval` (5 s by default).

use std::time::Duration;

use super::pgbouncer::PgBouncer;
use super::{load, BenchArgs, Figure, Progress};
use crate::db::{self, pooling, DbPool};
use crate::error::Result;
use crate::ids::WorkerId;
use crate::worker::{Worker, WorkerConfig};

/// The bar: the pooled worker's p50 at most this many times the direct one's.
pub const BAR_RATIO: f64 = 2.0;

pub(super) async fn run(
    pool: &DbPool,
    url: &str,
    args: &BenchArgs,
    figures: &mut Vec<Figure>,
    progress: &mut Progress,
) -> Result<()> {
    let bouncer = match super::pgbouncer::binary().map(|_| PgBouncer::start(url, 20)) {
        Some(Ok(bouncer)) => bouncer,
        Some(Err(e)) => {
            eprintln!("wake_pgbouncer: PgBouncer did not start ({e}); phase left out");
            return Ok(());
        }
        None => {
            eprintln!("wake_pgbouncer: pgbouncer is not installed (apt-get install pgbouncer); phase left out");
            return Ok(());
        }
    };
    let duration = Duration::from_secs_f64(args.seconds);
    let config = || WorkerConfig {
        worker_id: WorkerId::generate(),
        concurrency: 16,
        listen_url: Some(url.to_string()),
        ..WorkerConfig::default()
    };
    progress.detail("direct");
    let [direct] = load::idle_workers_latency(
        pool,
        duration,
        args.wake_rate,
        [("bench_wake_direct", Worker::new(pool.clone(), url, config()))],
    )
    .await?;
    progress.detail("through PgBouncer, LISTEN direct");
    let database = db::config(url)?.get_dbname().unwrap_or("postgres").to_string();
    let pooled_url = bouncer.url(&database);
    pooling::set_mode(pooling::PoolMode::Transaction);
    let pooled = async {
        let pooled_pool = db::pool(&pooled_url, 16)?;
        let worker = Worker::new(pooled_pool.clone(), &pooled_url, config());
        let measured =
            load::idle_workers_latency(pool, duration, args.wake_rate, [("bench_wake_pooled", worker)]).await;
        pooled_pool.close();
        measured
    }
    .await;
    pooling::set_mode(pooling::PoolMode::Session);
    let [pooled] = pooled?;
    figures.push(Figure::new("wake_direct_p50", "wake latency, direct: insert -> start, p50", direct.p50, "ms"));
    figures.push(
        Figure::new(
            "wake_pgbouncer_p50",
            "wake latency through PgBouncer (transaction mode), LISTEN direct: insert -> start, p50",
            pooled.p50,
            "ms",
        )
        .ratio(Some(direct.p50), "the direct wake-up's p50")
        .bar(&format!("<= {BAR_RATIO} x direct"), Some(pooled.p50 <= BAR_RATIO * direct.p50)),
    );
    figures.push(
        Figure::new("wake_pgbouncer_p95", "wake latency through PgBouncer, LISTEN direct, p95", pooled.p95, "ms")
            .ratio(Some(direct.p95), "the direct wake-up's p95"),
    );
    Ok(())
}

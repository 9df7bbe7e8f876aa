//! `ephemeral`: a fleet of short-lived worker processes through PgBouncer against a server with
//! few connections, beside a few long-lived workers connected directly, on the same data.
//!
//! ```text
//!   server     a private PostgreSQL of this phase, max_connections = 100
//!   direct     --ephemeral-tasks no-op tasks drained by 4 worker processes on the server's URL
//!              (the usual deployment: each with its pool, LISTEN and election connection)
//!   ephemeral  as many tasks drained by --ephemeral-workers processes started in
//!              --ephemeral-waves waves, each `--pool-mode transaction --exit-when-idle` through
//!              a PgBouncer of 20 server connections, poll-only (no direct connection at all)
//! ```
//!
//! Every worker is this very binary (`asyncflow worker --functions ... --exit-when-idle`) calling
//! an HTTP no-op served by this process. A drain is timed from its first worker's start until
//! every worker has exited. The phase fails (an error, no figure) unless every task succeeded,
//! none ended with a connection error as its last error, and every worker exited 0. It also
//! reports the most server connections seen at once during each drain (pg_stat_activity, every
//! 100 ms), and the CPU per task of the whole machine and of the worker processes together (the
//! figures' CPU/op and own/op).

use std::path::Path;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::dropin::HttpNoop;
use super::pgbouncer::PgBouncer;
use super::{load, BenchArgs, Figure, Progress};
use crate::db::embedded::{EmbeddedConfig, EmbeddedPostgres};
use crate::db::{self, api};
use crate::error::{Error, Result};

/// The server's connection limit in this phase (PostgreSQL's default).
const MAX_CONNECTIONS: &str = "100";
/// PgBouncer's server connections for the fleet.
const POOL_CONNECTIONS: u32 = 20;
/// The long-lived direct workers the fleet is compared with.
const DIRECT_WORKERS: usize = 4;
/// Each worker's slots (`--concurrency`) and, for the fleet, its pool (`--pool-size`).
const WORKER_CONCURRENCY: usize = 16;
const FLEET_POOL_SIZE: usize = 4;
/// The types the two drains work.
const DIRECT_TYPE: &str = "bench_ephemeral_direct";
const FLEET_TYPE: &str = "bench_ephemeral_fleet";
/// The bar: the fleet drains at least this share of the direct workers' rate.
pub const BAR_SHARE: f64 = 0.5;

/// One drain's outcome.
struct Drain {
    tasks_per_s: f64,
    seconds: f64,
    /// The most connections the server had at once while it ran.
    peak_connections: i64,
    /// The whole machine's busy CPU per task, in microseconds.
    machine_us: Option<f64>,
    /// The worker processes' CPU per task (all of them together), in microseconds.
    workers_us: Option<f64>,
}

/// Runs the phase; `update` is the UPDATE baseline of this run (the bench's own server), when it ran.
pub(super) async fn run(
    args: &BenchArgs,
    update: Option<f64>,
    figures: &mut Vec<Figure>,
    progress: &mut Progress,
) -> Result<()> {
    if super::pgbouncer::binary().is_none() {
        eprintln!("ephemeral: pgbouncer is not installed (apt-get install pgbouncer); phase left out");
        return Ok(());
    }
    let (tasks, workers, waves) = (args.ephemeral_tasks, args.ephemeral_workers, args.ephemeral_waves);
    let dir = std::env::temp_dir().join(format!("asyncflow-bench-ephemeral-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    progress.detail(&format!("a private server, max_connections = {MAX_CONNECTIONS}"));
    let server =
        EmbeddedPostgres::start(EmbeddedConfig::new(dir.join("data")).setting("max_connections", MAX_CONNECTIONS))
            .await?;
    let outcome = async {
        let url = server.url_for("postgres");
        db::migrate::migrate(&url).await?;
        let pool = db::pool(&url, 4)?;
        let noop = HttpNoop::start(1).await?;
        let folder = dir.join("functions");
        let measured = async {
            progress.detail(&format!("{DIRECT_WORKERS} long-lived workers, direct"));
            write_function(&folder, DIRECT_TYPE, noop.port)?;
            load::queue(&pool, DIRECT_TYPE, tasks, None).await?;
            let direct = drain(&pool, DIRECT_TYPE, tasks, DIRECT_WORKERS, DIRECT_WORKERS, || {
                worker(&folder, &url, DIRECT_TYPE, &[])
            })
            .await?;
            progress.detail(&format!("{workers} ephemeral workers in {waves} waves, through PgBouncer, poll-only"));
            let bouncer = PgBouncer::start(&url, POOL_CONNECTIONS)?;
            let pooled = bouncer.url("postgres");
            write_function(&folder, FLEET_TYPE, noop.port)?;
            load::queue(&pool, FLEET_TYPE, tasks, None).await?;
            let pool_size = FLEET_POOL_SIZE.to_string();
            let extra = ["--pool-mode", "transaction", "--pool-size", pool_size.as_str()];
            let fleet = drain(&pool, FLEET_TYPE, tasks, workers, workers.div_ceil(waves), || {
                worker(&folder, &pooled, FLEET_TYPE, &extra)
            })
            .await?;
            Ok::<_, Error>((direct, fleet))
        }
        .await;
        noop.stop();
        pool.close();
        measured
    }
    .await;
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
    let (direct, fleet) = outcome?;

    figures.push(
        Figure::new(
            "ephemeral_direct",
            &format!("drain: {DIRECT_WORKERS} long-lived workers, direct, {tasks} tasks"),
            direct.tasks_per_s,
            "tasks/s",
        )
        .ratio(update, "UPDATE")
        .cpu(super::cpu::CpuPerOp { machine_us: direct.machine_us, own_us: direct.workers_us }),
    );
    let pass = fleet.tasks_per_s >= BAR_SHARE * direct.tasks_per_s;
    figures.push(
        Figure::new(
            "ephemeral_fleet",
            &format!("drain: {workers} ephemeral workers, {waves} waves, PgBouncer, poll-only, {tasks} tasks"),
            fleet.tasks_per_s,
            "tasks/s",
        )
        .ratio(Some(direct.tasks_per_s), "4 direct workers")
        .bar(&format!(">= {BAR_SHARE} x {DIRECT_WORKERS} direct workers"), Some(pass))
        .cpu(super::cpu::CpuPerOp { machine_us: fleet.machine_us, own_us: fleet.workers_us }),
    );
    for (key, what, d) in [("direct", "4 direct workers", &direct), ("fleet", "the ephemeral fleet", &fleet)] {
        figures.push(Figure::new(&format!("ephemeral_{key}_seconds"), &format!("drain time, {what}"), d.seconds, "s"));
        figures.push(Figure::new(
            &format!("ephemeral_{key}_connections"),
            &format!("server connections at most, {what}"),
            d.peak_connections as f64,
            "connections",
        ));
    }
    Ok(())
}

/// `<folder>/<name>/function.toml`: the HTTP no-op at `port` (the folder holds only that one).
fn write_function(folder: &Path, name: &str, port: u16) -> Result<()> {
    let _ = std::fs::remove_dir_all(folder);
    let dir = folder.join(name);
    std::fs::create_dir_all(&dir)
        .and_then(|()| std::fs::write(dir.join("function.toml"), format!("url = \"http://127.0.0.1:{port}/\"\n")))
        .map_err(|e| Error::Config(format!("bench folder {}: {e}", dir.display())))
}

/// `asyncflow worker --exit-when-idle` (this program) for `name` on `url`, with `extra` options,
/// its output kept.
fn worker(folder: &Path, url: &str, name: &str, extra: &[&str]) -> Result<tokio::process::Child> {
    super::dropin::worker_command(folder, url, name, WORKER_CONCURRENCY, super::dropin::Maintenance::Off)?
        .args(extra)
        // the route is the one given here, not one this process was started with
        .env_remove("ASYNCFLOW_LISTEN_URL")
        .env_remove("ASYNCFLOW_POOL_MODE")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| Error::Config(format!("starting asyncflow worker: {e}")))
}

/// Starts `workers` workers from `next`, `per_wave` at a time a quarter of a second apart, waits
/// for all of them to exit, and checks what they left. Timed from the first start.
async fn drain(
    pool: &db::DbPool,
    name: &str,
    tasks: usize,
    workers: usize,
    per_wave: usize,
    mut next: impl FnMut() -> Result<tokio::process::Child>,
) -> Result<Drain> {
    let peak = Arc::new(AtomicI64::new(0));
    let sampler = {
        let (pool, peak) = (pool.clone(), peak.clone());
        tokio::spawn(async move {
            loop {
                if let Ok(c) = pool.get().await {
                    if let Ok(n) = api::server_connections(&c).await {
                        peak.fetch_max(n, Ordering::Relaxed);
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let meter = super::cpu::CpuMeter::start();
    let children = super::cpu::children_seconds();
    let started = Instant::now();
    let mut running = Vec::with_capacity(workers);
    let mut failure = None;
    for n in 0..workers {
        if n > 0 && n % per_wave.max(1) == 0 {
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        match next() {
            Ok(child) => running.push(tokio::spawn(child.wait_with_output())),
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    for handle in running {
        let exited = match handle.await {
            Ok(Ok(out)) if out.status.success() => Ok(()),
            Ok(Ok(out)) => {
                let stderr = String::from_utf8_lossy(&out.stderr);
                let tail: Vec<&str> = stderr.lines().rev().take(5).collect();
                Err(Error::Config(format!(
                    "ephemeral: a worker of {name} exited {}: {}",
                    out.status,
                    tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
                )))
            }
            Ok(Err(e)) => Err(Error::Config(format!("ephemeral: waiting for a worker of {name}: {e}"))),
            Err(e) => Err(Error::Config(format!("bench task: {e}"))),
        };
        // every worker is waited for (and the sampler stopped) before the first failure is told
        if let (Err(e), None) = (exited, &failure) {
            failure = Some(e);
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let machine_us = meter.per_op(tasks as u64).machine_us;
    let workers_us =
        children.and_then(|before| Some(super::cpu::children_seconds()? - before)).map(|s| s / tasks as f64 * 1e6);
    sampler.abort();
    if let Some(e) = failure {
        return Err(e);
    }
    let c = pool.get().await?;
    let (succeeded, connection_errors) = api::bench_drain_outcome(&c, name).await?;
    if succeeded != tasks as i64 || connection_errors != 0 {
        return Err(Error::Config(format!(
            "ephemeral: {name} drained {succeeded} of {tasks} tasks, {connection_errors} with a connection error last"
        )));
    }
    Ok(Drain {
        tasks_per_s: tasks as f64 / seconds,
        seconds,
        peak_connections: peak.load(Ordering::Relaxed),
        machine_us,
        workers_us,
    })
}

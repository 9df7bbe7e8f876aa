//! `idle`: what a fleet with nothing to do costs the server, beside the same server with no
//! asyncflow process at all.
//!
//! ```text
//!   baseline     no worker: the bench database's transactions/s (pg_stat_database commits and
//!                rollbacks) and the server's CPU (postmaster and backends, /proc)
//!   direct       --idle-workers database workers over --idle-types types, each as a process
//!                runs it: a pool of its own, its LISTEN connection and its maintenance
//!                participant (one of them leads and runs every service)
//!   pgbouncer    the same through PgBouncer in transaction mode, LISTEN on the direct URL
//!   poll-only    the same through PgBouncer without a direct URL: each type polled at its
//!                schedule_interval (5 s)
//!   remote       the same number of workers on an in-process `serve` (HTTP worker protocol)
//!   large        --idle-large workers (200) on the routes that hold that many on one server:
//!                on a `serve`, and poll-only through PgBouncer
//! ```
//!
//! Each run waits for every worker's heartbeat row (its types registered, its first claims made),
//! settles for --idle-settle seconds (idle services back off over about 40 s), then counts over
//! --idle-seconds. The workers run in this process (one pool, LISTEN
//! connection and election connection each, as in a process of their own) so that 50 of them
//! fit the embedded server's 200 connections; the server's side is what is measured.

use std::time::{Duration, Instant};

use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::pgbouncer::PgBouncer;
use super::{BenchArgs, Figure, Progress};
use crate::db::{self, api, pooling, DbPool};
use crate::error::{Error, Result};
use crate::function::{StageCall, StageReply};
use crate::ids::{TypeName, WorkerId};
use crate::maintenance::leader::Identity;
use crate::maintenance::{Maintainer, MaintenanceConfig};
use crate::task_type::TaskTypeUpdate;
use crate::worker::{Worker, WorkerConfig};

/// The bar: 50 idle database workers over 20 types, connected directly, cost the server at most
/// this many transactions per second beyond the baseline.
pub const BAR_TRANSACTIONS_PER_SECOND: f64 = 5.0;

/// What one run measured.
struct Cost {
    transactions_per_second: f64,
    /// The server's CPU, in percent of one CPU.
    server_cpu_percent: Option<f64>,
}

/// Refuses bad --idle-* options (before any phase runs).
pub(super) fn check(args: &BenchArgs) -> Result<()> {
    if args.idle_large > 2000
        || !(1..=1000).contains(&args.idle_workers)
        || !(1..=1000).contains(&args.idle_types)
        || !(0.0..=3600.0).contains(&args.idle_seconds)
        || args.idle_seconds == 0.0
        || !(0.0..=3600.0).contains(&args.idle_settle)
    {
        return Err(Error::Config(
            "--idle-workers and --idle-types must be 1..=1000, --idle-large 0..=2000, --idle-seconds in (0, 3600], \
             --idle-settle in [0, 3600]"
                .into(),
        ));
    }
    Ok(())
}

pub(super) async fn run(
    pool: &DbPool,
    url: &str,
    args: &BenchArgs,
    figures: &mut Vec<Figure>,
    progress: &mut Progress,
) -> Result<()> {
    let (workers, types) = (args.idle_workers, args.idle_types);

    let seconds = Duration::try_from_secs_f64(args.idle_seconds)
        .map_err(|_| Error::Config("--idle-seconds must be a number of seconds".into()))?;
    let settle = Duration::try_from_secs_f64(args.idle_settle)
        .map_err(|_| Error::Config("--idle-settle must be a number of seconds".into()))?;
    // "t<n>": a type name may not end in _<digits> (the names of its shards)
    let names: Vec<TypeName> = (0..types).map(|i| TypeName::new(&format!("bench_idle_t{i}"))).collect::<Result<_>>()?;
    for name in &names {
        api::register_task_type(&pool.get().await?, name, &TaskTypeUpdate::default()).await?;
    }
    let server_pid = server_pid(pool).await;

    progress.detail("baseline: no asyncflow process");
    tokio::time::sleep(settle.min(Duration::from_secs(5))).await;
    let baseline = measure(pool, server_pid, seconds).await?;
    let key = |what: &str| format!("idle_{what}_{workers}w_{types}t");
    push(figures, "idle_baseline", "idle: no asyncflow process, server transactions", &baseline, None, None);

    progress.detail(&format!("{workers} idle database workers, direct"));
    let direct = fleet(pool, url, &names, workers, Route::Direct, settle, seconds, server_pid).await?;
    let beyond = direct.transactions_per_second - baseline.transactions_per_second;
    let bar = format!("<= {BAR_TRANSACTIONS_PER_SECOND} tx/s (50 workers, 20 types, 60 s)");
    let counts = workers == 50 && types == 20 && seconds >= Duration::from_secs(60);
    push(
        figures,
        &key("direct"),
        &format!("idle: {workers} database workers over {types} types, direct, beyond the baseline"),
        &direct,
        Some(&baseline),
        Some((bar, counts.then_some(beyond <= BAR_TRANSACTIONS_PER_SECOND))),
    );

    // one PgBouncer for every fleet through it (dropped with the phase)
    let bouncer = match super::pgbouncer::binary().map(|_| PgBouncer::start(url, 20)) {
        Some(Ok(bouncer)) => Some(bouncer),
        Some(Err(e)) => {
            eprintln!("idle: PgBouncer did not start ({e}); its figures are left out");
            None
        }
        None => {
            eprintln!("idle: pgbouncer is not installed (apt-get install pgbouncer); its figures are left out");
            None
        }
    };
    let pooled = match &bouncer {
        Some(bouncer) => Some(bouncer.url(db::config(url)?.get_dbname().unwrap_or("postgres"))),
        None => None,
    };
    if let Some(pooled) = &pooled {
        for (route, what) in [
            (Route::Pooled { pooled: pooled.clone(), listen: true }, "pgbouncer"),
            (Route::Pooled { pooled: pooled.clone(), listen: false }, "poll_only"),
        ] {
            progress.detail(&format!("{workers} idle database workers, {what}"));
            let cost = fleet(pool, url, &names, workers, route, settle, seconds, server_pid).await?;
            let name = format!("idle: {workers} database workers over {types} types, {what}, beyond the baseline");
            push(figures, &key(what), &name, &cost, Some(&baseline), None);
        }
    }

    progress.detail(&format!("{workers} idle workers on a server"));
    let remote = fleet(pool, url, &names, workers, Route::Server, settle, seconds, server_pid).await?;
    let name = format!("idle: {workers} workers over {types} types on one serve, beyond the baseline");
    push(figures, &key("remote"), &name, &remote, Some(&baseline), None);

    // the large fleet, on the routes that hold it: a worker on a server holds no database
    // connection, and a poll-only one through PgBouncer none of its own (a direct or LISTENing
    // worker holds two or three: 200 of them do not fit the server's connections)
    let large = args.idle_large;
    if large > 0 {
        let key = |what: &str| format!("idle_{what}_{large}w_{types}t");
        progress.detail(&format!("{large} idle workers on a server"));
        let remote = fleet(pool, url, &names, large, Route::Server, settle, seconds, server_pid).await?;
        let name = format!("idle: {large} workers over {types} types on one serve, beyond the baseline");
        push(figures, &key("remote"), &name, &remote, Some(&baseline), None);
        if let Some(pooled) = &pooled {
            let route = Route::Pooled { pooled: pooled.clone(), listen: false };
            progress.detail(&format!("{large} idle database workers, poll_only"));
            let cost = fleet(pool, url, &names, large, route, settle, seconds, server_pid).await?;
            let name = format!("idle: {large} database workers over {types} types, poll_only, beyond the baseline");
            push(figures, &key("poll_only"), &name, &cost, Some(&baseline), None);
        }
    }
    Ok(())
}

/// How a fleet reaches the database.
#[derive(Clone)]
enum Route {
    /// Straight to the server.
    Direct,
    /// Through PgBouncer in transaction mode, LISTENing on the direct URL or polling.
    Pooled { pooled: String, listen: bool },
    /// Through an in-process `serve` on the direct URL.
    Server,
}

/// Starts `workers` idle workers over `types`, lets them settle, measures, stops them.
#[allow(clippy::too_many_arguments)]
async fn fleet(
    pool: &DbPool,
    url: &str,
    types: &[TypeName],
    workers: usize,
    route: Route,
    settle: Duration,
    seconds: Duration,
    server_pid: Option<i32>,
) -> Result<Cost> {
    let stop = CancellationToken::new();
    let stop_workers = stop.child_token();
    let mut running = tokio::task::JoinSet::new();
    let mut server = None;
    let mut server_addr = None;
    if let Route::Pooled { .. } = route {
        pooling::set_mode(pooling::PoolMode::Transaction);
    }
    if let Route::Server = route {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        server_addr = Some(listener.local_addr()?);
        let config = crate::http::HttpConfig {
            listen: listener.local_addr()?,
            tokens: Vec::new(),
            insecure_no_auth: true,
            max_body: crate::http::MAX_BODY_DEFAULT,
            header_timeout: crate::http::HEADER_TIMEOUT_DEFAULT,
            body_timeout: crate::http::BODY_TIMEOUT_DEFAULT,
        };
        let (serve_pool, url, stop) = (db::pool(url, 16)?, url.to_string(), stop.clone());
        server = Some(tokio::spawn(async move {
            if let Err(e) = crate::http::serve_on(listener, serve_pool, &url, config, stop).await {
                eprintln!("idle: serve failed: {e}");
            }
        }));
    }
    for n in 0..workers {
        let config = WorkerConfig {
            worker_id: WorkerId::new(&format!("bench-idle-{n}"))?,
            concurrency: 4,
            listen_url: match &route {
                Route::Pooled { listen: true, .. } => Some(url.to_string()),
                _ => None,
            },
            ..WorkerConfig::default()
        };
        let (worker, maintainer) = match &route {
            Route::Direct => {
                let own = db::pool(url, 1)?;
                (Worker::new(own.clone(), url, config), Some(maintainer(&own, url, n)))
            }
            Route::Pooled { pooled, .. } => {
                let own = db::pool(pooled, 1)?;
                (Worker::new(own.clone(), pooled, config), Some(maintainer(&own, pooled, n)))
            }
            Route::Server => {
                let base = format!("http://{}", server_addr.ok_or_else(|| Error::Unexpected("no server".into()))?);
                (Worker::remote(crate::worker::RemoteClient::new(&base, None)?, config), None)
            }
        };
        let mut worker = worker;
        for name in types {
            worker = worker.register(
                name.clone(),
                |_call: StageCall| async move { StageReply::Succeeded { result: json!(null) } },
                None,
                TaskTypeUpdate::default(),
            );
        }
        let stop = stop_workers.clone();
        running.spawn(async move {
            if let Some(maintainer) = maintainer {
                tokio::spawn(maintainer.run(stop.clone()));
            }
            if let Err(e) = worker.run(stop).await {
                eprintln!("idle: a worker failed: {e}");
            }
        });
    }
    // every worker started (its heartbeat row written: its types registered, its first claims
    // made), then the settling time
    let started = Instant::now();
    while api::list_workers(&pool.get().await?, 3600.0, None).await?.len() < workers
        && started.elapsed() < Duration::from_secs(300)
    {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    tokio::time::sleep(settle).await;
    let cost = measure(pool, server_pid, seconds).await;
    // the workers first, then the server they are on
    stop_workers.cancel();
    while running.join_next().await.is_some() {}
    stop.cancel();
    if let Some(server) = server {
        let _ = server.await;
    }
    pooling::set_mode(pooling::PoolMode::Session);
    // the stopped fleet's last statements are counted before the next run starts
    tokio::time::sleep(Duration::from_secs(2)).await;
    cost
}

/// A maintenance participant on `url` with every service on the worker's `pool`, as a worker
/// process runs one; `n` tells it from the other participants of this process (a lease is held
/// by its identity).
fn maintainer(pool: &DbPool, url: &str, n: usize) -> Maintainer {
    let tasks = MaintenanceConfig::default();
    let mut services = crate::maintenance::services(pool, &tasks);
    services.extend(crate::workflow::services(pool, &crate::workflow::ServiceConfig::default()));
    let me = Identity::of_this_process();
    Maintainer::new(url, tasks.leader_check, services)
        .with_quiet_probe(pool.clone())
        .with_identity(Identity { id: format!("{}-{n}", me.id), host: me.host })
}

/// The figures of one run: transactions/s beyond the baseline (with `bar`) and the server's CPU.
fn push(
    figures: &mut Vec<Figure>,
    key: &str,
    name: &str,
    cost: &Cost,
    baseline: Option<&Cost>,
    bar: Option<(String, Option<bool>)>,
) {
    // below the baseline is within its noise: nothing measurable beyond it
    let beyond = (cost.transactions_per_second - baseline.map_or(0.0, |b| b.transactions_per_second)).max(0.0);
    let mut figure = Figure::new(key, name, beyond, "tx/s");
    if let Some((bar, pass)) = bar {
        figure = figure.bar(&bar, pass);
    }
    figures.push(figure);
    if let Some(cpu) = cost.server_cpu_percent {
        let beside = baseline.and_then(|b| b.server_cpu_percent);
        figures.push(
            Figure::new(&format!("{key}_server_cpu"), &format!("{name}: server CPU"), cpu, "% of a CPU")
                .ratio(beside, "the baseline's server CPU"),
        );
    }
}

/// The server's transactions per second in this database, and its CPU, over `seconds`.
async fn measure(pool: &DbPool, server_pid: Option<i32>, seconds: Duration) -> Result<Cost> {
    let before = api::bench_transactions(&pool.get().await?).await?;
    let cpu_before = server_pid.and_then(server_cpu_seconds);
    let started = Instant::now();
    tokio::time::sleep(seconds).await;
    // statistics reach pg_stat_database when a backend reports them (an idle one within a
    // second or so): the window's end is read after the same delay as its start
    let after = api::bench_transactions(&pool.get().await?).await?;
    let wall = started.elapsed().as_secs_f64();
    let cpu = match (cpu_before, server_pid.and_then(server_cpu_seconds)) {
        (Some(a), Some(b)) => Some((b - a) / wall * 100.0),
        _ => None,
    };
    // the reading itself is one transaction
    Ok(Cost { transactions_per_second: (after - before - 1).max(0) as f64 / wall, server_cpu_percent: cpu })
}

/// The postmaster's pid, from `postmaster.pid` in the data directory (None when unreadable:
/// a role that may not read the setting, or a server on another machine).
async fn server_pid(pool: &DbPool) -> Option<i32> {
    let dir = api::bench_data_directory(&pool.get().await.ok()?).await.ok()??;
    let text = std::fs::read_to_string(std::path::Path::new(&dir).join("postmaster.pid")).ok()?;
    text.lines().next()?.trim().parse().ok()
}

/// CPU seconds of the postmaster, its ended children and its live ones (the backends).
fn server_cpu_seconds(postmaster: i32) -> Option<f64> {
    let ticks = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK).ok()??.max(1) as f64;
    let stat = |pid: i32| std::fs::read_to_string(format!("/proc/{pid}/stat")).ok();
    // fields after the command's closing parenthesis: state is 3, ppid 4, utime 14 .. cstime 17
    let fields = |text: &str| -> Option<Vec<String>> {
        let rest = &text[text.rfind(')')? + 2..];
        Some(rest.split_whitespace().map(str::to_string).collect())
    };
    let num = |f: &[String], field: usize| f.get(field - 3).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    let own = fields(&stat(postmaster)?)?;
    let mut total = num(&own, 14) + num(&own, 15) + num(&own, 16) + num(&own, 17);
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        if let Some(f) = stat(pid).as_deref().and_then(fields) {
            if num(&f, 4) as i32 == postmaster {
                total += num(&f, 14) + num(&f, 15);
            }
        }
    }
    Some(total / ticks)
}
